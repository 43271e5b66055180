//! Hanzo ML in WebAssembly: the GGUF chat models and BERT-family embedders of
//! `hanzo-transformers`, exported to JavaScript with `wasm-bindgen`.
//!
//! These are the raw bindings; `js/index.js` is the API users import (it loads the right
//! build, SIMD128 or scalar, and turns generation into an async, cancellable stream), and
//! `js/edge.js` Hanzo Edge's `HanzoEdge` over [`edge::EdgeRuntime`]. Every
//! error reaches JavaScript as an exception carrying the library's message.
#![deny(unsafe_op_in_unsafe_fn)]

mod edge;
mod options;

use hanzo_ml::cpu::Blob;
use hanzo_ml::quantized::cpu::interleaved::repacked_bytes;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::pipeline::PREFILL_CHUNK;
use hanzo_transformers::{
    EncoderFiles, Finish, Generation as Run, Logits, Message, TextGeneration, WeightMode,
};
use js_sys::Uint8Array;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// A library error as a JS `Error` with its message.
fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// A file's bytes being written into WebAssembly memory piece by piece (as they arrive from
/// a `fetch` stream or a `File`), so a model never sits in memory twice.
#[wasm_bindgen]
pub struct Bytes {
    blob: Blob,
}

#[wasm_bindgen]
impl Bytes {
    /// `len` bytes, zeroed.
    #[wasm_bindgen(constructor)]
    pub fn new(len: usize) -> Bytes {
        Bytes {
            blob: Blob::zeroed(len),
        }
    }

    /// A copy of a whole array.
    #[wasm_bindgen(js_name = copyOf)]
    pub fn copy_of(array: &Uint8Array) -> Bytes {
        let mut b = Bytes::new(array.length() as usize);
        b.write(0, array).expect("same length");
        b
    }

    /// Copies `chunk` in at `offset`.
    pub fn write(&mut self, offset: usize, chunk: &Uint8Array) -> Result<(), JsError> {
        let dst = self.blob.as_mut_slice().expect("bytes in memory");
        let len = chunk.length() as usize;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= dst.len())
            .ok_or_else(|| {
                js_err(format!(
                    "a chunk of {len} bytes at {offset} does not fit in {} bytes",
                    dst.len()
                ))
            })?;
        chunk.copy_to(&mut dst[offset..end]);
        Ok(())
    }

    #[wasm_bindgen(getter)]
    pub fn length(&self) -> usize {
        self.blob.len()
    }
}

/// A GGUF language model with its tokenizer and chat template.
#[wasm_bindgen]
pub struct Model {
    inner: Rc<TextGeneration>,
}

#[wasm_bindgen]
impl Model {
    /// Loads a GGUF file's bytes; the tensors view them without another copy. With
    /// `repack`, the SIMD128 builds rearrange the Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 matrices eight rows
    /// at a time where they lie, for the interleaved kernels' faster decode
    /// (`GgufFile::from_blob_interleaved`); the scalar build ignores it.
    pub fn load(bytes: Bytes, repack: bool) -> Result<Model, JsError> {
        let file = match repack && cfg!(target_feature = "simd128") {
            true => GgufFile::from_blob_interleaved(bytes.blob),
            false => GgufFile::from_blob(bytes.blob),
        };
        let file = file.map_err(js_err)?;
        let inner = TextGeneration::from_gguf_file(&file, WeightMode::AsStored).map_err(js_err)?;
        Ok(Model {
            inner: Rc::new(inner),
        })
    }

    /// What the file says the model is, as JSON: architecture, context length, vocabulary
    /// size, layers, hidden size, and whether the chat template came from the file.
    pub fn info(&self) -> String {
        let i = self.inner.model.info();
        serde_json::json!({
            "architecture": i.architecture,
            "contextLength": i.context_length,
            "vocabSize": i.vocab_size,
            "layers": i.layers,
            "hiddenSize": i.hidden_size,
            "chatTemplateFromFile": self.inner.template_from_file,
        })
        .to_string()
    }

    /// Token ids of raw text, with BOS/EOS as the model's flags say and special-token texts
    /// parsed (what `hanzo-engine tokenize` prints).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.inner.text_tokens(text)
    }

    /// The text of `ids` (special tokens left out).
    pub fn decode(&self, ids: &[u32]) -> Result<String, JsError> {
        self.check_ids(ids)?;
        Ok(self.inner.tokenizer.decode(ids, false))
    }

    /// Token ids of a chat (`[{role, content}, …]` as JSON) through the model's template,
    /// ready for generation.
    #[wasm_bindgen(js_name = chatTokens)]
    pub fn chat_tokens(&self, messages_json: &str) -> Result<Vec<u32>, JsError> {
        let messages: Vec<Message> =
            serde_json::from_str(messages_json).map_err(|e| js_err(format!("messages: {e}")))?;
        self.inner.chat_tokens(&messages).map_err(js_err)
    }

    /// The logits after every position of `ids` (`ids.length × vocabSize` values, row by
    /// row): what the model predicts for each next token, for scoring a text.
    pub fn logits(&self, ids: &[u32]) -> Result<Vec<f32>, JsError> {
        self.check_ids(ids)?;
        if ids.is_empty() {
            return Err(js_err("no tokens to score"));
        }
        let model = &self.inner.model;
        let mut cache = model.new_cache(ids.len());
        let mut rows = Vec::with_capacity(ids.len() * model.info().vocab_size);
        for chunk in ids.chunks(PREFILL_CHUNK) {
            let t = model
                .forward(chunk, &mut cache, Logits::All)
                .and_then(|t| Ok(t.flatten_all()?.to_vec1::<f32>()?))
                .map_err(js_err)?;
            rows.extend_from_slice(&t);
        }
        Ok(rows)
    }

    /// Starts generating from `ids` with the options (JSON: maxTokens, temperature, topK,
    /// topP, minP, seed, stop, repeatPenalty, presencePenalty, frequencyPenalty); reads the
    /// prompt before it returns.
    pub fn start(&self, ids: &[u32], options_json: &str) -> Result<Generation, JsError> {
        let opts = options::parse(options_json).map_err(js_err)?;
        self.check_ids(ids)?;
        let run = self.inner.start(ids, &opts).map_err(js_err)?;
        Ok(Generation {
            model: self.inner.clone(),
            run: Some(run),
        })
    }
}

impl Model {
    /// An error naming the first id outside the vocabulary.
    fn check_ids(&self, ids: &[u32]) -> Result<(), JsError> {
        let vocab = self.inner.tokenizer.vocab().len();
        match ids.iter().find(|&&id| id as usize >= vocab) {
            Some(bad) => Err(js_err(format!(
                "token id {bad} is outside the vocabulary ({vocab} tokens)"
            ))),
            None => Ok(()),
        }
    }
}

/// A generation in progress: `step()` gives its next piece of text.
#[wasm_bindgen]
pub struct Generation {
    model: Rc<TextGeneration>,
    /// `None` once `finish` has taken the result.
    run: Option<Run>,
}

#[wasm_bindgen]
impl Generation {
    /// The text of the next token (empty while a character or a possible stop string is
    /// still open); `undefined` once the generation has finished.
    pub fn step(&mut self) -> Result<Option<String>, JsError> {
        let Some(run) = self.run.as_mut() else {
            return Ok(None);
        };
        if run.finish().is_some() {
            return Ok(None);
        }
        self.model.step(run).map(Some).map_err(js_err)
    }

    /// Ends the generation now.
    pub fn cancel(&mut self) {
        if let Some(run) = self.run.as_mut() {
            run.cancel();
        }
    }

    /// The outcome as JSON: text, tokens, finishReason (`stop`, `length` or `cancelled`),
    /// promptTokens, promptSeconds, generateSeconds.
    pub fn result(&self) -> String {
        let Some(run) = self.run.as_ref() else {
            return "null".into();
        };
        let reason = match run.finish() {
            None => "running",
            Some(Finish::Length) => "length",
            Some(Finish::Stop | Finish::EndOfText) => "stop",
            Some(Finish::Cancelled) => "cancelled",
        };
        let g = run.generated();
        serde_json::json!({
            "text": g.text,
            "tokens": g.tokens,
            "finishReason": reason,
            "promptTokens": g.prompt_tokens,
            "promptSeconds": g.prompt_seconds,
            "generateSeconds": g.generate_seconds,
        })
        .to_string()
    }
}

/// A BERT-family sentence embedder (a sentence-transformers directory's files).
#[wasm_bindgen]
pub struct Embedder {
    inner: hanzo_transformers::Embedder,
}

#[wasm_bindgen]
impl Embedder {
    /// From the contents of config.json and tokenizer.json, the bytes of model.safetensors,
    /// and optionally 1_Pooling/config.json, modules.json and sentence_bert_config.json.
    pub fn load(
        config: &str,
        tokenizer: &str,
        weights: Bytes,
        pooling: Option<String>,
        modules: Option<String>,
        sentence_bert: Option<String>,
    ) -> Result<Embedder, JsError> {
        let inner = hanzo_transformers::Embedder::from_files(EncoderFiles {
            config,
            tokenizer,
            weights: weights.blob,
            pooling: pooling.as_deref(),
            modules: modules.as_deref(),
            sentence_bert: sentence_bert.as_deref(),
        })
        .map_err(js_err)?;
        Ok(Embedder { inner })
    }

    /// The vectors of `texts` (a JSON array of strings), one after another in one
    /// `Float32Array` of `texts.length × dimensions`.
    pub fn embed(&self, texts_json: &str) -> Result<Vec<f32>, JsError> {
        let texts: Vec<String> =
            serde_json::from_str(texts_json).map_err(|e| js_err(format!("texts: {e}")))?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = self.inner.embed(&refs).map_err(js_err)?;
        Ok(vectors.concat())
    }

    #[wasm_bindgen(getter)]
    pub fn dimensions(&self) -> usize {
        self.inner.model.config.hidden_size
    }
}

/// Whether this build's kernels use WebAssembly SIMD128.
#[wasm_bindgen(js_name = simd128)]
pub fn simd128() -> bool {
    cfg!(target_feature = "simd128")
}

/// Whether this build's kernels also use relaxed SIMD's 8-bit dot product.
#[wasm_bindgen(js_name = relaxedSimd)]
pub fn relaxed_simd() -> bool {
    cfg!(target_feature = "relaxed-simd")
}

/// Bytes of weights repacked so far (`Model.load`'s `repack`), over the module's life.
#[wasm_bindgen(js_name = repackedBytes)]
pub fn repacked_weight_bytes() -> usize {
    repacked_bytes()
}

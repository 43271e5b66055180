//! Hanzo Edge in WebAssembly: `hanzo_edge::Edge` (the memory budget, the one conversation
//! and its eviction) for `js/edge.js`'s `HanzoEdge`. The budget is checked from the file's
//! first bytes ([`edge_budget`]) before the rest is downloaded or copied in.

use crate::{js_err, options, Bytes};
use hanzo_edge::{Budget, Edge, EdgeConfig, EdgeError, Event, Eviction, KvDtype, Reply, Summary};
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{GenerateOptions, Message};
use serde::Deserialize;
use serde_json::{json, Value};
use wasm_bindgen::prelude::*;

/// `HanzoEdge.init`'s settings (the model itself comes apart).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    max_context_tokens: usize,
    max_memory_bytes: f64,
    eviction: Option<String>,
    keep_tokens: Option<usize>,
    max_keep_tokens: Option<usize>,
    prefill_chunk: Option<usize>,
    kv_dtype: Option<String>,
    lookup: Option<usize>,
    draft_k: Option<usize>,
}

fn config(json: &str) -> Result<EdgeConfig, String> {
    let s: Settings = serde_json::from_str(json).map_err(|e| format!("settings: {e}"))?;
    if !(s.max_memory_bytes.is_finite() && s.max_memory_bytes > 0.0) {
        return Err("maxMemoryBytes must be a positive number of bytes".into());
    }
    let mut c = EdgeConfig::new(
        "model.gguf",
        s.max_context_tokens,
        s.max_memory_bytes as u64,
    );
    c.eviction = match s.eviction.as_deref() {
        None | Some("rerotate") => Eviction::Rerotate,
        Some("recompute") => Eviction::Recompute,
        Some("off") => Eviction::Off,
        Some(other) => return Err(format!("eviction {other:?}: rerotate, recompute or off")),
    };
    c.keep_tokens = s.keep_tokens.unwrap_or(c.keep_tokens);
    c.max_keep_tokens = s.max_keep_tokens.unwrap_or(c.max_keep_tokens);
    c.prefill_chunk = s.prefill_chunk.unwrap_or(c.prefill_chunk);
    if let Some(d) = s.kv_dtype {
        c.kv_dtype = d.parse::<KvDtype>()?;
    }
    c.lookup = s
        .lookup
        .map(|n| hanzo_transformers::PromptLookup::new(n, s.draft_k.unwrap_or(8)));
    Ok(c)
}

fn breakdown(b: &hanzo_edge::Breakdown) -> Value {
    json!({
        "weights": b.weights,
        "kvCache": b.kv_cache,
        "activations": b.activations,
        "tokenizer": b.tokenizer,
        "runtime": b.runtime,
    })
}

fn budget_json(b: &Budget) -> Value {
    json!({"total": b.total(), "breakdown": breakdown(&b.breakdown)})
}

/// The budget of the model whose file is `file_len` bytes and starts with `prefix`, under
/// `settings` (JSON), as JSON: `{"fits": true, "budget": {...}}`, `{"fits": false, "needed",
/// "limit", "breakdown", "message"}`, or `{"more": true}` when the header runs past the
/// prefix. Other errors (not a GGUF file, a bad setting) are thrown.
#[wasm_bindgen(js_name = edgeBudget)]
pub fn edge_budget(prefix: &[u8], file_len: f64, settings: &str) -> Result<String, JsError> {
    let cfg = config(settings).map_err(js_err)?;
    let file = match GgufFile::header_only(prefix, file_len as u64) {
        Ok(f) => f,
        Err(_) if (prefix.len() as f64) < file_len => return Ok(json!({"more": true}).to_string()),
        Err(e) => return Err(js_err(e)),
    };
    Ok(match Budget::check(&file, &cfg) {
        Ok((b, _)) => json!({"fits": true, "budget": budget_json(&b)}),
        Err(e) => match &e {
            EdgeError::OverBudget {
                needed,
                limit,
                breakdown: b,
            } => json!({
                "fits": false,
                "needed": needed,
                "limit": limit,
                "breakdown": breakdown(b),
                "message": e.to_string(),
            }),
            _ => return Err(js_err(e)),
        },
    }
    .to_string())
}

/// One model and its conversation inside a budget (`hanzo_edge::Edge`).
#[wasm_bindgen]
pub struct EdgeRuntime {
    edge: Edge,
    /// The reply being generated, if any.
    reply: Option<Reply>,
    /// The last finished reply's summary.
    summary: Option<Summary>,
}

#[wasm_bindgen]
impl EdgeRuntime {
    /// Loads a GGUF file's bytes under `settings` (JSON); the SIMD128 builds interleave the
    /// weights the interleaved kernels read where they lie (`GgufFile::from_blob_interleaved`).
    pub fn load(bytes: Bytes, settings: &str) -> Result<EdgeRuntime, JsError> {
        let cfg = config(settings).map_err(js_err)?;
        let file = match cfg!(target_feature = "simd128") {
            true => GgufFile::from_blob_interleaved(bytes.blob),
            false => GgufFile::from_blob(bytes.blob),
        }
        .map_err(js_err)?;
        let edge = Edge::from_gguf(file, cfg).map_err(js_err)?;
        Ok(EdgeRuntime {
            edge,
            reply: None,
            summary: None,
        })
    }

    /// The budget as JSON: `{total, breakdown: {weights, kvCache, activations, tokenizer,
    /// runtime}}`.
    pub fn budget(&self) -> String {
        budget_json(self.edge.budget()).to_string()
    }

    /// Starts the reply to `messages` (the whole conversation, `[{role, content}, …]` as
    /// JSON) with the options (JSON, as `Model.start` takes them); what the KV cache holds of
    /// the conversation is not computed again. A reply still running is dropped.
    pub fn chat(&mut self, messages: &str, options: &str) -> Result<usize, JsError> {
        let messages: Vec<Message> =
            serde_json::from_str(messages).map_err(|e| js_err(format!("messages: {e}")))?;
        self.begin(options, |edge, opts| {
            edge.chat(&messages, opts).map(|s| s.into_reply())
        })
    }

    /// Starts a continuation of raw `text` (no chat template), as [`Self::chat`] does.
    pub fn complete(&mut self, text: &str, options: &str) -> Result<usize, JsError> {
        self.begin(options, |edge, opts| {
            edge.complete(text, opts).map(|s| s.into_reply())
        })
    }

    /// The next piece of the reply's text; `undefined` once it has finished (then
    /// [`Self::summary`] says how it went).
    pub fn step(&mut self) -> Result<Option<String>, JsError> {
        let Some(reply) = self.reply.as_mut() else {
            return Ok(None);
        };
        match reply.next_event(&mut self.edge) {
            Some(Ok(Event::Text(t))) => Ok(Some(t)),
            Some(Ok(Event::Done(s))) => {
                self.summary = Some(s);
                self.reply = None;
                Ok(None)
            }
            None => {
                self.reply = None;
                Ok(None)
            }
            Some(Err(e)) => {
                self.reply = None;
                Err(js_err(e))
            }
        }
    }

    /// Ends the reply now (the conversation keeps what was generated); its summary says
    /// `cancelled`.
    pub fn cancel(&mut self) {
        if let Some(r) = self.reply.take() {
            self.summary = Some(r.summary(&self.edge));
        }
    }

    /// The last reply's summary as JSON (null before one): finishReason,
    /// promptTokens, computedPromptTokens, completionTokens, evictedTokens, evictions,
    /// keptTokens, contextTokens, maxContextTokens, timeToFirstTokenSeconds,
    /// tokensPerSecond, draftedTokens, acceptedTokens.
    pub fn summary(&self) -> String {
        let Some(s) = &self.summary else {
            return "null".into();
        };
        json!({
            "finishReason": match s.finish {
                hanzo_transformers::Finish::Length => "length",
                hanzo_transformers::Finish::Cancelled => "cancelled",
                _ => "stop",
            },
            "promptTokens": s.prompt_tokens,
            "computedPromptTokens": s.computed_prompt_tokens,
            "completionTokens": s.completion_tokens,
            "evictedTokens": s.evicted_tokens,
            "evictions": s.evictions,
            "keptTokens": s.kept_tokens,
            "contextTokens": s.context_tokens,
            "maxContextTokens": s.max_context_tokens,
            "timeToFirstTokenSeconds": s.time_to_first_token_s,
            "tokensPerSecond": s.tokens_per_second,
            "draftedTokens": s.drafted_tokens,
            "acceptedTokens": s.accepted_tokens,
        })
        .to_string()
    }

    /// The tokens the KV cache holds, in position order.
    #[wasm_bindgen(js_name = contextTokens)]
    pub fn context_tokens(&self) -> Vec<u32> {
        self.edge.context_tokens().to_vec()
    }

    /// Unit vectors of `texts` (a JSON array of strings) by last-token pooling, one after
    /// another in one `Float32Array`.
    pub fn embed(&mut self, texts: &str) -> Result<Vec<f32>, JsError> {
        let texts: Vec<String> =
            serde_json::from_str(texts).map_err(|e| js_err(format!("texts: {e}")))?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(self.edge.embed(&refs).map_err(js_err)?.vectors.concat())
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.reply = None;
        self.edge.reset();
    }
}

impl EdgeRuntime {
    /// Drops a reply still running, starts the one `start` makes with the options (JSON),
    /// and returns its prompt's tokens.
    fn begin(
        &mut self,
        options: &str,
        start: impl FnOnce(&mut Edge, &GenerateOptions) -> Result<Reply, EdgeError>,
    ) -> Result<usize, JsError> {
        let opts = options::parse(options).map_err(js_err)?;
        self.reply = None;
        let reply = start(&mut self.edge, &opts).map_err(js_err)?;
        let prompt = reply.prompt_tokens();
        self.reply = Some(reply);
        Ok(prompt)
    }
}

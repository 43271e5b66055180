//! The embedding pipeline: tokenizer.json → BERT-family encoder → pooling (mean over real
//! tokens, or CLS) → optional L2 normalisation, as sentence-transformers configures it.

use crate::models::bert::{Bert, BertConfig};
use crate::{Error, Result};
use hanzo_ml::cpu::Blob;
use hanzo_ml::io::safetensors::{MmapedSafetensors, ShardedSafetensors};
use hanzo_ml::{DType, Device, Tensor};
use hanzo_nn::VarBuilder;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    Cls,
}

pub struct Embedder {
    pub model: Bert,
    pub tokenizer: tokenizers::Tokenizer,
    pub pooling: Pooling,
    pub normalize: bool,
    /// The most tokens an input may have (sentence-transformers' max_seq_length, at most the
    /// model's positions). Longer inputs are an error unless truncation is asked for.
    pub max_tokens: usize,
}

/// A sentence-transformers model's files, read already (see [`Embedder::from_files`]).
pub struct EncoderFiles<'a> {
    /// config.json
    pub config: &'a str,
    /// tokenizer.json
    pub tokenizer: &'a str,
    /// model.safetensors
    pub weights: Blob,
    /// 1_Pooling/config.json (mean pooling without it)
    pub pooling: Option<&'a str>,
    /// modules.json (a Normalize module there turns on L2 normalisation)
    pub modules: Option<&'a str>,
    /// sentence_bert_config.json (its `max_seq_length`)
    pub sentence_bert: Option<&'a str>,
}

/// The optional sentence-transformers configs, parsed.
struct SentenceConfig {
    pooling: Option<serde_json::Value>,
    modules: Option<serde_json::Value>,
    sentence_bert: Option<serde_json::Value>,
}

/// How `Embedder::embed_with` treats its inputs.
#[derive(Clone, Copy, Debug, Default)]
pub struct EmbedOptions {
    /// Cut inputs longer than `max_tokens` (keeping the final `[SEP]`) instead of failing;
    /// `Embeddings::truncated` says which were cut.
    pub truncate: bool,
}

/// The vectors of `Embedder::embed_with`, in input order, with what was embedded of each.
#[derive(Clone, Debug)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of each input as embedded ([CLS] and [SEP] included, after any truncation).
    pub tokens: Vec<usize>,
    /// Whether each input was cut to `max_tokens`.
    pub truncated: Vec<bool>,
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::model(path.display().to_string(), e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| Error::model(path.display().to_string(), e.to_string()))
}

/// The architecture config.json names; plain BERT checkpoints often leave `model_type` out.
fn encoder_arch(config: &serde_json::Value) -> &str {
    config["model_type"].as_str().unwrap_or("bert")
}

impl Embedder {
    /// Whether `dir` holds a model `from_dir` loads (its config.json names a BERT-family
    /// encoder), as opposed to a text-generation model.
    pub fn is_encoder_dir(dir: impl AsRef<Path>) -> bool {
        read_json(&dir.as_ref().join("config.json")).is_ok_and(|c| encoder_arch(&c) == "bert")
    }

    /// A sentence-transformers (or plain Hugging Face BERT) model directory: config.json,
    /// model.safetensors, tokenizer.json, and optionally 1_Pooling/config.json,
    /// modules.json (a Normalize module) and sentence_bert_config.json.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let config = read_json(&dir.join("config.json"))?;
        let weights = dir.join("model.safetensors");
        if !weights.exists() {
            return Err(Error::model(
                dir.display().to_string(),
                "no model.safetensors",
            ));
        }
        let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| Error::Tokenizer(format!("tokenizer.json: {e}")))?;
        let optional = |name: &str| read_json(&dir.join(name)).ok();
        Self::assemble(
            config,
            || {
                Ok(VarBuilder::from_safetensors(
                    &[weights],
                    DType::F32,
                    &Device::Cpu,
                )?)
            },
            tokenizer,
            SentenceConfig {
                pooling: optional("1_Pooling/config.json"),
                modules: optional("modules.json"),
                sentence_bert: optional("sentence_bert_config.json"),
            },
        )
    }

    /// The same model from its files' contents, read already (as in the browser, where there
    /// is no directory): `weights` is model.safetensors.
    pub fn from_files(files: EncoderFiles<'_>) -> Result<Self> {
        let json = |name: &str, text: &str| {
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| Error::model(name, e.to_string()))
        };
        let optional = |name: &str, text: Option<&str>| text.map(|t| json(name, t)).transpose();
        let tokenizer = tokenizers::Tokenizer::from_str(files.tokenizer)
            .map_err(|e| Error::Tokenizer(format!("tokenizer.json: {e}")))?;
        let sentence = SentenceConfig {
            pooling: optional("1_Pooling/config.json", files.pooling)?,
            modules: optional("modules.json", files.modules)?,
            sentence_bert: optional("sentence_bert_config.json", files.sentence_bert)?,
        };
        let weights = files.weights;
        Self::assemble(
            json("config.json", files.config)?,
            move || {
                let st = MmapedSafetensors::from_blob(weights, "model.safetensors")?;
                let source = ShardedSafetensors::from_files(vec![st]);
                Ok(VarBuilder::from_source(
                    Arc::new(source),
                    DType::F32,
                    &Device::Cpu,
                ))
            },
            tokenizer,
            sentence,
        )
    }

    /// The embedder of a parsed config.json; `weights` opens the weights once the config
    /// names an architecture we run.
    fn assemble(
        config: serde_json::Value,
        weights: impl FnOnce() -> Result<VarBuilder>,
        mut tokenizer: tokenizers::Tokenizer,
        sentence: SentenceConfig,
    ) -> Result<Self> {
        let arch = encoder_arch(&config);
        if arch != "bert" {
            return Err(Error::UnsupportedArchitecture(arch.into(), "bert"));
        }
        let vb = weights()?;
        let config: BertConfig = serde_json::from_value(config)
            .map_err(|e| Error::model("config.json", e.to_string()))?;
        let model = Bert::load(&vb, config)?;
        // Batching pads itself; truncation is max_tokens' job.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let pooling = match sentence.pooling {
            Some(p) if p["pooling_mode_cls_token"].as_bool() == Some(true) => Pooling::Cls,
            _ => Pooling::Mean,
        };
        let normalize = sentence
            .modules
            .is_some_and(|m| m.to_string().contains("Normalize"));
        let max_tokens = sentence
            .sentence_bert
            .and_then(|c| c["max_seq_length"].as_u64())
            .map(|n| n as usize)
            .unwrap_or(model.config.max_position_embeddings)
            .min(model.config.max_position_embeddings);
        Ok(Self {
            model,
            tokenizer,
            pooling,
            normalize,
            max_tokens,
        })
    }

    /// Token ids of one text (with [CLS]/[SEP]); an error if there are more than
    /// `max_tokens`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.encode_with(0, text, EmbedOptions::default())?.0)
    }

    /// Token ids of input `index`, cut to `max_tokens` where `opts` allows (the flag says
    /// whether it was).
    fn encode_with(
        &self,
        index: usize,
        text: &str,
        opts: EmbedOptions,
    ) -> Result<(Vec<u32>, bool)> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut ids = enc.get_ids().to_vec();
        if ids.len() <= self.max_tokens {
            return Ok((ids, false));
        }
        if !opts.truncate {
            return Err(Error::TooLong {
                index,
                tokens: ids.len(),
                limit: self.max_tokens,
            });
        }
        // Keep the final [SEP], as the tokenizers' truncation would.
        let last = *ids.last().expect("non-empty");
        ids.truncate(self.max_tokens);
        *ids.last_mut().expect("non-empty") = last;
        Ok((ids, true))
    }

    /// One vector per text; a text longer than `max_tokens` is an error (`Error::TooLong`).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_with(texts, EmbedOptions::default())?.vectors)
    }

    /// One vector per text, as `opts` asks. Texts are batched together, padded to the longest.
    pub fn embed_with(&self, texts: &[&str], opts: EmbedOptions) -> Result<Embeddings> {
        let (encoded, truncated): (Vec<Vec<u32>>, Vec<bool>) = texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.encode_with(i, t, opts))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        // Sort by length so each batch pads little; restore the order at the end.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encoded[i].len());
        let mut vecs = vec![Vec::new(); texts.len()];
        for batch in order.chunks(32) {
            let t = batch
                .iter()
                .map(|&i| encoded[i].len())
                .max()
                .unwrap_or(0)
                .max(1);
            let b = batch.len();
            let mut ids = vec![0u32; b * t];
            let mut mask = vec![0u32; b * t];
            for (r, &i) in batch.iter().enumerate() {
                for (j, &id) in encoded[i].iter().enumerate() {
                    ids[r * t + j] = id;
                    mask[r * t + j] = 1;
                }
            }
            let ids = Tensor::from_vec(ids, (b, t), &Device::Cpu)?;
            let mask_t = Tensor::from_vec(mask.clone(), (b, t), &Device::Cpu)?;
            let h = self.model.forward(&ids, &mask_t)?.to_vec3::<f32>()?;
            for (r, &i) in batch.iter().enumerate() {
                let d = h[r][0].len();
                let mut v = match self.pooling {
                    Pooling::Cls => h[r][0].clone(),
                    Pooling::Mean => {
                        let mut acc = vec![0f64; d];
                        let n = encoded[i].len().max(1);
                        for row in &h[r][..n] {
                            for (a, &x) in acc.iter_mut().zip(row) {
                                *a += x as f64;
                            }
                        }
                        acc.iter().map(|&a| (a / n as f64) as f32).collect()
                    }
                };
                if self.normalize {
                    l2_normalize(&mut v);
                }
                vecs[i] = v;
            }
        }
        Ok(Embeddings {
            vectors: vecs,
            tokens: encoded.iter().map(Vec::len).collect(),
            truncated,
        })
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt();
    let norm = norm.max(1e-12) as f32;
    v.iter_mut().for_each(|x| *x /= norm);
}

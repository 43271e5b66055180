//! Decoder language models and encoder embedding models.
//!
//! A loaded model holds only weights (shared, read-only); the per-sequence state is a
//! [`Cache`], so one model serves many sequences.

pub mod attention;
pub mod bert;
mod gemma3;
pub mod hf;
mod llama;
pub(crate) mod meta;
pub mod numerics;

pub use gemma3::Gemma3;
pub use llama::Llama;
pub use meta::WeightMode;

use crate::{Error, Result};
use attention::KvF16;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_ml::{RopeKind, Tensor};

/// What a model is, as read from its file.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub architecture: String,
    pub vocab_size: usize,
    /// Context length the model was trained for.
    pub context_length: usize,
    pub hidden_size: usize,
    pub layers: usize,
    /// KV heads × head dim: cache values per position per layer.
    pub kv_row: usize,
}

/// Which positions' logits `forward` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last position (generation).
    Last,
    /// Every position (perplexity, scoring).
    All,
}

/// Per-sequence KV state: one cache per layer and the number of positions seen.
pub struct Cache {
    layers: Vec<KvF16>,
    len: usize,
    limit: usize,
    /// Values per position per layer (kv_heads × head_dim).
    row: usize,
}

impl Cache {
    pub fn new(layers: usize, row: usize, limit: usize) -> Self {
        Self {
            layers: (0..layers).map(|_| KvF16::default()).collect(),
            len: 0,
            limit,
            row,
        }
    }

    /// Bytes the cache holds now.
    pub fn bytes(&self) -> usize {
        self.layers.len() * self.len * self.row * 2 * 2
    }

    /// Positions already processed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// Keeps the first `len` positions (a shared prompt prefix, say).
    pub fn truncate(&mut self, len: usize) {
        for l in &mut self.layers {
            l.truncate(len, self.row);
        }
        self.len = self.len.min(len);
    }

    fn check_room(&self, t: usize) -> Result<()> {
        if self.len + t > self.limit {
            return Err(Error::ContextFull {
                needed: self.len + t,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

pub trait LanguageModel: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// A fresh cache holding up to `limit` positions (capped at the training context).
    fn new_cache(&self, limit: usize) -> Cache {
        let info = self.info();
        Cache::new(info.layers, info.kv_row, limit.min(info.context_length))
    }

    /// Runs `tokens` at positions `cache.len()..`, appends them to the cache and returns
    /// logits `[n, vocab]` (n = 1 for [`Logits::Last`], `tokens.len()` for `All`).
    fn forward(&self, tokens: &[u32], cache: &mut Cache, logits: Logits) -> Result<Tensor>;
}

const SUPPORTED: &str = "gemma3, llama, mistral, phi3, qwen2, qwen3";

/// The model a GGUF file holds, chosen by `general.architecture`, weights as stored.
pub fn load_gguf(file: &GgufFile) -> Result<Box<dyn LanguageModel>> {
    load_gguf_with(file, WeightMode::AsStored)
}

/// The model a GGUF file holds, weights held as `mode` says.
pub fn load_gguf_with(file: &GgufFile, mode: WeightMode) -> Result<Box<dyn LanguageModel>> {
    let g = meta::Gguf::new(file)?.with_mode(mode);
    Ok(match g.arch.as_str() {
        "gemma3" => Box::new(Gemma3::from_gguf(&g)?),
        "llama" | "mistral" | "phi3" | "qwen2" | "qwen3" => Box::new(Llama::from_gguf(&g)?),
        other => return Err(Error::UnsupportedArchitecture(other.to_string(), SUPPORTED)),
    })
}

/// The model of a Hugging Face directory (config.json + safetensors), weights as `mode` says
/// (`WeightMode::Quantize` for ISQ).
pub fn load_dir(dir: &std::path::Path, mode: WeightMode) -> Result<Box<dyn LanguageModel>> {
    hf::load(dir, mode)
}

/// The output head over the final hidden states of a forward pass of `t` positions. A prompt's
/// pass (`t > 1`) never triggers repacking the head (`QMatMul::forward_prompt`): the first
/// token does not wait for the copy; the first decode step makes it.
fn output_logits(output: &hanzo_ml::quantized::QMatMul, x: &Tensor, t: usize) -> Result<Tensor> {
    Ok(if t > 1 {
        output.forward_prompt(x)?
    } else {
        output.forward(x)?
    })
}

/// Rotary embedding of `[t, heads, head_dim]` with tables `[t, rot_dim / 2]`; dims past
/// `rot_dim` pass through (partial rotary). Returns a contiguous `[t, heads, head_dim]`.
fn rope_heads(x: &Tensor, cos: &Tensor, sin: &Tensor, kind: RopeKind) -> Result<Tensor> {
    let d = x.dims()[2];
    let rd = cos.dims()[1] * 2;
    let xt = x.transpose(0, 1)?.unsqueeze(0)?;
    let r = if rd == d {
        xt.rotary_emb(cos, sin, kind)?
    } else {
        let r = xt.narrow(3, 0, rd)?.rotary_emb(cos, sin, kind)?;
        Tensor::cat(&[&r, &xt.narrow(3, rd, d - rd)?], 3)?
    };
    Ok(r.squeeze(0)?.transpose(0, 1)?.contiguous()?)
}

fn check_tokens(tokens: &[u32], vocab: usize) -> Result<()> {
    if tokens.is_empty() {
        return Err(Error::Invalid("forward needs at least one token".into()));
    }
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(Error::Invalid(format!(
            "token id {bad} is outside the vocabulary of {vocab}"
        )));
    }
    Ok(())
}

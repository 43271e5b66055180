//! Decoder language models and encoder embedding models.
//!
//! A loaded model holds only weights (shared, read-only); the per-sequence state is a
//! KV store ([`PagedKv`], or a single-sequence [`Cache`]), so one model serves many sequences.

pub mod bert;
mod decoder;
mod gemma3;
pub mod hf;
mod llama;
mod lora;
pub(crate) mod meta;
pub mod numerics;

pub use decoder::Decoder;
pub use meta::WeightMode;

use crate::lora::{Adapter, LoraId};
use crate::{Error, Result};
use hanzo_ml::kv::{KvDtype, KvLayout, PagedKv, SeqId};
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
    /// Query heads × head dim.
    pub q_row: usize,
    /// Width of the MLP's hidden layer.
    pub ffn_size: usize,
}

/// Bytes a forward pass of `rows` tokens that returns `logit_rows` rows of logits holds
/// beyond the weights and the KV store, at its peak: one layer's activations (f32; the
/// residual stream and its norm, queries before and after RoPE, keys, values, the
/// attention output and its projection; the MLP's gate, up, activated gate and product),
/// the activations quantized for the integer kernels, the rotary tables, and the logits
/// with the sampler's copies of them.
pub fn scratch_bytes(info: &ModelInfo, rows: usize, logit_rows: usize) -> usize {
    let (h, q, kv, f) = (info.hidden_size, info.q_row, info.kv_row, info.ffn_size);
    let per_row = 4 * (4 * h + 3 * q + 4 * kv + 4 * f) + 2 * (h + f) + 2 * 4 * q;
    rows * per_row + 4 * logit_rows * info.vocab_size * 4
}

/// Which positions' logits a forward pass returns for a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prompt chunk that is not the prompt's last).
    None,
    /// Only the last position (generation).
    Last,
    /// Every position (perplexity, scoring).
    All,
}

/// One sequence's part of a batch: its next tokens (a prompt chunk, or one decode token) at
/// positions `kv.len(seq)..`, and which of them need logits.
#[derive(Clone, Copy, Debug)]
pub struct SeqChunk<'a> {
    pub seq: SeqId,
    pub tokens: &'a [u32],
    pub logits: Logits,
    /// The length of the run these tokens end, at least `tokens.len()` (see `in_run`).
    run: usize,
    /// The LoRA adapter set the tokens run with (`LanguageModel::attach_lora`).
    lora: Option<LoraId>,
}

impl<'a> SeqChunk<'a> {
    /// `tokens` as a run of their own.
    pub fn new(seq: SeqId, tokens: &'a [u32], logits: Logits) -> Self {
        let run = tokens.len();
        Self {
            seq,
            tokens,
            logits,
            run,
            lora: None,
        }
    }

    /// The chunk run with adapter set `lora` (none: the base model).
    pub fn with_lora(self, lora: Option<LoraId>) -> Self {
        Self { lora, ..self }
    }

    /// The adapter set the chunk runs with.
    pub fn lora(&self) -> Option<LoraId> {
        self.lora
    }

    /// The last `tokens.len()` positions of a run of `run` positions whose first ones were
    /// computed before (the prefix cache supplied them): the weights take the kernels of the
    /// whole run (`QMatMul::forward_panels` where it reaches a weight's panel threshold), so
    /// the tokens get the numbers they get when the whole run is computed at once.
    pub fn in_run(self, run: usize) -> Self {
        Self {
            run: run.max(self.tokens.len()),
            ..self
        }
    }

    /// Every row computed as the decode step it stands for (the kernels of a one-token
    /// run), however many rows: a speculative check, whose logits must be what one decode
    /// step after another would give. The batch's runs stay shortest first.
    pub fn as_decode_steps(self) -> Self {
        Self { run: 1, ..self }
    }

    /// The length of the run these tokens end.
    pub fn run(&self) -> usize {
        self.run
    }
}

/// One sequence with a KV store of its own, for callers that run one sequence at a time
/// (the CLI, perplexity): the store holds `limit` positions and is allocated once.
pub struct Cache {
    kv: PagedKv,
    seq: SeqId,
    limit: usize,
    /// The adapter set the sequence runs with.
    lora: Option<LoraId>,
}

impl Cache {
    pub fn new(layout: KvLayout, limit: usize) -> Self {
        let blocks = layout.layers() * limit.max(1).div_ceil(layout.block_size);
        let mut kv = PagedKv::with_blocks(layout, blocks);
        let seq = kv.add_sequence();
        Self {
            kv,
            seq,
            limit,
            lora: None,
        }
    }

    /// Runs the sequence with adapter set `lora` from now on (none: the base model).
    pub fn set_lora(&mut self, lora: Option<LoraId>) {
        self.lora = lora;
    }

    pub fn lora(&self) -> Option<LoraId> {
        self.lora
    }

    /// Bytes of the store.
    pub fn bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// Positions already processed.
    pub fn len(&self) -> usize {
        self.kv.len(self.seq).expect("the cache's own sequence")
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Forgets positions `len..` (a speculative draft the model turned down). Sliding-window
    /// layers can give back only what [`Self::keep_behind`] asked them to keep.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        Ok(self.kv.truncate(self.seq, len)?)
    }

    /// Lets the sliding-window layers keep `n` positions behind their windows, so that up
    /// to `n` positions can be truncated.
    pub fn keep_behind(&mut self, n: usize) -> Result<()> {
        Ok(self.kv.keep_behind(self.seq, n)?)
    }

    /// Forgets every position.
    pub fn reset(&mut self) {
        self.kv.release(self.seq).expect("the cache's own sequence");
        self.seq = self.kv.add_sequence();
    }

    fn check_room(&self, t: usize) -> Result<()> {
        if self.len() + t > self.limit {
            return Err(Error::ContextFull {
                needed: self.len() + t,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

pub trait LanguageModel: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// The shape of this model's KV state, for a [`PagedKv`] store.
    fn kv_layout(&self) -> KvLayout;

    /// Runs a batch: every chunk's tokens at its sequence's next positions, appended to the
    /// store. Returns the logits `[rows, vocab]` the chunks asked for, in batch order. Room
    /// for the whole batch is reserved first: if the store is short of blocks nothing
    /// changes and the error is [`Error::Kv`] with `KvError::OutOfBlocks`.
    fn forward_batch(&self, batch: &[SeqChunk], kv: &mut PagedKv) -> Result<Tensor>;

    /// Runs a batch as [`Self::forward_batch`] does, but returns the rows the chunks asked
    /// for as hidden states after the final norm `[rows, hidden]` (the input of the output
    /// head) instead of logits: what last-token pooling embeds.
    fn hidden_batch(&self, batch: &[SeqChunk], kv: &mut PagedKv) -> Result<Tensor>;

    /// Repacks now every weight that would be repacked at the first decode step
    /// (`QMatMul::repack_now`), so that the stored pages of those weights are read once and
    /// released, never read whole by a prompt's pass beside their copies. Returns the
    /// weights repacked.
    fn repack_weights(&self) -> usize {
        0
    }

    /// Attaches a set of LoRA adapters, applied together, to the model (which keeps its
    /// weights as they are): chunks and caches that name the returned id run with them
    /// (`SeqChunk::with_lora`, `Cache::set_lora`), others without, in the same batches.
    /// An error, before anything changes, for an adapter made for another architecture or
    /// one whose shapes do not fit the model's weights.
    fn attach_lora(&mut self, adapters: &[Adapter]) -> Result<LoraId> {
        let _ = adapters;
        Err(Error::Invalid(format!(
            "{} models take no LoRA adapters",
            self.info().architecture
        )))
    }

    /// Evicts `count` positions of `seq` right after its pinned prefix (`PagedKv::evict`):
    /// the later positions move down by `count`, and their keys are rotated back by `count`
    /// positions, so the store holds what a fresh pass over the kept tokens would have
    /// written (up to the rounding of the keys to f16).
    fn evict(&self, kv: &mut PagedKv, seq: SeqId, count: usize) -> Result<()>;

    /// A fresh single-sequence cache holding up to `limit` positions (capped at the
    /// training context).
    fn new_cache(&self, limit: usize) -> Cache {
        self.new_cache_as(limit, KvDtype::F16)
    }

    /// [`Self::new_cache`] holding keys and values as `dtype`.
    fn new_cache_as(&self, limit: usize, dtype: KvDtype) -> Cache {
        let layout = self.kv_layout().with_dtype(dtype);
        Cache::new(layout, limit.min(self.info().context_length))
    }

    /// Runs `tokens` at positions `cache.len()..` and returns logits `[n, vocab]` (n = 1
    /// for [`Logits::Last`], `tokens.len()` for `All`).
    fn forward(&self, tokens: &[u32], cache: &mut Cache, logits: Logits) -> Result<Tensor> {
        cache.check_room(tokens.len())?;
        let chunk = SeqChunk::new(cache.seq, tokens, logits).with_lora(cache.lora);
        self.forward_batch(&[chunk], &mut cache.kv)
    }

    /// [`Self::forward`] with every position's logits, each computed as the decode step it
    /// stands for ([`SeqChunk::as_decode_steps`]): a speculative check.
    fn forward_steps(&self, tokens: &[u32], cache: &mut Cache) -> Result<Tensor> {
        cache.check_room(tokens.len())?;
        let chunk = SeqChunk::new(cache.seq, tokens, Logits::All)
            .as_decode_steps()
            .with_lora(cache.lora);
        self.forward_batch(&[chunk], &mut cache.kv)
    }
}

impl LanguageModel for Decoder {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn kv_layout(&self) -> KvLayout {
        Decoder::kv_layout(self)
    }

    fn forward_batch(&self, batch: &[SeqChunk], kv: &mut PagedKv) -> Result<Tensor> {
        Decoder::forward_batch(self, batch, kv)
    }

    fn hidden_batch(&self, batch: &[SeqChunk], kv: &mut PagedKv) -> Result<Tensor> {
        Decoder::hidden_batch(self, batch, kv)
    }

    fn evict(&self, kv: &mut PagedKv, seq: SeqId, count: usize) -> Result<()> {
        Decoder::evict(self, kv, seq, count)
    }

    fn repack_weights(&self) -> usize {
        Decoder::repack_weights(self)
    }

    fn attach_lora(&mut self, adapters: &[Adapter]) -> Result<LoraId> {
        Decoder::attach_lora(self, adapters)
    }
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
        "gemma3" => Box::new(gemma3::load(&g)?),
        "llama" | "mistral" | "phi3" | "qwen2" | "qwen3" => Box::new(llama::load(&g)?),
        other => return Err(Error::UnsupportedArchitecture(other.to_string(), SUPPORTED)),
    })
}

/// What [`load_gguf`] would build, from the file's metadata and tensor directory alone (no
/// tensor data is read): the model's [`ModelInfo`] and the [`KvLayout`] of its KV state.
/// The edge runtime sizes its memory budget from it before loading anything.
pub fn describe_gguf(file: &GgufFile) -> Result<(ModelInfo, KvLayout)> {
    let g = meta::Gguf::new(file)?;
    let (ctx, windows) = match g.arch.as_str() {
        "gemma3" => gemma3::context_and_windows(&g)?,
        "llama" | "mistral" | "phi3" | "qwen2" | "qwen3" => llama::context_and_windows(&g)?,
        other => return Err(Error::UnsupportedArchitecture(other.to_string(), SUPPORTED)),
    };
    let vocab = match file.content().tensor_info("token_embd.weight") {
        Some(t) => t.shape.dims()[0],
        None => return Err(Error::model(&g.arch, "no token_embd.weight")),
    };
    describe(&g, vocab, ctx, windows)
}

/// A decoder's info and KV layout from its parameters, vocabulary, context and windows.
fn describe(
    g: &meta::Gguf,
    vocab: usize,
    ctx: usize,
    windows: Vec<Option<usize>>,
) -> Result<(ModelInfo, KvLayout)> {
    let shape = g.decoder_shape()?;
    let layout = KvLayout::new(shape.kv_heads * shape.head_dim, windows);
    Ok((shape.info(&g.arch, vocab, ctx), layout))
}

/// The model of a Hugging Face directory (config.json + safetensors), weights as `mode` says
/// (`WeightMode::Quantize` for ISQ).
pub fn load_dir(dir: &std::path::Path, mode: WeightMode) -> Result<Box<dyn LanguageModel>> {
    hf::load(dir, mode)
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

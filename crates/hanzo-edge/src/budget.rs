//! The memory a model will take, computed from its file before anything large is read or
//! allocated (docs/EDGE.md says how each term is computed and what it was checked against).

use crate::config::EdgeConfig;
use crate::source::{ModelFiles, OpenedModel};
use crate::EdgeError;
use hanzo_ml::kv::KvLayout;
use hanzo_transformers::models::{scratch_bytes, ModelInfo};

/// Bytes of the process before any model: the binary's pages, the thread stacks and the
/// allocator's arenas (measured: `hanzo-edge` holds 4–5 MiB before it opens a file, and its worker threads and allocator arenas take a few more).
const RUNTIME_BYTES: u64 = 12 << 20;
/// Extra room the sliding-window layers keep behind their windows, so that a chat whose
/// last reply tokenizes differently when sent back can be truncated instead of recomputed.
pub(crate) const TRUNCATE_SLACK: usize = 32;

/// The terms of a budget, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breakdown {
    /// The weights as they sit in memory after any repacking.
    pub weights: u64,
    /// The KV cache for `max_context_tokens`, allocated once.
    pub kv_cache: u64,
    /// Activations of one prefill chunk, the logits and the sampler's copies of them.
    pub activations: u64,
    /// The tokenizer, and a GGUF file's header as read.
    pub tokenizer: u64,
    /// The process itself.
    pub runtime: u64,
    /// The safety guard (`EdgeConfig::guard`): its KV store and attention scratch, and with
    /// a model of its own, that model's weights, activations and tokenizer; 0 without one.
    pub guard: u64,
    /// LoRA adapters (`EdgeConfig::lora`): their A and scaled Bᵀ in f32, as the model holds
    /// them beside its weights; 0 without any.
    pub lora: u64,
    /// The draft model (`EdgeConfig::draft`): its weights, KV store, activations and
    /// tokenizer; 0 without one.
    pub draft: u64,
}

impl Breakdown {
    pub fn total(&self) -> u64 {
        self.weights
            + self.kv_cache
            + self.activations
            + self.tokenizer
            + self.runtime
            + self.guard
            + self.lora
            + self.draft
    }
}

impl std::fmt::Display for Breakdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = crate::error::mib;
        write!(
            f,
            "weights {}, KV cache {}, activations {}, tokenizer {}, runtime {}",
            m(self.weights),
            m(self.kv_cache),
            m(self.activations),
            m(self.tokenizer),
            m(self.runtime)
        )?;
        if self.guard > 0 {
            write!(f, ", guard {}", m(self.guard))?;
        }
        if self.lora > 0 {
            write!(f, ", LoRA {}", m(self.lora))?;
        }
        if self.draft > 0 {
            write!(f, ", draft model {}", m(self.draft))?;
        }
        Ok(())
    }
}

/// What a model with a given configuration needs, and the KV store's size.
#[derive(Clone, Debug)]
pub struct Budget {
    pub breakdown: Breakdown,
    /// Blocks of the KV store (`PagedKv::with_blocks`).
    pub kv_blocks: usize,
    /// Blocks of the safety guard's KV store (0 without a guard).
    pub guard_kv_blocks: usize,
    /// Blocks of the draft model's KV store (0 without one).
    pub draft_kv_blocks: usize,
}

impl Budget {
    /// The budget of a model (a GGUF file, or a model directory; its `info` and `layout`
    /// read from the headers, no tensor data touched) with `cfg`'s context, chunk and kept
    /// prefix. The weights count as [`ModelFiles::weights_bytes`] says.
    pub fn compute<'a>(
        model: impl Into<ModelFiles<'a>>,
        info: &ModelInfo,
        layout: &KvLayout,
        cfg: &EdgeConfig,
    ) -> Self {
        let model = model.into();
        let ctx = cfg.max_context_tokens;
        let chunk = cfg.chunk();
        // A pass that checks a draft (a prompt lookup's or the draft model's) runs the
        // pending token and the draft, and keeps every row's logits.
        let max_draft = match (&cfg.lookup, &cfg.draft) {
            (Some(l), _) => l.max_draft,
            (None, Some(d)) => d.max_draft,
            (None, None) => 0,
        };
        let checked = max_draft + 1;
        let pass = chunk.max(checked);
        let kv_blocks = layout.blocks_pinned(ctx, pass + TRUNCATE_SLACK, cfg.max_keep_tokens);
        Self {
            breakdown: Breakdown {
                weights: model.weights_bytes(),
                kv_cache: (kv_blocks * layout.block_bytes()) as u64,
                activations: scratch_bytes(info, pass, checked) as u64
                    + attention_bytes(layout, ctx),
                tokenizer: model.tokenizer_bytes(),
                runtime: RUNTIME_BYTES,
                guard: 0,
                lora: cfg.lora.iter().map(|a| a.bytes() as u64).sum(),
                draft: 0,
            },
            kv_blocks,
            guard_kv_blocks: 0,
            draft_kv_blocks: 0,
        }
    }

    pub fn total(&self) -> u64 {
        self.breakdown.total()
    }

    /// The budget of a model under `config` (a GGUF file may be header-only,
    /// `GgufFile::header_only`: nothing but the header is read), and the KV layout it was
    /// computed for; [`EdgeError::OverBudget`] when it is over `config.max_memory_bytes`.
    pub fn check<'a>(
        model: impl Into<ModelFiles<'a>>,
        config: &EdgeConfig,
    ) -> Result<(Self, KvLayout), EdgeError> {
        let model = model.into();
        let (info, layout) = model.describe()?;
        let layout = layout.with_dtype(config.kv_dtype);
        if config.max_context_tokens > info.context_length {
            return Err(EdgeError::Config(format!(
                "max_context_tokens {} is over the model's context of {}",
                config.max_context_tokens, info.context_length
            )));
        }
        layout
            .check_dtype()
            .map_err(|e| EdgeError::Config(e.to_string()))?;
        let mut budget = Self::compute(model, &info, &layout, config);
        if let Some(guard) = &config.guard {
            guard.validate()?;
            let (bytes, blocks) = guard_term(guard, &info, &layout, config)?;
            budget.breakdown.guard = bytes;
            budget.guard_kv_blocks = blocks;
        }
        if let Some(draft) = &config.draft {
            let (bytes, blocks) = draft_term(draft, config)?;
            budget.breakdown.draft = bytes;
            budget.draft_kv_blocks = blocks;
        }
        if budget.total() > config.max_memory_bytes {
            return Err(EdgeError::OverBudget {
                needed: budget.total(),
                limit: config.max_memory_bytes,
                breakdown: budget.breakdown.clone(),
            });
        }
        Ok((budget, layout))
    }
}

/// Attention over a long context reads one layer's visible keys and values as f32 copies
/// (a prompt pass, and every pass of a Q8_0 cache); an eviction's copy of the moved rows and
/// its f32 keys to re-rotate are no larger.
fn attention_bytes(layout: &KvLayout, ctx: usize) -> u64 {
    (ctx * layout.row * 2 * 4) as u64
}

/// The safety guard's bytes and KV blocks: a store for one window and its prompt (each
/// policy's part is read again after truncating back to the text, so that many positions
/// stay behind the windows), with the chat model's layout; or with the guard model's,
/// besides that model's weights, activations and tokenizer.
fn guard_term(
    guard: &crate::guard::Guard,
    info: &ModelInfo,
    layout: &KvLayout,
    cfg: &EdgeConfig,
) -> Result<(u64, usize), EdgeError> {
    let ctx = guard.context();
    let chunk = cfg.chunk();
    let slack = chunk + crate::guard::PROMPT_ROOM;
    let too_long = |limit: usize| {
        EdgeError::Config(format!(
            "guard: a window of {} tokens and its prompt take {ctx} positions, over the guard \
             model's context of {limit}",
            guard.window_tokens
        ))
    };
    let Some(path) = &guard.model else {
        if ctx > info.context_length {
            return Err(too_long(info.context_length));
        }
        let blocks = layout.blocks_pinned(ctx, slack, 0);
        let bytes = (blocks * layout.block_bytes()) as u64 + attention_bytes(layout, ctx);
        return Ok((bytes, blocks));
    };
    own_model_term(path, cfg, ctx, slack, "guard", too_long)
}

/// The draft model's term: its weights, a KV store for the context (with room for a pass
/// and truncation), a chunk's activations and its tokenizer; and its store's blocks.
fn draft_term(draft: &crate::DraftModel, cfg: &EdgeConfig) -> Result<(u64, usize), EdgeError> {
    let ctx = cfg.max_context_tokens;
    let too_long = |limit: usize| {
        EdgeError::Config(format!(
            "draft model: max_context_tokens {ctx} is over its context of {limit}"
        ))
    };
    let slack = cfg.chunk() + TRUNCATE_SLACK;
    own_model_term(&draft.model, cfg, ctx, slack, "draft model", too_long)
}

/// A second model's term (the guard's or the draft's, `what`) beside the chat model: its
/// weights, a KV store of `ctx` positions with `slack` more per pass, a chunk's activations
/// and its tokenizer; and its store's blocks. `too_long` words a context over the model's.
fn own_model_term(
    path: &std::path::Path,
    cfg: &EdgeConfig,
    ctx: usize,
    slack: usize,
    what: &str,
    too_long: impl Fn(usize) -> EdgeError,
) -> Result<(u64, usize), EdgeError> {
    let opened = OpenedModel::open(path)?;
    let model = opened.files();
    let (info, layout) = model.describe()?;
    let layout = layout.with_dtype(cfg.kv_dtype);
    if ctx > info.context_length {
        return Err(too_long(info.context_length));
    }
    layout
        .check_dtype()
        .map_err(|e| EdgeError::Config(format!("{what}: {e}")))?;
    let blocks = layout.blocks_pinned(ctx, slack, 0);
    let bytes = model.weights_bytes()
        + (blocks * layout.block_bytes()) as u64
        + scratch_bytes(&info, cfg.chunk(), 1) as u64
        + attention_bytes(&layout, ctx)
        + model.tokenizer_bytes();
    Ok((bytes, blocks))
}

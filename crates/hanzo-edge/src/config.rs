use hanzo_ml::kv::KvDtype;
use std::path::PathBuf;

/// The most tokens a prompt lookup or a draft model drafts per pass: turned-down drafts are
/// truncated away, and the sliding-window layers keep `TRUNCATE_SLACK` positions behind
/// their windows for that.
pub(crate) const MAX_DRAFT: usize = 16;

/// What to do with the KV cache when a conversation outgrows `max_context_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Move the later positions down and rotate their keys back (llama.cpp's context
    /// shift): a few milliseconds. The deeper layers' keys and values still carry what the
    /// evicted tokens contributed, so the next tokens may differ from a fresh run over the
    /// kept tokens.
    Rerotate,
    /// Recompute the kept tokens after the pinned prefix: a prefill of up to half the
    /// context, and exactly what a fresh run over the kept tokens computes.
    Recompute,
    /// No eviction: a conversation that outgrows the context is an error.
    Off,
}

/// How [`crate::Edge`] is set up; every size is fixed at load.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    /// A GGUF file, or one sealed by `hanzo-edge seal` (then `key` opens it).
    pub model: PathBuf,
    /// Positions the KV cache holds (prompt and reply together, the pinned prefix
    /// included); at most the model's training context.
    pub max_context_tokens: usize,
    /// The most memory the process may hold for the model (bytes): the load fails with
    /// `EdgeError::OverBudget` when the computed need is larger.
    pub max_memory_bytes: u64,
    /// Worker threads (`None`: the global pool as it is).
    pub threads: Option<usize>,
    /// Prompt tokens per forward pass, at most a quarter of the context: the activations'
    /// term of the budget grows with it.
    pub prefill_chunk: usize,
    /// The longest prefix that stays when older tokens are evicted (the system prompt plus
    /// `keep_tokens`); longer system prompts keep their first `max_keep_tokens`. The
    /// sliding-window layers keep these positions besides their window, so the budget
    /// counts them.
    pub max_keep_tokens: usize,
    /// Tokens kept after the system prompt when evicting (llama.cpp's `--keep`).
    pub keep_tokens: usize,
    pub eviction: Eviction,
    /// Speculative decoding by prompt lookup: each decode pass also checks up to
    /// `max_draft` tokens copied from what followed the newest earlier match of the last
    /// `ngram` tokens in the conversation (`--lookup N --draft-k K`). Greedy replies are
    /// the same with it as without; sampled ones keep the model's distribution. It pays
    /// where replies repeat their input (code edits, summaries). Off by default.
    pub lookup: Option<hanzo_transformers::PromptLookup>,
    /// LoRA adapters every reply runs with, applied together beside the quantized weights
    /// (`hanzo_transformers::Adapter::open_spec("FILE[:SCALE]")` reads llama.cpp's GGUF
    /// adapters and PEFT directories). Their bytes count in the budget. `Edge::new` takes
    /// them: the model keeps its own copy, so this list is empty afterwards.
    pub lora: Vec<hanzo_transformers::Adapter>,
    /// Speculative decoding with a draft model (`--draft-model FILE --draft-k K`): a
    /// smaller model with this one's vocabulary proposes tokens that this one checks in one
    /// pass. Its weights and KV store count in the budget. Not with `lookup`.
    pub draft: Option<crate::draft::DraftModel>,
    /// How the KV cache holds keys and values: f16, or Q8_0 at 53% of the bytes (its
    /// perplexity cost and speed are measured in docs/EDGE.md).
    pub kv_dtype: KvDtype,
    /// Above this thermal state (0 nominal, 1 fair, 2 serious, 3 critical) forward passes
    /// run on half the threads until the device cools; `None` never lowers them.
    pub thermal_limit: Option<u8>,
    /// Where the thermal zones are read (`/sys/class/thermal`; tests point it elsewhere).
    pub thermal_zones: PathBuf,
    /// The tools the model may call on this device ([`Edge::chat_with_tools`]); none
    /// unless granted.
    ///
    /// [`Edge::chat_with_tools`]: crate::Edge::chat_with_tools
    pub tools: crate::tools::LocalTools,
    /// The safety guard: a local model's check of the user's turn and the reply
    /// (`hanzo_edge::guard`); none by default.
    pub guard: Option<crate::guard::Guard>,
    /// An OpenAI-compatible server that answers what the device should not
    /// (`hanzo_edge::cloud`); none by default.
    #[cfg(feature = "cloud")]
    pub cloud: Option<crate::cloud::Cloud>,
    /// The key of a sealed model (`hanzo-edge seal`); asked for only when the file is one.
    #[cfg(feature = "seal")]
    pub key: Option<crate::seal::KeySource>,
}

impl EdgeConfig {
    /// `model` with a context of `max_context_tokens` inside `max_memory_bytes`; the rest
    /// at their defaults.
    pub fn new(
        model: impl Into<PathBuf>,
        max_context_tokens: usize,
        max_memory_bytes: u64,
    ) -> Self {
        Self {
            model: model.into(),
            max_context_tokens,
            max_memory_bytes,
            threads: None,
            prefill_chunk: 256,
            max_keep_tokens: (max_context_tokens / 4).min(256),
            keep_tokens: 0,
            eviction: Eviction::Rerotate,
            lookup: None,
            lora: Vec::new(),
            draft: None,
            kv_dtype: KvDtype::F16,
            thermal_limit: Some(1),
            thermal_zones: PathBuf::from("/sys/class/thermal"),
            tools: Default::default(),
            guard: None,
            #[cfg(feature = "cloud")]
            cloud: None,
            #[cfg(feature = "seal")]
            key: None,
        }
    }

    /// Prompt tokens per forward pass as run: `prefill_chunk`, at most a quarter of the
    /// context (an eviction must be able to make room for a whole chunk).
    pub(crate) fn chunk(&self) -> usize {
        self.prefill_chunk.min(self.max_context_tokens / 4).max(1)
    }

    /// The checks that need no model.
    pub(crate) fn validate(&self) -> Result<(), crate::EdgeError> {
        let bad = |m: String| Err(crate::EdgeError::Config(m));
        if self.prefill_chunk == 0 {
            return bad("prefill_chunk must be at least 1".into());
        }
        if self.max_context_tokens < 16 {
            return bad(format!(
                "max_context_tokens {} is too small to hold a conversation",
                self.max_context_tokens
            ));
        }
        if self.max_keep_tokens > self.max_context_tokens / 2 {
            return bad(format!(
                "max_keep_tokens {} is over half of max_context_tokens {}: evictions would leave no room",
                self.max_keep_tokens, self.max_context_tokens
            ));
        }
        if let Some(l) = &self.lookup {
            if l.ngram == 0 || l.max_draft == 0 || l.max_draft > MAX_DRAFT {
                return bad(format!(
                    "lookup: an n-gram of at least 1 token and 1 to {MAX_DRAFT} drafted tokens (n-gram {}, drafts {})",
                    l.ngram, l.max_draft
                ));
            }
        }
        if let Some(d) = &self.draft {
            if self.lookup.is_some() {
                return bad(
                    "a draft model and prompt lookup are two ways of drafting: pick one".into(),
                );
            }
            if d.max_draft == 0 || d.max_draft > MAX_DRAFT {
                return bad(format!(
                    "draft model: 1 to {MAX_DRAFT} drafted tokens per pass, not {}",
                    d.max_draft
                ));
            }
        }
        if self.threads == Some(0) {
            return bad("threads must be at least 1".into());
        }
        Ok(())
    }
}

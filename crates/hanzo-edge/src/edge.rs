//! [`Edge`]: one model, one conversation, one memory budget.

use crate::budget::{Budget, TRUNCATE_SLACK};
use crate::config::EdgeConfig;
use crate::conversation::{Conversation, Evicted};
use crate::stream::TokenStream;
use crate::EdgeError;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_ml::Tensor;
use hanzo_transformers::tokenizer::StreamDecoder;
use hanzo_transformers::{
    describe_gguf, load_gguf_with, GenerateOptions, Message, Sampler, StopFilter, TextGeneration,
    WeightMode,
};
use std::time::Instant;

/// The on-device runtime (see the crate docs).
pub struct Edge {
    pub(crate) pipeline: TextGeneration,
    pub(crate) conversation: Conversation,
    pub(crate) config: EdgeConfig,
    budget: Budget,
    load_seconds: f64,
}

impl Edge {
    /// Loads `config.model` if its budget fits `config.max_memory_bytes`. The file is
    /// mapped and its header read (no tensor data), the model's shape taken from it and the
    /// budget computed; over the limit, the error says by how much and where, and nothing
    /// was read but the header. Then the tokenizer is built and the KV cache allocated,
    /// once for the life of the `Edge`.
    pub fn new(config: EdgeConfig) -> Result<Self, EdgeError> {
        let t0 = Instant::now();
        config.validate()?;
        log_memory("start");
        if let Some(n) = config.threads {
            // The global pool can be built once per process; a second `Edge` shares it.
            if rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build_global()
                .is_err()
                && rayon::current_num_threads() != n
            {
                tracing::warn!(
                    "the thread pool already runs {} threads; {n} asked for",
                    rayon::current_num_threads()
                );
            }
        }
        let path = &config.model;
        if path.is_dir() {
            return Err(EdgeError::Config(format!(
                "{} is a directory; hanzo-edge loads GGUF files (`hanzo-engine quantize` makes one)",
                path.display()
            )));
        }
        let file = GgufFile::open(path)?;
        // Only the pages read are held, and a repacked weight's released pages stay released
        // (decode speed measured the same on the fixtures: docs/EDGE.md).
        file.prefer_small_pages();
        let (info, layout) = describe_gguf(&file)?;
        log_memory("header read");
        if config.max_context_tokens > info.context_length {
            return Err(EdgeError::Config(format!(
                "max_context_tokens {} is over the model's context of {}",
                config.max_context_tokens, info.context_length
            )));
        }
        let budget = Budget::compute(&file, &info, &layout, &config);
        if budget.total() > config.max_memory_bytes {
            return Err(EdgeError::OverBudget {
                needed: budget.total(),
                limit: config.max_memory_bytes,
                breakdown: budget.breakdown.clone(),
            });
        }
        tracing::info!(
            "budget {} of {} bytes: {}",
            budget.total(),
            config.max_memory_bytes,
            budget.breakdown
        );
        let model = load_gguf_with(&file, WeightMode::AsStored)?;
        log_memory("model shaped");
        // The copies the decode kernels want, made now: each weight's stored pages are read
        // once and released as they are copied, so memory never holds both (which the first
        // prompt's pass over stored weights would cause), and the budget's weights term is
        // what the process holds.
        let repacked = model.repack_weights();
        log_memory(&format!("{repacked} weights repacked"));
        let pipeline = TextGeneration::from_gguf_model(&file, model, WeightMode::AsStored)?;
        log_memory("tokenizer built");
        let conversation = Conversation::new(
            layout,
            budget.kv_blocks,
            config.max_context_tokens,
            TRUNCATE_SLACK,
        );
        log_memory("KV cache allocated");
        Ok(Self {
            pipeline,
            conversation,
            config,
            budget,
            load_seconds: t0.elapsed().as_secs_f64(),
        })
    }

    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    pub fn config(&self) -> &EdgeConfig {
        &self.config
    }

    /// Seconds `new` took.
    pub fn load_seconds(&self) -> f64 {
        self.load_seconds
    }

    /// The model, tokenizer and chat template.
    pub fn pipeline(&self) -> &TextGeneration {
        &self.pipeline
    }

    /// Positions the conversation holds now.
    pub fn context_used(&self) -> usize {
        self.conversation.len()
    }

    /// The tokens the KV cache holds, in position order.
    pub fn context_tokens(&self) -> &[u32] {
        self.conversation.tokens()
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.conversation.reset();
    }

    /// Streams the assistant's reply to `messages` (the whole conversation, as OpenAI's API
    /// takes it). What the KV cache holds of the conversation already is not computed
    /// again; the system prompt (and `keep_tokens` more) stays when older turns are evicted.
    pub fn chat(
        &mut self,
        messages: &[Message],
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        self.chat_with_tools(messages, &[], opts)
    }

    /// As [`Self::chat`], with functions the model may call (OpenAI's `tools` entries): the
    /// reply then holds calls in `hanzo_transformers::tools::TOOL_CALL_TAGS`, which
    /// `hanzo_transformers::tools::ToolCallParser` reads out.
    pub fn chat_with_tools(
        &mut self,
        messages: &[Message],
        tools: &[serde_json::Value],
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        let prompt = self.pipeline.chat_tokens_with_tools(messages, tools)?;
        let keep = self.system_prefix(messages, &prompt)? + self.config.keep_tokens;
        self.start(prompt, keep, opts)
    }

    /// Streams a continuation of raw `text` (no chat template); `keep_tokens` of it (and a
    /// BOS token) stay when older tokens are evicted.
    pub fn complete(
        &mut self,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        let prompt = self.pipeline.text_tokens(text);
        let bos = self.pipeline.tokenizer.special().bos;
        let keep =
            usize::from(bos.is_some() && prompt.first() == bos.as_ref()) + self.config.keep_tokens;
        self.start(prompt, keep, opts)
    }

    /// Streams a continuation of `prompt` token ids, `keep` of them pinned.
    pub fn complete_tokens(
        &mut self,
        prompt: Vec<u32>,
        keep: usize,
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        self.start(prompt, keep, opts)
    }

    /// Tokens of the conversation's leading system turn(s): where the chat rendered with
    /// only them stops agreeing with the whole prompt.
    fn system_prefix(&self, messages: &[Message], prompt: &[u32]) -> Result<usize, EdgeError> {
        let n = messages.iter().take_while(|m| m.role == "system").count();
        if n == 0 {
            let bos = self.pipeline.tokenizer.special().bos;
            return Ok(usize::from(bos.is_some() && prompt.first() == bos.as_ref()));
        }
        let system = self.pipeline.chat_tokens(&messages[..n])?;
        // The system-only render ends with an assistant header the whole one lacks there.
        Ok(system
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count())
    }

    fn start(
        &mut self,
        prompt: Vec<u32>,
        keep: usize,
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        opts.sampling
            .validate()
            .map_err(|e| EdgeError::Request(e.to_string()))?;
        if prompt.is_empty() {
            return Err(EdgeError::Request("the prompt is empty".into()));
        }
        let started = Instant::now();
        let keep = keep.min(self.config.max_keep_tokens);
        let at = self.conversation.prepare(&prompt, keep);
        let (logits, evicted) = self.feed(&prompt[at..])?;
        let mut sampler = Sampler::new(opts.sampling.clone());
        if opts.penalize_prompt {
            sampler.observe(&prompt);
        }
        Ok(TokenStream {
            sampler,
            decoder: StreamDecoder::new(),
            stops: StopFilter::new(opts.stop.clone()),
            max_tokens: opts.max_tokens,
            stop_tokens: opts.stop_tokens.clone(),
            logits,
            pending: None,
            generated: 0,
            tokens: Vec::with_capacity(opts.max_tokens.min(1 << 16)),
            finish: None,
            done: false,
            prompt_tokens: prompt.len(),
            computed: prompt.len() - at,
            evicted,
            started,
            first_token: None,
            edge: self,
        })
    }

    /// Runs `tokens` after the conversation, evicting where needed.
    pub(crate) fn feed(&mut self, tokens: &[u32]) -> Result<(Tensor, Evicted), EdgeError> {
        let (logits, evicted) = self.conversation.feed(
            self.pipeline.model.as_ref(),
            tokens,
            self.config.chunk(),
            self.config.eviction,
        )?;
        Ok((logits.expect("at least one token"), evicted))
    }
}

/// Resident and peak memory at a stage of loading, in the debug log (how the budget's terms
/// are checked: docs/EDGE.md).
fn log_memory(stage: &str) {
    if let Some(m) = hanzo_ml::memory::process_memory() {
        tracing::debug!(
            "{stage}: resident {:.1} MiB, peak {:.1} MiB",
            m.resident as f64 / 1048576.0,
            m.peak as f64 / 1048576.0
        );
    }
}

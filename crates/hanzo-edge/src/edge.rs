//! [`Edge`]: one model, one conversation, one memory budget.

use crate::budget::{Budget, TRUNCATE_SLACK};
use crate::config::EdgeConfig;
use crate::conversation::{Conversation, Evicted};
use crate::draft::Drafter;
use crate::guard::stream::Guarding;
use crate::guard::{Guard, GuardReport, Judge, Stage, Verdict};
use crate::source::{ModelFiles, OpenedModel};
use crate::stream::{Reply, Speculation, TokenStream};
use crate::thermal::Throttle;
use crate::EdgeError;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_ml::Tensor;
use hanzo_transformers::speculative::Draft;
use hanzo_transformers::tokenizer::StreamDecoder;
use hanzo_transformers::{
    l2_normalize, Embeddings, GenerateOptions, Message, Sampler, StopFilter, TextGeneration,
};
use web_time::Instant;

/// The on-device runtime (see the crate docs).
pub struct Edge {
    pub(crate) pipeline: TextGeneration,
    pub(crate) conversation: Conversation,
    pub(crate) config: EdgeConfig,
    throttle: Throttle,
    budget: Budget,
    load_seconds: f64,
    /// The safety guard, where `config.guard` asks for one.
    judge: Option<Judge>,
    /// The draft model, where `config.draft` asks for one.
    drafter: Option<Drafter>,
    /// Where the cloud fallback keeps deterministic answers.
    #[cfg(feature = "cloud")]
    cloud_cache: Option<crate::cloud::Cache>,
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
        let path = &config.model;
        #[cfg(feature = "seal")]
        if !path.is_dir() && crate::seal::is_sealed(path) {
            return Self::load_sealed(config, t0);
        }
        // A directory's files are let go once its weights are copied out of them.
        let opened = OpenedModel::open(path)?;
        Self::load(opened.files(), config, t0)
    }

    /// As [`Self::new`], for a GGUF file already in memory (`GgufFile::from_blob`, as in
    /// the browser): its bytes count in the budget whole. `config.model` only names it.
    pub fn from_gguf(file: GgufFile, config: EdgeConfig) -> Result<Self, EdgeError> {
        let t0 = Instant::now();
        config.validate()?;
        Self::load((&file).into(), config, t0)
    }

    /// A sealed model: decrypted chunk by chunk into the memory it runs from, as a file in
    /// memory counts in the budget (whole). The header's chunks come first and the budget is
    /// checked on them, before the buffer for the rest is touched.
    #[cfg(feature = "seal")]
    fn load_sealed(config: EdgeConfig, t0: Instant) -> Result<Self, EdgeError> {
        use crate::seal::SealedFile;
        /// The most header decrypted before giving up on parsing it (a vocabulary of 262k
        /// tokens with its scores takes under 8 MiB).
        const MAX_HEADER: usize = 64 << 20;
        let path = &config.model;
        let key = config.key.as_ref().ok_or_else(|| {
            EdgeError::Config(format!(
                "{} is a sealed model: a key is needed (EdgeConfig::key, --key-file or --key-env)",
                path.display()
            ))
        })?;
        let mut sealed = SealedFile::open(path, &key.key()?)?;
        let len = sealed.plaintext_len();
        let mut prefix = Vec::new();
        let header = loop {
            let n = sealed.chunk_len().min(len - sealed.position()) as usize;
            let at = prefix.len();
            prefix.resize(at + n, 0);
            sealed.read_next(&mut prefix[at..])?;
            match GgufFile::header_only(&prefix, len) {
                Ok(file) => break file,
                Err(e) if prefix.len() as u64 == len || prefix.len() >= MAX_HEADER => {
                    return Err(e.into())
                }
                Err(_) => {}
            }
        };
        Budget::check(&header, &config)?;
        let len = usize::try_from(len)
            .map_err(|_| EdgeError::Config(format!("{len} bytes do not fit this address space")))?;
        let mut blob = hanzo_ml::cpu::Blob::zeroed(len);
        let dst = blob.as_mut_slice().expect("a blob in memory is writable");
        dst[..prefix.len()].copy_from_slice(&prefix);
        let at = prefix.len();
        drop(prefix);
        sealed.read_next(&mut dst[at..])?;
        log_memory("model decrypted");
        // The types the decode kernels repack are rearranged where they lie: a repacked
        // copy would hold them twice.
        let file = GgufFile::from_blob_interleaved(blob)?;
        Self::load((&file).into(), config, t0)
    }

    fn load(model: ModelFiles, mut config: EdgeConfig, t0: Instant) -> Result<Self, EdgeError> {
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
        let (budget, layout) = Budget::check(model, &config)?;
        log_memory("header read");
        tracing::info!(
            "budget {} of {} bytes: {}",
            budget.total(),
            config.max_memory_bytes,
            budget.breakdown
        );
        let mut pipeline = model.pipeline()?;
        let lora = match config.lora.is_empty() {
            true => None,
            // The model keeps its own f32 copy of each update: the adapters as read go.
            false => Some(pipeline.attach_lora(&std::mem::take(&mut config.lora))?),
        };
        let judge = match &config.guard {
            Some(guard) => Some(load_judge(
                guard,
                &pipeline,
                &config,
                layout.clone(),
                &budget,
            )?),
            None => None,
        };
        let drafter = match &config.draft {
            Some(d) => Some(load_drafter(d, &pipeline, &config, &budget)?),
            None => None,
        };
        let conversation = Conversation::new(
            layout,
            budget.kv_blocks,
            config.max_context_tokens,
            TRUNCATE_SLACK,
            lora,
        );
        log_memory("KV cache allocated");
        let throttle = Throttle::new(config.thermal_zones.clone(), config.thermal_limit);
        #[cfg(feature = "cloud")]
        let cloud_cache = match config
            .cloud
            .as_ref()
            .and_then(|c| Some((c.cache_dir.as_ref()?, c)))
        {
            Some((dir, c)) => Some(crate::cloud::Cache::new(dir, c.cache_max_bytes).map_err(
                |e| EdgeError::Config(format!("the cloud cache {}: {e}", dir.display())),
            )?),
            None => None,
        };
        Ok(Self {
            pipeline,
            conversation,
            throttle,
            config,
            budget,
            load_seconds: t0.elapsed().as_secs_f64(),
            judge,
            drafter,
            #[cfg(feature = "cloud")]
            cloud_cache,
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

    /// Threads forward passes run on now: all of them, or half while the device is hotter
    /// than `EdgeConfig::thermal_limit`.
    pub fn threads(&self) -> usize {
        self.throttle.threads()
    }

    /// The thermal state as last read (0 nominal to 3 critical; `None` where the platform
    /// reports none or `thermal_limit` is off).
    pub fn thermal_state(&self) -> Option<u8> {
        self.throttle.state()
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
        self.chat_offering_tools(messages, &[], opts)
    }

    /// As [`Self::chat`], with functions the model may call (OpenAI's `tools` entries): the
    /// reply then holds calls in `hanzo_transformers::tools::TOOL_CALL_TAGS`, which
    /// `hanzo_transformers::tools::ToolCallParser` reads out. The caller runs them
    /// ([`Self::chat_with_tools`] runs the device's own tools).
    pub fn chat_offering_tools(
        &mut self,
        messages: &[Message],
        tools: &[serde_json::Value],
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        self.chat_routed(messages, tools, opts, true, false)
    }

    /// As [`Self::chat`], answered by the cloud fallback's model (`EdgeConfig::cloud`), or
    /// by the device if the cloud cannot answer (the summary says why).
    #[cfg(feature = "cloud")]
    pub fn chat_in_cloud(
        &mut self,
        messages: &[Message],
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        self.chat_routed(messages, &[], opts, true, true)
    }

    /// A chat reply from the device or, where `EdgeConfig::cloud` says so, the cloud (what
    /// [`Self::chat_offering_tools`] does with `seeded` and not `to_cloud`). `seeded`: the
    /// caller chose the sampling seed (a sampled reply is cached only then); `to_cloud`: the
    /// caller asked for the cloud's model.
    pub fn chat_routed(
        &mut self,
        messages: &[Message],
        tools: &[serde_json::Value],
        opts: &GenerateOptions,
        seeded: bool,
        to_cloud: bool,
    ) -> Result<TokenStream<'_>, EdgeError> {
        let prompt = self.pipeline.chat_tokens_with_tools(messages, tools)?;
        let keep = self.system_prefix(messages, &prompt)? + self.config.keep_tokens;
        let user = messages.iter().rev().find(|m| m.role == "user");
        let prompt_len = prompt.len();
        self.guarded(user.map(|m| m.content.as_str()), prompt_len, opts, |edge| {
            #[cfg(feature = "cloud")]
            if let Some(cloud) = edge.config.cloud.clone() {
                return edge
                    .start_routed(cloud, messages, tools, opts, seeded, to_cloud, prompt, keep);
            }
            let _ = (seeded, to_cloud);
            edge.start(prompt, keep, opts)
        })
    }

    /// The reply `start` begins, under the safety guard where there is one: `text` (the
    /// user's turn) judged first, and a flagged one answered with the refusal instead; the
    /// reply itself held back until judged where `Guard::check_reply`.
    fn guarded<'a>(
        &'a mut self,
        text: Option<&str>,
        prompt_tokens: usize,
        opts: &GenerateOptions,
        start: impl FnOnce(&'a mut Self) -> Result<TokenStream<'a>, EdgeError>,
    ) -> Result<TokenStream<'a>, EdgeError> {
        let Some((check_prompt, check_reply)) =
            self.guard().map(|g| (g.check_prompt, g.check_reply))
        else {
            return start(self);
        };
        let mut report = GuardReport::default();
        if let Some(text) = text.filter(|_| check_prompt) {
            let verdict = self.moderate(Stage::Prompt, text)?;
            report.add(Stage::Prompt, &verdict);
            report.first_token_seconds += verdict.seconds;
            if let Some(category) = &verdict.flagged {
                tracing::info!(
                    "the guard flagged the prompt: {category} ({:?})",
                    verdict.scores
                );
                let mut reply = self.placeholder(opts, prompt_tokens);
                reply.finish = Some(hanzo_transformers::Finish::EndOfText);
                let refusal = self.guard().expect("a guard").refusal_for(category);
                reply.guard = Some(Box::new(Guarding::refusing(report, refusal)));
                return Ok(TokenStream { edge: self, reply });
            }
        }
        let mut stream = start(self)?;
        stream.reply.guard = Some(Box::new(Guarding::watching(report, check_reply)));
        Ok(stream)
    }

    /// The safety guard's verdict on `text` as the user's turn or a reply (`stage`), with
    /// `EdgeConfig::guard`'s model, categories and threshold; an error without a guard.
    pub fn moderate(&mut self, stage: Stage, text: &str) -> Result<Verdict, EdgeError> {
        self.throttle.update();
        let Self {
            judge,
            pipeline,
            throttle,
            ..
        } = self;
        let judge = judge
            .as_mut()
            .ok_or_else(|| EdgeError::Request("no safety guard is configured".into()))?;
        let verdict = throttle.run(|| judge.judge(pipeline, stage, text))?;
        tracing::debug!(
            "guard on the {}: {:?}, {} tokens in {:.3} s",
            stage.as_str(),
            verdict.scores,
            verdict.tokens,
            verdict.seconds
        );
        Ok(verdict)
    }

    /// The tokens the safety guard's model reads to judge `text` (its first window) as
    /// `stage` under its `category`-th policy: what [`Self::moderate`] scores, for
    /// inspection.
    pub fn guard_prompt(
        &self,
        stage: Stage,
        category: usize,
        text: &str,
    ) -> Result<Vec<u32>, EdgeError> {
        let judge = self
            .judge
            .as_ref()
            .ok_or_else(|| EdgeError::Request("no safety guard is configured".into()))?;
        judge.prompt_tokens(&self.pipeline, stage, category, text)
    }

    /// The safety guard as configured, where there is one.
    pub fn guard(&self) -> Option<&Guard> {
        self.judge.as_ref().map(Judge::guard)
    }

    #[cfg(feature = "cloud")]
    #[allow(clippy::too_many_arguments)]
    fn start_routed(
        &mut self,
        cloud: crate::cloud::Cloud,
        messages: &[Message],
        tools: &[serde_json::Value],
        opts: &GenerateOptions,
        seeded: bool,
        to_cloud: bool,
        prompt: Vec<u32>,
        keep: usize,
    ) -> Result<TokenStream<'_>, EdgeError> {
        use crate::cloud::{CloudRequest, Reason, Route};
        opts.sampling
            .validate()
            .map_err(|e| EdgeError::Request(e.to_string()))?;
        let request = CloudRequest::new(&cloud, messages, tools, opts, seeded);
        self.throttle.update();
        let hot = match (cloud.thermal_level, self.thermal_state()) {
            (Some(level), Some(state)) => state > level,
            _ => false,
        };
        let first = if to_cloud {
            Some(Reason::Requested)
        } else if cloud.on_context && prompt.len() >= self.config.max_context_tokens {
            Some(Reason::Context)
        } else if hot {
            Some(Reason::Thermal)
        } else {
            None
        };
        if let Some(reason) = first {
            let mut reply = self.placeholder(opts, prompt.len());
            let route = Route::to_cloud(cloud, request, reason, (prompt, keep, opts.clone()));
            reply.route = Some(Box::new(route));
            return Ok(TokenStream { edge: self, reply });
        }
        let judged = cloud.fallback_entropy.is_some();
        let on_context = cloud.on_context;
        let prompt_len = prompt.len();
        match self.begin(prompt, keep, opts) {
            Ok(mut reply) => {
                if judged {
                    reply.entropies = Some(Vec::new());
                    let started = reply.started;
                    reply.route = Some(Box::new(Route::judged(cloud, request, started)));
                }
                Ok(TokenStream { edge: self, reply })
            }
            Err(EdgeError::ContextFull(message)) if on_context => {
                let mut reply = self.placeholder(opts, prompt_len);
                reply.route = Some(Box::new(Route::refused(cloud, request, message)));
                Ok(TokenStream { edge: self, reply })
            }
            Err(e) => Err(e),
        }
    }

    /// A reply with nothing computed on the device (the cloud or the guard answers it) to a
    /// prompt of `prompt_tokens`.
    fn placeholder(&self, opts: &GenerateOptions, prompt_tokens: usize) -> Reply {
        Reply {
            sampler: Sampler::new(opts.sampling.clone()),
            decoder: StreamDecoder::new(),
            stops: StopFilter::new(Vec::new()),
            max_tokens: opts.max_tokens,
            stop_tokens: Vec::new(),
            logits: Tensor::zeros(1, hanzo_ml::DType::F32, &hanzo_ml::Device::Cpu)
                .expect("a one-element tensor"),
            pending: None,
            generated: 0,
            tokens: Vec::new(),
            finish: None,
            done: false,
            prompt_tokens,
            computed: 0,
            evicted: Evicted::default(),
            started: Instant::now(),
            first_token: None,
            entropies: None,
            speculation: None,
            #[cfg(feature = "cloud")]
            route: None,
            guard: None,
        }
    }

    #[cfg(feature = "cloud")]
    pub(crate) fn cloud_cache(&self) -> Option<&crate::cloud::Cache> {
        self.cloud_cache.as_ref()
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
        let prompt_len = prompt.len();
        self.guarded(Some(text), prompt_len, opts, |edge| {
            edge.start(prompt, keep, opts)
        })
    }

    /// Streams a continuation of `prompt` token ids, `keep` of them pinned.
    pub fn complete_tokens(
        &mut self,
        prompt: Vec<u32>,
        keep: usize,
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>, EdgeError> {
        // The guard reads token ids as the text they spell.
        let text = match self.judge.is_some() {
            true => Some(self.pipeline.tokenizer.decode(&prompt, false)),
            false => None,
        };
        let prompt_len = prompt.len();
        self.guarded(text.as_deref(), prompt_len, opts, |edge| {
            edge.start(prompt, keep, opts)
        })
    }

    /// One unit vector per text, in order: the model's final-normed hidden state at each
    /// text's last token, L2-normalized (last-token pooling, as `hanzo-engine serve` embeds
    /// with a language model and as decoder embedders such as Qwen3-Embedding are read).
    /// Each text runs in the one KV store, beside the conversation when there is room and
    /// in its place when there is not; a text longer than the context is an error.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Embeddings, EdgeError> {
        let mut vectors = Vec::with_capacity(texts.len());
        let mut tokens = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let ids = self.pipeline.text_tokens(text);
            if ids.is_empty() {
                return Err(EdgeError::Request(format!("input {i} has no tokens")));
            }
            let mut v = self
                .conversation
                .last_hidden(self.pipeline.model.as_ref(), &ids, self.config.chunk())
                .map_err(|e| match e {
                    EdgeError::Request(m) => EdgeError::Request(format!("input {i}: {m}")),
                    e => e,
                })?;
            l2_normalize(&mut v);
            tokens.push(ids.len());
            vectors.push(v);
        }
        Ok(Embeddings {
            truncated: vec![false; vectors.len()],
            vectors,
            tokens,
        })
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
        let reply = self.begin(prompt, keep, opts)?;
        Ok(TokenStream { edge: self, reply })
    }

    /// Reads `prompt` (after what the KV cache holds of it) and returns the reply, ready to
    /// sample its first token.
    pub(crate) fn begin(
        &mut self,
        prompt: Vec<u32>,
        keep: usize,
        opts: &GenerateOptions,
    ) -> Result<Reply, EdgeError> {
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
        let reply = Reply {
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
            entropies: None,
            speculation: Speculation::of(&self.config),
            #[cfg(feature = "cloud")]
            route: None,
            guard: None,
        };
        Ok(reply)
    }

    /// Runs `tokens` after the conversation, evicting where needed.
    /// On as many threads as the device's temperature allows (`EdgeConfig::thermal_limit`).
    pub(crate) fn feed(&mut self, tokens: &[u32]) -> Result<(Tensor, Evicted), EdgeError> {
        self.throttle.update();
        let Self {
            conversation,
            pipeline,
            config,
            throttle,
            ..
        } = self;
        let model = pipeline.model.as_ref();
        let (chunk, eviction) = (config.chunk(), config.eviction);
        let (logits, evicted) =
            throttle.run(|| conversation.feed(model, tokens, chunk, eviction))?;
        Ok((logits.expect("at least one token"), evicted))
    }
}

impl Edge {
    /// Runs a speculative check's tokens (the pending token and its draft) in one pass and
    /// returns every row's logits; see `Conversation::feed_steps`.
    pub(crate) fn feed_steps(&mut self, tokens: &[u32]) -> Result<Tensor, EdgeError> {
        self.throttle.update();
        let Self {
            conversation,
            pipeline,
            throttle,
            ..
        } = self;
        let model = pipeline.model.as_ref();
        throttle.run(|| conversation.feed_steps(model, tokens))
    }

    /// Up to `n` tokens the draft model proposes after `history`, drawn by `sampler` (none
    /// without a draft model); see `Drafter::propose`.
    pub(crate) fn draft(
        &mut self,
        history: &[u32],
        n: usize,
        sampler: &mut Sampler,
        stop_tokens: &[u32],
    ) -> Result<Vec<Draft>, EdgeError> {
        let Self {
            drafter: Some(drafter),
            pipeline,
            throttle,
            ..
        } = self
        else {
            return Ok(Vec::new());
        };
        let vocab = pipeline.tokenizer.vocab();
        let ends = |t| vocab.is_end_of_generation(t) || stop_tokens.contains(&t);
        throttle.run(|| drafter.propose(history, n, sampler, ends))
    }
}

/// The draft model, loaded as the chat model is (repacked where it lies), its vocabulary
/// checked against the chat model's, with its KV store.
fn load_drafter(
    draft: &crate::DraftModel,
    pipeline: &TextGeneration,
    config: &EdgeConfig,
    budget: &Budget,
) -> Result<Drafter, EdgeError> {
    let opened = OpenedModel::open(&draft.model)?;
    let (_, layout) = opened.files().describe()?;
    let own = opened.files().pipeline()?;
    pipeline.check_draft_vocabulary(&own)?;
    let vocab = own.tokenizer.vocab().len();
    log_memory("draft model loaded");
    Ok(Drafter::new(
        own.model,
        layout.with_dtype(config.kv_dtype),
        budget.draft_kv_blocks,
        config.chunk(),
        TRUNCATE_SLACK,
        vocab,
    ))
}

/// The safety guard's judge: on the chat model's weights with a store of the chat model's
/// layout, or on a model of its own (loaded as the chat model is, repacked where it lies).
fn load_judge(
    guard: &Guard,
    pipeline: &TextGeneration,
    config: &EdgeConfig,
    layout: hanzo_ml::kv::KvLayout,
    budget: &Budget,
) -> Result<Judge, EdgeError> {
    let (own, layout) = match &guard.model {
        None => (None, layout),
        Some(path) => {
            let opened = OpenedModel::open(path)?;
            let (_, glayout) = opened.files().describe()?;
            let own = opened.files().pipeline()?;
            log_memory("guard model loaded");
            (Some(own), glayout.with_dtype(config.kv_dtype))
        }
    };
    Judge::new(
        guard.clone(),
        own,
        pipeline,
        layout,
        budget.guard_kv_blocks,
        config.chunk(),
    )
}

/// Resident and peak memory at a stage of loading, in the debug log (how the budget's terms
/// are checked: docs/EDGE.md).
pub(crate) fn log_memory(stage: &str) {
    if let Some(m) = hanzo_ml::memory::process_memory() {
        tracing::debug!(
            "{stage}: resident {:.1} MiB, peak {:.1} MiB",
            m.resident as f64 / 1048576.0,
            m.peak as f64 / 1048576.0
        );
    }
}

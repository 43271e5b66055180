//! The text-generation pipeline: model + tokenizer + chat template + sampler + KV cache,
//! streaming text through a callback. The CLI, the server and the edge runtime all drive
//! generation through it.

use crate::chat_template::{builtin_for, ChatTemplate, Message};
use crate::lora::{Adapter, LoraId};
use crate::models::{load_dir, load_gguf_with, Cache, LanguageModel, Logits, WeightMode};
use crate::sampler::{Sampler, SamplingParams};
use crate::speculative::{check_drafts, Draft, ModelDraft, PromptLookup, SpeculationStats};
use crate::stop::StopFilter;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::{Error, Result};
use hanzo_ml::quantized::gguf::{GgufFile, HugePages, Value};
use hanzo_ml::Tensor;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
// `web_time` is `std::time` natively; in WebAssembly it reads the JS clock (std's panics).
use web_time::Instant;

/// Prompt tokens per forward pass while prefilling.
pub const PREFILL_CHUNK: usize = 512;

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops before any of these strings; they are not part of the output.
    pub stop: Vec<String>,
    /// Tokens that end generation besides the model's EOS / end-of-turn.
    pub stop_tokens: Vec<u32>,
    /// Let the repetition penalties see the prompt too (llama.cpp does).
    pub penalize_prompt: bool,
    /// Speculative decoding with drafts from prompt lookup (`None`: one token per pass).
    /// Greedy output is the same either way; sampled output keeps its distribution. Only
    /// [`TextGeneration`] drafts so far: the server's scheduler and Hanzo Edge ignore it.
    pub lookup: Option<PromptLookup>,
    /// Speculative decoding with drafts from the pipeline's draft model (see
    /// [`TextGeneration::attach_draft`]); not together with `lookup`.
    pub draft: Option<ModelDraft>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            stop_tokens: Vec::new(),
            penalize_prompt: true,
            lookup: None,
            draft: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// `max_tokens` reached.
    Length,
    /// A stop string or stop token.
    Stop,
    /// The model's end-of-sequence / end-of-turn token.
    EndOfText,
    /// The callback asked to stop (client went away).
    Cancelled,
}

#[derive(Clone, Debug)]
pub struct Generated {
    pub text: String,
    pub tokens: Vec<u32>,
    pub prompt_tokens: usize,
    pub finish: Finish,
    pub prompt_seconds: f64,
    pub generate_seconds: f64,
    /// Speculative decoding's passes, drafted and kept tokens (all 0 without it).
    pub speculation: SpeculationStats,
}

pub struct TextGeneration {
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
    /// Whether the template came from the file (false: built-in fallback).
    pub template_from_file: bool,
    /// The not yet started move of a GGUF file's weights onto huge pages.
    huge_pages: Mutex<Option<HugePages>>,
    /// A smaller model with the same vocabulary, for speculative decoding's drafts.
    draft: Option<Box<dyn LanguageModel>>,
    /// The LoRA adapters generations run with (`attach_lora`).
    lora: Option<LoraId>,
}

impl TextGeneration {
    /// Model, tokenizer and chat template from one GGUF file.
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Self> {
        Self::load(path.as_ref(), WeightMode::AsStored)
    }

    /// A GGUF file or a Hugging Face directory (config.json, safetensors, tokenizer.json),
    /// weights held as `mode` says.
    pub fn load(path: &Path, mode: WeightMode) -> Result<Self> {
        if path.is_dir() {
            Self::from_dir_model(path, load_dir(path, mode)?)
        } else {
            let file = GgufFile::open(path)?;
            Self::from_gguf_file(&file, mode)
        }
    }

    pub fn from_gguf_file(file: &GgufFile, mode: WeightMode) -> Result<Self> {
        Self::from_gguf_model(file, load_gguf_with(file, mode)?, mode)
    }

    /// The tokenizer and chat template of `file` around `model`, loaded from it as `mode`
    /// says: for a caller that checks the model before building the rest (the edge runtime's
    /// memory budget).
    pub fn from_gguf_model(
        file: &GgufFile,
        model: Box<dyn LanguageModel>,
        mode: WeightMode,
    ) -> Result<Self> {
        let tokenizer = Tokenizer::from_gguf(file)?;
        let template = file
            .get("tokenizer.chat_template")
            .and_then(Value::as_str)
            .map(str::to_string);
        // Only weights used as stored are read from the map after loading; dequantized (F32)
        // or requantized (ISQ) ones are copies, and moving the unused file bytes would only
        // add to the resident set.
        let huge_pages = if mode == WeightMode::AsStored {
            file.huge_pages()
        } else {
            None
        };
        Self::assemble(model, tokenizer, template, huge_pages)
    }

    /// The tokenizer (`tokenizer.json`) and chat template of the model directory `dir`
    /// around `model`, loaded from it.
    pub fn from_dir_model(dir: &Path, model: Box<dyn LanguageModel>) -> Result<Self> {
        let tokenizer = Tokenizer::from_hf_dir(dir)?;
        let template = crate::tokenizer::hf::chat_template(dir)?;
        Self::assemble(model, tokenizer, template, None)
    }

    /// Starts moving a GGUF model's weights onto 2 MiB pages in the background, once (see
    /// `HugePages`). For long-lived callers (a server, a benchmark, perplexity): decoding runs
    /// faster from huge pages (docs/QUANTIZATION.md), but the copy costs a large fraction of a
    /// second of one core, more than a short generation gains, so `generate`
    /// does not start it. Call it after a first forward pass (the pages are then mapped, and
    /// nothing is copied where the page cache already maps them whole). `None` when there is
    /// nothing to move or it has started already.
    pub fn start_huge_pages(&self) -> Option<std::thread::JoinHandle<hanzo_ml::Result<usize>>> {
        let pending = self.huge_pages.lock().map(|mut p| p.take());
        pending.ok().flatten().and_then(HugePages::spawn)
    }

    /// Two forward passes page the weights in and repack them (the first, a prompt's, reads
    /// them as stored; the second, a decode step's, makes the repacked copies), then their
    /// move onto 2 MiB pages starts in the background (see `start_huge_pages`); the handle of
    /// that move, if any. After it every generation computes what the steady state does (a
    /// first prompt pass otherwise reads the weights as stored, with their numerics), as a
    /// server's do.
    pub fn page_in(&self) -> Result<Option<std::thread::JoinHandle<hanzo_ml::Result<usize>>>> {
        let first = self.tokenizer.special().bos.unwrap_or(0);
        let mut cache = self.model.new_cache(2);
        for _ in 0..2 {
            self.model.forward(&[first], &mut cache, Logits::Last)?;
        }
        Ok(self.start_huge_pages())
    }

    fn assemble(
        model: Box<dyn LanguageModel>,
        tokenizer: Tokenizer,
        template: Option<String>,
        huge_pages: Option<HugePages>,
    ) -> Result<Self> {
        if tokenizer.vocab().len() > model.info().vocab_size {
            return Err(Error::model(
                &model.info().architecture,
                format!(
                    "tokenizer has {} tokens but the model only {} embeddings",
                    tokenizer.vocab().len(),
                    model.info().vocab_size
                ),
            ));
        }
        let text = |id: Option<u32>| {
            id.and_then(|i| tokenizer.vocab().text(i))
                .unwrap_or_default()
                .to_string()
        };
        let (bos, eos) = (text(tokenizer.special().bos), text(tokenizer.special().eos));
        let source = template
            .as_deref()
            .unwrap_or_else(|| builtin_for(&model.info().architecture));
        Ok(Self {
            template: ChatTemplate::new(source, &bos, &eos)?,
            template_from_file: template.is_some(),
            model,
            tokenizer,
            huge_pages: Mutex::new(huge_pages),
            draft: None,
            lora: None,
        })
    }

    /// Takes `draft`'s model as this pipeline's draft model ([`GenerateOptions::draft`]). Its
    /// tokenizer must be this one's, token for token: its proposals are token ids.
    pub fn attach_draft(&mut self, draft: TextGeneration) -> Result<()> {
        self.check_draft_vocabulary(&draft)?;
        self.draft = Some(draft.model);
        Ok(())
    }

    /// An error naming the first token that differs unless `draft`'s vocabulary is this
    /// one's, token for token (a draft model's proposals are token ids).
    pub fn check_draft_vocabulary(&self, draft: &TextGeneration) -> Result<()> {
        let (mine, theirs) = (self.tokenizer.vocab(), draft.tokenizer.vocab());
        let differs = (0..mine.len().max(theirs.len()) as u32)
            .find(|&i| mine.text(i) != theirs.text(i))
            .map(|i| {
                let show = |t: Option<&str>| t.map_or("none".to_string(), |t| format!("{t:?}"));
                format!(
                    "token {i} is {} for the model and {} for the draft",
                    show(mine.text(i)),
                    show(theirs.text(i))
                )
            });
        if let Some(why) = differs.or_else(|| {
            (mine.len() != theirs.len()).then(|| {
                format!(
                    "the model has {} tokens, the draft {}",
                    mine.len(),
                    theirs.len()
                )
            })
        }) {
            return Err(Error::Invalid(format!(
                "the draft model's vocabulary is not the model's: {why}"
            )));
        }
        Ok(())
    }

    /// Attaches `adapters` to the model, applied together to every generation from now on
    /// (`LanguageModel::attach_lora`; a draft model keeps running without them).
    pub fn attach_lora(&mut self, adapters: &[Adapter]) -> Result<LoraId> {
        let id = self.model.attach_lora(adapters)?;
        self.lora = Some(id);
        Ok(id)
    }

    /// The adapters generations run with, if any.
    pub fn lora(&self) -> Option<LoraId> {
        self.lora
    }

    /// Whether a draft model is attached.
    pub fn has_draft(&self) -> bool {
        self.draft.is_some()
    }

    /// The draft model, where one is attached (the server runs it in its own batches).
    pub fn draft_model(&self) -> Option<&dyn LanguageModel> {
        self.draft.as_deref()
    }

    /// Token ids of a chat, ready for generation (template applied, specials parsed; the
    /// template writes BOS itself where the model wants one).
    pub fn chat_tokens(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.chat_tokens_with_tools(messages, &[])
    }

    /// As [`chat_tokens`](Self::chat_tokens), with functions the model may call (OpenAI's
    /// `tools` entries). A template that knows no tools gets them described in the system
    /// turn and earlier calls written as text ([`crate::tools::lower`]); the model answers
    /// in [`crate::tools::TOOL_CALL_TAGS`] either way.
    pub fn chat_tokens_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
    ) -> Result<Vec<u32>> {
        let has_calls = messages
            .iter()
            .any(|m| !m.tool_calls.is_empty() || m.role == "tool");
        let text = if self.template.handles_tools() || (tools.is_empty() && !has_calls) {
            self.template.render_with_tools(messages, tools, true)?
        } else {
            let lowered = crate::tools::lower(messages, tools, crate::tools::TOOL_CALL_TAGS);
            self.template.render(&lowered, true)?
        };
        Ok(self.template_tokens(&text))
    }

    /// Token ids of text the chat template rendered (specials parsed), with BOS first where
    /// the model wants one and the template did not write it.
    pub fn template_tokens(&self, text: &str) -> Vec<u32> {
        let mut ids = self.tokenizer.encode(text, false, true);
        let sp = self.tokenizer.special();
        if let (true, Some(bos)) = (sp.add_bos, sp.bos) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        ids
    }

    /// Token ids of raw text, with BOS/EOS as the model's flags say.
    pub fn text_tokens(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true, true)
    }

    /// Generates from `prompt` ids, passing each completed piece of text to `on_text`
    /// (return `false` to stop).
    pub fn generate(
        &self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generated> {
        let mut g = self.start(prompt, opts)?;
        while g.finish.is_none() {
            let piece = self.step(&mut g)?;
            if !piece.is_empty() && !on_text(&piece) {
                g.cancel();
            }
        }
        Ok(g.into_generated())
    }

    /// Starts a generation from `prompt` ids: checks the options and reads the prompt (the
    /// prefill). [`step`](Self::step) then produces the text piece by piece, so a caller that
    /// must stay responsive (a browser tab, an event loop) can run other work between tokens.
    pub fn start(&self, prompt: &[u32], opts: &GenerateOptions) -> Result<Generation> {
        opts.sampling.validate().map_err(Error::Invalid)?;
        if prompt.is_empty() {
            return Err(Error::Invalid("the prompt is empty".into()));
        }
        let ctx = self.model.info().context_length;
        if prompt.len() >= ctx {
            return Err(Error::ContextFull {
                needed: prompt.len() + 1,
                limit: ctx,
            });
        }
        let max_draft = match (&opts.lookup, &opts.draft) {
            (Some(_), Some(_)) => {
                return Err(Error::Invalid(
                    "drafts come from prompt lookup or a draft model, not both".into(),
                ))
            }
            (Some(l), None) => l.max_draft,
            (None, Some(_)) if self.draft.is_none() => {
                return Err(Error::Invalid("no draft model is loaded".into()));
            }
            (None, Some(d)) => d.max_draft,
            (None, None) => 0,
        };
        let limit = prompt.len() + opts.max_tokens.max(1);
        let mut cache = self.model.new_cache(limit);
        cache.set_lora(self.lora);
        if max_draft > 0 {
            // A turned-down draft is truncated away, window layers included.
            cache.keep_behind(max_draft + 1)?;
        }
        let mut draft_cache = match (&self.draft, &opts.draft) {
            (Some(m), Some(_)) => {
                let mut c = m.new_cache(limit);
                c.keep_behind(max_draft + 1)?;
                Some(c)
            }
            _ => None,
        };
        let mut sampler = Sampler::new(opts.sampling.clone());
        if opts.penalize_prompt {
            sampler.observe(prompt);
        }
        let t0 = Instant::now();
        let mut logits = None;
        for chunk in prompt.chunks(PREFILL_CHUNK) {
            logits = Some(self.model.forward(chunk, &mut cache, Logits::Last)?);
            if let (Some(m), Some(c)) = (&self.draft, &mut draft_cache) {
                m.forward(chunk, c, Logits::Last)?;
            }
        }
        Ok(Generation {
            cache,
            sampler,
            stream: StreamDecoder::new(),
            stops: StopFilter::new(opts.stop.clone()),
            max_tokens: opts.max_tokens,
            stop_tokens: opts.stop_tokens.clone(),
            logits: logits.expect("non-empty prompt"),
            pending: None,
            tokens: Vec::new(),
            text: String::new(),
            finish: None,
            prompt_tokens: prompt.len(),
            prompt_seconds: t0.elapsed().as_secs_f64(),
            started: Instant::now(),
            lookup: opts.lookup,
            draft_cache,
            max_draft,
            history: match max_draft {
                0 => Vec::new(),
                _ => prompt.to_vec(),
            },
            ahead: VecDeque::new(),
            speculation: SpeculationStats::default(),
            // A first draft of two: cheap to check, doubled while drafts are kept whole.
            draft_len: max_draft.min(2),
        })
    }

    /// Samples one token of `g` and returns the text it completes: empty while a character
    /// or a possible stop string is still open, and after the generation has finished
    /// ([`Generation::finish`] says when and why). The last piece carries whatever was held
    /// back.
    pub fn step(&self, g: &mut Generation) -> Result<String> {
        if g.finish.is_some() {
            return Ok(String::new());
        }
        if g.tokens.len() >= g.max_tokens {
            return Ok(g.end(Finish::Length));
        }
        // A token is pending only once nothing produced ahead is left to give.
        if let Some(tok) = g.pending.take() {
            let room = g.cache.limit().saturating_sub(g.cache.len() + 1);
            // The first decode step goes alone: it is the pass that repacks the weights
            // (a pass of several tokens reads them as stored, with the stored form's
            // numerics), and every check after it should compute what a decode step does.
            let want = match g.cache.len() > g.prompt_tokens {
                true => room.min(g.draft_len),
                false => 0,
            };
            let drafts = match &g.lookup {
                Some(l) => l
                    .propose(&g.history, want)
                    .into_iter()
                    .map(|t| (t, vec![(t, 1.0)]))
                    .collect(),
                None if g.draft_cache.is_some() => self.draft_tokens(g, want)?,
                None => Vec::new(),
            };
            if drafts.is_empty() {
                g.logits = self.model.forward(&[tok], &mut g.cache, Logits::Last)?;
            } else {
                self.speculate(g, tok, &drafts)?;
            }
        }
        let (tok, cached) = match g.ahead.pop_front() {
            Some(ahead) => ahead,
            None => {
                let row = g.logits.flatten_all()?.to_vec1::<f32>()?;
                (g.sampler.sample(&row), false)
            }
        };
        if g.max_draft > 0 {
            g.history.push(tok);
        }
        if self.tokenizer.vocab().is_end_of_generation(tok) {
            return Ok(g.end(Finish::EndOfText));
        }
        if g.stop_tokens.contains(&tok) {
            return Ok(g.end(Finish::Stop));
        }
        g.tokens.push(tok);
        let (mut out, hit) = g.stops.push(&g.stream.push(&self.tokenizer, tok));
        g.text.push_str(&out);
        if hit {
            g.finish = Some(Finish::Stop);
        } else if g.tokens.len() == g.max_tokens || (!cached && g.cache.len() >= g.cache.limit()) {
            out += &g.end(Finish::Length);
        } else if !cached {
            g.pending = Some(tok);
        }
        Ok(out)
    }

    /// Feeds `tok` and `drafts` in one pass and keeps, in `g.ahead`, the tokens the model
    /// produces at those positions: each draft the sampler's check keeps (already in the
    /// cache), then the first token it put in a draft's place, or after a fully kept draft
    /// the token that follows it (to be fed next). The turned-down drafts leave the cache.
    fn speculate(&self, g: &mut Generation, tok: u32, drafts: &[Draft]) -> Result<()> {
        let len = g.cache.len();
        let input: Vec<u32> = std::iter::once(tok)
            .chain(drafts.iter().map(|d| d.0))
            .collect();
        let rows = self
            .model
            .forward_steps(&input, &mut g.cache)?
            .to_vec2::<f32>()?;
        let vocab = self.tokenizer.vocab();
        let stops = &g.stop_tokens;
        let ends = |t| vocab.is_end_of_generation(t) || stops.contains(&t);
        let kept = check_drafts(&mut g.sampler, &rows, drafts, ends, &mut g.ahead);
        g.cache.truncate(len + 1 + kept)?;
        if let Some(c) = &mut g.draft_cache {
            // The draft model keeps what the target kept (it may lag a token behind).
            let keep = c.len().min(len + 1 + kept);
            c.truncate(keep)?;
        }
        // The next draft's length follows how this one went: longer after a draft kept
        // whole, one past the kept part otherwise (a pass over a few tokens costs little
        // more than a decode step; a long draft turned down early costs several).
        g.draft_len = match kept == drafts.len() {
            true => (g.draft_len * 2).min(g.max_draft),
            false => (kept + 1).min(g.max_draft),
        };
        g.speculation.passes += 1;
        g.speculation.drafted += drafts.len();
        g.speculation.accepted += kept;
        Ok(())
    }

    /// Up to `n` tokens the draft model proposes after `g.history`, each with the
    /// distribution it was drawn from. The draft's cache first catches up with the history
    /// (after a draft kept whole it lacks the last draft token and the one after).
    fn draft_tokens(&self, g: &mut Generation, n: usize) -> Result<Vec<Draft>> {
        let (Some(model), Some(cache)) = (&self.draft, &mut g.draft_cache) else {
            return Ok(Vec::new());
        };
        let vocab = self.tokenizer.vocab();
        let mut out = Vec::with_capacity(n);
        let mut input = g.history[cache.len()..].to_vec();
        while out.len() < n && !input.is_empty() {
            let logits = model.forward(&input, cache, Logits::Last)?;
            let row = logits.flatten_all()?.to_vec1::<f32>()?;
            let (t, q) = g.sampler.propose(&row[..row.len().min(vocab.len().max(1))]);
            out.push((t, q));
            if vocab.is_end_of_generation(t) || g.stop_tokens.contains(&t) {
                break;
            }
            input = vec![t];
        }
        Ok(out)
    }
}

/// One generation in progress: its KV cache, sampler and the text so far (see
/// [`TextGeneration::start`]).
pub struct Generation {
    cache: Cache,
    sampler: Sampler,
    stream: StreamDecoder,
    stops: StopFilter,
    max_tokens: usize,
    stop_tokens: Vec<u32>,
    /// The next token's logits.
    logits: Tensor,
    /// The last sampled token, to be fed to the model before the next sample.
    pending: Option<u32>,
    tokens: Vec<u32>,
    text: String,
    finish: Option<Finish>,
    prompt_tokens: usize,
    prompt_seconds: f64,
    started: Instant,
    lookup: Option<PromptLookup>,
    /// The draft model's KV cache, with a draft model.
    draft_cache: Option<Cache>,
    /// Tokens drafted at most per pass (0: no speculation).
    max_draft: usize,
    /// The prompt and the tokens given so far, where drafts are made from.
    history: Vec<u32>,
    /// Tokens produced ahead by a speculative pass, to be given before the model runs
    /// again; `true` where the KV cache holds the token already.
    ahead: VecDeque<(u32, bool)>,
    speculation: SpeculationStats,
    /// Tokens the next draft may have (at most `max_draft`).
    draft_len: usize,
}

impl Generation {
    /// How speculative decoding went so far.
    pub fn speculation(&self) -> SpeculationStats {
        self.speculation
    }

    /// Why the generation ended; `None` while it goes on.
    pub fn finish(&self) -> Option<Finish> {
        self.finish
    }

    /// The tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Ends the generation here (nothing held back is released).
    pub fn cancel(&mut self) {
        self.finish.get_or_insert(Finish::Cancelled);
    }

    /// The outcome so far (`finish` is `Cancelled` while it goes on).
    pub fn generated(&self) -> Generated {
        Generated {
            text: self.text.clone(),
            tokens: self.tokens.clone(),
            prompt_tokens: self.prompt_tokens,
            finish: self.finish.unwrap_or(Finish::Cancelled),
            prompt_seconds: self.prompt_seconds,
            generate_seconds: self.started.elapsed().as_secs_f64(),
            speculation: self.speculation,
        }
    }

    pub fn into_generated(self) -> Generated {
        let seconds = self.started.elapsed().as_secs_f64();
        Generated {
            text: self.text,
            tokens: self.tokens,
            prompt_tokens: self.prompt_tokens,
            finish: self.finish.unwrap_or(Finish::Cancelled),
            prompt_seconds: self.prompt_seconds,
            generate_seconds: seconds,
            speculation: self.speculation,
        }
    }

    /// Finishes with `why`, releasing the text held back unless a stop ended it.
    fn end(&mut self, why: Finish) -> String {
        self.finish = Some(why);
        if why == Finish::Stop {
            return String::new();
        }
        let (out, _) = self.stops.push(&self.stream.finish());
        let out = out + &self.stops.flush();
        self.text.push_str(&out);
        out
    }
}

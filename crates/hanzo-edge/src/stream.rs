//! A reply as it is generated: text pieces, then one summary.

use crate::config::EdgeConfig;
use crate::conversation::Evicted;
use crate::edge::Edge;
use crate::EdgeError;
use hanzo_ml::Tensor;
use hanzo_transformers::speculative::{check_drafts, Draft};
use hanzo_transformers::tokenizer::StreamDecoder;
use hanzo_transformers::{Finish, PromptLookup, Sampler, SpeculationStats, StopFilter};
use std::collections::VecDeque;
use web_time::Instant;

/// One item of a [`TokenStream`].
#[derive(Clone, Debug)]
pub enum Event {
    /// The next piece of the reply (whole characters; a possible stop string is held back
    /// until it is decided).
    Text(String),
    /// The end of the reply, always the last event.
    Done(Summary),
}

/// Where a reply came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// This device's model.
    Local,
    /// The cloud fallback (`EdgeConfig::cloud`), or its cache.
    Cloud,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Local => "local",
            Source::Cloud => "cloud",
        }
    }
}

/// How a reply went.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub finish: Finish,
    /// Tokens of the prompt (the whole conversation as sent).
    pub prompt_tokens: usize,
    /// Of those, the ones computed for this reply (the rest the KV cache held already).
    pub computed_prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Tokens evicted during this reply, and how many evictions that took.
    pub evicted_tokens: usize,
    pub evictions: usize,
    /// The prefix that evictions keep.
    pub kept_tokens: usize,
    /// Positions the conversation holds now, of `max_context_tokens`.
    pub context_tokens: usize,
    pub max_context_tokens: usize,
    pub time_to_first_token_s: f64,
    pub generate_seconds: f64,
    /// Generated tokens per second after the first.
    pub tokens_per_second: f64,
    /// Where the reply came from.
    pub source: Source,
    /// Why it went to the cloud (`context`, `entropy`, `model`, `thermal`), where it did or
    /// was meant to.
    pub fallback_reason: Option<&'static str>,
    /// Why the cloud did not answer, where it was asked and the device answered instead.
    pub cloud_error: Option<String>,
    /// The cloud's answer came from the cache on disk.
    pub cached: bool,
    /// What the safety guard found and what it cost, where `EdgeConfig::guard` is set. A
    /// flagged turn's reply is the guard's refusal.
    pub guard: Option<crate::guard::GuardReport>,
    /// Tokens drafted for this reply (`EdgeConfig::lookup` or `EdgeConfig::draft`), and of
    /// those the ones the model kept.
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

/// The reply to [`Edge::chat`] or [`Edge::complete`]: an iterator of [`Event`]s. Dropping
/// it ends the reply where it is (the conversation keeps what was generated).
pub struct TokenStream<'a> {
    pub(crate) edge: &'a mut Edge,
    pub(crate) reply: Reply,
}

/// A reply in progress apart from the [`Edge`] it runs on: what a host that cannot hold a
/// [`TokenStream`]'s borrow keeps (the JavaScript bindings), with [`Reply::next_event`]
/// called with the same `Edge` that started it, and no other reply started meanwhile.
pub struct Reply {
    pub(crate) sampler: Sampler,
    pub(crate) decoder: StreamDecoder,
    pub(crate) stops: StopFilter,
    pub(crate) max_tokens: usize,
    pub(crate) stop_tokens: Vec<u32>,
    pub(crate) logits: Tensor,
    pub(crate) pending: Option<u32>,
    pub(crate) generated: usize,
    pub(crate) tokens: Vec<u32>,
    pub(crate) finish: Option<Finish>,
    pub(crate) done: bool,
    pub(crate) prompt_tokens: usize,
    pub(crate) computed: usize,
    pub(crate) evicted: Evicted,
    pub(crate) started: Instant,
    pub(crate) first_token: Option<f64>,
    /// The entropy (nats) of each sampled token's distribution, where the cloud fallback
    /// judges the local draft by it.
    pub(crate) entropies: Option<Vec<f32>>,
    /// Speculative decoding's state, where `EdgeConfig::lookup` or `draft` asks for it.
    pub(crate) speculation: Option<Speculation>,
    /// The cloud fallback's state for this reply.
    #[cfg(feature = "cloud")]
    pub(crate) route: Option<Box<crate::cloud::Route>>,
    /// The safety guard's state for this reply.
    pub(crate) guard: Option<Box<crate::guard::stream::Guarding>>,
}

impl TokenStream<'_> {
    /// Tokens of the prompt (the whole conversation as sent).
    pub fn prompt_tokens(&self) -> usize {
        self.reply.prompt_tokens()
    }

    /// The tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        self.reply.tokens()
    }

    /// Evictions during this reply so far.
    pub fn evictions(&self) -> usize {
        self.reply.evicted.events
    }

    /// The reply without the borrow of its `Edge` (see [`Reply`]).
    pub fn into_reply(self) -> Reply {
        self.reply
    }

    /// The tokens the KV cache holds now, in position order: the kept prefix, then the
    /// newest tokens (the last generated token joins when the next one is asked for).
    pub fn context(&self) -> &[u32] {
        self.edge.conversation.tokens()
    }

    /// Runs to the end and returns the whole reply with its summary.
    pub fn collect_text(self) -> Result<(String, Summary), EdgeError> {
        let mut text = String::new();
        for event in self {
            match event? {
                Event::Text(t) => text.push_str(&t),
                Event::Done(s) => return Ok((text, s)),
            }
        }
        Err(EdgeError::Request(
            "the stream ended without a summary".into(),
        ))
    }
}

impl Reply {
    /// The next event, as [`TokenStream`]'s iterator gives it; `None` after the summary.
    pub fn next_event(&mut self, edge: &mut Edge) -> Option<Result<Event, EdgeError>> {
        if self.guard.is_some() {
            return crate::guard::stream::next_event(self, edge);
        }
        self.next_inner(edge)
    }

    /// The next event of the reply as the device or the cloud gives it, before the guard.
    pub(crate) fn next_inner(&mut self, edge: &mut Edge) -> Option<Result<Event, EdgeError>> {
        #[cfg(feature = "cloud")]
        if self.route.is_some() {
            return crate::cloud::route::next_event(self, edge);
        }
        self.next_local(edge)
    }

    /// The next event of the device's own reply.
    pub(crate) fn next_local(&mut self, edge: &mut Edge) -> Option<Result<Event, EdgeError>> {
        loop {
            if self.done {
                return None;
            }
            if self.finish.is_some() {
                self.done = true;
                return Some(Ok(Event::Done(self.summary(edge))));
            }
            match self.step(edge) {
                Ok(piece) if piece.is_empty() => continue,
                Ok(piece) => return Some(Ok(Event::Text(piece))),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }

    /// Tokens of the prompt (the whole conversation as sent).
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// The tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Samples the next token and returns the text it completes (see
    /// `TextGeneration::step`, whose rules this follows).
    fn step(&mut self, edge: &mut Edge) -> Result<String, EdgeError> {
        if let Some(tok) = self.pending.take() {
            if !self.check_draft(edge, tok)? {
                let (logits, e) = edge.feed(&[tok])?;
                self.evicted.tokens += e.tokens;
                self.evicted.events += e.events;
                self.logits = logits;
            }
        }
        if self.generated >= self.max_tokens {
            return Ok(self.end(Finish::Length));
        }
        let ahead = self.speculation.as_mut().and_then(|s| s.ahead.pop_front());
        let (tok, cached) = match ahead {
            Some(ahead) => ahead,
            None => {
                let row = self.logits.flatten_all()?.to_vec1::<f32>()?;
                if let Some(e) = self.entropies.as_mut() {
                    e.push(entropy(&row));
                }
                (self.sampler.sample(&row), false)
            }
        };
        self.first_token
            .get_or_insert_with(|| self.started.elapsed().as_secs_f64());
        let tokenizer = &edge.pipeline.tokenizer;
        if tokenizer.vocab().is_end_of_generation(tok) {
            self.drop_ahead(edge, cached)?;
            return Ok(self.end(Finish::EndOfText));
        }
        if self.stop_tokens.contains(&tok) {
            self.drop_ahead(edge, cached)?;
            return Ok(self.end(Finish::Stop));
        }
        self.generated += 1;
        self.tokens.push(tok);
        let (mut out, hit) = self.stops.push(&self.decoder.push(tokenizer, tok));
        if hit {
            self.finish = Some(Finish::Stop);
            self.drop_ahead(edge, cached)?;
        } else if self.generated == self.max_tokens {
            out += &self.end(Finish::Length);
            self.drop_ahead(edge, cached)?;
        } else if !cached {
            self.pending = Some(tok);
        }
        Ok(out)
    }

    /// Speculative decoding (a prompt lookup's or the draft model's draft): feeds `tok` and
    /// the draft in one pass and keeps the tokens the model produces at those positions
    /// (`Speculation::ahead`): each draft the sampler's check keeps, then the token it put
    /// in a draft's place (or the one after a draft kept whole). The turned-down drafts
    /// leave the KV cache. False, with nothing fed, where there is no draft. Drafts use only
    /// the room the context has: they never cause an eviction, so evictions come when they
    /// would without them.
    fn check_draft(&mut self, edge: &mut Edge, tok: u32) -> Result<bool, EdgeError> {
        // The cloud fallback's entropy judge reads every sampled row: no drafts then.
        let (Some(spec), None) = (self.speculation.as_mut(), &self.entropies) else {
            return Ok(false);
        };
        // What the pass can give is the kept drafts and one more token.
        let want = spec
            .draft_len
            .min(edge.conversation.room().saturating_sub(1))
            .min(self.max_tokens.saturating_sub(self.generated + 1));
        let mut history = Vec::with_capacity(edge.conversation.len() + 1);
        history.extend_from_slice(edge.conversation.tokens());
        history.push(tok);
        let drafts: Vec<Draft> = match spec.lookup {
            Some(lookup) => lookup
                .propose(&history, want)
                .into_iter()
                .map(|t| (t, vec![(t, 1.0)]))
                .collect(),
            None if want > 0 => edge.draft(&history, want, &mut self.sampler, &self.stop_tokens)?,
            None => Vec::new(),
        };
        if drafts.is_empty() {
            return Ok(false);
        }
        history.clear();
        history.push(tok);
        history.extend(drafts.iter().map(|d| d.0));
        let rows = edge.feed_steps(&history)?.to_vec2::<f32>()?;
        let vocab = edge.pipeline.tokenizer.vocab();
        let stops = &self.stop_tokens;
        let ends = |t| vocab.is_end_of_generation(t) || stops.contains(&t);
        let kept = check_drafts(&mut self.sampler, &rows, &drafts, ends, &mut spec.ahead);
        let len = edge.conversation.len();
        edge.conversation.truncate(len - (drafts.len() - kept))?;
        spec.went(drafts.len(), kept);
        Ok(true)
    }

    /// At the end of a reply, takes back out of the KV cache what a speculative check put
    /// there past it: the last token where it was a kept draft (`cached`), and the kept
    /// drafts not given; the conversation then holds what it would without speculation.
    fn drop_ahead(&mut self, edge: &mut Edge, cached: bool) -> Result<(), EdgeError> {
        let Some(spec) = self.speculation.as_mut() else {
            return Ok(());
        };
        let n = usize::from(cached) + spec.ahead.iter().filter(|a| a.1).count();
        spec.ahead.clear();
        let len = edge.conversation.len();
        edge.conversation.truncate(len - n)
    }

    fn end(&mut self, why: Finish) -> String {
        self.finish = Some(why);
        if why == Finish::Stop {
            return String::new();
        }
        let (out, _) = self.stops.push(&self.decoder.finish());
        out + &self.stops.flush()
    }

    /// How the reply went so far (`Finish::Cancelled` while it has not finished).
    pub fn summary(&self, edge: &Edge) -> Summary {
        let mut s = self.local_summary(edge);
        #[cfg(feature = "cloud")]
        if let Some(route) = &self.route {
            route.annotate(&mut s);
        }
        if let Some(guard) = &self.guard {
            guard.annotate(&mut s);
        }
        s
    }

    fn local_summary(&self, edge: &Edge) -> Summary {
        let total = self.started.elapsed().as_secs_f64();
        let ttft = self.first_token.unwrap_or(total);
        let after = self.generated.saturating_sub(1);
        Summary {
            finish: self.finish.unwrap_or(Finish::Cancelled),
            prompt_tokens: self.prompt_tokens,
            computed_prompt_tokens: self.computed,
            completion_tokens: self.generated,
            evicted_tokens: self.evicted.tokens,
            evictions: self.evicted.events,
            kept_tokens: edge.conversation.pinned(),
            context_tokens: edge.conversation.len(),
            max_context_tokens: edge.config.max_context_tokens,
            time_to_first_token_s: ttft,
            generate_seconds: total,
            tokens_per_second: if total > ttft && after > 0 {
                after as f64 / (total - ttft)
            } else {
                0.0
            },
            source: Source::Local,
            fallback_reason: None,
            cloud_error: None,
            cached: false,
            guard: None,
            drafted_tokens: self.speculation.as_ref().map_or(0, |s| s.stats.drafted),
            accepted_tokens: self.speculation.as_ref().map_or(0, |s| s.stats.accepted),
        }
    }
}

/// A reply's speculative decoding: by prompt lookup (`EdgeConfig::lookup`) or with the
/// draft model (`EdgeConfig::draft`).
pub(crate) struct Speculation {
    /// The prompt lookup; the draft model drafts without one.
    lookup: Option<PromptLookup>,
    max_draft: usize,
    /// Tokens the last check produced, in order, not yet given: kept drafts (true: the KV
    /// cache holds them), then the model's own next token (false: still to be fed).
    ahead: VecDeque<(u32, bool)>,
    /// The next draft's length: two at first, doubled after a draft kept whole, one past
    /// the kept part otherwise (`TextGeneration`'s rule), at most `max_draft`.
    draft_len: usize,
    stats: SpeculationStats,
}

impl Speculation {
    /// What `config` asks for, if anything.
    pub(crate) fn of(config: &EdgeConfig) -> Option<Self> {
        let (lookup, max_draft) = match (&config.lookup, &config.draft) {
            (Some(l), _) => (Some(*l), l.max_draft),
            (None, Some(d)) => (None, d.max_draft),
            (None, None) => return None,
        };
        Some(Self {
            lookup,
            max_draft,
            ahead: VecDeque::new(),
            draft_len: max_draft.min(2),
            stats: SpeculationStats::default(),
        })
    }

    fn went(&mut self, drafted: usize, kept: usize) {
        self.draft_len = match kept == drafted {
            true => (self.draft_len * 2).min(self.max_draft),
            false => (kept + 1).min(self.max_draft),
        };
        self.stats.passes += 1;
        self.stats.drafted += drafted;
        self.stats.accepted += kept;
    }
}

/// The entropy (nats) of the softmax of `logits`.
fn entropy(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (mut z, mut weighted) = (0f64, 0f64);
    for &l in logits {
        let d = (l - max) as f64;
        let e = d.exp();
        z += e;
        weighted += e * d;
    }
    // H = log Z - E[d], with d = logit - max and Z the sum of exp(d).
    (z.ln() - weighted / z) as f32
}

/// With the `async` feature (on by default) a [`TokenStream`] is also a
/// `futures_core::Stream` of the same events. The model runs on the thread that polls: each
/// poll computes the next token there (one decode step, a few to tens of milliseconds) and
/// is ready at once, never pending. Poll it where blocking that long is fine (a dedicated
/// thread, `tokio::task::spawn_blocking`, a local executor) rather than on an executor
/// thread others wait on. Dropping it cancels the reply, as with the iterator.
#[cfg(feature = "async")]
impl futures_core::Stream for TokenStream<'_> {
    type Item = Result<Event, EdgeError>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.get_mut().next())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::from(!self.reply.done), None)
    }
}

impl Iterator for TokenStream<'_> {
    type Item = Result<Event, EdgeError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reply.next_event(self.edge)
    }
}

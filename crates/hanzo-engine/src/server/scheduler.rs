//! Continuous batching for one language model: a thread that owns the model's paged KV store
//! and, at every step, runs one forward pass over the next token of every decoding sequence
//! plus prompt chunks of the sequences still prefilling.
//!
//! - Requests join the running set between any two steps (up to `max_seqs`).
//! - Prompts are computed in chunks that end at multiples of [`PREFILL_CHUNK`] positions, as
//!   `TextGeneration::generate` computes them alone, so a sequence's logits in a batch are
//!   bit-identical to its logits alone (the decoder's batch invariance does the rest). At most
//!   `PREFILL_CHUNK` prompt tokens go into one pass, so running streams keep flowing.
//! - A new prompt starts from the longest run of its blocks the prefix cache holds; the rest of
//!   its chunk takes the kernels of the whole chunk (`SeqChunk::in_run`), as alone.
//! - `n` choices share the prompt: it is computed once, then the sequence is forked.
//! - When the pool runs out of blocks, the sequence admitted last is preempted: its blocks go
//!   back and it waits at the head of the queue to be recomputed (prompt and tokens so far).
//! - A request whose receiver is gone (the client disconnected) is dropped at the next step,
//!   queued or running, and its blocks go back to the pool.
//! - With prompt lookup (`--lookup`), a decoding sequence's step carries a draft: the tokens
//!   that followed the last earlier match of its newest n-gram. Its rows are computed as
//!   decode steps, the sampler keeps the drafts it would have produced and replaces the first
//!   it would not, and the turned-down positions leave the KV store (their blocks go back).
//! - With a draft model (`--draft-model`), the drafts come from it instead: before the pass,
//!   each drafting sequence's draft store catches up with its tokens, then every round is one
//!   decode step of the draft model over all of them, batched; its store keeps what the model
//!   kept.

use super::metrics::Metrics;
pub use hanzo_api::events::{Constraint, Event, FinishReason, TokenLogprob};
use hanzo_ml::kv::{KvError, PagedKv, SeqId};
use hanzo_transformers::pipeline::PREFILL_CHUNK;
use hanzo_transformers::sampler::{log_softmax, top_n};
use hanzo_transformers::speculative::Draft;
use hanzo_transformers::tokenizer::StreamDecoder;
use hanzo_transformers::{
    Error as ModelError, Logits, LoraId, PromptLookup, Sampler, SamplingParams, SeqChunk,
    StopFilter, TextGeneration,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// What a request asks the scheduler to generate.
pub struct GenRequest {
    pub prompt: Vec<u32>,
    /// Independent choices sampled from the same prompt.
    pub n: usize,
    pub max_tokens: usize,
    /// Choice `i` samples with seed `sampling.seed + i`.
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// `Some(k)`: report each token's log-probability and the `k` most likely alternatives.
    pub logprobs: Option<usize>,
    /// Scoring instead of generating: the log-probabilities of these tokens as the prompt's
    /// next token come back as one [`Event::Scores`], then the request finishes.
    pub score: Option<Vec<u32>>,
    /// One grammar per choice (constrained decoding), or none.
    pub constraints: Vec<Box<dyn Constraint>>,
    /// The LoRA adapter the request runs with (`model: "base+adapter"`), if any.
    pub lora: Option<LoraId>,
    pub events: UnboundedSender<Event>,
}

/// Why a request was refused at the door.
#[derive(Debug)]
pub enum SubmitError {
    /// The queue is full.
    Busy,
    /// The scheduler thread has ended.
    Stopped,
}

impl From<SubmitError> for super::error::ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Busy => super::error::ApiError::busy(),
            SubmitError::Stopped => {
                super::error::ApiError::unavailable("the model's scheduler has stopped")
            }
        }
    }
}

/// How the scheduler is sized.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_seqs: usize,
    pub max_queue: usize,
    /// Positions one sequence may hold (prompt and generated tokens).
    pub ctx_size: usize,
    /// Speculative decoding by prompt lookup for every sequence that can take it (one choice
    /// per sequence, no grammar).
    pub lookup: Option<PromptLookup>,
    /// Tokens drafted at most per step, by prompt lookup or the pipeline's draft model (0:
    /// no speculation).
    pub max_draft: usize,
}

/// The handle request handlers hold: submit work, read the queue length.
#[derive(Clone)]
pub struct Scheduler {
    tx: mpsc::Sender<GenRequest>,
    waiting: Arc<AtomicUsize>,
    limits: Limits,
}

impl Scheduler {
    /// Starts the scheduler thread for `pipeline` over `kv`.
    pub fn start(
        pipeline: Arc<TextGeneration>,
        kv: PagedKv,
        draft_kv: Option<PagedKv>,
        limits: Limits,
        metrics: Arc<Metrics>,
        model_name: String,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let mut state = State {
            pipeline,
            kv,
            draft_kv,
            limits,
            metrics,
            model: model_name,
            waiting_count: waiting.clone(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            last_stats: Default::default(),
        };
        std::thread::Builder::new()
            .name("scheduler".into())
            .spawn(move || state.run(rx))?;
        Ok(Self {
            tx,
            waiting,
            limits,
        })
    }

    /// Queues a request, or refuses it when `max_queue` requests wait already.
    pub fn submit(&self, req: GenRequest) -> Result<(), SubmitError> {
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        if queued >= self.limits.max_queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::Busy);
        }
        self.tx.send(req).map_err(|_| {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            SubmitError::Stopped
        })
    }
}

/// One choice's sampling and text state.
struct Choice {
    index: usize,
    sampler: Sampler,
    decoder: StreamDecoder,
    stop: StopFilter,
    generated: usize,
    last_token_at: Option<Instant>,
    /// The grammar the choice's tokens must follow.
    matcher: Option<Box<dyn Constraint>>,
}

/// What the whole request shares.
struct Shared {
    req: GenRequest,
    arrived: Instant,
    /// Whether it has left the queue once (its queue time is recorded).
    admitted: bool,
}

/// A sequence, running (it holds `id`) or waiting.
struct Seq {
    shared: Arc<std::sync::Mutex<Shared>>,
    id: Option<SeqId>,
    /// The prompt and every token sampled so far; positions `computed..` are still to run.
    tokens: Vec<u32>,
    computed: usize,
    /// Positions `..prefill_to` are computed as a prompt, in chunks (the prompt, and after
    /// a preemption the tokens sampled before it too); later ones one decode step each.
    prefill_to: usize,
    /// Every choice until the prompt is done (then the sequence forks), one afterwards.
    choices: Vec<Choice>,
    /// Whether it was counted as waiting (fresh requests are; preempted ones are not).
    counted: bool,
    /// Tokens its next draft may have: 2 at first, doubled while drafts are kept whole, one
    /// past the kept part otherwise (as `TextGeneration` drafts).
    draft_len: usize,
    /// The request's LoRA adapter.
    lora: Option<LoraId>,
    /// Its sequence in the draft model's store and the positions that holds (the first
    /// tokens of `tokens`), once it has drafted.
    draft: Option<(SeqId, usize)>,
}

impl Seq {
    fn closed(&self) -> bool {
        self.shared
            .lock()
            .map_or(true, |s| s.req.events.is_closed())
    }

    fn send(&self, e: Event) {
        if let Ok(s) = self.shared.lock() {
            let _ = s.req.events.send(e);
        }
    }
}

struct State {
    pipeline: Arc<TextGeneration>,
    kv: PagedKv,
    /// The draft model's KV store, with a draft model.
    draft_kv: Option<PagedKv>,
    limits: Limits,
    metrics: Arc<Metrics>,
    model: String,
    waiting_count: Arc<AtomicUsize>,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    last_stats: hanzo_ml::kv::KvStats,
}

/// One entry of a step's batch: which running sequence, how many of its tokens (its drafts
/// included), and the drafted tokens that follow its next token, with the distributions a
/// draft model drew them from (none for a prompt lookup's, which are certain).
struct Planned {
    at: usize,
    len: usize,
    logits: bool,
    drafts: Vec<u32>,
    dists: Vec<Vec<(u32, f64)>>,
}

impl State {
    fn run(&mut self, rx: mpsc::Receiver<GenRequest>) {
        loop {
            if self.running.is_empty() && self.waiting.is_empty() {
                match rx.recv() {
                    Ok(req) => self.enqueue(req),
                    Err(_) => return,
                }
            }
            while let Ok(req) = rx.try_recv() {
                self.enqueue(req);
            }
            self.drop_cancelled();
            self.admit();
            self.step();
            self.report();
        }
    }

    fn enqueue(&mut self, mut req: GenRequest) {
        let mut matchers = std::mem::take(&mut req.constraints).into_iter();
        let choices = (0..req.n)
            .map(|i| Choice {
                matcher: matchers.next(),
                index: i,
                sampler: Sampler::new(SamplingParams {
                    seed: req.sampling.seed.wrapping_add(i as u64),
                    ..req.sampling.clone()
                }),
                decoder: StreamDecoder::new(),
                stop: StopFilter::new(req.stop.clone()),
                generated: 0,
                last_token_at: None,
            })
            .collect();
        let tokens = req.prompt.clone();
        let lora = req.lora;
        self.waiting.push_back(Seq {
            shared: Arc::new(std::sync::Mutex::new(Shared {
                req,
                arrived: Instant::now(),
                admitted: false,
            })),
            id: None,
            prefill_to: tokens.len(),
            tokens,
            computed: 0,
            choices,
            counted: true,
            draft_len: 2,
            lora,
            draft: None,
        });
    }

    fn uncount(&self, s: &mut Seq) {
        if std::mem::take(&mut s.counted) {
            self.waiting_count.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn drop_cancelled(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].closed() {
                let mut s = self.waiting.remove(i).expect("in range");
                self.uncount(&mut s);
                self.metrics.cancelled(&self.model);
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].closed() {
                let s = self.running.remove(i);
                self.free(&s);
                self.metrics.cancelled(&self.model);
            } else {
                i += 1;
            }
        }
    }

    fn free(&mut self, s: &Seq) {
        if let Some(id) = s.id {
            let _ = self.kv.release(id);
        }
        if let (Some((id, _)), Some(kv)) = (s.draft, &mut self.draft_kv) {
            let _ = kv.release(id);
        }
    }

    fn admit(&mut self) {
        while self.running.len() < self.limits.max_seqs {
            let Some(mut s) = self.waiting.pop_front() else {
                return;
            };
            // Room for its first chunk (as if nothing were cached) and one more block per
            // running sequence; a sequence alone is always admitted (if it cannot fit at all,
            // its forward pass says so).
            let layout = self.kv.layout();
            let first = chunk_end(0, s.tokens.len());
            let needed =
                layout.blocks_for(first, PREFILL_CHUNK) + self.running.len() * layout.layers();
            if !self.running.is_empty() && needed > self.kv.free_blocks() {
                self.waiting.push_front(s);
                return;
            }
            // An adapter's keys and values are its own: its sequences share blocks only
            // with each other.
            let namespace = s.lora.map_or(0, |l| 1 + l.index() as u64);
            let (id, cached) = self.kv.add_sequence_with_prefix_in(&s.tokens, namespace);
            if self.limits.max_draft > 0 {
                // Window layers keep what a turned-down draft takes back.
                let _ = self.kv.keep_behind(id, self.limits.max_draft + 1);
            }
            s.id = Some(id);
            s.computed = cached;
            self.uncount(&mut s);
            if let Ok(mut sh) = s.shared.lock() {
                if !std::mem::replace(&mut sh.admitted, true) {
                    let queued = sh.arrived.elapsed().as_secs_f64();
                    self.metrics.queue_time(&self.model, queued);
                }
            }
            self.running.push(s);
        }
    }

    /// The next pass: one token of every decoding sequence, then prompt chunks (each ending
    /// at a multiple of `PREFILL_CHUNK`) while they fit in `PREFILL_CHUNK` tokens.
    /// `model_drafts[at]`: what the draft model proposed for running sequence `at`.
    fn plan(&self, model_drafts: &[Vec<Draft>]) -> Vec<Planned> {
        let mut plan = Vec::new();
        let share = self.draft_share();
        for (at, s) in self.running.iter().enumerate() {
            if s.tokens.len() - s.computed == 1 {
                let (drafts, dists) = match model_drafts.get(at) {
                    Some(d) if !d.is_empty() => d.iter().cloned().unzip(),
                    _ => (self.drafts(s, share), Vec::new()),
                };
                plan.push(Planned {
                    at,
                    len: 1 + drafts.len(),
                    logits: true,
                    drafts,
                    dists,
                });
            }
        }
        let mut budget = PREFILL_CHUNK;
        for (at, s) in self.running.iter().enumerate() {
            let pending = s.tokens.len() - s.computed;
            if pending <= 1 {
                continue;
            }
            let len = chunk_end(s.computed, s.tokens.len()) - s.computed;
            if len > budget {
                break;
            }
            budget -= len;
            plan.push(Planned {
                at,
                len,
                logits: s.computed + len == s.tokens.len(),
                drafts: Vec::new(),
                dists: Vec::new(),
            });
        }
        plan
    }

    /// Drafted rows a decoding sequence may have this step. Drafts share one budget of
    /// `max_draft` rows a step: a pass over many decoding sequences is no longer bound by
    /// reading the weights, and rows of turned-down drafts would cost it more than they save.
    fn draft_share(&self) -> usize {
        let decoding = self
            .running
            .iter()
            .filter(|s| s.tokens.len() - s.computed == 1)
            .count();
        self.limits.max_draft.div_ceil(decoding.max(1))
    }

    /// Tokens a decoding sequence may draft, at most `share`: none for a choice under a
    /// grammar, and no more than its room (the context, `max_tokens`) and its draft length.
    fn draft_room(&self, s: &Seq, share: usize) -> usize {
        let [c] = &s.choices[..] else {
            return 0;
        };
        if c.matcher.is_some() {
            return 0;
        }
        let Ok(max_tokens) = s.shared.lock().map(|sh| sh.req.max_tokens) else {
            return 0;
        };
        // The pass writes the next token and the drafts; the last kept one, or the one
        // after them all, is sampled too.
        (self.limits.ctx_size.saturating_sub(s.tokens.len()))
            .min(max_tokens.saturating_sub(c.generated + 1))
            .min(s.draft_len)
            .min(share)
    }

    /// The draft prompt lookup proposes after a decoding sequence's tokens (none without
    /// lookup).
    fn drafts(&self, s: &Seq, share: usize) -> Vec<u32> {
        match self.limits.lookup {
            Some(l) => l.propose(&s.tokens, self.draft_room(s, share)),
            None => Vec::new(),
        }
    }

    /// The draft model's proposals for every decoding sequence that may draft (indexed as
    /// `running`; empty without a draft model). Each one's draft sequence first catches up
    /// with its tokens, the next one included (a long catch-up alone, in prompt-sized
    /// chunks); then each round is one batched pass of the draft model over the sequences
    /// still drafting, each proposing one token drawn by its own sampler.
    fn model_drafts(&mut self) -> Vec<Vec<Draft>> {
        let mut out = vec![Vec::new(); self.running.len()];
        let pipeline = self.pipeline.clone();
        let (Some(model), true) = (pipeline.draft_model(), self.draft_kv.is_some()) else {
            return out;
        };
        let share = self.draft_share();
        let want: Vec<(usize, usize)> = (0..self.running.len())
            .filter(|&at| self.running[at].tokens.len() - self.running[at].computed == 1)
            .map(|at| (at, self.draft_room(&self.running[at], share)))
            .filter(|&(_, n)| n > 0)
            .collect();
        if want.is_empty() {
            return out;
        }
        let vocab = pipeline.tokenizer.vocab();
        let kv = self.draft_kv.as_mut().expect("checked");
        // Each drafting sequence: its draft sequence, tokens still to read, drafts left.
        let mut active: Vec<(usize, SeqId, Vec<u32>, usize)> = Vec::new();
        for &(at, n) in &want {
            let s = &mut self.running[at];
            let (id, held) = match s.draft {
                Some(d) => d,
                None => {
                    let (id, cached) = kv.add_sequence_with_prefix(&s.tokens);
                    let _ = kv.keep_behind(id, self.limits.max_draft + 1);
                    (id, cached)
                }
            };
            s.draft = Some((id, held));
            let mut rest = &s.tokens[held..];
            // All but the last chunk alone, before the batched rounds.
            while rest.len() > PREFILL_CHUNK {
                let chunk = SeqChunk::new(id, &rest[..PREFILL_CHUNK], Logits::None);
                if let Err(e) = model.forward_batch(&[chunk], kv) {
                    tracing::debug!("no draft this step: {e}");
                    return self.drop_drafts(&want);
                }
                rest = &rest[PREFILL_CHUNK..];
            }
            s.draft = Some((id, s.tokens.len() - rest.len()));
            active.push((at, id, rest.to_vec(), n));
        }
        while !active.is_empty() {
            let chunks: Vec<SeqChunk> = active
                .iter()
                .map(|(_, id, input, _)| SeqChunk::new(*id, input, Logits::Last))
                .collect();
            let logits =
                match model.forward_batch(&chunks, self.draft_kv.as_mut().expect("checked")) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::debug!("no draft this step: {e}");
                        return self.drop_drafts(&want);
                    }
                };
            let running = &mut self.running;
            let read = logits.with_contiguous(|flat: &[f32]| {
                let width = flat.len() / active.len().max(1);
                for ((at, _, input, left), row) in active.iter_mut().zip(flat.chunks_exact(width)) {
                    let s = &mut running[*at];
                    if let Some((_, held)) = &mut s.draft {
                        *held += input.len();
                    }
                    let row = &row[..row.len().min(vocab.len().max(1))];
                    let (t, q) = s.choices[0].sampler.propose(row);
                    out[*at].push((t, q));
                    *left -= 1;
                    *input = vec![t];
                    if vocab.is_end_of_generation(t) {
                        *left = 0;
                    }
                }
            });
            if let Err(e) = read {
                tracing::debug!("no draft this step: {e}");
                return self.drop_drafts(&want);
            }
            active.retain(|a| a.3 > 0);
        }
        out
    }

    /// After a failed draft pass: the drafting sequences' draft stores go (they start over
    /// at their next draft), and nobody drafts this step.
    fn drop_drafts(&mut self, want: &[(usize, usize)]) -> Vec<Vec<Draft>> {
        for &(at, _) in want {
            if let (Some((id, _)), Some(kv)) = (self.running[at].draft.take(), &mut self.draft_kv) {
                let _ = kv.release(id);
            }
        }
        vec![Vec::new(); self.running.len()]
    }

    fn step(&mut self) {
        let model_drafts = self.model_drafts();
        loop {
            let plan = self.plan(&model_drafts);
            if plan.is_empty() {
                return;
            }
            // A drafting sequence's next token and its drafts.
            let drafted: Vec<Vec<u32>> = plan
                .iter()
                .map(|p| match p.drafts.is_empty() {
                    true => Vec::new(),
                    false => {
                        let s = &self.running[p.at];
                        let next = s.tokens[s.computed];
                        std::iter::once(next)
                            .chain(p.drafts.iter().copied())
                            .collect()
                    }
                })
                .collect();
            let chunks: Vec<SeqChunk> = plan
                .iter()
                .zip(&drafted)
                .map(|(p, d)| {
                    let s = &self.running[p.at];
                    let id = s.id.expect("running");
                    if !d.is_empty() {
                        // Every row as the decode step it stands for.
                        return SeqChunk::new(id, d, Logits::All)
                            .as_decode_steps()
                            .with_lora(s.lora);
                    }
                    let tokens = &s.tokens[s.computed..s.computed + p.len];
                    let logits = if p.logits { Logits::Last } else { Logits::None };
                    SeqChunk::new(id, tokens, logits)
                        .in_run(run_length(s.computed, s.prefill_to))
                        .with_lora(s.lora)
                })
                .collect();
            let result = self.pipeline.model.forward_batch(&chunks, &mut self.kv);
            match result {
                Ok(logits) => return self.after(&plan, logits),
                Err(ModelError::Kv(KvError::OutOfBlocks { .. })) if self.running.len() > 1 => {
                    self.preempt();
                }
                Err(e) => {
                    // Out of blocks with one sequence: it can never fit. Anything else is a
                    // model failure; neither is worth retrying.
                    let msg = match e {
                        ModelError::Kv(KvError::OutOfBlocks { needed, free, .. }) => format!(
                            "the request needs more KV cache than the server has \
                             ({needed} blocks needed, {free} free); raise --kv-budget"
                        ),
                        e => format!("inference failed: {e}"),
                    };
                    tracing::error!("{msg}");
                    let mut failed: Vec<usize> = plan.iter().map(|p| p.at).collect();
                    failed.sort_unstable();
                    for at in failed.into_iter().rev() {
                        let s = self.running.remove(at);
                        s.send(Event::Error(msg.clone()));
                        self.free(&s);
                    }
                    return;
                }
            }
        }
    }

    /// Frees the sequence admitted last and queues it first, to be recomputed.
    fn preempt(&mut self) {
        let mut s = self.running.pop().expect("more than one running");
        self.free(&s);
        s.id = None;
        s.draft = None;
        s.computed = 0;
        s.prefill_to = s.tokens.len();
        tracing::debug!(
            "preempted a sequence of {} tokens: KV cache full",
            s.tokens.len()
        );
        self.metrics.preempted(&self.model);
        self.waiting.push_front(s);
    }

    fn after(&mut self, plan: &[Planned], logits: hanzo_ml::Tensor) {
        // The rows are read where they lie (16 rows of Gemma 3's vocabulary are 16 MB).
        let &[_, vocab] = logits.dims() else {
            return self.after_rows(plan, &[]);
        };
        let read = logits.with_contiguous(|flat: &[f32]| {
            let rows: Vec<&[f32]> = flat.chunks_exact(vocab.max(1)).collect();
            self.after_rows(plan, &rows)
        });
        if let Err(e) = read {
            tracing::error!("cannot read logits: {e}");
        }
    }

    fn after_rows(&mut self, plan: &[Planned], rows: &[&[f32]]) {
        let mut next_row = 0;
        let mut prompt_tokens = 0;
        let mut finished = Vec::new();
        let mut forks = Vec::new();
        for p in plan {
            if !p.drafts.is_empty() {
                let n = p.len;
                let Some(rows) = rows.get(next_row..next_row + n) else {
                    break;
                };
                next_row += n;
                if self.check_drafts(p, rows) {
                    finished.push(p.at);
                }
                continue;
            }
            let s = &mut self.running[p.at];
            s.computed += p.len;
            if p.len > 1 || s.choices.iter().all(|c| c.generated == 0) {
                prompt_tokens += p.len;
            }
            if !p.logits {
                continue;
            }
            let r = next_row;
            next_row += 1;
            let Some(row) = rows.get(r) else { break };
            // The prompt is done: give every further choice a sequence of its own.
            while s.choices.len() > 1 {
                let c = s.choices.pop().expect("len > 1");
                match self.kv.fork(s.id.expect("running")) {
                    Ok(id) => forks.push((
                        Seq {
                            shared: s.shared.clone(),
                            id: Some(id),
                            tokens: s.tokens.clone(),
                            computed: s.computed,
                            prefill_to: s.prefill_to,
                            choices: vec![c],
                            counted: false,
                            draft_len: s.draft_len,
                            lora: s.lora,
                            draft: None,
                        },
                        r,
                    )),
                    Err(e) => {
                        s.send(Event::Error(format!("cannot fork the sequence: {e}")));
                    }
                }
            }
            if self.sample(p.at, row, None).0 {
                finished.push(p.at);
            }
        }
        // Each fork samples from its prompt's row, as its first choice did.
        for (s, r) in forks {
            self.running.push(s);
            let at = self.running.len() - 1;
            if self.sample(at, rows[r], None).0 {
                finished.push(at);
            }
        }
        self.metrics.prompt_tokens(&self.model, prompt_tokens);
        finished.sort_unstable();
        for at in finished.into_iter().rev() {
            let s = self.running.remove(at);
            self.free(&s);
        }
    }

    /// The rows of a drafting sequence's pass (its next token, then each draft): the
    /// sampler's check keeps drafts until the first it would not have produced, whose place
    /// its own token takes (after a draft kept whole, the token that follows it). The store
    /// keeps the next token and the kept drafts. Returns whether the choice has finished.
    fn check_drafts(&mut self, p: &Planned, rows: &[&[f32]]) -> bool {
        let base = self.running[p.at].computed;
        let mut kept = 0;
        let mut done = false;
        for (i, row) in rows.iter().enumerate() {
            let certain;
            let draft = match (p.drafts.get(i), p.dists.get(i)) {
                (Some(&d), Some(q)) => Some((d, q.as_slice())),
                (Some(&d), None) => {
                    certain = [(d, 1.0)];
                    Some((d, &certain[..]))
                }
                (None, _) => None,
            };
            let (finished, same) = self.sample(p.at, row, draft);
            kept += usize::from(same);
            if finished || !same {
                done = finished;
                break;
            }
        }
        self.metrics.speculated(&self.model, p.drafts.len(), kept);
        let s = &mut self.running[p.at];
        s.computed = base + 1 + kept;
        // The draft store read the next token and every draft but the last.
        if let (Some((id, held)), Some(kv)) = (&mut s.draft, &mut self.draft_kv) {
            let keep = (*held).min(base + 1 + kept);
            if kv.truncate(*id, keep).is_ok() {
                *held = keep;
            } else {
                let _ = kv.release(*id);
                s.draft = None;
            }
        }
        let max = self.limits.max_draft.max(1);
        s.draft_len = match kept == p.drafts.len() {
            true => (s.draft_len * 2).min(max),
            false => (kept + 1).min(max),
        };
        if done {
            return true;
        }
        let id = s.id.expect("running");
        if let Err(e) = self.kv.truncate(id, base + 1 + kept) {
            let msg = format!("cannot take back a turned-down draft: {e}");
            tracing::error!("{msg}");
            self.running[p.at].send(Event::Error(msg));
            return true;
        }
        false
    }

    /// Samples the next token of running sequence `at` (one choice) and streams its text;
    /// with `draft`, the speculative check of that drafted token. Returns whether the choice
    /// has finished and whether its token is the draft.
    fn sample(
        &mut self,
        at: usize,
        row: &[f32],
        draft: Option<(u32, &[(u32, f64)])>,
    ) -> (bool, bool) {
        let p = self.pipeline.clone();
        let vocab = p.tokenizer.vocab();
        let ctx = self.limits.ctx_size;
        let s = &mut self.running[at];
        let shared = s.shared.clone();
        let Ok(sh) = shared.lock() else {
            return (true, false);
        };
        let c = &mut s.choices[0];
        if let Some(ids) = &sh.req.score {
            let lp = log_softmax(row);
            let scores = ids
                .iter()
                .map(|&t| lp.get(t as usize).copied().unwrap_or(f32::NEG_INFINITY));
            let _ = sh.req.events.send(Event::Scores(scores.collect()));
            finish(
                &self.metrics,
                &self.model,
                &sh,
                c.index,
                FinishReason::Stop,
                0,
            );
            return (true, false);
        }
        let (tok, same) = match (&mut c.matcher, draft) {
            (None, Some((d, q))) => c.sampler.verify_against(row, d, q),
            (None, None) => (c.sampler.sample(row), false),
            (Some(m), _) => {
                let mut masked = row.to_vec();
                if let Err(e) = m.mask(&mut masked) {
                    let _ = sh.req.events.send(Event::Error(format!("grammar: {e}")));
                    return (true, false);
                }
                let tok = c.sampler.sample(&masked);
                if let Err(e) = m.consume(tok) {
                    let _ = sh.req.events.send(Event::Error(format!("grammar: {e}")));
                    return (true, false);
                }
                (tok, false)
            }
        };
        let now = Instant::now();
        match c.last_token_at.replace(now) {
            None if c.index == 0 => {
                let ttft = sh.arrived.elapsed().as_secs_f64();
                self.metrics.ttft(&self.model, ttft);
            }
            None => {}
            Some(prev) => self
                .metrics
                .inter_token(&self.model, (now - prev).as_secs_f64()),
        }
        self.metrics.generated(&self.model, 1);
        let end = vocab.is_end_of_generation(tok);
        // The end-of-turn token is not part of the answer: no text, no log-probability.
        let logprobs = match sh.req.logprobs {
            Some(k) if !end => {
                let lp = log_softmax(row);
                let entry = |id: u32| {
                    let bytes = p.tokenizer.token_bytes(id, true);
                    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
                };
                let (token, bytes) = entry(tok);
                vec![TokenLogprob {
                    token,
                    bytes,
                    logprob: lp[tok as usize],
                    top: top_n(&lp, k)
                        .into_iter()
                        .map(|(id, l)| {
                            let (t, b) = entry(id);
                            (t, b, l)
                        })
                        .collect(),
                }]
            }
            _ => Vec::new(),
        };
        let mut text = String::new();
        let mut hit = false;
        c.generated += 1;
        if !end {
            let (out, h) = c.stop.push(&c.decoder.push(&p.tokenizer, tok));
            text = out;
            hit = h;
            s.tokens.push(tok);
        }
        let grammar_done = c.matcher.as_ref().is_some_and(|m| m.is_done());
        let reason = if end || hit || grammar_done {
            Some(FinishReason::Stop)
        } else if c.generated >= sh.req.max_tokens || s.tokens.len() >= ctx {
            Some(FinishReason::Length)
        } else {
            None
        };
        // A stop string ends the text where it starts; otherwise what is held back is final.
        if reason.is_some() && !hit {
            let (out, _) = c.stop.push(&c.decoder.finish());
            text.push_str(&out);
            text.push_str(&c.stop.flush());
        }
        if !text.is_empty() || !logprobs.is_empty() {
            let _ = sh.req.events.send(Event::Text {
                choice: c.index,
                text,
                logprobs,
            });
        }
        let Some(reason) = reason else {
            return (false, same);
        };
        let tokens = c.generated - usize::from(end);
        finish(&self.metrics, &self.model, &sh, c.index, reason, tokens);
        (true, same)
    }

    fn report(&mut self) {
        let stats = self.kv.stats();
        self.metrics.kv(
            &self.model,
            self.kv.total_blocks(),
            self.kv.free_blocks(),
            stats.prefix_queried - self.last_stats.prefix_queried,
            stats.prefix_hit - self.last_stats.prefix_hit,
        );
        self.last_stats = stats;
        self.metrics.queues(
            &self.model,
            self.running.len(),
            self.waiting_count.load(Ordering::SeqCst)
                + self.waiting.iter().filter(|s| !s.counted).count(),
        );
    }
}

/// Ends one choice: its `Finish` event and the request metrics (a free function, so it can
/// run while the choice itself is borrowed from the running set).
fn finish(
    metrics: &Metrics,
    model: &str,
    sh: &Shared,
    choice: usize,
    reason: FinishReason,
    tokens: usize,
) {
    let _ = sh.req.events.send(Event::Finish {
        choice,
        reason,
        tokens,
    });
    metrics.finished(model, reason.as_str(), sh.arrived.elapsed().as_secs_f64());
}

/// Where the chunk starting at `computed` ends: the next multiple of `PREFILL_CHUNK`, or the
/// end of the tokens.
fn chunk_end(computed: usize, len: usize) -> usize {
    ((computed / PREFILL_CHUNK + 1) * PREFILL_CHUNK).min(len)
}

/// The length of the run that computes position `computed` when the sequence is computed
/// alone: its prompt chunk (from the chunk's start, though the prefix cache may have
/// supplied the first positions), or 1 for a decode step.
fn run_length(computed: usize, prefill_to: usize) -> usize {
    if computed < prefill_to {
        chunk_end(computed, prefill_to) - computed / PREFILL_CHUNK * PREFILL_CHUNK
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_where_a_lone_prompt_would_end_them() {
        assert_eq!(chunk_end(0, 100), 100);
        assert_eq!(chunk_end(0, 1000), 512);
        assert_eq!(chunk_end(512, 1000), 1000);
        assert_eq!(chunk_end(480, 1000), 512);
    }

    #[test]
    fn a_cached_prefix_leaves_the_rest_of_its_chunk_in_the_whole_chunk_run() {
        // A 100-token prompt: one chunk, whatever the cache supplied of it.
        assert_eq!(run_length(0, 100), 100);
        assert_eq!(run_length(64, 100), 100);
        assert_eq!(run_length(99, 100), 100);
        // 1000 tokens: chunks 0..512 and 512..1000.
        assert_eq!(run_length(480, 1000), 512);
        assert_eq!(run_length(512, 1000), 488);
        assert_eq!(run_length(960, 1000), 488);
        // Decode steps run alone.
        assert_eq!(run_length(100, 100), 1);
        assert_eq!(run_length(150, 100), 1);
    }
}

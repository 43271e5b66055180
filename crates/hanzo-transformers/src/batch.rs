//! Several generations at once through the batched core: one paged KV store shared by the
//! sequences and one `LanguageModel::forward_batch` per step, for a caller with many prompts
//! at hand (the Python package's `LLM.generate([...])`). Each sequence samples and stops as
//! [`TextGeneration::generate`] would alone (its own sampler, stop strings, token limit);
//! greedy replies equal the solo ones. Speculative decoding is the solo pipeline's.

use crate::models::{Logits, SeqChunk};
use crate::pipeline::PREFILL_CHUNK;
use crate::stop::StopFilter;
use crate::tokenizer::StreamDecoder;
use crate::{Error, Finish, GenerateOptions, Generated, Result, Sampler, TextGeneration};
use hanzo_ml::kv::{PagedKv, SeqId};
use web_time::Instant;

/// One sequence of a [`Batch`].
struct Seq {
    id: SeqId,
    prompt_tokens: usize,
    /// Whether its KV blocks went back to the store.
    released: bool,
    sampler: Sampler,
    stream: StreamDecoder,
    stops: StopFilter,
    max_tokens: usize,
    stop_tokens: Vec<u32>,
    tokens: Vec<u32>,
    text: String,
    finish: Option<Finish>,
    /// The last token, to be fed in the next pass.
    next: Option<u32>,
    prompt_seconds: f64,
}

/// Generations in progress together (see [`TextGeneration::start_batch`]).
pub struct Batch {
    kv: PagedKv,
    seqs: Vec<Seq>,
    started: Instant,
}

impl Batch {
    /// Whether every sequence has finished.
    pub fn is_done(&self) -> bool {
        self.seqs.iter().all(|s| s.finish.is_some())
    }

    /// Ends every sequence still going.
    pub fn cancel(&mut self) {
        for s in &mut self.seqs {
            s.finish.get_or_insert(Finish::Cancelled);
        }
    }

    /// The outcomes, in the prompts' order.
    pub fn into_generated(mut self) -> Vec<Generated> {
        let seconds = self.started.elapsed().as_secs_f64();
        self.cancel();
        release_finished(&mut self);
        self.seqs
            .into_iter()
            .map(|s| Generated {
                text: s.text,
                prompt_tokens: s.prompt_tokens,
                tokens: s.tokens,
                finish: s.finish.unwrap_or(Finish::Cancelled),
                prompt_seconds: s.prompt_seconds,
                generate_seconds: seconds,
                speculation: Default::default(),
            })
            .collect()
    }
}

impl Seq {
    /// Takes the token sampled for this sequence: the end of the text, a stop, or more text.
    fn accept(&mut self, p: &TextGeneration, tok: u32) {
        if p.tokenizer.vocab().is_end_of_generation(tok) {
            return self.end(Finish::EndOfText);
        }
        if self.stop_tokens.contains(&tok) {
            return self.end(Finish::Stop);
        }
        self.tokens.push(tok);
        let (out, hit) = self.stops.push(&self.stream.push(&p.tokenizer, tok));
        self.text.push_str(&out);
        if hit {
            self.finish = Some(Finish::Stop);
        } else if self.tokens.len() >= self.max_tokens {
            self.end(Finish::Length);
        } else {
            self.next = Some(tok);
        }
    }

    /// Finishes with `why`, releasing the text held back unless a stop string ended it.
    fn end(&mut self, why: Finish) {
        self.finish = Some(why);
        if why != Finish::Stop {
            let (out, _) = self.stops.push(&self.stream.finish());
            self.text.push_str(&out);
            self.text.push_str(&self.stops.flush());
        }
    }
}

impl TextGeneration {
    /// Starts a generation per prompt (each with its options) and reads the prompts, several
    /// per forward pass; [`step_batch`](Self::step_batch) then moves them all a token on.
    pub fn start_batch(&self, prompts: &[Vec<u32>], opts: &[GenerateOptions]) -> Result<Batch> {
        if prompts.len() != opts.len() {
            return Err(Error::Invalid(format!(
                "{} prompts with {} sets of options",
                prompts.len(),
                opts.len()
            )));
        }
        let ctx = self.model.info().context_length;
        for (p, o) in prompts.iter().zip(opts) {
            o.sampling.validate().map_err(Error::Invalid)?;
            if o.lookup.is_some() || o.draft.is_some() {
                return Err(Error::Invalid(
                    "speculative decoding runs one generation at a time".into(),
                ));
            }
            if p.is_empty() {
                return Err(Error::Invalid("a prompt is empty".into()));
            }
            if p.len() >= ctx {
                return Err(Error::ContextFull {
                    needed: p.len() + 1,
                    limit: ctx,
                });
            }
        }
        let layout = self.model.kv_layout();
        let blocks = prompts
            .iter()
            .zip(opts)
            .map(|(p, o)| layout.blocks_for(p.len() + o.max_tokens.max(1), PREFILL_CHUNK))
            .sum();
        let mut kv = PagedKv::with_blocks(layout, blocks);
        let mut seqs: Vec<Seq> = prompts
            .iter()
            .zip(opts)
            .map(|(p, o)| {
                let mut sampler = Sampler::new(o.sampling.clone());
                if o.penalize_prompt {
                    sampler.observe(p);
                }
                Seq {
                    id: kv.add_sequence(),
                    prompt_tokens: p.len(),
                    released: false,
                    sampler,
                    stream: StreamDecoder::new(),
                    stops: StopFilter::new(o.stop.clone()),
                    max_tokens: o.max_tokens,
                    stop_tokens: o.stop_tokens.clone(),
                    tokens: Vec::new(),
                    text: String::new(),
                    finish: None,
                    next: None,
                    prompt_seconds: 0.0,
                }
            })
            .collect();
        let started = Instant::now();
        let ids: Vec<SeqId> = seqs.iter().map(|s| s.id).collect();
        self.prefill(&mut kv, &ids, prompts, |i, row| {
            let s = &mut seqs[i];
            s.prompt_seconds = started.elapsed().as_secs_f64();
            let tok = s.sampler.sample(&row);
            s.accept(self, tok);
        })?;
        let mut batch = Batch { kv, seqs, started };
        release_finished(&mut batch);
        Ok(batch)
    }

    /// The log-probabilities of `ids` at the end of each prompt (a scoring pass: nothing is
    /// generated), the prompts read together as `start_batch` reads them.
    pub fn last_logprobs_batch(&self, prompts: &[Vec<u32>], ids: &[u32]) -> Result<Vec<Vec<f32>>> {
        let ctx = self.model.info().context_length;
        if let Some(p) = prompts.iter().find(|p| p.is_empty() || p.len() > ctx) {
            return Err(Error::Invalid(format!(
                "a prompt of {} tokens: 1 to {ctx} (the context length) are scored",
                p.len()
            )));
        }
        let layout = self.model.kv_layout();
        let blocks = prompts
            .iter()
            .map(|p| layout.blocks_for(p.len(), PREFILL_CHUNK))
            .sum();
        let mut kv = PagedKv::with_blocks(layout, blocks);
        let seqs: Vec<SeqId> = prompts.iter().map(|_| kv.add_sequence()).collect();
        let mut out = vec![Vec::new(); prompts.len()];
        self.prefill(&mut kv, &seqs, prompts, |i, row| {
            let lp = crate::sampler::log_softmax(&row);
            out[i] = ids
                .iter()
                .map(|&t| lp.get(t as usize).copied().unwrap_or(f32::NEG_INFINITY))
                .collect();
        })?;
        Ok(out)
    }

    /// Reads `prompts` into sequences `seqs` of `kv` in the solo pipeline's chunks (so each
    /// gets the same numbers), as many chunks per pass as fit in one chunk's worth of tokens;
    /// `on_last(i, logits)` gets the logits after prompt `i`'s last token.
    fn prefill(
        &self,
        kv: &mut PagedKv,
        seqs: &[SeqId],
        prompts: &[Vec<u32>],
        mut on_last: impl FnMut(usize, Vec<f32>),
    ) -> Result<()> {
        let pieces: Vec<(usize, &[u32])> = prompts
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.chunks(PREFILL_CHUNK).map(move |c| (i, c)))
            .collect();
        let mut at = 0;
        while at < pieces.len() {
            let mut end = at + 1;
            let mut tokens = pieces[at].1.len();
            while end < pieces.len() && tokens + pieces[end].1.len() <= PREFILL_CHUNK {
                tokens += pieces[end].1.len();
                end += 1;
            }
            let last = |k: usize| {
                let (i, c) = pieces[k];
                c.as_ptr_range().end == prompts[i].as_ptr_range().end
            };
            let chunks: Vec<SeqChunk> = (at..end)
                .map(|k| {
                    let (i, c) = pieces[k];
                    let logits = if last(k) { Logits::Last } else { Logits::None };
                    SeqChunk::new(seqs[i], c, logits).with_lora(self.lora())
                })
                .collect();
            let rows = self.model.forward_batch(&chunks, kv)?.to_vec2::<f32>()?;
            let finished: Vec<usize> = (at..end)
                .filter(|&k| last(k))
                .map(|k| pieces[k].0)
                .collect();
            for (i, row) in finished.into_iter().zip(rows) {
                on_last(i, row);
            }
            at = end;
        }
        Ok(())
    }

    /// One token more for every sequence still going, all in one forward pass; `false` once
    /// all have finished.
    pub fn step_batch(&self, b: &mut Batch) -> Result<bool> {
        let going: Vec<usize> = (0..b.seqs.len())
            .filter(|&i| b.seqs[i].finish.is_none())
            .collect();
        if going.is_empty() {
            return Ok(false);
        }
        let feed: Vec<[u32; 1]> = going
            .iter()
            .map(|&i| {
                [b.seqs[i]
                    .next
                    .expect("a sequence going has a token to feed")]
            })
            .collect();
        let chunks: Vec<SeqChunk> = going
            .iter()
            .zip(&feed)
            .map(|(&i, t)| SeqChunk::new(b.seqs[i].id, t, Logits::Last).with_lora(self.lora()))
            .collect();
        let rows = self
            .model
            .forward_batch(&chunks, &mut b.kv)?
            .to_vec2::<f32>()?;
        for (&i, row) in going.iter().zip(rows) {
            let s = &mut b.seqs[i];
            let tok = s.sampler.sample(&row);
            s.accept(self, tok);
        }
        release_finished(b);
        Ok(!b.is_done())
    }
}

/// Gives the KV blocks of finished sequences back to the store.
fn release_finished(b: &mut Batch) {
    for s in b
        .seqs
        .iter_mut()
        .filter(|s| s.finish.is_some() && !s.released)
    {
        s.released = true;
        let _ = b.kv.release(s.id);
    }
}

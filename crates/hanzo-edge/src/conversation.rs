//! The one conversation an [`crate::Edge`] holds: its KV store (allocated once), the tokens
//! at each position, and what was evicted. A new request's prompt (the whole conversation
//! as the client sends it) is matched against it, so only what is new is computed.

use crate::config::Eviction;
use crate::EdgeError;
use hanzo_ml::kv::{KvLayout, PagedKv, SeqId};
use hanzo_ml::Tensor;
use hanzo_transformers::{LanguageModel, Logits, LoraId, SeqChunk};
use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;

pub(crate) struct Conversation {
    kv: PagedKv,
    seq: SeqId,
    /// The token at each position of the store.
    held: Vec<u32>,
    /// Tokens evicted after the pinned prefix so far, and their hash in order: a later
    /// prompt continues this conversation only if it has the same tokens there.
    evicted: usize,
    evicted_hash: DefaultHasher,
    ctx: usize,
    slack: usize,
    /// The LoRA adapters every pass runs with (`EdgeConfig::lora`).
    lora: Option<LoraId>,
}

/// What an eviction did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Evicted {
    pub tokens: usize,
    pub events: usize,
}

impl Conversation {
    pub fn new(
        layout: KvLayout,
        blocks: usize,
        ctx: usize,
        slack: usize,
        lora: Option<LoraId>,
    ) -> Self {
        let mut kv = PagedKv::with_blocks(layout, blocks);
        let seq = kv.add_sequence();
        let _ = kv.keep_behind(seq, slack);
        Self {
            kv,
            seq,
            held: Vec::with_capacity(ctx),
            evicted: 0,
            evicted_hash: DefaultHasher::new(),
            ctx,
            slack,
            lora,
        }
    }

    /// A chunk of this conversation's passes: `tokens` of `seq`, with its adapters.
    fn chunk<'a>(&self, seq: SeqId, tokens: &'a [u32], logits: Logits) -> SeqChunk<'a> {
        SeqChunk::new(seq, tokens, logits).with_lora(self.lora)
    }

    /// Positions in use.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn tokens(&self) -> &[u32] {
        &self.held
    }

    pub fn pinned(&self) -> usize {
        self.kv.pinned(self.seq).unwrap_or(0)
    }

    /// Forgets the conversation (the store keeps its memory).
    pub fn reset(&mut self) {
        let _ = self.kv.release(self.seq);
        self.seq = self.kv.add_sequence();
        let _ = self.kv.keep_behind(self.seq, self.slack);
        self.held.clear();
        self.evicted = 0;
        self.evicted_hash = DefaultHasher::new();
    }

    /// The final-normed hidden state after `tokens` (at most the context), computed in a
    /// sequence of its own beside the conversation when the store has the blocks for it;
    /// otherwise the conversation is set aside first (its next turn is computed afresh).
    /// The sequence's blocks go back to the store.
    pub fn last_hidden(
        &mut self,
        model: &dyn LanguageModel,
        tokens: &[u32],
        chunk: usize,
    ) -> Result<Vec<f32>, EdgeError> {
        if tokens.is_empty() || tokens.len() > self.ctx {
            return Err(EdgeError::Request(format!(
                "an input of {} tokens; 1 to {} fit the context",
                tokens.len(),
                self.ctx
            )));
        }
        if self.kv.layout().blocks_for(tokens.len(), chunk) > self.kv.free_blocks() {
            self.reset();
        }
        let seq = self.kv.add_sequence();
        let mut out = Ok(Vec::new());
        let n = tokens.len().div_ceil(chunk.max(1));
        for (i, c) in tokens.chunks(chunk.max(1)).enumerate() {
            let want = if i + 1 == n {
                Logits::Last
            } else {
                Logits::None
            };
            match model.hidden_batch(&[self.chunk(seq, c, want)], &mut self.kv) {
                Ok(h) if i + 1 == n => out = h.to_vec_flat::<f32>().map_err(EdgeError::from),
                Ok(_) => {}
                Err(e) => {
                    out = Err(e.into());
                    break;
                }
            }
        }
        let _ = self.kv.release(seq);
        out
    }

    /// Makes the store ready for `prompt`, the whole conversation so far: keeps what it
    /// holds of it already, or starts over with the first `keep` tokens pinned. Returns
    /// where in `prompt` the tokens to compute start (at least one is left to compute).
    pub fn prepare(&mut self, prompt: &[u32], keep: usize) -> usize {
        if let Some(at) = self.continues(prompt) {
            return at;
        }
        self.reset();
        let _ = self
            .kv
            .pin(self.seq, keep.min(prompt.len().saturating_sub(1)));
        0
    }

    /// Where the new tokens of `prompt` start if it continues this conversation (after
    /// truncating what differs), or `None`.
    fn continues(&mut self, prompt: &[u32]) -> Option<usize> {
        let k = self.pinned();
        let e = self.evicted;
        if self.held.is_empty() || prompt.len() <= k + e || prompt[..k] != self.held[..k] {
            return None;
        }
        if e > 0 {
            let mut h = DefaultHasher::new();
            prompt[k..k + e].iter().for_each(|&t| h.write_u32(t));
            if h.finish() != self.evicted_hash.finish() {
                return None;
            }
        }
        let tail = &prompt[k + e..];
        let same = tail
            .iter()
            .zip(&self.held[k..])
            .take_while(|(a, b)| a == b)
            .count()
            .min(tail.len() - 1);
        let len = k + same;
        if len < self.held.len() {
            if self.kv.truncate(self.seq, len).is_err() {
                return None;
            }
            self.held.truncate(len);
        }
        Some(k + e + same)
    }

    /// Runs `tokens` at the next positions in chunks of at most `chunk`, evicting first
    /// where they would not fit. Returns the last token's logits (when `logits`) and what
    /// was evicted.
    pub fn feed(
        &mut self,
        model: &dyn LanguageModel,
        tokens: &[u32],
        chunk: usize,
        mode: Eviction,
    ) -> Result<(Option<Tensor>, Evicted), EdgeError> {
        let mut out = None;
        let mut evicted = Evicted::default();
        let chunks = tokens.chunks(chunk.max(1));
        let n = chunks.len();
        for (i, c) in chunks.enumerate() {
            let e = self.make_room(model, c.len(), chunk, mode)?;
            evicted.tokens += e.tokens;
            evicted.events += e.events;
            let want = if i + 1 == n {
                Logits::Last
            } else {
                Logits::None
            };
            let logits = model.forward_batch(&[self.chunk(self.seq, c, want)], &mut self.kv)?;
            self.held.extend_from_slice(c);
            out = Some(logits);
        }
        Ok((out, evicted))
    }

    /// Runs `tokens` at the next positions in one pass, each computed as a decode step
    /// computes it, and returns every row's logits: a speculative check (the pending token,
    /// then the draft). They must fit the context as it is (drafts never cause an eviction).
    pub fn feed_steps(
        &mut self,
        model: &dyn LanguageModel,
        tokens: &[u32],
    ) -> Result<Tensor, EdgeError> {
        if self.held.len() + tokens.len() > self.ctx {
            return Err(EdgeError::Request(format!(
                "a draft check of {} tokens after {} positions overflows the context of {}",
                tokens.len(),
                self.held.len(),
                self.ctx
            )));
        }
        let chunk = self.chunk(self.seq, tokens, Logits::All).as_decode_steps();
        let rows = model.forward_batch(&[chunk], &mut self.kv)?;
        self.held.extend_from_slice(tokens);
        Ok(rows)
    }

    /// Drops the positions from `len` on (turned-down drafts).
    pub fn truncate(&mut self, len: usize) -> Result<(), EdgeError> {
        if len < self.held.len() {
            self.kv.truncate(self.seq, len)?;
            self.held.truncate(len);
        }
        Ok(())
    }

    /// Positions the context has room for before an eviction.
    pub fn room(&self) -> usize {
        self.ctx - self.held.len()
    }

    /// Evicts so that `t` more positions fit: at least what is missing, and half of what
    /// follows the pinned prefix (as llama.cpp's context shift), so that evictions stay rare.
    fn make_room(
        &mut self,
        model: &dyn LanguageModel,
        t: usize,
        chunk: usize,
        mode: Eviction,
    ) -> Result<Evicted, EdgeError> {
        let len = self.held.len();
        if len + t <= self.ctx {
            return Ok(Evicted::default());
        }
        let k = self.pinned();
        let movable = len - k;
        let missing = len + t - self.ctx;
        if mode == Eviction::Off || missing > movable {
            return Err(EdgeError::ContextFull(format!(
                "the conversation needs {} positions, the context holds {}{}",
                len + t,
                self.ctx,
                if mode == Eviction::Off {
                    " (eviction is off)"
                } else {
                    " even after evicting everything but the kept prefix"
                }
            )));
        }
        let n = missing.max(movable / 2).min(movable);
        let t0 = web_time::Instant::now();
        for &t in &self.held[k..k + n] {
            self.evicted_hash.write_u32(t);
        }
        match mode {
            Eviction::Rerotate => {
                model.evict(&mut self.kv, self.seq, n)?;
                self.held.drain(k..k + n);
            }
            Eviction::Recompute => {
                self.kv.truncate(self.seq, k)?;
                let tail: Vec<u32> = self.held[k + n..].to_vec();
                self.held.truncate(k);
                for c in tail.chunks(chunk.max(1)) {
                    let chunk = self.chunk(self.seq, c, Logits::None);
                    model.forward_batch(&[chunk], &mut self.kv)?;
                    self.held.extend_from_slice(c);
                }
            }
            Eviction::Off => unreachable!("refused above"),
        }
        self.evicted += n;
        tracing::debug!(
            "evicted {n} tokens after {k} kept ({mode:?}): {:.1} ms, {} positions left",
            t0.elapsed().as_secs_f64() * 1e3,
            self.held.len()
        );
        Ok(Evicted {
            tokens: n,
            events: 1,
        })
    }
}

//! Speculative decoding with a draft model (`EdgeConfig::draft`): a smaller model with the
//! chat model's vocabulary proposes tokens, one decode step each, and the chat model checks
//! them all in one pass. The draft has a KV store of its own, allocated once and counted in
//! the budget, that follows the conversation's positions: before each draft it keeps what it
//! holds of them and computes the rest (after an eviction, everything past the common start).

use crate::EdgeError;
use hanzo_ml::kv::{KvLayout, PagedKv, SeqId};
use hanzo_ml::Tensor;
use hanzo_transformers::speculative::Draft;
use hanzo_transformers::{LanguageModel, Logits, Sampler, SeqChunk};
use std::path::PathBuf;

/// The draft model of [`crate::EdgeConfig::draft`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraftModel {
    /// A GGUF file with the chat model's vocabulary, token for token (a smaller model of the
    /// same family, or a low-bit copy of the same model made by `hanzo-engine quantize`).
    pub model: PathBuf,
    /// Tokens drafted at most per pass (1 to 16).
    pub max_draft: usize,
}

/// The loaded draft model and its KV store.
pub(crate) struct Drafter {
    model: Box<dyn LanguageModel>,
    kv: PagedKv,
    seq: SeqId,
    /// The token at each position of the store.
    held: Vec<u32>,
    chunk: usize,
    slack: usize,
    /// Tokens of the vocabulary (the logits' rows may be padded past it).
    vocab: usize,
}

impl Drafter {
    pub fn new(
        model: Box<dyn LanguageModel>,
        layout: KvLayout,
        blocks: usize,
        chunk: usize,
        slack: usize,
        vocab: usize,
    ) -> Self {
        let mut kv = PagedKv::with_blocks(layout, blocks);
        let seq = kv.add_sequence();
        let _ = kv.keep_behind(seq, slack);
        Self {
            model,
            kv,
            seq,
            held: Vec::new(),
            chunk: chunk.max(1),
            slack,
            vocab,
        }
    }

    /// Up to `n` tokens the draft model proposes after `history` (the conversation's
    /// positions, then the token about to be fed), each with the distribution `sampler`
    /// drew it from; a token `ends` is proposed last.
    pub fn propose(
        &mut self,
        history: &[u32],
        n: usize,
        sampler: &mut Sampler,
        ends: impl Fn(u32) -> bool,
    ) -> Result<Vec<Draft>, EdgeError> {
        // Keep what the store holds of the history, all but its last token at most (the
        // pass that reads that one gives the first proposal).
        let same = self
            .held
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count()
            .min(history.len().saturating_sub(1));
        let kept = self.truncate(same);
        let mut input = history[kept..].to_vec();
        let mut out = Vec::with_capacity(n);
        while out.len() < n && !input.is_empty() {
            let logits = self.feed(&input)?;
            let row = logits.flatten_all()?.to_vec1::<f32>()?;
            let (t, q) = sampler.propose(&row[..row.len().min(self.vocab.max(1))]);
            out.push((t, q));
            if ends(t) {
                break;
            }
            input = vec![t];
        }
        Ok(out)
    }

    /// Keeps the first `len` positions and returns how many it kept: `len`, or 0 where a
    /// sliding-window layer no longer holds what truncation needs (the store starts over).
    fn truncate(&mut self, len: usize) -> usize {
        if len >= self.held.len() {
            return self.held.len();
        }
        if self.kv.truncate(self.seq, len).is_ok() {
            self.held.truncate(len);
            return len;
        }
        let _ = self.kv.release(self.seq);
        self.seq = self.kv.add_sequence();
        let _ = self.kv.keep_behind(self.seq, self.slack);
        self.held.clear();
        0
    }

    /// Runs `tokens` at the next positions in chunks; the last one's logits.
    fn feed(&mut self, tokens: &[u32]) -> Result<Tensor, EdgeError> {
        let n = tokens.len().div_ceil(self.chunk);
        let mut last = None;
        for (i, c) in tokens.chunks(self.chunk).enumerate() {
            let want = match i + 1 == n {
                true => Logits::Last,
                false => Logits::None,
            };
            let logits = self
                .model
                .forward_batch(&[SeqChunk::new(self.seq, c, want)], &mut self.kv)?;
            self.held.extend_from_slice(c);
            last = Some(logits);
        }
        last.ok_or_else(|| EdgeError::Request("nothing for the draft model to read".into()))
    }
}

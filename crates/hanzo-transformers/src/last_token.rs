//! Embeddings from a decoder language model by last-token pooling: each text's tokens (BOS
//! and EOS as the model's flags say) through every layer and the final norm, the last
//! position's hidden state, L2-normalized — what llama.cpp's `--pooling last` computes and
//! how decoder embedders such as Qwen3-Embedding and gte-Qwen2 are read.

use crate::embedding::{l2_normalize, EmbedOptions, Embeddings};
use crate::models::{Logits, SeqChunk};
use crate::pipeline::{TextGeneration, PREFILL_CHUNK};
use crate::{Error, Result};
use hanzo_ml::kv::PagedKv;

/// Tokens of all texts together that one group of passes takes: bounds the KV store a group
/// allocates. A longer text runs alone.
const GROUP_TOKENS: usize = 2048;

impl TextGeneration {
    /// One unit vector per text, in order, of the model's hidden width. A text longer than
    /// `max_tokens` is [`Error::TooLong`] unless `opts.truncate` (then its first tokens are
    /// kept, ending in EOS where the model appends one); a text with no tokens is
    /// [`Error::Invalid`].
    pub fn embed_last_token(
        &self,
        texts: &[&str],
        max_tokens: usize,
        opts: EmbedOptions,
    ) -> Result<Embeddings> {
        let mut truncated = vec![false; texts.len()];
        let mut encoded = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let mut ids = self.text_tokens(text);
            if ids.is_empty() {
                return Err(Error::Invalid(format!("input {i} has no tokens")));
            }
            if ids.len() > max_tokens {
                if !opts.truncate || max_tokens == 0 {
                    return Err(Error::TooLong {
                        index: i,
                        tokens: ids.len(),
                        limit: max_tokens,
                    });
                }
                let last = *ids.last().expect("non-empty");
                ids.truncate(max_tokens);
                if self.tokenizer.special().add_eos {
                    *ids.last_mut().expect("non-empty") = last;
                }
                truncated[i] = true;
            }
            encoded.push(ids);
        }
        let mut vectors = vec![Vec::new(); texts.len()];
        let mut start = 0;
        while start < encoded.len() {
            let mut end = start + 1;
            let mut total = encoded[start].len();
            while end < encoded.len() && total + encoded[end].len() <= GROUP_TOKENS {
                total += encoded[end].len();
                end += 1;
            }
            let group = self.last_hidden(&encoded[start..end])?;
            for (v, h) in vectors[start..end].iter_mut().zip(group) {
                *v = h;
            }
            start = end;
        }
        for v in &mut vectors {
            l2_normalize(v);
        }
        Ok(Embeddings {
            vectors,
            tokens: encoded.iter().map(Vec::len).collect(),
            truncated,
        })
    }

    /// The final-normed hidden state at the last position of each token run. The runs go
    /// through the model together, a prefill chunk of each per pass, in a KV store of their
    /// own that is dropped at the end.
    fn last_hidden(&self, runs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let layout = self.model.kv_layout();
        let blocks = runs
            .iter()
            .map(|r| layout.blocks_for(r.len(), PREFILL_CHUNK))
            .sum();
        let mut kv = PagedKv::with_blocks(layout, blocks);
        let seqs: Vec<_> = runs.iter().map(|_| kv.add_sequence()).collect();
        let mut out = vec![Vec::new(); runs.len()];
        let longest = runs.iter().map(Vec::len).max().unwrap_or(0);
        let mut done = 0;
        while done < longest {
            let mut batch = Vec::new();
            let mut ending = Vec::new();
            for (i, run) in runs.iter().enumerate() {
                if done >= run.len() {
                    continue;
                }
                let tokens = &run[done..run.len().min(done + PREFILL_CHUNK)];
                let last = done + tokens.len() == run.len();
                let logits = if last { Logits::Last } else { Logits::None };
                batch.push(SeqChunk::new(seqs[i], tokens, logits));
                if last {
                    ending.push(i);
                }
            }
            let h = self.model.hidden_batch(&batch, &mut kv)?.to_vec2::<f32>()?;
            for (i, row) in ending.into_iter().zip(h) {
                out[i] = row;
            }
            done += PREFILL_CHUNK;
        }
        Ok(out)
    }
}

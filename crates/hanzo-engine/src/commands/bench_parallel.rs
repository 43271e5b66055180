//! `hanzo-engine bench --parallel N`: N sequences, each a distinct `-p`-token prompt then `-n`
//! generated tokens, run together over one paged KV store, as a server would run N
//! conversations.
//!
//! The prompts are prefilled first, packed into passes of up to `PREFILL_CHUNK` tokens;
//! then `-n` steps each decode one token of every sequence in one pass (greedy, never
//! stopping early). Like `llama-batched-bench`, the generation speed counts the decode phase
//! only: N × `-n` tokens over its time; a sequence's time to first token is when its
//! prompt's pass ended, from the start.

use anyhow::{bail, Result};
use hanzo_ml::kv::{PagedKv, SeqId};
use hanzo_transformers::pipeline::PREFILL_CHUNK;
use hanzo_transformers::sampler::argmax;
use hanzo_transformers::{LanguageModel, Logits, SeqChunk};
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// One `--parallel` measurement.
pub struct Run {
    pub parallel: usize,
    pub prompt: usize,
    pub generated: usize,
    /// Generated tokens of all sequences per second of the decode phase.
    pub total_tokens_per_second: f64,
    /// The same per sequence.
    pub tokens_per_second: f64,
    /// Mean time from the start to a sequence's first token.
    pub ttft_s: f64,
    /// Prompt tokens per second of the prefill phase.
    pub prefill_tokens_per_second: f64,
    /// Bytes of the KV pool.
    pub kv_bytes: usize,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "test": "parallel",
            "parallel": self.parallel,
            "prompt": self.prompt,
            "generated": self.generated,
            "total_tokens_per_second": self.total_tokens_per_second,
            "tokens_per_second": self.tokens_per_second,
            "ttft_s": self.ttft_s,
            "prefill_tokens_per_second": self.prefill_tokens_per_second,
            "kv_bytes": self.kv_bytes,
        })
    }
}

/// Runs `n` sequences of `prompt` + `generated` tokens together.
pub fn run(
    model: &dyn LanguageModel,
    n: usize,
    prompt: usize,
    generated: usize,
    seed: u64,
) -> Result<Run> {
    if n == 0 || prompt == 0 {
        bail!("--parallel needs at least one sequence and -p of at least 1 token");
    }
    let layout = model.kv_layout();
    let chunk = prompt.min(PREFILL_CHUNK);
    let blocks = n * layout.blocks_for(prompt + generated, chunk);
    let mut kv = PagedKv::with_blocks(layout, blocks);
    let vocab = model.info().vocab_size as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let prompts: Vec<Vec<u32>> = (0..n)
        .map(|_| (0..prompt).map(|_| rng.gen_range(0..vocab)).collect())
        .collect();
    let seqs: Vec<SeqId> = (0..n).map(|_| kv.add_sequence()).collect();
    let mut next = vec![0u32; n];
    let mut ttft = vec![0f64; n];

    // Prefill: whole prompts (or PREFILL_CHUNK pieces of one) packed into passes of up to
    // PREFILL_CHUNK tokens.
    let t0 = Instant::now();
    let mut pieces: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        for s in (0..p.len()).step_by(chunk) {
            pieces.push((i, s..(s + chunk).min(p.len())));
        }
    }
    let mut at = 0;
    while at < pieces.len() {
        let mut batch = Vec::new();
        let mut tokens = 0;
        while at < pieces.len() && (batch.is_empty() || tokens + pieces[at].1.len() <= chunk) {
            let (i, r) = pieces[at].clone();
            tokens += r.len();
            let last = r.end == prompts[i].len();
            batch.push((i, r, last));
            at += 1;
        }
        let chunks: Vec<SeqChunk> = batch
            .iter()
            .map(|(i, r, last)| {
                let logits = if *last { Logits::Last } else { Logits::None };
                SeqChunk::new(seqs[*i], &prompts[*i][r.clone()], logits)
            })
            .collect();
        let logits = model.forward_batch(&chunks, &mut kv)?;
        let done: Vec<usize> = batch
            .iter()
            .filter(|(_, _, last)| *last)
            .map(|b| b.0)
            .collect();
        for (&i, row) in done.iter().zip(argmax_rows(&logits)?) {
            next[i] = row;
            ttft[i] = t0.elapsed().as_secs_f64();
        }
    }
    let prefill_s = t0.elapsed().as_secs_f64();

    // Decode: one token of every sequence per pass (the prompt pass's token first).
    let t1 = Instant::now();
    for _ in 0..generated {
        let tokens: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let chunks: Vec<SeqChunk> = seqs
            .iter()
            .zip(&tokens)
            .map(|(&seq, t)| SeqChunk::new(seq, t, Logits::Last))
            .collect();
        let logits = model.forward_batch(&chunks, &mut kv)?;
        next = argmax_rows(&logits)?;
    }
    let decode_s = t1.elapsed().as_secs_f64();
    let kv_bytes = kv.bytes();
    for s in seqs {
        kv.release(s)?;
    }
    let decoded = (n * generated) as f64;
    let total = if decode_s > 0.0 {
        decoded / decode_s
    } else {
        0.0
    };
    Ok(Run {
        parallel: n,
        prompt,
        generated,
        total_tokens_per_second: total,
        tokens_per_second: total / n as f64,
        ttft_s: ttft.iter().sum::<f64>() / n as f64,
        prefill_tokens_per_second: (n * prompt) as f64 / prefill_s,
        kv_bytes,
    })
}

/// The argmax of every row of `[rows, vocab]` logits.
fn argmax_rows(logits: &hanzo_ml::Tensor) -> Result<Vec<u32>> {
    let vocab = logits.dims()[1].max(1);
    Ok(logits.with_contiguous(|flat: &[f32]| flat.chunks_exact(vocab).map(argmax).collect())?)
}

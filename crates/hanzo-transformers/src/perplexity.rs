//! Perplexity as llama.cpp's `llama-perplexity` computes it. The text is tokenized once
//! (with BOS), cut into non-overlapping CTX-token chunks whose first token is replaced by BOS,
//! and each chunk's second half is scored: PPL = exp(mean NLL), with the standard error of
//! the mean NLL scaled by PPL.

use crate::{Error, Logits, Result, TextGeneration};
use hanzo_ml::kv::KvDtype;

#[derive(Debug, Clone, Copy)]
pub struct Perplexity {
    pub ppl: f64,
    pub stderr: f64,
    pub chunks: usize,
    pub scored: usize,
}

pub fn compute(
    p: &TextGeneration,
    text: &str,
    ctx: usize,
    kv_dtype: KvDtype,
    mut on_chunk: impl FnMut(usize, f64),
) -> Result<Perplexity> {
    if ctx < 4 {
        return Err(Error::Invalid("the context size must be at least 4".into()));
    }
    let mut tokens = p.tokenizer.encode(text, true, false);
    let n_chunks = tokens.len() / ctx;
    if n_chunks == 0 || tokens.len() < 2 * ctx {
        return Err(Error::Invalid(format!(
            "the text has {} tokens; at least 2 × ctx ({}) are needed",
            tokens.len(),
            2 * ctx
        )));
    }
    let bos = p
        .tokenizer
        .special()
        .bos
        .filter(|_| p.tokenizer.special().add_bos);
    let vocab = p.model.info().vocab_size;
    let first = ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for c in 0..n_chunks {
        let chunk = &mut tokens[c * ctx..(c + 1) * ctx];
        let saved = chunk[0];
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let mut cache = p.model.new_cache_as(ctx, kv_dtype);
        cache.set_lora(p.lora());
        let logits = p.model.forward(chunk, &mut cache, Logits::All)?;
        chunk[0] = saved;
        let rows = logits.to_vec_flat::<f32>()?;
        for j in first..ctx - 1 {
            let row = &rows[j * vocab..(j + 1) * vocab];
            let target = tokens[c * ctx + j + 1] as usize;
            let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln() + m;
            let lp = row[target] as f64 - lse;
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        on_chunk(c, (nll / count as f64).exp());
    }
    let mean = nll / count as f64;
    let var = nll2 / count as f64 - mean * mean;
    let ppl = mean.exp();
    let stderr = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        stderr,
        chunks: n_chunks,
        scored: count,
    })
}

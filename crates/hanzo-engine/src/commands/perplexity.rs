//! `hanzo-engine perplexity`: llama.cpp's `llama-perplexity` method over a text file (the
//! computation is `hanzo_transformers::perplexity`).

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use hanzo_ml::kv::KvDtype;
use hanzo_transformers::perplexity::compute;
use std::path::PathBuf;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: super::ModelArgs,
    /// Text file to score.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Tokens per chunk.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// How the KV cache holds keys and values: f16, q8_0 or f32 (llama.cpp's
    /// `--cache-type-k/v`), to measure what a quantized cache costs.
    #[arg(long = "kv-dtype", default_value = "f16")]
    pub kv_dtype: KvDtype,
}

pub fn run(a: Args) -> Result<()> {
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("cannot read {}", a.file.display()))?;
    let p = super::load(&a.model)?;
    // Many forward passes follow, each reading every weight: move them first.
    super::settle_weights(&p)?;
    let t0 = std::time::Instant::now();
    let bar = crate::progress::bar(0, "perplexity");
    let r = compute(&p, &text, a.ctx, a.kv_dtype, |c, running| {
        bar.inc(1);
        eprintln!("[{}] {running:.4}", c + 1);
    })?;
    bar.finish_and_clear();
    eprintln!(
        "{} chunks of {} tokens, {} scored, {:.2} s",
        r.chunks,
        a.ctx,
        r.scored,
        t0.elapsed().as_secs_f64()
    );
    println!("PPL = {:.4} +/- {:.5}", r.ppl, r.stderr);
    Ok(())
}

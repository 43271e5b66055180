//! `hanzo-engine embed`: one embedding per text, as a JSON array of arrays.

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use hanzo_transformers::{EmbedOptions, Embedder};
use std::path::PathBuf;
use std::time::Instant;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A model in the store, or a directory (config.json, model.safetensors, tokenizer.json; sentence-transformers
    /// pooling and normalisation configs when present).
    #[arg(short, long)]
    pub model: PathBuf,
    /// Cut texts longer than the model's maximum (each cut is reported on stderr) instead of
    /// failing.
    #[arg(long)]
    pub truncate: bool,
    #[arg(required = true)]
    pub texts: Vec<String>,
}

pub fn run(mut a: Args) -> Result<()> {
    a.model = crate::store::resolve_model(&a.model)?;
    if !a.model.is_dir() {
        bail!(
            "{}: embeddings need a model directory (safetensors + config.json + tokenizer.json)",
            a.model.display()
        );
    }
    let t0 = Instant::now();
    let e = Embedder::from_dir(&a.model)
        .with_context(|| format!("cannot load {}", a.model.display()))?;
    eprintln!(
        "loaded {} layers, hidden {}, {:?} pooling{} in {:.3} s",
        e.model.config.num_hidden_layers,
        e.model.config.hidden_size,
        e.pooling,
        if e.normalize { ", normalized" } else { "" },
        t0.elapsed().as_secs_f64()
    );
    let texts: Vec<&str> = a.texts.iter().map(String::as_str).collect();
    let t1 = Instant::now();
    let out = e.embed_with(
        &texts,
        EmbedOptions {
            truncate: a.truncate,
        },
    )?;
    for (i, _) in out.truncated.iter().enumerate().filter(|(_, &cut)| cut) {
        eprintln!("text {i} truncated to {} tokens", out.tokens[i]);
    }
    let v = out.vectors;
    eprintln!(
        "embedded {} texts in {:.3} s",
        texts.len(),
        t1.elapsed().as_secs_f64()
    );
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}

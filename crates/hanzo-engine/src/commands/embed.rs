//! `hanzo-engine embed`: one embedding per text, as a JSON array of arrays.

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use hanzo_transformers::Embedder;
use std::path::PathBuf;
use std::time::Instant;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Model directory (config.json, model.safetensors, tokenizer.json; sentence-transformers
    /// pooling and normalisation configs when present).
    #[arg(short, long)]
    pub model: PathBuf,
    #[arg(required = true)]
    pub texts: Vec<String>,
}

pub fn run(a: Args) -> Result<()> {
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
    let v = e.embed(&texts)?;
    eprintln!(
        "embedded {} texts in {:.3} s",
        texts.len(),
        t1.elapsed().as_secs_f64()
    );
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}

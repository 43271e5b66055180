//! `hanzo-engine embed`: one embedding per text, as a JSON array of arrays: from an
//! embedding model, or from a language model by last-token pooling.

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use hanzo_transformers::{EmbedOptions, Embedder, TextGeneration, WeightMode};
use std::path::PathBuf;
use std::time::Instant;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A model in the store, a sentence-transformers directory (config.json,
    /// model.safetensors, tokenizer.json; its pooling and normalisation configs when
    /// present), or a language model (GGUF file or directory), which embeds by last-token
    /// pooling.
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
    let texts: Vec<&str> = a.texts.iter().map(String::as_str).collect();
    let opts = EmbedOptions {
        truncate: a.truncate,
    };
    let t0 = Instant::now();
    let (out, t1) = if a.model.is_dir() && Embedder::is_encoder_dir(&a.model) {
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
        let t1 = Instant::now();
        (e.embed_with(&texts, opts)?, t1)
    } else {
        let p = TextGeneration::load(&a.model, WeightMode::AsStored)
            .with_context(|| format!("cannot load {}", a.model.display()))?;
        let info = p.model.info();
        eprintln!(
            "loaded {} ({} layers, hidden {}), last-token pooling, normalized, in {:.3} s",
            info.architecture,
            info.layers,
            info.hidden_size,
            t0.elapsed().as_secs_f64()
        );
        let t1 = Instant::now();
        (p.embed_last_token(&texts, info.context_length, opts)?, t1)
    };
    for (i, _) in out.truncated.iter().enumerate().filter(|(_, &cut)| cut) {
        eprintln!("text {i} truncated to {} tokens", out.tokens[i]);
    }
    eprintln!(
        "embedded {} texts in {:.3} s",
        texts.len(),
        t1.elapsed().as_secs_f64()
    );
    println!("{}", serde_json::to_string(&out.vectors)?);
    Ok(())
}

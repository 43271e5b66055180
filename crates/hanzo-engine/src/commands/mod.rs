//! The model subcommands of `hanzo-engine`: run, tokenize, embed, perplexity, bench, and the
//! store's list / show / rm.

pub mod bench;
pub mod bench_parallel;
mod bench_spec;
pub mod embed;
pub mod perplexity;
pub mod run;
pub mod speculation;
pub mod store;
pub mod tokenize;

use anyhow::{Context, Result};
use hanzo_ml::quantized::GgmlDType;
use hanzo_transformers::{Adapter, TextGeneration, WeightMode};
use std::path::PathBuf;
use std::time::Instant;

/// Which model to load and how to hold its weights (shared by run, bench, perplexity).
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// A model in the store (see `list`), a GGUF file, or a model directory (config.json,
    /// *.safetensors, tokenizer.json).
    #[arg(short, long)]
    pub model: PathBuf,
    /// Quantize float weights to this type while loading (ISQ), e.g. q8_0, q4_k.
    #[arg(long, value_name = "TYPE", conflicts_with = "f32")]
    pub isq: Option<String>,
    /// Dequantize every weight to f32 (slow; the reference numerics).
    #[arg(long)]
    pub f32: bool,
    /// A LoRA adapter to run with: a GGUF adapter (llama.cpp's) or a PEFT directory
    /// (adapter_config.json + adapter_model.safetensors), its update times SCALE (default
    /// 1). Repeat to apply several at once. The weights stay as stored.
    #[arg(long, value_name = "FILE[:SCALE]")]
    pub lora: Vec<String>,
}

impl ModelArgs {
    fn mode(&self) -> Result<WeightMode> {
        weight_mode(self.isq.as_deref(), self.f32)
    }
}

/// How to hold the weights, from `--isq TYPE` / `--f32`.
pub fn weight_mode(isq: Option<&str>, f32: bool) -> Result<WeightMode> {
    Ok(match (isq, f32) {
        (Some(t), _) => {
            WeightMode::Quantize(GgmlDType::from_name(t).with_context(|| format!("--isq {t}"))?)
        }
        (None, true) => WeightMode::F32,
        (None, false) => WeightMode::AsStored,
    })
}

/// Loads a generation pipeline, reporting the time on stderr.
pub fn load(m: &ModelArgs) -> Result<TextGeneration> {
    let t0 = Instant::now();
    let mode = m.mode()?;
    let path = &crate::store::resolve_model(&m.model)?;
    let spinner = crate::progress::spinner(&format!("loading {}", path.display()));
    let mut p = TextGeneration::load(path, mode)
        .with_context(|| format!("cannot load {}", path.display()))?;
    spinner.finish_and_clear();
    attach_loras(&mut p, &m.lora)?;
    let info = p.model.info();
    eprintln!(
        "loaded {} ({} layers, hidden {}, vocab {}, context {}) in {:.3} s",
        info.architecture,
        info.layers,
        info.hidden_size,
        info.vocab_size,
        info.context_length,
        t0.elapsed().as_secs_f64()
    );
    Ok(p)
}

/// Attaches the adapters of `--lora` specs (`FILE[:SCALE]`) to `p`, applied together.
pub fn attach_loras(p: &mut TextGeneration, specs: &[String]) -> Result<()> {
    if specs.is_empty() {
        return Ok(());
    }
    let adapters = specs
        .iter()
        .map(|s| open_adapter(s).with_context(|| format!("--lora {s}")))
        .collect::<Result<Vec<_>>>()?;
    p.attach_lora(&adapters)?;
    for a in &adapters {
        eprintln!(
            "LoRA adapter {}: {} weights, rank {}, {:.1} MiB",
            a.name,
            a.weights().count(),
            a.rank(),
            a.bytes() as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

/// The LoRA adapter of a `--lora` spec (`FILE[:SCALE]`); an error in a build without them.
pub fn open_adapter(spec: &str) -> Result<Adapter> {
    #[cfg(feature = "lora")]
    return Ok(Adapter::open_spec(spec)?);
    #[cfg(not(feature = "lora"))]
    anyhow::bail!(
        "{spec}: this build leaves out LoRA adapters (--no-default-features); build \
         hanzo-engine with its default features or `--features lora`"
    );
}

/// The weights brought to their steady state ([`TextGeneration::page_in`]); the handle of
/// their move onto huge pages, if any.
pub fn page_in(p: &TextGeneration) -> Result<Option<HugePageMove>> {
    Ok(p.page_in()?)
}

/// The background move of a model's weights onto huge pages: the bytes it moved.
pub type HugePageMove = std::thread::JoinHandle<hanzo_ml::Result<usize>>;

/// Brings the weights to the state generation reaches a moment after its first prompt pass
/// (`page_in`, then waiting for the move), so a measurement sees the steady state.
pub fn settle_weights(p: &TextGeneration) -> Result<()> {
    let Some(handle) = page_in(p)? else {
        return Ok(());
    };
    let t0 = Instant::now();
    match handle.join() {
        Ok(Ok(0)) | Err(_) => {}
        Ok(Ok(bytes)) => eprintln!(
            "weights moved onto 2 MiB pages: {} MiB in {:.3} s",
            bytes >> 20,
            t0.elapsed().as_secs_f64()
        ),
        Ok(Err(e)) => eprintln!("weights stay partly on 4 KiB pages: {e}"),
    }
    Ok(())
}

//! The model subcommands of `hanzo-engine`: run, tokenize, perplexity, bench.

pub mod bench;
pub mod embed;
pub mod perplexity;
pub mod run;
pub mod tokenize;

use anyhow::{bail, Context, Result};
use hanzo_transformers::TextGeneration;
use std::path::Path;
use std::time::Instant;

/// Loads a generation pipeline from `--model` (a GGUF file), reporting the time on stderr.
pub fn load(model: &Path) -> Result<TextGeneration> {
    let t0 = Instant::now();
    if model.is_dir() {
        bail!(
            "{}: model directories (safetensors + config.json) are not supported for \
             generation yet; pass a GGUF file",
            model.display()
        );
    }
    let spinner = progress::spinner(&format!("loading {}", model.display()));
    let p = TextGeneration::from_gguf(model)
        .with_context(|| format!("cannot load {}", model.display()))?;
    spinner.finish_and_clear();
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

pub mod progress {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::io::IsTerminal;

    /// A spinner on stderr when it is a terminal; hidden otherwise.
    pub fn spinner(msg: &str) -> ProgressBar {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new_spinner()
        } else {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
        };
        bar.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid"));
        bar.set_message(msg.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(80));
        bar
    }

    /// A bar over `total` steps on stderr when it is a terminal.
    pub fn bar(total: u64, msg: &str) -> ProgressBar {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new(total)
        } else {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
        };
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {eta}")
                .expect("valid")
                .progress_chars("=> "),
        );
        bar.set_message(msg.to_string());
        bar
    }
}

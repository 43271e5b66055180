//! `hanzo-engine run`: stream a continuation (or a chat reply) to stdout.

use anyhow::{bail, Result};
use clap::Args as ClapArgs;
use hanzo_transformers::{GenerateOptions, Message, SamplingParams};
use std::io::Write;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: super::ModelArgs,
    /// Apply the model's chat template (PROMPT is the user's message).
    #[arg(long)]
    pub chat: bool,
    /// System message (with --chat).
    #[arg(long)]
    pub system: Option<String>,
    /// Tokens to generate at most.
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    pub n: usize,
    /// 0 = greedy.
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Random seed (default: from the clock, printed on stderr).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop before this string (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub spec: super::speculation::SpecArgs,
    pub prompt: String,
}

pub fn run(a: Args) -> Result<()> {
    if a.system.is_some() && !a.chat {
        bail!("--system needs --chat");
    }
    let mut p = super::load(&a.model)?;
    a.spec.attach(&mut p)?;
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    });
    let prompt = if a.chat {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(Message::new("system", s));
        }
        msgs.push(Message::new("user", &a.prompt));
        p.chat_tokens(&msgs)?
    } else {
        p.text_tokens(&a.prompt)
    };
    let opts = a.spec.apply(GenerateOptions {
        max_tokens: a.n,
        sampling: SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repeat_penalty: a.repeat_penalty,
            repeat_last_n: 64,
            presence_penalty: a.presence_penalty,
            frequency_penalty: a.frequency_penalty,
            logit_bias: Vec::new(),
            seed,
        },
        stop: a.stop.clone(),
        ..GenerateOptions::default()
    })?;
    if a.temperature > 0.0 {
        eprintln!("seed {seed}");
    }
    let mut out = std::io::stdout().lock();
    let g = p.generate(&prompt, &opts, &mut |s| {
        // A closed pipe (e.g. `| head`) ends generation quietly.
        out.write_all(s.as_bytes())
            .and_then(|_| out.flush())
            .is_ok()
    })?;
    if a.chat {
        let _ = writeln!(out);
    }
    eprintln!(
        "\nprompt: {} tokens in {:.3} s ({:.1} t/s); generated: {} tokens in {:.3} s ({:.1} t/s); stop: {:?}",
        g.prompt_tokens,
        g.prompt_seconds,
        g.prompt_tokens as f64 / g.prompt_seconds.max(1e-9),
        g.tokens.len(),
        g.generate_seconds,
        g.tokens.len() as f64 / g.generate_seconds.max(1e-9),
        g.finish
    );
    let s = g.speculation;
    if a.spec.active() {
        eprintln!(
            "speculation: {} passes, {} of {} drafted tokens kept ({:.0}%)",
            s.passes,
            s.accepted,
            s.drafted,
            100.0 * s.acceptance()
        );
    }
    Ok(())
}

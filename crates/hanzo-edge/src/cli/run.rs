//! `hanzo-edge run`: one prompt, the reply streamed to stdout, the figures to stderr.

use super::{memory_line, ModelArgs, SampleArgs};
use clap::Args;
use hanzo_edge::{Edge, Event};
use hanzo_transformers::Message;
use std::io::Write;

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// Send the prompt as a user turn through the model's chat template.
    #[arg(long)]
    chat: bool,
    /// A system prompt (with --chat); it stays when older turns are evicted.
    #[arg(long)]
    system: Option<String>,
    /// With tools granted (--allow): the most replies, the tools' calls run between them.
    #[arg(long, default_value_t = 8)]
    max_tool_steps: usize,
    /// The prompt.
    prompt: String,
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let mut edge = Edge::new(a.model.config()?)?;
    let opts = a.sample.options();
    let stream = if a.chat {
        let mut messages = Vec::new();
        if let Some(s) = &a.system {
            messages.push(Message::new("system", s));
        }
        messages.push(Message::new("user", &a.prompt));
        if !edge.config().tools.available().is_empty() {
            return run_tools(&mut edge, &messages, &opts, a.max_tool_steps);
        }
        edge.chat(&messages, &opts)?
    } else {
        edge.complete(&a.prompt, &opts)?
    };
    let mut out = std::io::stdout().lock();
    let mut summary = None;
    for event in stream {
        match event? {
            Event::Text(t) => {
                out.write_all(t.as_bytes())?;
                out.flush()?;
            }
            Event::Done(s) => summary = Some(s),
        }
    }
    writeln!(out)?;
    if let Some(s) = summary {
        if let Some(reason) = s.fallback_reason {
            match (&s.cloud_error, s.cached) {
                (Some(e), _) => eprintln!("cloud ({reason}) did not answer: {e}; answered here"),
                (None, true) => eprintln!("answered from the cloud cache ({reason})"),
                (None, false) => eprintln!("answered by the cloud ({reason})"),
            }
        }
        eprintln!(
            "prompt {} tokens, {} generated ({:?}); load {:.3} s, first token {:.3} s, {:.2} tokens/s; context {}/{}, {} evicted in {} evictions",
            s.prompt_tokens,
            s.completion_tokens,
            s.finish,
            edge.load_seconds(),
            s.time_to_first_token_s,
            s.tokens_per_second,
            s.context_tokens,
            s.max_context_tokens,
            s.evicted_tokens,
            s.evictions
        );
        if edge.config().lookup.is_some() || edge.config().draft.is_some() {
            eprintln!(
                "speculation: {} of {} drafted tokens kept ({:.0}%)",
                s.accepted_tokens,
                s.drafted_tokens,
                100.0 * s.accepted_tokens as f64 / s.drafted_tokens.max(1) as f64
            );
        }
        if let Some(g) = &s.guard {
            eprintln!("{}", super::guard::report_line(g));
        }
    }
    eprintln!("{}", memory_line(&edge));
    Ok(())
}

/// `--chat` with tools: the calls run to completion, each shown on stderr, then the answer.
fn run_tools(
    edge: &mut Edge,
    messages: &[Message],
    opts: &hanzo_transformers::GenerateOptions,
    max_steps: usize,
) -> anyhow::Result<()> {
    let run = edge.chat_with_tools(messages, opts, max_steps)?;
    for c in &run.calls {
        match &c.result {
            Ok(r) => eprintln!("tool {}({}): {} bytes", c.name, c.arguments, r.len()),
            Err(e) => eprintln!("tool {}({}): refused: {e}", c.name, c.arguments),
        }
    }
    println!("{}", run.reply);
    eprintln!(
        "{} replies, {} tool calls{}",
        run.steps,
        run.calls.len(),
        if run.stopped_at_limit {
            " (stopped at --max-tool-steps)"
        } else {
            ""
        }
    );
    eprintln!("{}", memory_line(edge));
    Ok(())
}

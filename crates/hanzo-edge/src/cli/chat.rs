//! `hanzo-edge chat`: an interactive conversation on the terminal. Each line is a user turn;
//! the status line shows the context in use and the memory against the budget.

use super::{memory_line, ModelArgs, SampleArgs};
use clap::Args;
use hanzo_edge::{Edge, Event};
use hanzo_transformers::Message;
use std::io::{BufRead, Write};

#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// A system prompt; it stays when older turns are evicted.
    #[arg(long)]
    system: Option<String>,
}

pub fn chat(a: ChatArgs) -> anyhow::Result<()> {
    let mut edge = Edge::new(a.model.config()?)?;
    let opts = a.sample.options();
    eprintln!(
        "budget {:.1} MiB ({}); context {} tokens. An empty line or end of input quits; /reset starts over.",
        edge.budget().total() as f64 / 1048576.0,
        edge.budget().breakdown,
        edge.config().max_context_tokens
    );
    let mut messages: Vec<Message> = a.system.iter().map(|s| Message::new("system", s)).collect();
    let system_turns = messages.len();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if line.trim() == "/reset" {
            messages.truncate(system_turns);
            edge.reset();
            continue;
        }
        messages.push(Message::new("user", line.trim_end()));
        let mut reply = String::new();
        let mut summary = None;
        for event in edge.chat(&messages, &opts)? {
            match event? {
                Event::Text(t) => {
                    out.write_all(t.as_bytes())?;
                    out.flush()?;
                    reply.push_str(&t);
                }
                Event::Done(s) => summary = Some(s),
            }
        }
        if let Some(s) = summary {
            eprintln!(
                "\n[context {}/{} tokens, {} evicted; {} of {} prompt tokens computed; {:.2} tokens/s; {}]",
                s.context_tokens,
                s.max_context_tokens,
                s.evicted_tokens,
                s.computed_prompt_tokens,
                s.prompt_tokens,
                s.tokens_per_second,
                memory_line(&edge)
            );
            if let Some(g) = s.guard.as_ref().filter(|g| g.flagged.is_some()) {
                eprintln!("[{}]", super::guard::report_line(g));
            }
        }
        messages.push(Message::new("assistant", &reply));
    }
    Ok(())
}

//! `hanzo-engine`: the command-line entry point.

use clap::{Parser, Subcommand};
use hanzo_engine::{commands, quantize, server, store};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hanzo-engine",
    version,
    about = "Hanzo Engine: run, serve and convert models"
)]
struct Cli {
    /// Worker threads (default: all cores).
    #[arg(short = 't', long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve models over the OpenAI API (chat, completions, structured output, tools,
    /// embeddings, rerank, metrics), and MCP's tools with --mcp-port / --mcp-enabled.
    Serve(server::Args),
    /// Serve the models' MCP tools (hanzo_infer, hanzo_embed, hanzo_list_models) on stdio.
    #[cfg(feature = "mcp")]
    Mcp(server::McpArgs),
    /// Generate text from a prompt (streams the continuation to stdout).
    Run(commands::run::Args),
    /// Print a text's token ids as a JSON array.
    Tokenize(commands::tokenize::Args),
    /// Embed texts with a BERT-family model (prints a JSON array of vectors).
    Embed(commands::embed::Args),
    /// Perplexity of a text file, computed like llama.cpp's llama-perplexity.
    Perplexity(commands::perplexity::Args),
    /// Prompt-processing and generation speed, like llama-bench.
    Bench(commands::bench::Args),
    /// Quantize a GGUF or safetensors model into a GGUF file.
    Quantize(quantize::Args),
    /// Download a model into the store (a URL, hf://ORG/REPO, ORG/REPO[:QUANT],
    /// ollama://NAME[:TAG] or a local path); resumes an interrupted download.
    Pull(store::PullArgs),
    /// List the models in the store.
    List(commands::store::ListArgs),
    /// Show a model's architecture, parameters, tensors, tokenizer and chat template.
    Show(commands::store::ShowArgs),
    /// Remove models from the store.
    Rm(commands::store::RmArgs),
}

/// Logs to stderr. `HANZO_LOG` takes a level (`debug`) or comma-separated `target=level`
/// directives (`info,tower_http=debug`); the default is `info`.
fn init_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let default = Targets::new().with_default(LevelFilter::INFO);
    let filter = match std::env::var("HANZO_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse::<Targets>().unwrap_or_else(|e| {
            eprintln!("warning: HANZO_LOG={spec:?} is not a log filter ({e}); logging at info");
            default
        }),
        _ => default,
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .with(filter)
        .init();
}

fn main() -> ExitCode {
    hanzo_ml::cpu::reuse_large_buffers();
    let cli = Cli::parse();
    init_logging();
    if let Some(n) = cli.threads {
        if let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
        {
            eprintln!("error: cannot start {n} threads: {e}");
            return ExitCode::FAILURE;
        }
    }
    let result = match cli.command {
        Command::Serve(args) => server::run(args),
        #[cfg(feature = "mcp")]
        Command::Mcp(args) => server::run_mcp(args),
        Command::Run(args) => commands::run::run(args),
        Command::Tokenize(args) => commands::tokenize::run(args),
        Command::Embed(args) => commands::embed::run(args),
        Command::Perplexity(args) => commands::perplexity::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Pull(args) => store::pull(args),
        Command::List(args) => commands::store::list(args),
        Command::Show(args) => commands::store::show(args),
        Command::Rm(args) => commands::store::rm(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

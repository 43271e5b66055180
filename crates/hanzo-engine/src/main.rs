//! `hanzo-engine`: the command-line entry point.

use clap::{Parser, Subcommand};
use hanzo_engine::quantize;
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
    /// Quantize a GGUF or safetensors model into a GGUF file.
    Quantize(quantize::Args),
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HANZO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

fn main() -> ExitCode {
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
        Command::Quantize(args) => quantize::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

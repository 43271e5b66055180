//! `hanzo-edge`: the on-device runtime's command line (`run`, `chat`, `serve`).

mod cli;
mod serve;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    hanzo_ml::cpu::reuse_large_buffers();
    let args = cli::Cli::parse();
    cli::init_logging();
    match cli::main(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

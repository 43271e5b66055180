//! Helpers shared by the engine's end-to-end tests: fixtures and running the binary.
#![allow(dead_code)]

use std::process::{Command, Output};

#[path = "../../../../scripts/fixture_path.rs"]
mod fixture_path;
pub use fixture_path::fixture;

/// Runs the `hanzo-engine` binary built for these tests.
pub fn engine(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hanzo-engine"))
        .args(args)
        .output()
        .expect("run hanzo-engine")
}

//! How the tests start the `hanzo-edge` binary, and how long they run.
#![allow(dead_code)] // each test file uses its part

use hanzo_transformers::{GenerateOptions, SamplingParams};
use std::process::Command;

/// The `hanzo-edge` binary as a command: through `$HANZO_TEST_RUNNER` when the tests run
/// under an emulator (`qemu-aarch64 -L /usr/aarch64-linux-gnu` for the AArch64 build, whose
/// binary the host cannot start by itself), with warnings only in the log.
pub fn edge_command() -> Command {
    let bin = env!("CARGO_BIN_EXE_hanzo-edge");
    let runner = std::env::var("HANZO_TEST_RUNNER").unwrap_or_default();
    let mut runner = runner.split_whitespace();
    let mut command = match runner.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(runner).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    command.env("HANZO_LOG", "warn");
    command
}

/// `$HANZO_TEST_QUICK`: the smallest fixture and short replies only, for emulated runs.
pub fn quick() -> bool {
    std::env::var_os("HANZO_TEST_QUICK").is_some()
}

/// Greedy decoding of at most `max_tokens`, the other options at their defaults.
pub fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ..GenerateOptions::default()
    }
}

/// `hanzo-engine`, next to this test's `hanzo-edge` (the workspace's test run builds both).
pub fn engine_bin() -> std::path::PathBuf {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_hanzo-edge"))
        .with_file_name(format!("hanzo-engine{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: this test needs it (cargo build -p hanzo-engine --profile test, or cargo test --workspace)",
        bin.display()
    );
    bin
}

/// The peak and the budget (MiB) of the `memory: peak … of a … budget` line `hanzo-edge run`
/// prints on stderr, and the line itself; panics when it is missing.
pub fn peak_and_budget(stderr: &str) -> (f64, f64, String) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("memory: peak"))
        .unwrap_or_else(|| panic!("no memory line in {stderr}"));
    let nums: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1], line.to_string())
}

/// `hanzo-engine quantize INPUT OUT ARGS...`; panics with its error output when it fails.
pub fn quantize(input: &std::path::Path, out: &std::path::Path, args: &[&str]) {
    let run = Command::new(engine_bin())
        .arg("quantize")
        .arg(input)
        .arg(out)
        .args(args)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "hanzo-engine quantize: {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

//! Helpers shared by the engine's end-to-end tests: fixtures and running the binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Path of a fixture (fetched and verified by scripts/fixtures.py if not cached yet).
pub fn fixture(id: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fixtures.py");
    let out = Command::new("python3")
        .args([script.to_str().unwrap(), "--print-path", id])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Runs the `hanzo-engine` binary built for these tests.
pub fn engine(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hanzo-engine"))
        .args(args)
        .output()
        .expect("run hanzo-engine")
}

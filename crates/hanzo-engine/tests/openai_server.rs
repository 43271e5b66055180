//! The server end to end: `tests/server/*.py` start `hanzo-engine serve` on loopback ports and
//! drive it with the official `openai` Python package (installed by `scripts/test.sh`).

mod common;

use common::fixture;
use std::process::Command;

/// The features this binary was built with (on by default; the lean build's tests of them
/// are skipped or check the refusal).
const FEATURES: &[&str] = &[
    #[cfg(feature = "structured-output")]
    "structured-output",
    #[cfg(feature = "mcp")]
    "mcp",
];

#[test]
fn openai_clients_get_what_the_api_promises() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/server");
    let deps = Command::new("python3")
        .args(["-c", "import openai, pytest"])
        .status()
        .expect("python3");
    assert!(
        deps.success(),
        "the server tests need Python's openai and pytest packages: \
         python3 -m pip install openai pytest (scripts/test.sh installs them)"
    );
    // HANZO_SERVER_TESTS narrows the run to some of the files (scripts/test.sh runs the whole
    // suite on the default build and only the files that tell the builds apart on the lean
    // `--no-default-features` build).
    let files: Vec<String> = match std::env::var("HANZO_SERVER_TESTS") {
        Ok(list) if !list.trim().is_empty() => list
            .split_whitespace()
            .map(|f| format!("{dir}/{f}"))
            .collect(),
        _ => vec![dir.to_string()],
    };
    let status = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(&files)
        .env("HANZO_ENGINE_BIN", env!("CARGO_BIN_EXE_hanzo-engine"))
        .env("HANZO_QWEN", fixture("qwen2"))
        .env("HANZO_MINILM", fixture("minilm"))
        .env("HANZO_SMOLLM2", fixture("smollm2"))
        .env("HANZO_FEATURES", FEATURES.join(","))
        .status()
        .expect("run pytest");
    assert!(
        status.success(),
        "the server's API tests failed (output above)"
    );
}

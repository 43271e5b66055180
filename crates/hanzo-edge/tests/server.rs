//! `hanzo-edge serve` and `hanzo-edge mcp` end to end: `tests/server/*.py` start them and
//! drive them with the official `openai` and `mcp` Python packages (installed by
//! `scripts/test.sh`).

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use std::process::Command;

#[test]
fn openai_clients_get_the_local_api() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/server");
    let deps = Command::new("python3")
        .args(["-c", "import openai, pytest, mcp"])
        .status()
        .expect("python3");
    assert!(
        deps.success(),
        "the server tests need Python's openai, pytest and mcp packages: \
         python3 -m pip install openai pytest mcp (scripts/test.sh installs them)"
    );
    let status = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", dir])
        .env("HANZO_EDGE_BIN", env!("CARGO_BIN_EXE_hanzo-edge"))
        .env("HANZO_SMOLLM", fixture_path::fixture("smollm2"))
        // The cloud fallback's tests run a real hanzo-engine, built beside hanzo-edge by the
        // workspace's test run, with Qwen2.5-Coder as the cloud's model.
        .env("HANZO_ENGINE_BIN", common::engine_bin())
        .env("HANZO_QWEN", fixture_path::fixture("qwen2"))
        .status()
        .expect("run pytest");
    assert!(
        status.success(),
        "the local API's tests failed (output above)"
    );
}

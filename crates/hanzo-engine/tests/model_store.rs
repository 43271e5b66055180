//! The model store end to end: `tests/store/*.py` start loopback stand-ins for a file server,
//! the Hugging Face hub and an Ollama registry, then drive `hanzo-engine pull / list / show /
//! rm / run` against a fresh store and check the results with the `gguf` Python package.

mod common;

use common::fixture;
use std::process::Command;

#[test]
fn pull_list_show_rm() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/store");
    let deps = Command::new("python3")
        .args(["-c", "import gguf, pytest"])
        .status()
        .expect("python3");
    assert!(
        deps.success(),
        "the store tests need Python's gguf and pytest packages (scripts/test.sh installs them)"
    );
    let status = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", dir])
        .env("HANZO_ENGINE_BIN", env!("CARGO_BIN_EXE_hanzo-engine"))
        .env("HANZO_SMOLLM", fixture("smollm2"))
        .env("HANZO_GEMMA", fixture("gemma3"))
        .env("HANZO_MINILM", fixture("minilm"))
        .status()
        .expect("run pytest");
    assert!(
        status.success(),
        "the model store tests failed (output above)"
    );
}

//! The LoRA test adapters, shared by the crates' tests through `#[path]`: written by
//! `scripts/lora_adapters.py write` with NumPy (PEFT directories `attn`, `mlp` and their GGUF
//! forms `attn.gguf`, `mlp.gguf`), which fails unless they hash to what hanzo-transformers'
//! `tests/reference/smollm2-135m-lora-peft.json` recorded. For SmolLM2-135M.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes the adapters into `dir` (a folder of the test's own) and returns it.
pub fn write(dir: PathBuf) -> PathBuf {
    // Every crate lives at crates/<name>, two levels below the repository root.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let ok = Command::new("python3")
        .arg(root.join("scripts/lora_adapters.py"))
        .arg("write")
        .arg(&dir)
        .arg(root.join("crates/hanzo-transformers/tests/reference/smollm2-135m-lora-peft.json"))
        .status()
        .expect("python3 is needed to write the test adapters")
        .success();
    assert!(ok, "scripts/lora_adapters.py write failed");
    dir
}

//! The Rust side of `gguf_to_hf.py`, shared by the crates' tests through `#[path]`: a GGUF
//! fixture written as a Hugging Face model directory.

use std::path::Path;
use std::process::Command;

/// Writes `gguf`'s model to directory `out` (f32 safetensors, config.json, tokenizer.json);
/// panics with the script's error output when it fails.
pub fn write(gguf: &Path, out: &Path) {
    // Every crate lives at crates/<name>, two levels below the repository root.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gguf_to_hf.py");
    let run = Command::new("python3")
        .arg(script)
        .arg(gguf)
        .arg(out)
        .output()
        .expect("python3 is needed to write a model directory");
    assert!(
        run.status.success(),
        "gguf_to_hf.py (pip install numpy safetensors gguf, or run scripts/test.sh):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

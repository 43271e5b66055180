//! The Rust side of `fixtures.py`, shared by the crates' tests through `#[path]`: the cached,
//! checksum-verified path of a fixture, fetched on first use.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Path of fixture `id` (see `scripts/fixtures.py`); panics with the script's error output
/// when it cannot be fetched.
pub fn fixture(id: &str) -> PathBuf {
    // Every crate lives at crates/<name>, two levels below the repository root.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fixtures.py");
    let out = Command::new("python3")
        .args([script.to_str().unwrap(), "--print-path", id])
        .output()
        .expect("python3 is needed to fetch fixtures");
    assert!(
        out.status.success(),
        "fetching fixture {id} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

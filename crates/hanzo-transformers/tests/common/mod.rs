//! Helpers shared by the model tests: fixture paths and the reference data.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../../../scripts/fixture_path.rs"]
mod fixture_path;
pub use fixture_path::fixture;

pub fn reference_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(name)
}

/// A JSON file from tests/reference.
pub fn reference(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(reference_path(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Runs a converter from scripts/ on fixture `id`, writing `out` (a name under the test
/// target's temporary folder), and returns the output path.
pub fn convert_fixture(script: &str, flags: &[&str], id: &str, out: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let src = fixture(id);
    let dst = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out);
    let ok = Command::new("python3")
        .arg(&script)
        .args(flags)
        .args([&src, &dst])
        .status()
        .expect("python3")
        .success();
    assert!(ok, "{} failed", script.display());
    dst
}

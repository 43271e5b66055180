//! Qwen2.5-Coder-0.5B-Instruct (`qwen2`: QKV biases, untied Q8_0 output, half-split RoPE)
//! against PyTorch / transformers running the same GGUF dequantized to f32
//! (tests/reference/qwen2.5-coder-0.5b-q4_k_m-transformers.json, recorded by
//! scripts/reference/transformers_logits.py). As for SmolLM2: with every weight in f32 we
//! compute what transformers computes; as stored, 8-bit activations move logits by tenths.

mod common;

use common::{assert_matches_reference, assert_tracks_reference};
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{load_gguf_with, WeightMode};

const REFERENCE: &str = "qwen2.5-coder-0.5b-q4_k_m-transformers.json";

fn gguf() -> GgufFile {
    GgufFile::open(common::fixture("qwen2")).unwrap()
}

#[test]
fn gguf_in_f32_computes_what_transformers_computes() {
    let model = load_gguf_with(&gguf(), WeightMode::F32).unwrap();
    assert_matches_reference(model.as_ref(), REFERENCE, 0.05, "f32");
}

#[test]
fn gguf_as_stored_tracks_transformers() {
    let model = load_gguf_with(&gguf(), WeightMode::AsStored).unwrap();
    assert_tracks_reference(model.as_ref(), REFERENCE, "Q4_K_M + Q8 activations");
}

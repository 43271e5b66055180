//! Qwen2.5-Coder-0.5B-Instruct (`qwen2`: QKV biases, untied Q8_0 output, half-split RoPE)
//! against PyTorch / transformers running the same GGUF dequantized to f32
//! (tests/reference/qwen2.5-coder-0.5b-q4_k_m-transformers.json, recorded by
//! scripts/reference/transformers_logits.py). As for SmolLM2: with every weight in f32 we
//! compute what transformers computes; as stored, 8-bit activations move logits by tenths.

mod common;

use common::{assert_quantized_drift, compare};
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{load_gguf_with, WeightMode};

const REFERENCE: &str = "qwen2.5-coder-0.5b-q4_k_m-transformers.json";

fn gguf() -> GgufFile {
    GgufFile::open(common::fixture("qwen2")).unwrap()
}

#[test]
fn gguf_in_f32_computes_what_transformers_computes() {
    let model = load_gguf_with(&gguf(), WeightMode::F32).unwrap();
    let d = compare(model.as_ref(), REFERENCE, 0.0);
    eprintln!(
        "f32: max |Δ logit| {:.4}, {}/32 teacher-forced argmax agree",
        d.worst, d.agree
    );
    assert!(d.worst < 0.05, "logit drift {}", d.worst);
    assert_eq!(d.agree, 32);
}

#[test]
fn gguf_as_stored_tracks_transformers() {
    let model = load_gguf_with(&gguf(), WeightMode::AsStored).unwrap();
    let d = compare(model.as_ref(), REFERENCE, 0.3);
    eprintln!(
        "Q4_K_M + Q8 activations: max |Δ logit| {:.3}, rms {:.3}, {}/32 agree",
        d.worst, d.rms, d.agree
    );
    assert_quantized_drift(&d);
}

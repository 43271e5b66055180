//! Architecture features that no downloadable fixture exercises, on tiny random-weight models
//! (2 layers, hidden 64, vocab 96) written by scripts/tiny_models.py, against the logits
//! transformers computes for them (tests/reference/tiny-models-transformers.json, recorded by
//! the same script): Llama 3.1's RoPE scaling, Mistral's sliding window, Qwen3's QK-norm and
//! Qwen2's QKV biases. Each feature moves the reference's logits by 1.6 to 7.8 when left out,
//! far past the tolerance here.

mod common;

use common::row;
use hanzo_transformers::{load_dir, Logits, WeightMode};
use std::path::PathBuf;
use std::sync::OnceLock;

const REFERENCE: &str = "tiny-models-transformers.json";

/// The models, written once per test run and checked against the reference's weights.
fn models_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| common::write_checked("tiny_models.py", "tiny-models", REFERENCE))
}

/// Every position's logits against transformers'. The KV cache holds f16 (as llama.cpp's
/// does), so logits move by up to a few thousandths.
fn check(name: &str) {
    let r = common::reference(REFERENCE);
    let ids = common::ids(&r["token_ids"]);
    let want: Vec<f32> = r["models"][name]["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
        })
        .collect();
    let model = load_dir(&models_dir().join(name), WeightMode::AsStored).unwrap();
    let mut cache = model.new_cache(ids.len());
    let got = row(&model.forward(&ids, &mut cache, Logits::All).unwrap());
    assert_eq!(got.len(), want.len());
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!(
        "{name}: max |Δ logit| {worst:.2e} over {} logits",
        got.len()
    );
    assert!(
        worst < 0.02,
        "{name}: logits differ from transformers' by {worst}"
    );
}

#[test]
fn llama3_rope_scaling() {
    check("llama3-rope-scaling");
}

#[test]
fn mistral_sliding_window() {
    check("mistral-sliding-window");
}

#[test]
fn qwen3_qk_norm() {
    check("qwen3-qk-norm");
}

#[test]
fn qwen2_qkv_biases() {
    check("qwen2-qkv-bias");
}

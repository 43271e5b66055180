//! `hanzo-engine quantize` end to end on the real fixtures.

mod common;

use common::{engine, fixture};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use hanzo_ml::quantized::GgmlDType;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// llama.cpp made the Gemma fixture with its Q4_K_M mixture; our planner, given the same
/// tensor list, must pick the same type for every tensor (Q6_K on the more-bits attention V
/// and FFN down layers, Q5_0 where 640-wide rows rule out Q4_K, Q8_0 for the tied embedding).
#[test]
fn q4_k_m_plan_reproduces_llama_cpp_on_gemma3() {
    let path = fixture("gemma3");
    let file = GgufFile::open(&path).unwrap();
    let plan = hanzo_engine::quantize::plan_for(&path, "Q4_K_M").unwrap();
    let mut differ = Vec::new();
    for ((name, ours), info) in plan.iter().zip(file.tensor_infos()) {
        assert_eq!(name, &info.name);
        if *ours != info.dtype {
            differ.push(format!("{name}: ours {ours}, llama.cpp {}", info.dtype));
        }
    }
    assert!(
        differ.is_empty(),
        "{} tensors differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[test]
fn requantizes_gemma3_to_q8_0_keeping_metadata() {
    let src = fixture("gemma3");
    let out = tmp("gemma3-q8_0.gguf");
    let r = engine(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q8_0",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let a = GgufFile::open(&src).unwrap();
    let b = GgufFile::open(&out).unwrap();
    for (k, v) in a.metadata() {
        if k != "general.file_type" {
            assert_eq!(b.get(k), Some(v), "{k}");
        }
    }
    assert_eq!(b.get("general.file_type"), Some(&Value::U32(7)));
    assert_eq!(a.tensor_infos().len(), b.tensor_infos().len());
    for (ta, tb) in a.tensor_infos().iter().zip(b.tensor_infos()) {
        assert_eq!(ta.name, tb.name);
        assert_eq!(ta.shape, tb.shape);
        let want = if ta.shape.rank() >= 2 {
            GgmlDType::Q8_0
        } else {
            GgmlDType::F32
        };
        assert_eq!(tb.dtype, want, "{}", ta.name);
    }
    // Q8_0 of the dequantized Q4_K/Q5_0/Q6_K values is within Q8_0's own error of them.
    let x = a
        .tensor("blk.3.ffn_down.weight")
        .unwrap()
        .dequantize_f32()
        .unwrap();
    let y = b
        .tensor("blk.3.ffn_down.weight")
        .unwrap()
        .dequantize_f32()
        .unwrap();
    let rms =
        |v: &[f32]| (v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    let diff: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
    assert!(rms(&diff) < 0.01 * rms(&x), "{} vs {}", rms(&diff), rms(&x));
    std::fs::remove_file(out).ok();
}

#[test]
fn quantizes_safetensors_directory() {
    let dir = fixture("minilm");
    let out = tmp("minilm-q4_k_m.gguf");
    let r = engine(&[
        "quantize",
        dir.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "q4_k_m",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(
        f.get("general.architecture").and_then(|v| v.as_str()),
        Some("bert")
    );
    let ty = |n: &str| {
        f.tensor_infos()
            .iter()
            .find(|t| t.name.ends_with(n))
            .unwrap()
            .dtype
    };
    // 384-wide rows cannot hold 256-blocks: Q4_K falls back to Q5_0; 1536-wide rows take Q4_K.
    assert_eq!(
        ty("encoder.layer.0.attention.self.query.weight"),
        GgmlDType::Q5_0
    );
    assert_eq!(ty("encoder.layer.0.output.dense.weight"), GgmlDType::Q4K);
    assert_eq!(
        ty("encoder.layer.0.attention.self.query.bias"),
        GgmlDType::F32
    );
    assert_eq!(ty("embeddings.LayerNorm.weight"), GgmlDType::F32);
    assert_eq!(ty("embeddings.position_embeddings.weight"), GgmlDType::F32);
    std::fs::remove_file(out).ok();
}

#[test]
fn bad_invocations_fail_cleanly() {
    let out = tmp("never.gguf");
    let r = engine(&[
        "quantize",
        "/nonexistent.gguf",
        out.to_str().unwrap(),
        "--type",
        "Q4_0",
    ]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("/nonexistent.gguf"));

    let src = fixture("gemma3");
    let r = engine(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q9_X",
    ]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("unknown quantization type"));

    // A truncated model is rejected before anything is written.
    let bad = tmp("truncated.gguf");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    let r = engine(&[
        "quantize",
        bad.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q4_0",
    ]);
    assert!(!r.status.success());
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("beyond the end"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(!out.exists());
    std::fs::remove_file(bad).ok();
}

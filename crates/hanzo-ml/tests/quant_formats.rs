//! Block formats against independent references:
//! - dequantization of random blocks of every type equals the `gguf` Python package's
//!   dequantization bit for bit;
//! - quantization of the types `gguf` implements (Q4_0..Q8_0, F16, BF16) equals its output
//!   byte for byte;
//! - k-quant, IQ4_NL and IQ4_XS quantization equals ggml's C reference (bytes recorded in
//!   tests/data/ggml_quants, produced by ggml's `ggml_quantize_chunk`), and its error is within
//!   1% of ggml's on larger synthetic and real weight matrices;
//! - quantization under an importance matrix equals ggml's C reference with the same
//!   importance (tests/data/ggml_quants/imatrix), for every type whose quantizer uses one.

mod common;

use hanzo_ml::quantized::{GgmlDType, QTensor};
use hanzo_ml::Tensor;
use std::collections::HashMap;

fn reference() -> HashMap<String, Tensor> {
    hanzo_ml::io::read_npz(common::gguf_reference_npz())
        .unwrap()
        .into_iter()
        .collect()
}

fn bytes(t: &Tensor) -> Vec<u8> {
    t.to_vec1::<u8>().unwrap()
}

fn floats(t: &Tensor) -> Vec<f32> {
    t.to_vec1::<f32>().unwrap()
}

#[test]
fn dequantization_matches_gguf_package_bit_for_bit() {
    let r = reference();
    let types = [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
        "F16", "BF16", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M",
        "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4",
    ];
    for name in types {
        let dt = GgmlDType::from_name(name).unwrap();
        let raw = bytes(&r[&format!("{name}_blocks")]);
        let want = floats(&r[&format!("{name}_deq")]);
        let q = QTensor::from_bytes(dt, want.len(), &raw).unwrap();
        let got = q.dequantize_f32().unwrap();
        let mismatches: Vec<usize> = (0..want.len())
            .filter(|&i| {
                got[i].to_bits() != want[i].to_bits() && !(got[i].is_nan() && want[i].is_nan())
            })
            .collect();
        assert!(
            mismatches.is_empty(),
            "{name}: {} of {} values differ, first at {}: {} vs {}",
            mismatches.len(),
            want.len(),
            mismatches[0],
            got[mismatches[0]],
            want[mismatches[0]]
        );
    }
}

#[test]
fn quantization_matches_gguf_package_byte_for_byte() {
    let r = reference();
    let x = floats(&r["quant_input"]);
    let types = [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16", "TQ1_0", "TQ2_0", "MXFP4",
    ];
    for name in types {
        let dt = GgmlDType::from_name(name).unwrap();
        let want = bytes(&r[&format!("{name}_quant")]);
        let got = QTensor::quantize_f32(&x, (8, 256), dt).unwrap();
        let diff = got.data().iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(got.data().len(), want.len(), "{name}");
        assert_eq!(diff, 0, "{name}: {diff} of {} bytes differ", want.len());
    }
}

/// The C reference's bytes for `synthetic_weights(8, 512, 7)`; regenerate with the harness
/// described in tests/data/ggml_quants/README.md.
fn ggml_bytes(name: &str) -> Vec<u8> {
    let p = common::crate_dir().join(format!("tests/data/ggml_quants/{name}.bin"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_quantizer_matches_ggml_c_reference_bytes() {
    let x = common::synthetic_weights(8, 512, 7);
    for name in [
        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl",
        "iq4_xs", "iq3_xxs", "iq3_s", "iq2_s", "iq1_m",
    ] {
        let dt = GgmlDType::from_name(name).unwrap();
        let want = ggml_bytes(name);
        let got = QTensor::quantize_f32(&x, (8, 512), dt).unwrap();
        assert_eq!(got.data().len(), want.len(), "{name}");
        let bs = dt.type_size();
        let blocks_differ = got
            .data()
            .chunks(bs)
            .zip(want.chunks(bs))
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            blocks_differ,
            0,
            "{name}: {blocks_differ} of {} blocks differ from ggml",
            want.len() / bs
        );
    }
}

/// One importance per column, heavy-tailed like an imatrix's mean squared activations, with
/// some zeros (columns no activation reached).
fn importances(cols: usize, seed: u64) -> Vec<f32> {
    common::synthetic_weights(1, cols, seed)
        .iter()
        .enumerate()
        .map(|(j, &v)| {
            if j % 97 == 0 {
                0.0
            } else {
                (50.0 * v) * (50.0 * v)
            }
        })
        .collect()
}

/// The importance-matrix case: `synthetic_weights(8, 512, 7)` with row 2's elements 96..128
/// zeroed (an all-zero group), and `importances(512, 13)`.
fn weighted_case() -> (Vec<f32>, Vec<f32>) {
    let mut x = common::synthetic_weights(8, 512, 7);
    x[2 * 512 + 96..2 * 512 + 128].fill(0.0);
    (x, importances(512, 13))
}

/// The types ggml will not quantize without an importance matrix.
const NEED_IMPORTANCE: [&str; 3] = ["iq2_xxs", "iq2_xs", "iq1_s"];

#[test]
fn importance_weighted_quantizers_match_ggml_c_reference_bytes() {
    let (x, qw) = weighted_case();
    for name in [
        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl",
        "iq4_xs", "iq3_xxs", "iq3_s", "iq2_xxs", "iq2_xs", "iq2_s", "iq1_s", "iq1_m",
    ] {
        let dt = GgmlDType::from_name(name).unwrap();
        let want = ggml_bytes(&format!("imatrix/{name}"));
        let got = QTensor::quantize_f32_weighted(&x, (8, 512), dt, &qw).unwrap();
        assert_eq!(got.data().len(), want.len(), "{name}");
        let bs = dt.type_size();
        let differ: Vec<usize> = (0..want.len() / bs)
            .filter(|&i| got.data()[i * bs..][..bs] != want[i * bs..][..bs])
            .collect();
        assert!(
            differ.is_empty(),
            "{name}: {} of {} blocks differ from ggml, the first {}",
            differ.len(),
            want.len() / bs,
            differ[0]
        );
        // The importance changes the result wherever ggml's quantizer uses it; the types
        // whose quantizer needs one refuse to work without.
        match QTensor::quantize_f32(&x, (8, 512), dt) {
            Ok(plain) => assert_eq!(plain.data() == got.data(), name == "q8_0", "{name}"),
            Err(e) => {
                assert!(NEED_IMPORTANCE.contains(&name), "{name}: {e}");
                assert!(e.to_string().contains("importance matrix"), "{name}: {e}");
            }
        }
    }
}

#[test]
fn importance_weighted_quantization_lowers_the_weighted_error() {
    let (x, qw) = weighted_case();
    let weighted_rmse = |q: &QTensor| {
        let y = q.dequantize_f32().unwrap();
        let s: f64 = (0..x.len())
            .map(|i| qw[i % 512] as f64 * ((x[i] - y[i]) as f64).powi(2))
            .sum();
        s.sqrt()
    };
    for dt in [
        GgmlDType::Q4_0,
        GgmlDType::Q2K,
        GgmlDType::Q4K,
        GgmlDType::IQ4XS,
    ] {
        let plain = QTensor::quantize_f32(&x, (8, 512), dt).unwrap();
        let weighted = QTensor::quantize_f32_weighted(&x, (8, 512), dt, &qw).unwrap();
        let (p, w) = (weighted_rmse(&plain), weighted_rmse(&weighted));
        assert!(w < p, "{dt}: weighted error {w:.4e} not below {p:.4e}");
    }
}

#[test]
fn importance_must_fit_the_tensor() {
    let x = vec![0.5f32; 4 * 256];
    let q = |n: usize, shape: &[usize]| {
        QTensor::quantize_f32_weighted(&x, shape, GgmlDType::Q4K, &vec![1.0; n])
    };
    assert!(q(256, &[4, 256]).is_ok());
    // Two experts of two rows each, one importance row per expert.
    assert!(q(512, &[2, 2, 256]).is_ok());
    for (n, shape) in [(255, [4, 256]), (768, [4, 256]), (0, [4, 256])] {
        let err = q(n, &shape).unwrap_err().to_string();
        assert!(err.contains("importance"), "{n}: {err}");
    }
    assert!(QTensor::quantize_f32_weighted(&x, (4, 256), GgmlDType::IQ2XXS, &[1.0; 256]).is_ok());
    assert!(QTensor::quantize_f32_weighted(&x, (4, 256), GgmlDType::IQ2XXS, &[1.0; 255]).is_err());
}

fn quant_rmse(x: &[f32], rows: usize, cols: usize, dt: GgmlDType) -> f64 {
    let q = QTensor::quantize_f32(x, (rows, cols), dt).unwrap();
    common::rmse(x, &q.dequantize_f32().unwrap())
}

/// ggml's RMSE on the same data, recorded by the C harness (tests/data/ggml_quants/README.md).
fn ggml_rmse() -> serde_json::Value {
    let p = common::crate_dir().join("tests/data/ggml_quants/rmse.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn quantization_error_within_one_percent_of_ggml_on_synthetic_weights() {
    let refs = ggml_rmse();
    let x = common::synthetic_weights(64, 4096, 11);
    for (name, want) in refs["synthetic_64x4096_seed11"].as_object().unwrap() {
        let dt = GgmlDType::from_name(name).unwrap();
        let got = quant_rmse(&x, 64, 4096, dt);
        let want = want.as_f64().unwrap();
        assert!(
            (got / want - 1.0).abs() <= 0.01,
            "{name}: rmse {got:.6e} vs ggml {want:.6e}"
        );
    }
}

#[test]
fn quantization_error_within_one_percent_of_ggml_on_real_weights() {
    let (x, rows, cols) = minilm_ffn_out();
    let refs = ggml_rmse();
    for (name, want) in refs["minilm_layer0_output_dense"].as_object().unwrap() {
        let dt = GgmlDType::from_name(name).unwrap();
        let got = quant_rmse(&x, rows, cols, dt);
        let want = want.as_f64().unwrap();
        assert!(
            (got / want - 1.0).abs() <= 0.01,
            "{name}: rmse {got:.6e} vs ggml {want:.6e}"
        );
    }
}

/// all-MiniLM-L6-v2's layer-0 FFN output projection: [384, 1536] f32, with its rows and columns.
fn minilm_ffn_out() -> (Vec<f32>, usize, usize) {
    let dir = common::fixture("minilm");
    let st = hanzo_ml::io::safetensors::load(dir.join("model.safetensors")).unwrap();
    let w = st
        .iter()
        .find(|(k, _)| k.ends_with("encoder.layer.0.output.dense.weight"))
        .map(|(_, t)| t.clone())
        .expect("weight present");
    let (rows, cols) = w.dims2().unwrap();
    (w.to_vec_flat::<f32>().unwrap(), rows, cols)
}

/// The MiniLM matrix of `minilm_ffn_out` and `importances(1536, 17)`.
fn minilm_weighted_case() -> (Vec<f32>, usize, usize, Vec<f32>) {
    let (x, rows, cols) = minilm_ffn_out();
    (x, rows, cols, importances(cols, 17))
}

/// 64-bit FNV-1a, the fingerprint recorded for ggml's bytes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn importance_weighted_quantizers_match_ggml_on_real_weights() {
    // Each type's bytes from ggml's `ggml_quantize_chunk` on the MiniLM case, fingerprinted
    // (tests/data/ggml_quants/README.md): a few hundred rows of real weights reach the rare
    // branches and float orderings a small synthetic matrix misses.
    let (x, rows, cols, qw) = minilm_weighted_case();
    let p = common::crate_dir().join("tests/data/ggml_quants/minilm_imatrix_fnv1a.json");
    let want: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let mut wrong = Vec::new();
    for (name, hash) in want.as_object().unwrap() {
        let dt = GgmlDType::from_name(name).unwrap();
        let got = QTensor::quantize_f32_weighted(&x, (rows, cols), dt, &qw).unwrap();
        if format!("{:016x}", fnv1a(got.data())) != hash.as_str().unwrap() {
            wrong.push(name.as_str());
        }
    }
    assert!(wrong.is_empty(), "differ from ggml: {wrong:?}");
}

#[test]
fn more_bits_give_less_error() {
    let x = common::synthetic_weights(16, 1024, 3);
    let e = |n: &str| quant_rmse(&x, 16, 1024, GgmlDType::from_name(n).unwrap());
    let order = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_0"];
    for w in order.windows(2) {
        assert!(e(w[0]) > e(w[1]), "{} should be worse than {}", w[0], w[1]);
    }
    assert!(e("F16") < e("Q8_0") && e("F32") == 0.0);
}

#[test]
fn misshapen_input_is_an_error_not_a_panic() {
    let x = vec![0f32; 300];
    assert!(QTensor::quantize_f32(&x, (300,), GgmlDType::Q4K).is_err());
    assert!(QTensor::quantize_f32(&x, (10, 30), GgmlDType::Q8_0).is_err());
    assert!(QTensor::quantize_f32(&x, (2, 256), GgmlDType::Q4K).is_err());
    assert!(QTensor::from_bytes(GgmlDType::Q4_0, 32, &[0u8; 17]).is_err());
    assert!(GgmlDType::from_u32(4).is_err());
    assert!(GgmlDType::from_u32(28)
        .unwrap_err()
        .to_string()
        .contains("F64"));
    // Types written only under an importance matrix say so without one.
    let err = QTensor::quantize_f32(&[0.5; 256], (1, 256), GgmlDType::IQ2XXS).unwrap_err();
    assert!(err.to_string().contains("importance matrix"), "{err}");
}

/// Writes the synthetic inputs above as raw little-endian f32 for the C reference harness:
/// `HANZO_DUMP_DIR=/tmp/x cargo test --test quant_formats -- --ignored dump`.
#[test]
#[ignore]
fn dump_synthetic_inputs() {
    let dir = std::path::PathBuf::from(std::env::var("HANZO_DUMP_DIR").expect("HANZO_DUMP_DIR"));
    for (name, rows, cols, seed) in [
        ("small_8x512_seed7", 8, 512, 7),
        ("synthetic_64x4096_seed11", 64, 4096, 11),
    ] {
        let x = common::synthetic_weights(rows, cols, seed);
        std::fs::write(
            dir.join(format!("{name}.f32")),
            bytemuck::cast_slice::<f32, u8>(&x),
        )
        .unwrap();
    }
    let (x, qw) = weighted_case();
    let (minilm, _, _, minilm_qw) = minilm_weighted_case();
    for (name, v) in [
        ("imatrix_input_8x512", x),
        ("imatrix_importance_512", qw),
        ("minilm_384x1536", minilm),
        ("minilm_importance_1536", minilm_qw),
    ] {
        std::fs::write(
            dir.join(format!("{name}.f32")),
            bytemuck::cast_slice::<f32, u8>(&v),
        )
        .unwrap();
    }
}

//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn repo_root() -> PathBuf {
    crate_dir().join("../..")
}

/// Runs `python3 args...`, panicking with its stderr and a hint when it fails.
pub fn python(args: &[&str]) {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3 is needed for the reference tests");
    assert!(
        out.status.success(),
        "python3 {args:?} failed (pip install numpy gguf, or run scripts/test.sh):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The gguf-package reference blocks: `$HANZO_GGUF_REF` when set (scripts/test.sh), else
/// generated now into the test's temp dir.
pub fn gguf_reference_npz() -> PathBuf {
    if let Some(p) = std::env::var_os("HANZO_GGUF_REF") {
        return PathBuf::from(p);
    }
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gguf_blocks.npz");
    let script = crate_dir().join("tests/gguf_ref/gen.py");
    python(&[script.to_str().unwrap(), "blocks", out.to_str().unwrap()]);
    out
}

#[path = "../../../../scripts/fixture_path.rs"]
mod fixture_path;
#[allow(unused_imports)] // Not every test binary reads fixtures.
pub use fixture_path::fixture;

/// Deterministic weight-like data: Gaussian rows whose scale varies by row, with 1% of
/// values 8x larger (outliers are what make the k-quant scale search matter). xorshift64*
/// and Box-Muller, so any language can regenerate the same numbers.
pub fn synthetic_weights(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.max(1);
    let mut uniform = move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let scale = 0.02 * (1 + r % 7) as f64;
        for _ in 0..cols {
            let (u1, u2) = (uniform(), uniform());
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let outlier = if uniform() < 0.01 { 8.0 } else { 1.0 };
            out.push((z * scale * outlier) as f32);
        }
    }
    out
}

pub fn rmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let s: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    (s / a.len() as f64).sqrt()
}

/// A weight matrix of type `dt`: `synthetic_weights` quantized, or, for the types we read but
/// cannot write (the IQ1/IQ2 lattices), random blocks with a finite f16 scale of
/// weight-like size.
pub fn weight_tensor(
    dt: hanzo_ml::quantized::GgmlDType,
    rows: usize,
    cols: usize,
    seed: u64,
) -> hanzo_ml::quantized::QTensor {
    use hanzo_ml::quantized::{GgmlDType, QTensor};
    if dt.quantize_unsupported().is_none() {
        let w = synthetic_weights(rows, cols, seed);
        return QTensor::quantize_f32(&w, (rows, cols), dt).unwrap();
    }
    let (bs, ts) = (dt.block_size(), dt.type_size());
    let mut s = seed.max(1);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut bytes: Vec<u8> = (0..rows * cols / bs * ts).map(|_| next() as u8).collect();
    for block in bytes.chunks_exact_mut(ts) {
        let d = half::f16::from_f32(0.002 + (next() % 1000) as f32 * 1e-5).to_bits();
        if dt == GgmlDType::IQ1M {
            // The scale's four nibbles sit in the top bits of the last four words.
            for k in 0..4 {
                let at = ts - 8 + 2 * k;
                let w = u16::from_le_bytes([block[at], block[at + 1]]) & 0x0FFF;
                let w = w | (d >> (4 * k) & 15) << 12;
                block[at..at + 2].copy_from_slice(&w.to_le_bytes());
            }
        } else {
            block[..2].copy_from_slice(&d.to_le_bytes());
        }
    }
    QTensor::from_bytes(dt, (rows, cols), &bytes).unwrap()
}

/// A GGUF file's bytes, written by our writer: `meta`, then `tensors` in order.
pub fn gguf_bytes(
    meta: &[(String, hanzo_ml::quantized::gguf::Value)],
    tensors: &[(String, hanzo_ml::quantized::QTensor)],
) -> Vec<u8> {
    use hanzo_ml::quantized::gguf::{write_gguf, TensorSpec};
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|(name, t)| TensorSpec {
            name: name.clone(),
            dtype: t.dtype(),
            shape: t.shape().clone(),
        })
        .collect();
    let mut out = Vec::new();
    write_gguf(&mut out, meta, &specs, |i| {
        Ok(std::borrow::Cow::Borrowed(tensors[i].1.data()))
    })
    .expect("writing to memory");
    out
}

//! AFQ against MLX itself: `tests/afq_ref/gen.py` runs `mlx.core.quantize` and `dequantize`
//! (PyPI `mlx[cpu]`) on f16 and bf16 weights for every bit width and group size; ours must
//! give the same packed levels, scales and biases bit for bit, and the same dequantized
//! values, and read MLX's tensors back to the same weights.

mod common;

use hanzo_ml::io::safetensors::MmapedSafetensors;
use hanzo_ml::quantized::format::afq::{AFQ_BITS, AFQ_GROUPS};
use hanzo_ml::quantized::{AfqScale, AfqType, GgmlDType, QTensor};
use hanzo_ml::{DType, Tensor};
use std::path::Path;

fn reference() -> MmapedSafetensors {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("afq_ref.safetensors");
    let script = common::crate_dir().join("tests/afq_ref/gen.py");
    common::python(&[script.to_str().unwrap(), out.to_str().unwrap()]);
    MmapedSafetensors::new(&out).unwrap()
}

fn u16s(t: &Tensor) -> Vec<u16> {
    match t.dtype() {
        DType::F16 => t
            .flatten_all()
            .unwrap()
            .to_vec1::<half::f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::BF16 => t
            .flatten_all()
            .unwrap()
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        d => panic!("scales of dtype {d:?}"),
    }
}

fn le_bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words(t: &Tensor) -> Vec<u8> {
    t.flatten_all()
        .unwrap()
        .to_vec1::<u32>()
        .unwrap()
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

#[test]
fn quantize_and_dequantize_equal_mlx_bit_for_bit() {
    let st = reference();
    let mut checked = 0;
    for (name, scale) in [("f16", AfqScale::F16), ("bf16", AfqScale::BF16)] {
        let w = st.get(&format!("{name}.w")).unwrap();
        let (n, k) = w.dims2().unwrap();
        for bits in AFQ_BITS {
            for group in AFQ_GROUPS {
                let t = AfqType::new(bits, group, scale).unwrap();
                let key = format!("{name}.{bits}.{group}");
                let (q, s, b, deq) = ["q", "s", "b", "deq"]
                    .map(|p| st.get(&format!("{key}.{p}")).unwrap())
                    .into();
                let ours = QTensor::quantize(&w, GgmlDType::Afq(t)).unwrap();
                let (oq, os, ob) = ours.to_mlx().unwrap();
                assert_eq!(oq, words(&q), "{key}: packed levels differ from MLX's");
                assert_eq!(os, le_bytes(&u16s(&s)), "{key}: scales differ from MLX's");
                assert_eq!(ob, le_bytes(&u16s(&b)), "{key}: biases differ from MLX's");

                // MLX's tensors read back are our tensor, byte for byte.
                let theirs =
                    QTensor::from_mlx(t, (n, k), &words(&q), &u16s(&s), &u16s(&b)).unwrap();
                assert_eq!(theirs.data(), ours.data(), "{key}");

                // Dequantized: MLX computes `scale · q` and then `+ bias` in the weights'
                // dtype, rounding both; ours in f32. So within a rounding of the product (at
                // most the group's largest magnitude) and one of the sum.
                let want = deq
                    .to_dtype(DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap();
                let got = theirs.dequantize_f32().unwrap();
                let ulp = if scale == AfqScale::BF16 {
                    1.0 / 256.0
                } else {
                    1.0 / 2048.0
                };
                for (gi, (a, b)) in got.chunks(group).zip(want.chunks(group)).enumerate() {
                    let big = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                    for (x, y) in a.iter().zip(b) {
                        assert!(
                            (x - y).abs() <= (2.0 * big + y.abs()) * ulp,
                            "{key} group {gi}: {x} vs MLX {y}"
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * AFQ_BITS.len() * AFQ_GROUPS.len());
}

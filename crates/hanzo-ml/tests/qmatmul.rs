//! QMatMul against dequantize-then-f32-matmul, for every quantized type and for awkward
//! shapes (output rows not a multiple of any chunk size, k a multiple of the block size only,
//! one and several activation rows).
//!
//! Two references:
//! - exact: the activations are passed through the same 8-bit quantization QMatMul applies
//!   (Q8_0/Q8_1/Q8_K), then multiplied in f64 — QMatMul must agree to float rounding (1e-5
//!   of the output scale), which pins down the integer kernels;
//! - plain: f32 activations, no quantization — the error must stay below 1% of
//!   `‖w_r‖·‖x‖` (the Cauchy–Schwarz bound on the output; what activation quantization costs).

mod common;

use hanzo_ml::quantized::format::*;
use hanzo_ml::quantized::kernels::Kernels;
use hanzo_ml::quantized::{GgmlDType, QMatMul, QTensor};
use hanzo_ml::{Device, Tensor};

/// Every weight type QMatMul multiplies in its stored form: the quantized ones (Q8_K is only
/// ever an activation type) and the two-byte floats.
fn quant_types() -> impl Iterator<Item = GgmlDType> {
    GgmlDType::ALL.into_iter().filter(|&dt| {
        (dt.is_quantized() && dt != GgmlDType::Q8K)
            || matches!(dt, GgmlDType::F16 | GgmlDType::BF16)
    })
}

/// The activation row exactly as QMatMul sees it after quantization to `act`.
fn through_dot_type(act: GgmlDType, x: &[f32]) -> Vec<f32> {
    fn go<B: GgmlBlock>(x: &[f32]) -> Vec<f32> {
        let mut q = vec![<B as bytemuck::Zeroable>::zeroed(); x.len() / B::BLOCK_SIZE];
        B::quantize(x, &mut q);
        let mut out = vec![0f32; x.len()];
        B::dequantize(&q, &mut out);
        out
    }
    hanzo_ml::with_block_type!(act, B => go::<B>(x))
}

/// For types multiplied against Q8_1: per block, the stored f16 `s` minus the exact sum of the
/// dequantized activations.
fn q8_1_sum_rounding(dt: GgmlDType, act: GgmlDType, x: &[f32]) -> Option<Vec<f64>> {
    if !matches!(dt, GgmlDType::Q4_1 | GgmlDType::Q5_1) || act != GgmlDType::Q8_1 {
        return None;
    }
    let mut q = vec![<BlockQ8_1 as bytemuck::Zeroable>::zeroed(); x.len() / 32];
    BlockQ8_1::quantize(x, &mut q);
    Some(
        q.iter()
            .map(|b| {
                let exact: f64 = b.qs.iter().map(|&v| v as f64 * b.d.to_f32() as f64).sum();
                b.s.to_f32() as f64 - exact
            })
            .collect(),
    )
}

fn block_mins(w: &QTensor, dt: GgmlDType, row: usize, k: usize) -> Vec<f32> {
    let per_row = k / 32;
    let range = row * per_row..(row + 1) * per_row;
    match dt {
        GgmlDType::Q4_1 => w.blocks::<BlockQ4_1>().unwrap()[range]
            .iter()
            .map(|b| b.m.to_f32())
            .collect(),
        GgmlDType::Q5_1 => w.blocks::<BlockQ5_1>().unwrap()[range]
            .iter()
            .map(|b| b.m.to_f32())
            .collect(),
        _ => unreachable!(),
    }
}

fn check(dt: GgmlDType, n: usize, k: usize, m: usize) {
    check_with(dt, n, k, m, |q| QMatMul::from_qtensor(q).unwrap());
}

fn check_with(dt: GgmlDType, n: usize, k: usize, m: usize, make: fn(QTensor) -> QMatMul) {
    let x = common::synthetic_weights(m, k, 99 + m as u64);
    let qw = common::weight_tensor(dt, n, k, 5 + n as u64);
    let wd = qw.dequantize_f32().unwrap();
    let qw_blocks = qw.clone();
    let mm = make(qw);
    let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
    let got = mm.forward(&xt).unwrap();
    assert_eq!(got.dims(), &[m, n]);
    let got = got.to_vec_flat::<f32>().unwrap();
    for j in 0..m {
        let xj = &x[j * k..(j + 1) * k];
        let act = mm.activation_dtype(m).unwrap();
        let xq = through_dot_type(act, xj);
        let s_fix = q8_1_sum_rounding(dt, act, xj);
        let mut scale = 0f64;
        let mut worst_exact = 0f64;
        let mut worst_plain = 0f64;
        let norm = |v: &[f32]| v.iter().map(|&a| a as f64 * a as f64).sum::<f64>().sqrt();
        for r in 0..n {
            let wr = &wd[r * k..(r + 1) * k];
            let mut exact: f64 = wr.iter().zip(&xq).map(|(&a, &b)| a as f64 * b as f64).sum();
            if let Some(fix) = &s_fix {
                // Q4_1/Q5_1 fold their minimum in through Q8_1's f16 block sum `s`.
                let mins = block_mins(&qw_blocks, dt, r, k);
                exact += mins
                    .iter()
                    .zip(fix)
                    .map(|(&m, &f)| m as f64 * f)
                    .sum::<f64>();
            }
            let plain: f64 = wr.iter().zip(xj).map(|(&a, &b)| a as f64 * b as f64).sum();
            scale = scale.max(plain.abs());
            let g = got[j * n + r] as f64;
            worst_exact = worst_exact.max((g - exact).abs());
            worst_plain = worst_plain.max((g - plain).abs() / (norm(wr) * norm(xj)));
        }
        assert!(worst_exact <= 1e-5 * scale, "{dt} n={n} k={k} m={m} row {j}: exact-reference error {worst_exact:e} (scale {scale:e})");
        assert!(
            worst_plain <= 1e-2,
            "{dt} n={n} k={k} m={m} row {j}: relative error vs f32 {worst_plain:e}"
        );
    }
}

#[test]
fn qmatmul_matches_dequantized_matmul_for_every_type_and_odd_shapes() {
    for dt in quant_types() {
        // 96 or 768: a multiple of the block size only (float weights: a ragged 75).
        let k_small = if dt.block_size() == 1 {
            75
        } else {
            dt.block_size() * 3
        };
        for (n, k) in [(37, k_small), (19, 512 * dt.block_size().max(32) / 32)] {
            for m in [1, 3, 17, 40] {
                check(dt, n, k, m);
            }
        }
        if dt.block_size() == 1 {
            // Float prefill: rows past a block of 16, columns past a multiple of 8, and
            // every count of activation rows past its tiles of 6.
            for m in 18..24 {
                check(dt, 21, 1100, m);
            }
            // Tasks of more than 16 rows (the BF16 pair panel's blocks of 32 rows, a ragged
            // last block), and an odd width whose last column has no pair.
            check(dt, 200, 1100, 19);
            check(dt, 130, 75, 25);
        }
    }
}

/// The types repacked eight rows at a time.
const INTERLEAVED: [GgmlDType; 7] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::IQ4NL,
    GgmlDType::MXFP4,
];

/// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4 repacked eight rows at a time (the decode kernel, the
/// small-batch tiles of 4 and 1 activation rows, and the prefill panels from 16 rows on),
/// against the same references.
#[test]
fn interleaved_types_match_dequantized_matmul() {
    for dt in INTERLEAVED {
        for (n, k) in [(8, 32), (40, 96), (72, 512)] {
            for m in [1, 2, 3, 4, 5, 9, 15, 16, 17, 40] {
                check_with(dt, n, k, m, |q| QMatMul::interleave(&q).unwrap());
            }
        }
    }
}

/// IQ4_XS repacked eight rows at a time, and IQ3_S and IQ3_XXS transcoded into its layout
/// (against Q8_K below the panels' rows, through the panels from 16 rows on), against the
/// same references; their repacked rows read back exactly as stored.
#[test]
fn interleaved_iq4xs_layout_matches_dequantized_matmul() {
    for dt in [GgmlDType::IQ4XS, GgmlDType::IQ3S, GgmlDType::IQ3XXS] {
        for (n, k) in [(8, 256), (40, 512), (16, 768)] {
            for m in [1, 3, 4, 9, 15, 16, 17, 40] {
                check_with(dt, n, k, m, |q| {
                    let w = QMatMul::interleave(&q).unwrap();
                    assert!(w.is_repacked());
                    w
                });
            }
        }
        let (n, k) = (24, 512);
        let q = QTensor::quantize_f32(&common::synthetic_weights(n, k, 5), (n, k), dt).unwrap();
        let ids = [0u32, 23, 7, 8, 7];
        let want = q
            .dequantize_rows(&ids)
            .unwrap()
            .to_vec_flat::<f32>()
            .unwrap();
        let got = QMatMul::interleave(&q)
            .unwrap()
            .dequantize_rows(&ids)
            .unwrap();
        assert_eq!(got.to_vec_flat::<f32>().unwrap(), want, "{dt}");
        // A width that is not whole groups of eight rows is not repacked.
        let q = QTensor::quantize_f32(&common::synthetic_weights(12, k, 5), (12, k), dt).unwrap();
        let err = QMatMul::interleave(&q).unwrap_err().to_string();
        assert!(err.contains("groups of 8 rows"), "{err}");
    }
}

/// Activations `[52, 512]` (more rows than any type's GEMM panel threshold) and, for every
/// quantized type, a `[40, 512]` weight as stored and as `from_arc` chooses (maybe to repack).
fn rows_and_weights() -> (Tensor, Vec<(GgmlDType, [QMatMul; 2])>) {
    let (n, k, m) = (40, 512, 52);
    let x = Tensor::from_vec(common::synthetic_weights(m, k, 5), (m, k), &Device::Cpu).unwrap();
    let ws = quant_types()
        .map(|dt| {
            let q = std::sync::Arc::new(common::weight_tensor(dt, n, k, 9));
            let stored = QMatMul::from_arc_as_stored(q.clone()).unwrap();
            (dt, [stored, QMatMul::from_arc(q).unwrap()])
        })
        .collect();
    (x, ws)
}

/// The first place where `a` and its prefix in `b` differ in any bit.
fn first_difference(a: &Tensor, b: &[f32]) -> Option<usize> {
    let a = a.to_vec_flat::<f32>().unwrap();
    a.iter()
        .zip(b)
        .position(|(a, b)| a.to_bits() != b.to_bits())
}

/// `forward_rows_alone`: every row of a many-row product equals, bit for bit, the product of
/// that row alone, for stored and repacked weights, with more rows than any type's GEMM panel
/// threshold (where `forward` takes the panels and their Q8_0 activations instead). Below a
/// weight's threshold, `forward` itself computes every row so.
#[test]
fn rows_alone_equal_one_row_products_bit_for_bit() {
    let (x, weights) = rows_and_weights();
    let m = x.dims()[0];
    for (dt, ws) in weights {
        for w in ws {
            // The one-row products first: they repack a weight `from_arc` chose to repack.
            let alone: Vec<f32> = (0..m)
                .flat_map(|j| {
                    let row = w.forward(&x.narrow(0, j, 1).unwrap()).unwrap();
                    row.to_vec_flat::<f32>().unwrap()
                })
                .collect();
            let below = w.panels_from() - 1;
            assert!(below < m, "{dt:?}: raise m past {}", w.panels_from());
            let rows = w.forward_rows_alone(&x, true).unwrap();
            assert_eq!(first_difference(&rows, &alone), None, "{dt:?}: rows alone");
            let short = w.forward(&x.narrow(0, 0, below).unwrap()).unwrap();
            let differ = first_difference(&short, &alone);
            assert_eq!(differ, None, "{dt:?}: {below} rows");
        }
    }
}

/// A prompt's product is the same bit for bit before a weight's repack and after it (the
/// repacked panels hold the stored panels' levels, scales and mins), so a prompt's logits do
/// not depend on whether a decode step came first.
#[test]
fn prompts_give_the_same_numbers_before_and_after_a_repack() {
    let (x, weights) = rows_and_weights();
    for (dt, [stored, w]) in weights {
        let before = stored
            .forward_prompt(&x)
            .unwrap()
            .to_vec_flat::<f32>()
            .unwrap();
        w.forward(&x.narrow(0, 0, 1).unwrap()).unwrap();
        let after = w.forward_prompt(&x).unwrap();
        assert_eq!(first_difference(&after, &before), None, "{dt:?}");
    }
}

/// From `panels_from` rows on, each row of a product is the same however many rows come
/// with it (the batch puts runs that long together), before and after a repack.
#[test]
fn from_the_panel_threshold_rows_do_not_depend_on_their_company() {
    let (x, weights) = rows_and_weights();
    for (dt, ws) in weights {
        for (w, label) in ws.iter().zip(["stored", "not yet repacked"]) {
            let from = w.panels_from();
            let all = w.forward_prompt(&x).unwrap().to_vec_flat::<f32>().unwrap();
            let few = w.forward_prompt(&x.narrow(0, 0, from).unwrap()).unwrap();
            let differ = first_difference(&few, &all);
            assert_eq!(differ, None, "{dt:?} {label}: {from} rows");
        }
    }
}

/// `forward_panels` gives a few rows what they get inside a product of `panels_from` rows or
/// more (the pieces of a long run split across passes), for stored weights, weights before
/// their repack and after it.
#[test]
fn forced_panels_give_a_few_rows_what_a_long_run_gives_them() {
    let (x, weights) = rows_and_weights();
    let m = x.dims()[0];
    for (dt, ws) in weights {
        for (w, label) in ws.iter().zip(["stored", "repackable"]) {
            for repacked in [false, true] {
                if repacked {
                    // A one-row product repacks a weight `from_arc` chose to repack.
                    w.forward(&x.narrow(0, 0, 1).unwrap()).unwrap();
                }
                let all = w.forward_prompt(&x).unwrap().to_vec_flat::<f32>().unwrap();
                let n = all.len() / m;
                for (at, rows) in [(0, 1), (3, 1), (5, 7), (m - 9, 9)] {
                    let few = w.forward_panels(&x.narrow(0, at, rows).unwrap(), repacked);
                    let differ = first_difference(&few.unwrap(), &all[at * n..]);
                    assert_eq!(
                        differ, None,
                        "{dt:?} {label} repacked={repacked}: {at}+{rows}"
                    );
                }
            }
        }
    }
}

/// A weight `from_arc` chose to repack is multiplied as stored until its first decode
/// product, then repacked; its outputs are the same before and after.
#[test]
fn repacking_waits_for_the_first_decode_product() {
    let (n, k) = (64, 256);
    let q = QTensor::quantize_f32(&common::synthetic_weights(n, k, 3), (n, k), GgmlDType::Q5_0)
        .unwrap();
    let lazy = QMatMul::from_arc(std::sync::Arc::new(q.clone())).unwrap();
    if !matches!(lazy, QMatMul::Interleaved(_)) {
        eprintln!("repacking does not pay on this CPU; nothing to check");
        return;
    }
    let stored = QMatMul::from_arc_as_stored(std::sync::Arc::new(q)).unwrap();
    let input = |m: usize| {
        let x = common::synthetic_weights(m, k, 11 + m as u64);
        Tensor::from_vec(x, (m, k), &Device::Cpu).unwrap()
    };
    let out = |w: &QMatMul, m: usize| w.forward(&input(m)).unwrap().to_vec_flat::<f32>().unwrap();
    let close = |got: Vec<f32>, want: Vec<f32>| {
        let scale = want.iter().fold(0f32, |s, v| s.max(v.abs()));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * scale, "{g} vs {w}");
        }
    };
    assert!(!lazy.is_repacked());
    assert_eq!(
        out(&lazy, 3),
        out(&stored, 3),
        "before repacking: the stored path itself"
    );
    assert!(!lazy.is_repacked(), "a prompt does not repack");
    close(out(&lazy, 1), out(&stored, 1));
    assert!(lazy.is_repacked(), "the first decode product repacks");
    close(out(&lazy, 3), out(&stored, 3));
    close(out(&lazy, 20), out(&stored, 20));
}

/// The repacked form gives the row form's outputs to float rounding, through `forward_many`
/// (one decode pass over several weights) as through `forward`. Q4_1 and Q5_1 row by row take
/// Q8_1 activations, whose block sum `d·Σq` is stored as an f16; repacked they take the exact
/// integer sum, so the two differ by that rounding of the min's term.
#[test]
fn interleaved_and_stored_rows_agree() {
    let (k, n) = (256, 64);
    let x = Tensor::from_vec(common::synthetic_weights(1, k, 7), (1, k), &Device::Cpu).unwrap();
    for dt in INTERLEAVED {
        let q = QTensor::quantize_f32(&common::synthetic_weights(n, k, 3), (n, k), dt).unwrap();
        let stored = QMatMul::from_arc_as_stored(std::sync::Arc::new(q.clone())).unwrap();
        let packed = QMatMul::interleave(&q).unwrap();
        assert!(matches!(packed, QMatMul::Interleaved(_)));
        let a = stored.forward(&x).unwrap().to_vec_flat::<f32>().unwrap();
        let many = QMatMul::forward_many(&[&packed, &stored], &x).unwrap();
        for got in [packed.forward(&x).unwrap(), many[0].clone()] {
            let got = got.to_vec_flat::<f32>().unwrap();
            let scale = a.iter().fold(0f32, |s, v| s.max(v.abs()));
            let with_min = matches!(dt, GgmlDType::Q4_1 | GgmlDType::Q5_1);
            let tol = if with_min { 1e-3 } else { 1e-5 };
            for (g, a) in got.iter().zip(&a) {
                assert!((g - a).abs() <= tol * scale, "{dt}: {g} vs {a}");
            }
        }
    }
    let q = QTensor::quantize_f32(
        &common::synthetic_weights(12, 64, 3),
        (12, 64),
        GgmlDType::Q5_0,
    )
    .unwrap();
    let err = QMatMul::interleave(&q).unwrap_err().to_string();
    assert!(err.contains("groups of 8 rows"), "{err}");
    let q = QTensor::quantize_f32(
        &common::synthetic_weights(8, 256, 3),
        (8, 256),
        GgmlDType::Q4K,
    )
    .unwrap();
    assert!(QMatMul::interleave(&q).is_err());
}

/// A tied output head serves embedding lookups: a repacked weight gives back exactly the
/// stored rows, and an id past the last row is an error.
#[test]
fn repacked_weights_give_back_their_rows() {
    let (n, k) = (24, 96);
    let ids = [0u32, 23, 7, 8, 7];
    for dt in INTERLEAVED {
        let q = QTensor::quantize_f32(&common::synthetic_weights(n, k, 5), (n, k), dt).unwrap();
        let want = q
            .dequantize_rows(&ids)
            .unwrap()
            .to_vec_flat::<f32>()
            .unwrap();
        for w in [
            QMatMul::interleave(&q).unwrap(),
            QMatMul::from_arc_as_stored(std::sync::Arc::new(q.clone())).unwrap(),
            QMatMul::Dense(q.dequantize().unwrap()),
        ] {
            let got = w.dequantize_rows(&ids).unwrap();
            assert_eq!(got.dims(), [ids.len(), k]);
            assert_eq!(got.to_vec_flat::<f32>().unwrap(), want, "{dt}");
            assert!(w.dequantize_rows(&[24]).is_err(), "{dt}: row 24 of 24");
        }
    }
}

/// A GGUF in memory loaded with its weights interleaved where they lie: each fitting tensor
/// reads back (dequantized, by rows) exactly as stored, multiplies bit for bit as a repacked
/// copy does, and the others are left alone.
#[test]
fn weights_interleaved_in_place_equal_a_repacked_copy() {
    use hanzo_ml::cpu::Blob;
    use hanzo_ml::quantized::cpu::interleaved::repacked_bytes;
    use hanzo_ml::quantized::gguf::GgufFile;
    let (n, k) = (24, 96);
    let mut tensors: Vec<(String, QTensor)> = INTERLEAVED
        .iter()
        .map(|&dt| {
            let w = common::synthetic_weights(n, k, dt.id() as u64 + 9);
            (
                dt.name().to_string(),
                QTensor::quantize_f32(&w, (n, k), dt).unwrap(),
            )
        })
        .collect();
    // Left as stored: rows not in groups of eight, a type without the layout, a vector.
    for (name, dt, shape) in [
        ("q8_0 12 rows", GgmlDType::Q8_0, vec![12, 64]),
        ("q4_k", GgmlDType::Q4K, vec![8, 256]),
        ("q8_0 vector", GgmlDType::Q8_0, vec![256]),
    ] {
        let count = shape.iter().product();
        let q = QTensor::quantize_f32(&common::synthetic_weights(1, count, 2), shape, dt).unwrap();
        tensors.push((name.to_string(), q));
    }
    let bytes = common::gguf_bytes(&[], &tensors);
    let before = repacked_bytes();
    let file = GgufFile::from_blob_interleaved(Blob::copy_of(&bytes)).unwrap();
    let fitting: usize = tensors[..INTERLEAVED.len()]
        .iter()
        .map(|(_, t)| t.data().len())
        .sum();
    assert!(repacked_bytes() - before >= fitting);
    let x = Tensor::from_vec(common::synthetic_weights(5, k, 7), (5, k), &Device::Cpu).unwrap();
    let ids = [0u32, 23, 7, 8, 7];
    for (i, (name, want)) in tensors.iter().enumerate() {
        let got = file.tensor(name).unwrap();
        let fits = i < INTERLEAVED.len();
        assert_eq!(got.is_interleaved(), fits, "{name}");
        assert_eq!(got.data() == want.data(), !fits, "{name}: bytes rearranged");
        assert_eq!(
            got.dequantize_f32().unwrap(),
            want.dequantize_f32().unwrap(),
            "{name}"
        );
        if !fits {
            continue;
        }
        assert!(
            got.blocks::<BlockQ8_0>().is_err(),
            "{name}: no row-by-row blocks"
        );
        let flat = |t: Tensor| t.to_vec_flat::<f32>().unwrap();
        let want_rows = flat(want.dequantize_rows(&ids).unwrap());
        assert_eq!(
            flat(got.dequantize_rows(&ids).unwrap()),
            want_rows,
            "{name}"
        );
        assert!(got.dequantize_rows(&[24]).is_err(), "{name}: row 24 of 24");
        let copy = QMatMul::interleave(want).unwrap();
        let here = QMatMul::from_arc_as_stored(std::sync::Arc::new(got.clone())).unwrap();
        assert!(here.is_repacked(), "{name}");
        let in_place = QMatMul::from_arc(std::sync::Arc::new(got)).unwrap();
        for x in [x.clone(), x.narrow(0, 0, 1).unwrap()] {
            let product = |w: &QMatMul| w.forward(&x).unwrap().to_vec_flat::<f32>().unwrap();
            assert_eq!(product(&in_place), product(&copy), "{name} {:?}", x.dims());
            let many = QMatMul::forward_many(&[&in_place, &here], &x).unwrap();
            assert_eq!(
                many[1].to_vec_flat::<f32>().unwrap(),
                product(&copy),
                "{name}"
            );
        }
        for w in [&in_place, &copy] {
            assert_eq!(flat(w.dequantize_rows(&ids).unwrap()), want_rows, "{name}");
        }
    }
}

#[test]
fn simd_kernels_agree_with_scalar_reference() {
    fn go<B: Kernels>(dt: GgmlDType, k: usize) -> (f32, f32) {
        let w = common::weight_tensor(dt, 1, k, 1234);
        let wq = w.blocks::<B>().unwrap();
        let x = common::synthetic_weights(1, k, 4321);
        let mut xq =
            vec![<B::Dot as bytemuck::Zeroable>::zeroed(); k / <B::Dot as GgmlBlock>::BLOCK_SIZE];
        <B::Dot as GgmlBlock>::quantize(&x, &mut xq);
        (B::vec_dot()(wq, &xq), B::vec_dot_scalar(wq, &xq))
    }
    eprintln!("kernels in use: {}", hanzo_ml::cpu::features::isa().name());
    for dt in quant_types() {
        let (fast, scalar) = hanzo_ml::with_block_type!(dt, B => go::<B>(dt, 4096));
        assert!(
            (fast - scalar).abs() <= 1e-5 * scalar.abs().max(1e-3),
            "{dt}: {fast} vs {scalar}"
        );
    }
}

#[test]
fn float_weights_and_batched_inputs() {
    // F16/F32 weights go through the dense path; a 3-D input keeps its leading dims.
    let (n, k) = (5, 64);
    let w = common::synthetic_weights(n, k, 8);
    let x = Tensor::from_vec(common::synthetic_weights(6, k, 9), (2, 3, k), &Device::Cpu).unwrap();
    let want = x
        .matmul(
            &Tensor::from_vec(w.clone(), (n, k), &Device::Cpu)
                .unwrap()
                .t()
                .unwrap(),
        )
        .unwrap();
    for dt in [GgmlDType::F32, GgmlDType::F16, GgmlDType::Q8_0] {
        let mm = QMatMul::from_qtensor(QTensor::quantize_f32(&w, (n, k), dt).unwrap()).unwrap();
        let got = mm.forward(&x).unwrap();
        assert_eq!(got.dims(), &[2, 3, n]);
        let diff = (got - &want)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_vec0::<f32>()
            .unwrap();
        assert!(diff < 2e-2, "{dt}: {diff}");
    }
}

#[test]
fn forward_many_equals_separate_products() {
    // Mixed weight types and row counts (decode takes the one-pass path; a dense weight or
    // several activation rows fall back to one product each). The one-pass path runs the
    // same kernels, so the results are bit-equal.
    let k = 512;
    let ws: Vec<QMatMul> = [
        (GgmlDType::Q5_0, 40),
        (GgmlDType::Q4K, 7),
        (GgmlDType::Q8_0, 33),
        (GgmlDType::Q6K, 1),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(dt, n))| {
        let w = common::synthetic_weights(n, k, 20 + i as u64);
        QMatMul::from_qtensor(QTensor::quantize_f32(&w, (n, k), dt).unwrap()).unwrap()
    })
    .collect();
    let dense = QMatMul::from_qtensor(
        QTensor::quantize_f32(&common::synthetic_weights(3, k, 30), (3, k), GgmlDType::F32)
            .unwrap(),
    )
    .unwrap();
    for m in [1, 3] {
        let x =
            Tensor::from_vec(common::synthetic_weights(m, k, 31), (m, k), &Device::Cpu).unwrap();
        for set in [ws.iter().collect::<Vec<_>>(), vec![&ws[0], &dense, &ws[1]]] {
            let many = QMatMul::forward_many(&set, &x).unwrap();
            assert_eq!(many.len(), set.len());
            for (w, got) in set.iter().zip(&many) {
                let want = w.forward(&x).unwrap();
                assert_eq!(got.dims(), want.dims());
                assert_eq!(
                    got.to_vec_flat::<f32>().unwrap(),
                    want.to_vec_flat::<f32>().unwrap()
                );
            }
        }
    }
    let narrow = Tensor::zeros((1, k - 32), hanzo_ml::DType::F32, &Device::Cpu).unwrap();
    assert!(QMatMul::forward_many(&[&ws[0]], &narrow).is_err());
}

/// Q8_0 weights at -128 (only foreign files hold it) and 127 against activations at ±127:
/// the largest integer pair sums the prefill panels and the decode tiles see, checked against
/// the exact products.
#[test]
fn q8_0_extreme_levels_in_prefill_and_decode() {
    let (n, k, m) = (8, 64, 16);
    let mut bytes = Vec::new();
    for r in 0..n {
        for b in 0..k / 32 {
            bytes.extend_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
            bytes.extend((0..32).map(|j| if (r + b + j) % 3 == 0 { 0x80u8 } else { 127 }));
        }
    }
    let w = QTensor::from_bytes(GgmlDType::Q8_0, (n, k), &bytes).unwrap();
    let levels = |r: usize, e: usize| {
        if (r + e / 32 + e % 32).is_multiple_of(3) {
            -128.0
        } else {
            127.0
        }
    };
    // Every activation row quantizes to exactly ±127 with scale 1/127.
    let x: Vec<f32> = (0..m * k)
        .map(|i| {
            if (i * 7 / 3 + i / k) % 2 == 0 {
                1.0
            } else {
                -1.0
            }
        })
        .collect();
    let mm = QMatMul::from_qtensor(w).unwrap();
    let prefill = mm
        .forward(&Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap())
        .unwrap()
        .to_vec_flat::<f32>()
        .unwrap();
    let d_x = half::f16::from_f32(1.0 / 127.0).to_f32() as f64;
    for j in 0..m {
        let row = &x[j * k..(j + 1) * k];
        let decode = mm
            .forward(&Tensor::from_vec(row.to_vec(), (1, k), &Device::Cpu).unwrap())
            .unwrap()
            .to_vec_flat::<f32>()
            .unwrap();
        for r in 0..n {
            let exact: f64 = (0..k)
                .map(|e| levels(r, e) * 127.0 * row[e] as f64 * d_x)
                .sum();
            for (path, got) in [("prefill", prefill[j * n + r]), ("decode", decode[r])] {
                assert!(
                    (got as f64 - exact).abs() <= 1e-5 * exact.abs().max(1.0),
                    "{path} row {j} col {r}: {got} vs {exact}"
                );
            }
        }
    }
}

#[test]
fn wrong_input_width_is_an_error() {
    let mm =
        QMatMul::from_qtensor(QTensor::quantize_f32(&[0.5; 64], (2, 32), GgmlDType::Q8_0).unwrap())
            .unwrap();
    let x = Tensor::zeros((1, 31), hanzo_ml::DType::F32, &Device::Cpu).unwrap();
    assert!(mm.forward(&x).is_err());
    assert!(QMatMul::from_qtensor(
        QTensor::quantize_f32(&[0.5; 64], (64,), GgmlDType::Q8_0).unwrap()
    )
    .is_err());
}

#[test]
fn isq_quantizes_real_safetensors_weights_on_load() {
    use hanzo_ml::quantized::isq::{fallback_type, IsqLoader};
    assert_eq!(fallback_type(GgmlDType::Q4K, 640), GgmlDType::Q5_0);
    assert_eq!(fallback_type(GgmlDType::Q6K, 640), GgmlDType::Q8_0);
    assert_eq!(fallback_type(GgmlDType::Q4_0, 100), GgmlDType::F16);
    let dir = common::fixture("minilm");
    let name = "encoder.layer.0.intermediate.dense.weight"; // [1536, 384]: 384 is not a multiple of 256
    for dt in [GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K] {
        let l = IsqLoader::open(dir.join("model.safetensors"), dt).unwrap();
        let full = l
            .names()
            .into_iter()
            .find(|n| n.ends_with(name))
            .unwrap()
            .to_string();
        let w = l.tensor(&full).unwrap();
        let mm = l.qmatmul(&full).unwrap();
        let x =
            Tensor::from_vec(common::synthetic_weights(2, 384, 1), (2, 384), &Device::Cpu).unwrap();
        let want = x.matmul(&w.t().unwrap()).unwrap();
        let got = mm.forward(&x).unwrap();
        let err = (got - &want)
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap()
            .to_vec0::<f32>()
            .unwrap()
            .sqrt();
        let scale = want
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap()
            .to_vec0::<f32>()
            .unwrap()
            .sqrt();
        assert!(err < 0.05 * scale, "{dt}: rms error {err} vs rms {scale}");
    }
}

#[test]
fn qmatmul_row_widths_of_real_models() {
    // SmolLM2's hidden 576 (18 blocks of 32) and Qwen2.5's 896 (28), as decode and prefill.
    for dt in [
        GgmlDType::Q8_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q4_0,
    ] {
        for k in [576, 896] {
            for m in [1, 37] {
                check(dt, 300, k, m);
            }
        }
    }
}

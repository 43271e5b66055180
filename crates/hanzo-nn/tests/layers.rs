//! Layers against hand-computed values and straightforward f64 loop references.

use hanzo_ml::{DType, Device, Tensor};
use hanzo_nn::activation::Activation;
use hanzo_nn::conv::ConvConfig;
use hanzo_nn::init::{fans, Gain};
use hanzo_nn::*;
use std::collections::HashMap;

const CPU: Device = Device::Cpu;

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec(), &CPU).unwrap()
}

fn flat(x: &Tensor) -> Vec<f32> {
    x.to_dtype(DType::F32)
        .unwrap()
        .to_vec_flat::<f32>()
        .unwrap()
}

fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "at {i}: {x} vs {y}");
    }
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[test]
fn linear_with_and_without_bias() {
    let w = t(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = t(&[0.5, -1.], &[2]);
    let x = t(&[1., 0., -1., 2., 1., 0.], &[2, 3]);
    let y = Linear::new(w.clone(), Some(b.into())).forward(&x).unwrap();
    // [1,0,-1]·[1,2,3] = -2, ·[4,5,6] = -2; [2,1,0]·... = 4, 13
    assert_eq!(flat(&y), vec![-1.5, -3., 4.5, 12.]);
    let y3 = Linear::new(w, None)
        .forward(&x.reshape((1, 2, 3)).unwrap())
        .unwrap();
    assert_eq!(y3.dims(), &[1, 2, 2]);
    assert_eq!(flat(&y3), vec![-2., -2., 4., 13.]);
}

#[test]
fn quantized_linear_matches_dense_within_q8_error() {
    let (n, k) = (8, 64);
    let w = t(&values(n * k, 1), &[n, k]);
    let x = t(&values(3 * k, 2), &[3, k]);
    let mut map = HashMap::new();
    map.insert("l.weight".to_string(), w.clone());
    let vb = VarBuilder::from_tensors(map, DType::F32, &CPU);
    let q = QLinear::load(k, n, hanzo_ml::quantized::GgmlDType::Q8_0, &vb.pp("l")).unwrap();
    assert_eq!(q.dims(), (n, k));
    let dense = flat(&Linear::new(w, None).forward(&x).unwrap());
    let quant = flat(&q.forward(&x).unwrap());
    for (a, b) in quant.iter().zip(&dense) {
        assert!((a - b).abs() < 0.05, "{a} vs {b}");
    }
}

#[test]
fn embedding_looks_up_rows_and_rejects_out_of_range_ids() {
    let e = Embedding::new(t(&[0., 1., 10., 11., 20., 21.], &[3, 2])).unwrap();
    let ids = Tensor::new([[2u32, 0], [1, 1]], &CPU).unwrap();
    let y = e.forward(&ids).unwrap();
    assert_eq!(y.dims(), &[2, 2, 2]);
    assert_eq!(flat(&y), vec![20., 21., 0., 1., 10., 11., 10., 11.]);
    assert!(e.forward(&Tensor::new([3u32], &CPU).unwrap()).is_err());
}

#[test]
fn norms_match_loop_references() {
    let (rows, d) = (3, 8);
    let xv = values(rows * d, 3);
    let wv = values(d, 4);
    let bv = values(d, 5);
    let x = t(&xv, &[rows, d]);
    let eps = 1e-5;
    let mut ln_ref = vec![];
    let mut rms_ref = vec![];
    for r in 0..rows {
        let row: Vec<f64> = xv[r * d..(r + 1) * d].iter().map(|&v| v as f64).collect();
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        for i in 0..d {
            ln_ref
                .push(((row[i] - mean) / (var + eps).sqrt() * wv[i] as f64 + bv[i] as f64) as f32);
            rms_ref.push((row[i] / (ms + eps).sqrt() * wv[i] as f64) as f32);
        }
    }
    let ln = LayerNorm::new(t(&wv, &[d]), Some(t(&bv, &[d]).into()), eps);
    close(&flat(&ln.forward(&x).unwrap()), &ln_ref, 1e-5);
    let rms = RmsNorm::new(t(&wv, &[d]), eps);
    close(&flat(&rms.forward(&x).unwrap()), &rms_ref, 1e-5);
}

#[test]
fn group_norm_and_batch_norm_match_loop_references() {
    let (n, c, hw, groups) = (2, 4, 3, 2);
    let xv = values(n * c * hw, 6);
    let wv = [1.0f32, 2.0, -1.0, 0.5];
    let bv = [0.0f32, 1.0, 0.5, -0.5];
    let x = t(&xv, &[n, c, hw]);
    let gn = GroupNorm::new(t(&wv, &[c]), t(&bv, &[c]), groups, 1e-5).unwrap();
    let mut want = vec![0f32; xv.len()];
    let per = c / groups * hw;
    for b in 0..n {
        for g in 0..groups {
            let base = b * c * hw + g * per;
            let s: Vec<f64> = xv[base..base + per].iter().map(|&v| v as f64).collect();
            let mean = s.iter().sum::<f64>() / per as f64;
            let var = s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / per as f64;
            for (i, v) in s.iter().enumerate() {
                let ch = g * (c / groups) + i / hw;
                want[base + i] =
                    ((v - mean) / (var + 1e-5).sqrt() * wv[ch] as f64 + bv[ch] as f64) as f32;
            }
        }
    }
    close(&flat(&gn.forward(&x).unwrap()), &want, 1e-5);
    assert!(GroupNorm::new(t(&wv, &[c]), t(&bv, &[c]), 3, 1e-5).is_err());

    let mean = [0.1f32, -0.2, 0.3, 0.0];
    let var = [1.0f32, 4.0, 0.25, 2.0];
    let bn = BatchNorm::new(
        &t(&mean, &[c]),
        &t(&var, &[c]),
        &t(&wv, &[c]),
        &t(&bv, &[c]),
        1e-5,
    )
    .unwrap();
    let got = flat(&bn.forward(&x).unwrap());
    for (i, g) in got.iter().enumerate() {
        let ch = (i / hw) % c;
        let w = ((xv[i] - mean[ch]) as f64 / (var[ch] as f64 + 1e-5).sqrt() * wv[ch] as f64
            + bv[ch] as f64) as f32;
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
}

#[test]
fn activations_match_scalar_formulas() {
    let xs = [-30.0f32, -2.5, -1.0, -0.1, 0.0, 0.3, 1.0, 4.0, 30.0];
    let x = t(&xs, &[xs.len()]);
    let check = |a: Activation, f: &dyn Fn(f64) -> f64| {
        let got = flat(&a.forward(&x).unwrap());
        for (g, &v) in got.iter().zip(&xs) {
            let w = f(v as f64) as f32;
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{a:?}({v}) = {g}, want {w}"
            );
        }
    };
    check(Activation::Softplus, &|v| {
        if v > 20.0 {
            v
        } else {
            v.exp().ln_1p()
        }
    });
    check(Activation::LeakyRelu(0.1), &|v| {
        if v > 0.0 {
            v
        } else {
            0.1 * v
        }
    });
    check(Activation::Elu(1.5), &|v| {
        if v > 0.0 {
            v
        } else {
            1.5 * v.exp_m1()
        }
    });
    check(Activation::Sigmoid, &|v| 1.0 / (1.0 + (-v).exp()));
    check(Activation::Silu, &|v| v / (1.0 + (-v).exp()));
    // GELU(1): 0.5 (1 + erf(1/sqrt 2)) = 0.841344746; tanh form 0.841191990.
    let one = t(&[1.0], &[1]);
    close(
        &flat(&Activation::GeluErf.forward(&one).unwrap()),
        &[0.841_344_7],
        1e-6,
    );
    close(
        &flat(&Activation::GeluTanh.forward(&one).unwrap()),
        &[0.841_192],
        1e-6,
    );
    assert_eq!(
        Activation::from_name("gelu_pytorch_tanh").unwrap(),
        Activation::GeluTanh
    );
    assert!(Activation::from_name("swishy").is_err());
}

#[test]
fn dropout_zeroes_about_p_and_rescales_only_in_training() {
    let x = Tensor::ones(10_000, DType::F32, &CPU).unwrap();
    let d = Dropout::new(0.25).unwrap();
    assert_eq!(flat(&d.forward_t(&x, false).unwrap()), flat(&x));
    let y = flat(&d.forward_t(&x, true).unwrap());
    let zeros = y.iter().filter(|&&v| v == 0.0).count();
    assert!((2200..2800).contains(&zeros), "{zeros} zeros");
    assert!(y.iter().all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6));
    assert!(Dropout::new(1.0).is_err());
}

#[test]
fn convolutions_match_direct_sums() {
    // Conv1d, 2 in -> 1 out channel, k = 2, padding 1, bias 0.5.
    let x = t(&[1., 2., 3., 10., 20., 30.], &[1, 2, 3]);
    let w = t(&[1., -1., 0.5, 0.25], &[1, 2, 2]);
    let cfg = ConvConfig {
        padding: 1,
        ..Default::default()
    };
    let y = Conv1d::new(w, Some(t(&[0.5], &[1]).into()), cfg)
        .forward(&x)
        .unwrap();
    // out[j] = sum_c sum_k w[c,k] x[c, j + k - 1]
    let xp = |c: usize, i: isize| {
        if (0..3).contains(&i) {
            [[1., 2., 3.], [10., 20., 30.]][c][i as usize]
        } else {
            0.0
        }
    };
    let want: Vec<f32> = (0..4)
        .map(|j| {
            let j = j as isize;
            0.5 + xp(0, j - 1) * 1. + -xp(0, j) + xp(1, j - 1) * 0.5 + xp(1, j) * 0.25
        })
        .collect();
    assert_eq!(flat(&y), want);

    let x = t(&values(2 * 5 * 5, 7), &[1, 2, 5, 5]);
    let wv = values(3 * 2 * 3 * 3, 8);
    let conv = Conv2d::new(
        t(&wv, &[3, 2, 3, 3]),
        None,
        ConvConfig {
            stride: 2,
            ..Default::default()
        },
    );
    let y = conv.forward(&x).unwrap();
    assert_eq!(y.dims(), &[1, 3, 2, 2]);
    let xv = flat(&x);
    let got = flat(&y);
    for o in 0..3 {
        for i in 0..2 {
            for j in 0..2 {
                let mut s = 0f64;
                for c in 0..2 {
                    for a in 0..3 {
                        for b in 0..3 {
                            s += (wv[((o * 2 + c) * 3 + a) * 3 + b]
                                * xv[(c * 5 + 2 * i + a) * 5 + 2 * j + b])
                                as f64;
                        }
                    }
                }
                assert!((got[(o * 2 + i) * 2 + j] as f64 - s).abs() < 1e-5);
            }
        }
    }
}

#[test]
fn initialisers_have_the_documented_spread() {
    let shape: hanzo_ml::Shape = (256, 64, 3, 3).into();
    assert_eq!(fans(&shape), (576, 2304));
    let w = flat(
        &Init::KaimingUniform(Gain::Relu)
            .tensor(&shape, DType::F32, &CPU)
            .unwrap(),
    );
    let bound = (2.0f32).sqrt() * (3.0f32 / 576.0).sqrt();
    assert!(w.iter().all(|v| v.abs() <= bound));
    let max = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(max > 0.99 * bound);
    let w = flat(
        &Init::XavierNormal(1.0)
            .tensor(&shape, DType::F32, &CPU)
            .unwrap(),
    );
    let std = (w.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / w.len() as f64).sqrt();
    let want = (2.0 / (576.0 + 2304.0f64)).sqrt();
    assert!((std / want - 1.0).abs() < 0.02, "std {std} vs {want}");
    // PyTorch's Linear default: bound 1/sqrt(fan_in).
    let w = flat(
        &Init::DEFAULT_WEIGHT
            .tensor(&(10, 100).into(), DType::F32, &CPU)
            .unwrap(),
    );
    assert!(w.iter().all(|v| v.abs() <= 0.1 + 1e-6));
}

#[test]
fn losses_match_hand_computed_values() {
    let logits = t(&[1., 2., 3., 1., 1., 1.], &[2, 3]);
    let target = Tensor::new([2u32, 0], &CPU).unwrap();
    let ce = loss::cross_entropy(&logits, &target)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let l0 = -(3f64.exp() / (1f64.exp() + 2f64.exp() + 3f64.exp())).ln();
    let l1 = 3f64.ln();
    assert!((ce as f64 - (l0 + l1) / 2.0).abs() < 1e-6, "{ce}");
    assert!(loss::cross_entropy(&logits, &Tensor::new([1u32], &CPU).unwrap()).is_err());
    let m = loss::mse(&t(&[1., 2.], &[2]), &t(&[0., 4.], &[2])).unwrap();
    assert_eq!(m.to_scalar::<f32>().unwrap(), 2.5);
    let bce = loss::binary_cross_entropy_with_logits(&t(&[0., 100.], &[2]), &t(&[1., 0.], &[2]))
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(
        (bce as f64 - (2f64.ln() + 100.0) / 2.0).abs() < 1e-4,
        "{bce}"
    );
}

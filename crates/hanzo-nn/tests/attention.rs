//! Attention (MHA / GQA / MQA, causal and sliding-window), rotary scalings and KV caches
//! against a scalar f64 reference and against each other.

use hanzo_ml::{DType, Device, RopeKind, Tensor};
use hanzo_nn::attention::attention_mask;
use hanzo_nn::*;
use std::collections::HashMap;

const CPU: Device = Device::Cpu;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * 0.5
        })
        .collect()
}

fn flat(x: &Tensor) -> Vec<f32> {
    x.to_vec_flat::<f32>().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// q `[hq, t, d]`, k/v `[hk, t, d]` flattened; query i sees key j when `allowed(i, j)`.
fn reference_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (hq, hk, t, d): (usize, usize, usize, usize),
    allowed: impl Fn(usize, usize) -> bool,
) -> Vec<f32> {
    let mut out = vec![0f32; hq * t * d];
    for h in 0..hq {
        let kh = h / (hq / hk);
        for i in 0..t {
            let scores: Vec<f64> = (0..t)
                .map(|j| {
                    if !allowed(i, j) {
                        return f64::NEG_INFINITY;
                    }
                    (0..d)
                        .map(|e| q[(h * t + i) * d + e] as f64 * k[(kh * t + j) * d + e] as f64)
                        .sum::<f64>()
                        / (d as f64).sqrt()
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = w.iter().sum();
            for e in 0..d {
                let acc: f64 = (0..t).map(|j| w[j] * v[(kh * t + j) * d + e] as f64).sum();
                out[(h * t + i) * d + e] = (acc / z) as f32;
            }
        }
    }
    out
}

/// An attention layer with identity-free random projections, plus its raw weights.
fn layer(cfg: &AttentionConfig, seed: u64) -> (Attention, HashMap<String, Tensor>) {
    let (h, d) = (cfg.hidden, cfg.head_dim);
    let mut map = HashMap::new();
    let mut add = |name: &str, rows: usize, cols: usize, s: u64| {
        let w = Tensor::from_vec(values(rows * cols, s), (rows, cols), &CPU).unwrap();
        map.insert(format!("{name}.weight"), w);
    };
    add("q_proj", cfg.num_heads * d, h, seed);
    add("k_proj", cfg.num_kv_heads * d, h, seed + 1);
    add("v_proj", cfg.num_kv_heads * d, h, seed + 2);
    add("o_proj", h, cfg.num_heads * d, seed + 3);
    let vb = VarBuilder::from_tensors(map.clone(), DType::F32, &CPU);
    (Attention::load(cfg.clone(), None, &vb).unwrap(), map)
}

fn project(x: &Tensor, w: &Tensor, heads: usize, t: usize, d: usize) -> Vec<f32> {
    let y = x.matmul(&w.t().unwrap()).unwrap(); // [t, heads * d]
    flat(
        &y.reshape((t, heads, d))
            .unwrap()
            .transpose(0, 1)
            .unwrap()
            .contiguous()
            .unwrap(),
    )
}

fn check_against_reference(mask: MaskKind, hq: usize, hk: usize) {
    let (t, d, hidden) = (9, 4, 12);
    let cfg = AttentionConfig {
        hidden,
        num_heads: hq,
        num_kv_heads: hk,
        head_dim: d,
        bias: false,
        mask,
        scale: None,
    };
    let (att, w) = layer(&cfg, 10 + hq as u64 * 7 + hk as u64);
    let x = Tensor::from_vec(values(t * hidden, 99), (1, t, hidden), &CPU).unwrap();
    let got = flat(&att.forward(&x, 0).unwrap());
    let x2 = x.reshape((t, hidden)).unwrap();
    let q = project(&x2, &w["q_proj.weight"], hq, t, d);
    let k = project(&x2, &w["k_proj.weight"], hk, t, d);
    let v = project(&x2, &w["v_proj.weight"], hk, t, d);
    let allowed = |i: usize, j: usize| match mask {
        MaskKind::Bidirectional => true,
        MaskKind::Causal => j <= i,
        MaskKind::SlidingWindow(win) => j <= i && i - j < win,
    };
    let heads = reference_attention(&q, &k, &v, (hq, hk, t, d), allowed);
    // [hq, t, d] -> [t, hq * d] -> o_proj
    let merged = Tensor::from_vec(heads, (hq, t, d), &CPU)
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .reshape((t, hq * d))
        .unwrap();
    let want = flat(&merged.matmul(&w["o_proj.weight"].t().unwrap()).unwrap());
    let diff = max_diff(&got, &want);
    assert!(diff < 1e-5, "{mask:?} hq {hq} hk {hk}: max diff {diff}");
}

#[test]
fn attention_matches_the_scalar_reference_for_mha_gqa_mqa_and_every_mask() {
    for mask in [
        MaskKind::Bidirectional,
        MaskKind::Causal,
        MaskKind::SlidingWindow(3),
    ] {
        check_against_reference(mask, 4, 4);
        check_against_reference(mask, 4, 2);
        check_against_reference(mask, 6, 1);
    }
}

#[test]
fn sliding_window_mask_is_causal_and_bounded() {
    let m = attention_mask(MaskKind::SlidingWindow(2), &[3, 4], &[1, 2, 3, 4], &CPU)
        .unwrap()
        .unwrap();
    assert_eq!(
        m.to_vec2::<u8>().unwrap(),
        vec![vec![0, 1, 1, 0], vec![0, 0, 1, 1]]
    );
    assert!(attention_mask(MaskKind::Causal, &[5], &[0, 1, 5], &CPU)
        .unwrap()
        .is_none());
}

#[test]
fn write_slice_is_in_place_when_unshared_and_copy_on_write_otherwise() {
    let mut buf = Tensor::zeros((2, 3), DType::F32, &CPU).unwrap();
    let view = buf.clone();
    let row = Tensor::new([[7f32], [8.]], &CPU).unwrap();
    buf.write_slice(&row, 1, 2).unwrap();
    assert_eq!(
        buf.to_vec2::<f32>().unwrap(),
        vec![vec![0., 0., 7.], vec![0., 0., 8.]]
    );
    assert_eq!(
        view.to_vec2::<f32>().unwrap(),
        vec![vec![0.; 3]; 2],
        "the old handle must not change"
    );
    assert!(buf.write_slice(&row, 1, 3).is_err());
    assert!(buf
        .write_slice(&Tensor::new([[1f32, 2.]], &CPU).unwrap(), 1, 0)
        .is_err());
}

#[test]
fn rope_scalings_follow_their_definitions() {
    let d = 128;
    let base = 500_000.0;
    let plain = RotaryEmbedding::new(base, d, &RopeScaling::None, RopeKind::HalfSplit).unwrap();
    let f = plain.inv_freq();
    assert_eq!(f[0], 1.0);
    assert!((f[1] - base.powf(-2.0 / 128.0)).abs() < 1e-15);
    let lin = RotaryEmbedding::new(
        base,
        d,
        &RopeScaling::Linear { factor: 4.0 },
        RopeKind::HalfSplit,
    )
    .unwrap();
    assert!(lin
        .inv_freq()
        .iter()
        .zip(f)
        .all(|(a, b)| (a - b / 4.0).abs() < 1e-15));

    // Llama 3.1 (factor 8, low 1, high 4, 8192): wavelengths below 2048 kept, above 8192
    // divided by 8, and a blend in between.
    let l3 = RotaryEmbedding::new(
        base,
        d,
        &RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192,
        },
        RopeKind::HalfSplit,
    )
    .unwrap();
    for (i, (&g, &b)) in l3.inv_freq().iter().zip(f).enumerate() {
        let wl = 2.0 * std::f64::consts::PI / b;
        if wl < 2048.0 {
            assert_eq!(g, b, "dim {i}");
        } else if wl > 8192.0 {
            assert!((g - b / 8.0).abs() < 1e-18, "dim {i}");
        } else {
            assert!(g < b && g > b / 8.0, "dim {i}");
        }
    }

    // YaRN: fast dims extrapolate (unchanged), slow dims interpolate (/ factor), cos/sin are
    // scaled by 0.1 ln(factor) + 1.
    let yarn = RotaryEmbedding::new(
        10_000.0,
        64,
        &RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: None,
        },
        RopeKind::HalfSplit,
    )
    .unwrap();
    let base_f =
        RotaryEmbedding::new(10_000.0, 64, &RopeScaling::None, RopeKind::HalfSplit).unwrap();
    let (yf, bf) = (yarn.inv_freq(), base_f.inv_freq());
    // low = floor(64 ln(4096 / (32 * 2 pi)) / (2 ln 10000)) = floor(10.47) = 10,
    // high = ceil(64 ln(4096 / (1 * 2 pi)) / (2 ln 10000)) = ceil(22.51) = 23.
    assert!((0..=10).all(|i| yf[i] == bf[i]));
    assert!((23..32).all(|i| (yf[i] - bf[i] / 4.0).abs() < 1e-18));
    assert!((11..23).all(|i| yf[i] < bf[i] && yf[i] > bf[i] / 4.0));
    let (cos, _) = yarn.cos_sin(&[0], &CPU).unwrap();
    let m = 0.1 * 4f64.ln() + 1.0;
    assert!(flat(&cos).iter().all(|c| (*c as f64 - m).abs() < 1e-6));
}

#[test]
fn rope_rotates_pairs_by_position_angles() {
    // One head, d = 4, position 3: half-split pairs (0, 2), (1, 3).
    let rope = RotaryEmbedding::new(100.0, 4, &RopeScaling::None, RopeKind::HalfSplit).unwrap();
    let x = Tensor::new([1f32, 2., 3., 4.], &CPU)
        .unwrap()
        .reshape((1, 1, 1, 4))
        .unwrap();
    let y = flat(&rope.apply(&x, 3).unwrap());
    let (a0, a1) = (3.0f64, 3.0 * 100f64.powf(-0.5));
    let want = [
        1.0 * a0.cos() - 3.0 * a0.sin(),
        2.0 * a1.cos() - 4.0 * a1.sin(),
        1.0 * a0.sin() + 3.0 * a0.cos(),
        2.0 * a1.sin() + 4.0 * a1.cos(),
    ];
    for (g, w) in y.iter().zip(want) {
        assert!((*g as f64 - w).abs() < 1e-5, "{g} vs {w}");
    }
    // Partial rotary: the last features pass through.
    let part = RotaryEmbedding::new(100.0, 2, &RopeScaling::None, RopeKind::Interleaved).unwrap();
    let y = flat(&part.apply(&x, 3).unwrap());
    assert_eq!(&y[2..], &[3., 4.]);
    assert!((y[0] as f64 - (a0.cos() - 2.0 * a0.sin())).abs() < 1e-5);
}

//! Element-wise pieces computed the way ggml's CPU backend computes them, so that models
//! reproduce llama.cpp's outputs token for token (see `f16_attention` for why that takes
//! matching its roundings).

use half::f16;
use hanzo_ml::{Device, Tensor};
use rayon::prelude::*;
use std::sync::OnceLock;

/// GELU (tanh form) in f32, as ggml writes it.
fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

/// ggml evaluates GELU through a table indexed by the input rounded to f16, holding the
/// result rounded to f16 (outside [-10, 10] it is 0 or the identity). Held widened to f32
/// (exactly) so a lookup is one load.
fn gelu_table() -> &'static [f32] {
    static T: OnceLock<Vec<f32>> = OnceLock::new();
    T.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| f16::from_f32(gelu_f32(f16::from_bits(b).to_f32())).to_f32())
            .collect()
    })
}

fn gelu_ggml(x: f32, table: &[f32]) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        table[f16::from_f32(x).to_bits() as usize]
    }
}

/// `gelu(gate) * up` (Gemma's GEGLU MLP), both `[t, ffn]` f32.
pub fn geglu(gate: &Tensor, up: &Tensor) -> hanzo_ml::Result<Tensor> {
    let table = gelu_table();
    let out = gate.with_contiguous(|g: &[f32]| {
        up.with_contiguous(|u: &[f32]| {
            let mut out = vec![0f32; g.len()];
            out.par_chunks_mut(4096)
                .zip(g.par_chunks(4096).zip(u.par_chunks(4096)))
                .for_each(|(o, (g, u))| {
                    for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
                        *o = gelu_ggml(g, table) * u;
                    }
                });
            out
        })
    })??;
    Tensor::from_vec(out, gate.shape().clone(), &Device::Cpu)
}

/// RoPE cos/sin tables `[positions, dims / 2]` computed like ggml: the angle starts at the
/// position and is multiplied by `base^(-2/dims)` in f32 for each successive pair, so large
/// positions see the same accumulated rounding as llama.cpp. `factors` divide the angles of
/// each pair (Llama 3.1 `rope_freqs`); `scale` multiplies positions (linear scaling).
pub fn rope_tables(
    base: f32,
    dims: usize,
    scale: f32,
    factors: Option<&[f32]>,
    positions: std::ops::Range<usize>,
) -> hanzo_ml::Result<(Tensor, Tensor)> {
    let half = dims / 2;
    let theta_scale = base.powf(-2.0 / dims as f32);
    let t = positions.len();
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for p in positions {
        let mut theta = p as f32;
        for i in 0..half {
            let ff = factors.map_or(1.0, |f| f[i]);
            let angle = scale * theta / ff;
            cos.push(angle.cos());
            sin.push(angle.sin());
            theta *= theta_scale;
        }
    }
    Ok((
        Tensor::from_vec(cos, (t, half), &Device::Cpu)?,
        Tensor::from_vec(sin, (t, half), &Device::Cpu)?,
    ))
}

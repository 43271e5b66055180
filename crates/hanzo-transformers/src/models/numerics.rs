//! Element-wise pieces computed the way ggml's CPU backend computes them, so that models
//! reproduce llama.cpp's outputs token for token (see `hanzo_ml::cpu::attention` for why
//! that takes matching its roundings).

use half::f16;
use hanzo_ml::cpu::par::filled_chunks;
use hanzo_ml::{Device, Tensor};
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

/// `o = gelu(g) * u` element-wise, eight at a time where the CPU has AVX2 and F16C (the
/// scalar loop's f16 rounding, table lookup and clamps, so the same floats; the scalar loop
/// is a noticeable share of a decode step's serial time).
fn geglu_slice(g: &[f32], u: &[f32], o: &mut [f32], table: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    let done = if hanzo_ml::cpu::features::isa() >= hanzo_ml::cpu::features::Isa::Avx2 {
        // SAFETY: AVX2 and F16C checked above; the table has all 65536 entries.
        unsafe { x86::geglu(g, u, o, table) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for ((o, &g), &u) in o[done..].iter_mut().zip(&g[done..]).zip(&u[done..]) {
        *o = gelu_ggml(g, table) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// The whole groups of eight of `geglu_slice`; returns how many elements it did.
    ///
    /// # Safety
    /// AVX2 and F16C must be available; `table` has 65536 entries.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn geglu(g: &[f32], u: &[f32], o: &mut [f32], table: &[f32]) -> usize {
        assert!(table.len() == 1 << 16 && u.len() >= g.len() && o.len() >= g.len());
        let (lo, hi) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
        let n = g.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: i + 8 <= n for g, u and o; every gathered index is a u16, inside the
            // table (checked above).
            unsafe {
                let x = _mm256_loadu_ps(g.as_ptr().add(i));
                let bits = _mm256_cvtepu16_epi32(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x));
                let y = _mm256_i32gather_ps::<4>(table.as_ptr(), bits);
                // x <= -10 → 0, x >= 10 → x (ordered compares: NaN keeps the table's NaN).
                let y = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(x, lo), y);
                let y = _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_GE_OQ>(x, hi));
                let r = _mm256_mul_ps(y, _mm256_loadu_ps(u.as_ptr().add(i)));
                _mm256_storeu_ps(o.as_mut_ptr().add(i), r);
            }
        }
        n
    }
}

/// `gelu(gate) * up` (Gemma's GEGLU MLP), both `[t, ffn]` f32.
pub fn geglu(gate: &Tensor, up: &Tensor) -> hanzo_ml::Result<Tensor> {
    let table = gelu_table();
    let out = gate.with_contiguous(|g: &[f32]| {
        up.with_contiguous(|u: &[f32]| {
            filled_chunks(g.len(), 4096, &|i, o| {
                let at = i * 4096..i * 4096 + o.len();
                geglu_slice(&g[at.clone()], &u[at], o, table)
            })
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
    positions: &[usize],
) -> hanzo_ml::Result<(Tensor, Tensor)> {
    let half = dims / 2;
    let theta_scale = base.powf(-2.0 / dims as f32);
    let t = positions.len();
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for &p in positions {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_geglu_gives_the_scalar_floats() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        hanzo_ml::cpu::features::test_kernels_at(hanzo_ml::cpu::features::Isa::Avx2, "GEGLU");
        let mut rng = StdRng::seed_from_u64(3);
        let mut g: Vec<f32> = (0..1003).map(|_| rng.gen_range(-12.0..12.0)).collect();
        // The clamps, both sides of them, f16 ties, and values no f16 holds.
        let edges = [
            -10.0,
            10.0,
            -10.000001,
            9.999999,
            0.0,
            -0.0,
            1.000_488_3, // halfway between two f16s
            70000.0,
            -70000.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-8,
        ];
        g[..edges.len()].copy_from_slice(&edges);
        let u: Vec<f32> = (0..g.len()).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let table = gelu_table();
        let mut got = vec![0f32; g.len()];
        geglu_slice(&g, &u, &mut got, table);
        for (i, ((&g, &u), &got)) in g.iter().zip(&u).zip(&got).enumerate() {
            let want = gelu_ggml(g, table) * u;
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "element {i}: gelu({g}) * {u}: {got} vs {want}"
            );
        }
    }
}

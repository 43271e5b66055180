//! f32 row kernels with runtime SIMD dispatch. `scalar` is always compiled and is the
//! reference the vectorised paths are tested against; `kernels()` gives the set for the
//! instruction set `cpu::features::isa` chose (`HANZO_ISA` caps it).
//!
//! Vector sets: AVX2+FMA and AVX-512F on x86_64, NEON on aarch64, SIMD128 in a WebAssembly
//! build compiled with it. Each op is written once,
//! in `rows`, over the small vector interface of `vector`; each instruction set implements
//! that interface (`avx2`, `avx512`, `neon`) and gets its table from `row_kernels!`. A table
//! is built only for an instruction set the CPU has, so the safe fn pointers in it are always
//! sound to call.

pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg_attr(
    not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )),
    allow(dead_code)
)]
mod rows;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod simd128;
#[cfg_attr(
    not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )),
    allow(dead_code, unused_macros, unused_imports)
)]
mod vector;

use super::features::Isa;
use std::sync::OnceLock;

/// `layer_norm(x, weight, bias, eps, out)`.
pub type LayerNormFn = fn(&[f32], &[f32], Option<&[f32]>, f32, &mut [f32]);

/// `rope(x, cos, sin, out)` for one position: `x`/`out` of head_dim, `cos`/`sin` of half.
pub type RopeFn = fn(&[f32], &[f32], &[f32], &mut [f32]);

/// One table of row kernels; each field is a plain fn so dispatch costs one indirect call.
/// Binary and unary kernels work over the common length of their slices.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub name: &'static str,
    pub sum: fn(&[f32]) -> f32,
    /// NaN if any element is NaN; -inf for an empty slice.
    pub max: fn(&[f32]) -> f32,
    pub dot: fn(&[f32], &[f32]) -> f32,
    /// `o += alpha · x`.
    pub axpy: fn(f32, &[f32], &mut [f32]),
    pub add: fn(&[f32], &[f32], &mut [f32]),
    pub sub: fn(&[f32], &[f32], &mut [f32]),
    pub mul: fn(&[f32], &[f32], &mut [f32]),
    pub div: fn(&[f32], &[f32], &mut [f32]),
    /// Semantics of `op::Maximum` / `op::Minimum` (NaN propagates, ties give `a`).
    pub maximum: fn(&[f32], &[f32], &mut [f32]),
    pub minimum: fn(&[f32], &[f32], &mut [f32]),
    pub exp: fn(&[f32], &mut [f32]),
    pub silu: fn(&[f32], &mut [f32]),
    pub softmax: fn(&[f32], &mut [f32]),
    pub log_softmax: fn(&[f32], &mut [f32]),
    pub rms_norm: fn(&[f32], &[f32], f32, &mut [f32]),
    pub layer_norm: LayerNormFn,
    pub rope_halfsplit: RopeFn,
    pub rope_interleaved: RopeFn,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernels({})", self.name)
    }
}

impl Kernels {
    pub const SCALAR: Kernels = Kernels {
        name: "scalar",
        sum: scalar::sum,
        max: scalar::max,
        dot: scalar::dot,
        axpy: scalar::axpy,
        add: scalar::add,
        sub: scalar::sub,
        mul: scalar::mul,
        div: scalar::div,
        maximum: scalar::maximum,
        minimum: scalar::minimum,
        exp: scalar::exp,
        silu: scalar::silu,
        softmax: scalar::softmax,
        log_softmax: scalar::log_softmax,
        rms_norm: scalar::rms_norm,
        layer_norm: scalar::layer_norm,
        rope_halfsplit: scalar::rope_halfsplit,
        rope_interleaved: scalar::rope_interleaved,
    };

    /// The table for one instruction set (which this CPU must support): the AVX2 table
    /// serves AVX-VNNI too, whose extra instructions are integer ones.
    pub fn for_isa(isa: Isa) -> Kernels {
        assert!(isa.supported(), "{isa:?} kernels on a CPU without them");
        // SAFETY (each `assume`): `isa` is supported (asserted above), and each level's
        // features include those its table's token stands for.
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::table(unsafe { avx512::Avx512::assume() }),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni => avx2::table(unsafe { avx2::Avx2::assume() }),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::NeonDot => neon::table(unsafe { neon::Neon::assume() }),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Isa::Simd128 => simd128::table(unsafe { simd128::Simd128::assume() }),
            _ => Self::SCALAR,
        }
    }

    /// Every distinct kernel set this CPU can run, best last (scalar first). Tests compare them all.
    pub fn available() -> Vec<Kernels> {
        let mut all: Vec<Kernels> = Vec::new();
        for k in Isa::available().into_iter().map(Self::for_isa) {
            if all.last().is_none_or(|last| last.name != k.name) {
                all.push(k);
            }
        }
        all
    }
}

/// The kernels chosen for this process.
pub fn kernels() -> &'static Kernels {
    static K: OnceLock<Kernels> = OnceLock::new();
    K.get_or_init(|| Kernels::for_isa(super::features::isa()))
}

// Dispatchers with the signatures of `op::UnaryOpT::F32_VEC` / `op::BinaryOpT::F32_VEC`.

/// Sum; long slices are summed in parallel chunks whose partial sums are added in order, so
/// the result does not depend on scheduling.
pub fn sum_f32(v: &[f32]) -> f32 {
    use super::elementwise::{PAR_CHUNK, PAR_MIN};
    let sum = kernels().sum;
    if v.len() < 4 * PAR_MIN {
        return sum(v);
    }
    let part = 4 * PAR_CHUNK;
    let mut parts = vec![0f32; v.len().div_ceil(part)];
    crate::cpu::par::for_each_chunk(&mut parts, 1, &|i, p| {
        p[0] = sum(&v[i * part..v.len().min((i + 1) * part)])
    });
    sum(&parts)
}

pub fn exp_f32(x: &[f32], o: &mut [f32]) {
    (kernels().exp)(x, o)
}

pub fn silu_f32(x: &[f32], o: &mut [f32]) {
    (kernels().silu)(x, o)
}

/// Exact (erf) GELU, `0.5 x (1 + erf(x / √2))`, with erf from Abramowitz & Stegun 7.1.26
/// (absolute error ≤ 1.5e-7) over the vector `exp` kernel: the polynomial vectorises, where
/// libm's `erff` is a branchy scalar call per element.
pub fn gelu_erf_f32(x: &[f32], o: &mut [f32]) {
    const CHUNK: usize = 256;
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let exp = kernels().exp;
    let mut e = [0f32; CHUNK];
    for (x, o) in x.chunks(CHUNK).zip(o.chunks_mut(CHUNK)) {
        let e = &mut e[..x.len()];
        for (o, &v) in o.iter_mut().zip(x) {
            let z = v * std::f32::consts::FRAC_1_SQRT_2;
            *o = -z * z;
        }
        exp(o, e);
        for (o, (&v, &e)) in o.iter_mut().zip(x.iter().zip(e.iter())) {
            let z = (v * std::f32::consts::FRAC_1_SQRT_2).abs();
            let t = 1.0 / (1.0 + P * z);
            let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
            let erf = (1.0 - poly * e).copysign(v);
            *o = 0.5 * v * (1.0 + erf);
        }
    }
}

pub fn add_f32(a: &[f32], b: &[f32], o: &mut [f32]) {
    (kernels().add)(a, b, o)
}

pub fn sub_f32(a: &[f32], b: &[f32], o: &mut [f32]) {
    (kernels().sub)(a, b, o)
}

pub fn mul_f32(a: &[f32], b: &[f32], o: &mut [f32]) {
    (kernels().mul)(a, b, o)
}

pub fn div_f32(a: &[f32], b: &[f32], o: &mut [f32]) {
    (kernels().div)(a, b, o)
}

pub fn maximum_f32(a: &[f32], b: &[f32], o: &mut [f32]) {
    (kernels().maximum)(a, b, o)
}

pub fn minimum_f32(a: &[f32], b: &[f32], o: &mut [f32]) {
    (kernels().minimum)(a, b, o)
}

#[cfg(test)]
mod gelu_tests {
    #[test]
    fn vector_gelu_erf_matches_the_f64_formula() {
        let x: Vec<f32> = (-4000..=4000)
            .map(|i| i as f32 * 0.0025)
            .chain([-30.0, 30.0, 1e-30])
            .collect();
        let mut got = vec![0f32; x.len()];
        super::gelu_erf_f32(&x, &mut got);
        for (&v, &g) in x.iter().zip(&got) {
            let v64 = v as f64;
            let want = 0.5 * v64 * (1.0 + libm::erf(v64 * std::f64::consts::FRAC_1_SQRT_2));
            let err = (g as f64 - want).abs();
            assert!(
                err <= 2e-7 * v64.abs().max(1.0),
                "gelu({v}) = {g}, want {want}"
            );
        }
    }
}

//! The bottom layer of `quantized`: ggml's block formats and their portable arithmetic.
//!
//! Each block is a `#[repr(C)]` struct with ggml's exact layout (size checked at compile
//! time) behind one trait: dequantize, quantize with ggml's algorithm, the scalar dot product
//! against its activation partner type (`Dot`) that every SIMD kernel is checked against, and
//! the unpacked form the prefill GEMM multiplies. Nothing here knows about instruction sets or
//! threads, so another backend (a GPU) can reuse the layouts and the reference arithmetic
//! without pulling in any x86 code; the layers above (`kernels`, `cpu`, `qmatmul`) import
//! from here and never the other way.
//!
//! Quantization follows ggml's reference (`*_ref`, no importance matrix) algorithms, which is
//! what `llama-quantize` runs without `--imatrix`.

pub mod afq;
mod dtype;
mod float;
mod importance;
pub mod interleaved;
pub mod interleaved_iq4xs;
mod iq1;
mod iq1_quant;
mod iq2;
mod iq2_quant;
mod iq3;
mod iq3_quant;
mod iq4nl;
mod iq4xs;
mod iq_grids;
mod kquants;
mod lattice;
mod lattice_search;
mod legacy;
mod mxfp4;
pub(crate) mod search;
mod ternary;

pub use afq::{AfqScale, AfqType};
pub use dtype::GgmlDType;

pub use iq1::{BlockIQ1M, BlockIQ1S};
#[cfg(target_arch = "aarch64")]
pub(crate) use iq1::{DecodesToRuns, DELTA as IQ1_DELTA};
pub use iq2::{BlockIQ2S, BlockIQ2XS, BlockIQ2XXS};
pub use iq3::{BlockIQ3S, BlockIQ3XXS};
pub use iq4nl::{BlockIQ4NL, IQ4NL_VALUES};
pub use iq4xs::BlockIQ4XS;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) use kquants::scale_min_k4;
#[cfg(target_arch = "aarch64")]
pub(crate) use kquants::{q3k_scales_by_words, scales_mins_k4};
pub use kquants::{
    quantize_q8k_ref, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K,
};
#[cfg(target_arch = "aarch64")]
pub(crate) use lattice::LevelsFactor;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use lattice::{iq1s_grid, iq2s_grid, iq2xs_grid, iq2xxs_grid, iq3s_grid, iq3xxs_grid};
pub(crate) use legacy::{nibbles, nibbles_5};
pub use legacy::{
    quantize_q8_0_ref, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK,
};
pub use mxfp4::{e8m0_half, BlockMXFP4, MXFP4_VALUES};
pub use ternary::{BlockTQ1_0, BlockTQ2_0};

/// The half-precision float types under names the type-dispatch macro can reach from any crate.
pub type HalfF16 = half::f16;
pub type HalfBF16 = half::bf16;

/// A block's 256 levels, 32 at a time: element `32r + i` is `level(r, i)`. Loops of this shape
/// vectorize (one shift count per run), where `from_fn` over all 256 computes each element's
/// indices and shifts on its own; the GEMM panels unpack every weight block through these.
#[inline(always)]
pub(super) fn by_runs<T: Copy + Default>(level: impl Fn(usize, usize) -> T) -> [T; 256] {
    let mut out = [T::default(); 256];
    for (r, run) in out.chunks_exact_mut(32).enumerate() {
        for (i, o) in run.iter_mut().enumerate() {
            *o = level(r, i);
        }
    }
    out
}

/// A block in the form the prefill GEMM multiplies (see `quantized::cpu::gemm`): unsigned levels
/// `u` (one byte per element, none above `max_level`) and, per group of `group` elements
/// (16 or 32), a scale and a min, so that element `i` is `scale[i / group] * u[i] - min[i / group]`.
pub struct Unpacking<B> {
    pub group: usize,
    pub max_level: u8,
    /// Fills the first `BLOCK_SIZE` levels and `BLOCK_SIZE / group` scales and mins (fixed
    /// sizes, the largest block's, so the copies compile to plain moves).
    pub unpack: fn(&B, &mut [u8; 256], &mut [f32; 16], &mut [f32; 16]),
}

pub trait GgmlBlock: bytemuck::Pod + Send + Sync + 'static {
    const DTYPE: GgmlDType;
    /// Elements per block.
    const BLOCK_SIZE: usize;
    /// The type activations are quantized to before a dot product with this type.
    type Dot: GgmlBlock;

    /// `out.len() == blocks.len() * BLOCK_SIZE`.
    fn dequantize(blocks: &[Self], out: &mut [f32]);
    /// `xs.len() == out.len() * BLOCK_SIZE`. ggml's reference algorithm; `kernels` has the
    /// SIMD forms of the activation types' quantization, byte-exact with this.
    fn quantize(xs: &[f32], out: &mut [Self]);
    /// Portable dot product; the SIMD kernels are checked against it.
    fn vec_dot_scalar(w: &[Self], x: &[Self::Dot]) -> f32;
    /// Quantizes one whole row `xs` under the importance `qw` of its columns (an importance
    /// matrix's, `qw.len() == xs.len()`), as `llama-quantize --imatrix` does. The types whose
    /// ggml quantizer takes no importance (Q8_0, the floats, TQ*, MXFP4) run `quantize`.
    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        let _ = qw;
        Self::quantize(xs, out)
    }
    /// Why `quantize` (without importance) cannot write this type: ggml quantizes IQ2_XXS,
    /// IQ2_XS and IQ1_S only under an importance matrix (`quantize_row_weighted`). Their
    /// `quantize` must not be called; `QTensor::quantize` answers with this message instead.
    const QUANTIZE_UNSUPPORTED: Option<&'static str> = None;
    /// The GEMM form, for the types that have one.
    fn unpacking() -> Option<Unpacking<Self>> {
        None
    }
}

/// Runs `$body` with `$B` bound to the block type of `$dtype` (the ggml type-traits table).
#[macro_export]
#[doc(hidden)]
macro_rules! with_block_type {
    ($dtype:expr, $B:ident => $body:expr) => {{
        use $crate::quantized::format::GgmlDType as T;
        use $crate::quantized::format::*;
        match $dtype {
            T::F32 => {
                type $B = f32;
                $body
            }
            T::F16 => {
                type $B = HalfF16;
                $body
            }
            T::BF16 => {
                type $B = HalfBF16;
                $body
            }
            T::Q4_0 => {
                type $B = BlockQ4_0;
                $body
            }
            T::Q4_1 => {
                type $B = BlockQ4_1;
                $body
            }
            T::Q5_0 => {
                type $B = BlockQ5_0;
                $body
            }
            T::Q5_1 => {
                type $B = BlockQ5_1;
                $body
            }
            T::Q8_0 => {
                type $B = BlockQ8_0;
                $body
            }
            T::Q8_1 => {
                type $B = BlockQ8_1;
                $body
            }
            T::Q2K => {
                type $B = BlockQ2K;
                $body
            }
            T::Q3K => {
                type $B = BlockQ3K;
                $body
            }
            T::Q4K => {
                type $B = BlockQ4K;
                $body
            }
            T::Q5K => {
                type $B = BlockQ5K;
                $body
            }
            T::Q6K => {
                type $B = BlockQ6K;
                $body
            }
            T::Q8K => {
                type $B = BlockQ8K;
                $body
            }
            T::IQ4NL => {
                type $B = BlockIQ4NL;
                $body
            }
            T::IQ2XXS => {
                type $B = BlockIQ2XXS;
                $body
            }
            T::IQ2XS => {
                type $B = BlockIQ2XS;
                $body
            }
            T::IQ2S => {
                type $B = BlockIQ2S;
                $body
            }
            T::IQ3XXS => {
                type $B = BlockIQ3XXS;
                $body
            }
            T::IQ3S => {
                type $B = BlockIQ3S;
                $body
            }
            T::IQ1S => {
                type $B = BlockIQ1S;
                $body
            }
            T::IQ1M => {
                type $B = BlockIQ1M;
                $body
            }
            T::IQ4XS => {
                type $B = BlockIQ4XS;
                $body
            }
            T::TQ1_0 => {
                type $B = BlockTQ1_0;
                $body
            }
            T::TQ2_0 => {
                type $B = BlockTQ2_0;
                $body
            }
            T::MXFP4 => {
                type $B = BlockMXFP4;
                $body
            }
            T::Afq(t) => $crate::quantized::format::afq::not_a_block(t),
        }
    }};
}

impl GgmlDType {
    /// Why this type cannot be quantized to without an importance matrix, for the types that
    /// need one.
    pub fn quantize_unsupported(self) -> Option<&'static str> {
        if self.afq().is_some() {
            return None;
        }
        crate::with_block_type!(self, B => B::QUANTIZE_UNSUPPORTED)
    }
}

/// The element of largest magnitude (the first one on ties), with its sign.
pub(crate) fn signed_absmax(xs: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in xs {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

pub(crate) fn min_max(xs: &[f32]) -> (f32, f32) {
    xs.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| {
        (if v < lo { v } else { lo }, if v > hi { v } else { hi })
    })
}

/// Σ a·b over i8 lanes, in i32.
#[inline]
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// `n` values of random bytes (xorshift from `seed`): blocks with every bit pattern the
/// format can hold, for tests.
#[cfg(test)]
pub(crate) fn random_pod<T: bytemuck::Pod>(n: usize, seed: u64) -> Vec<T> {
    let mut s = seed | 1;
    let mut out = vec![<T as bytemuck::Zeroable>::zeroed(); n];
    for b in bytemuck::cast_slice_mut::<T, u8>(&mut out) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = (s >> 32) as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_match_the_table() {
        fn check<B: GgmlBlock>() {
            assert_eq!(
                std::mem::size_of::<B>(),
                B::DTYPE.type_size(),
                "{}",
                B::DTYPE
            );
            assert_eq!(B::BLOCK_SIZE, B::DTYPE.block_size(), "{}", B::DTYPE);
            assert!(std::mem::align_of::<B>() <= 4, "{}", B::DTYPE);
        }
        for dt in GgmlDType::ALL {
            crate::with_block_type!(dt, B => check::<B>());
        }
    }

    /// Every type's GEMM form on blocks of random bytes (every level and scale pattern; blocks
    /// whose random f16 scales give non-finite values are skipped): no byte above
    /// `max_level`, and `scale · u − min` gives the dequantized value (to float rounding).
    #[test]
    fn unpacked_forms_equal_the_dequantized_blocks() {
        fn check<B: GgmlBlock>() {
            let Some(un) = B::unpacking() else { return };
            let seed = 0x9e37_79b9_7f4a_7c15u64 ^ B::DTYPE.type_size() as u64;
            for b in random_pod::<B>(64, seed) {
                let mut want = vec![0f32; B::BLOCK_SIZE];
                B::dequantize(std::slice::from_ref(&b), &mut want);
                if want.iter().any(|v| !v.is_finite()) {
                    continue;
                }
                let (mut u, mut sc, mut mn) = ([0u8; 256], [0f32; 16], [0f32; 16]);
                (un.unpack)(&b, &mut u, &mut sc, &mut mn);
                for (i, &w) in want.iter().enumerate() {
                    let g = i / un.group;
                    assert!(
                        u[i] <= un.max_level,
                        "{} byte {} > {}",
                        B::DTYPE,
                        u[i],
                        un.max_level
                    );
                    let got = sc[g] * u[i] as f32 - mn[g];
                    let tol = 1e-6 * (mn[g].abs() + w.abs()).max(1e-30);
                    assert!(
                        (got - w).abs() <= tol,
                        "{} element {i}: {got} vs {w}",
                        B::DTYPE
                    );
                }
            }
        }
        for dt in GgmlDType::ALL {
            crate::with_block_type!(dt, B => check::<B>());
        }
    }
}

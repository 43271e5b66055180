//! Quantized dot-product kernels, picked at run time. Each `pick_*` returns the fastest
//! kernel this CPU runs for one weight type; the scalar form in `blocks` is the reference the
//! SIMD kernels are tested against.

#[cfg(target_arch = "x86_64")]
mod avx2;

use super::blocks::*;

/// Whether the AVX2 kernel set (AVX2 + FMA + F16C) can run here.
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Set `HANZO_QUANT_SCALAR=1` to force the scalar kernels (for comparisons and debugging).
fn simd_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var_os("HANZO_QUANT_SCALAR").is_none())
}

/// Quantizes a row of activations; the SIMD forms give the reference's exact bytes.
pub type QuantizeFn<B> = fn(&[f32], &mut [B]);

macro_rules! quantize_picker {
    ($name:ident, $block:ty, $avx2:ident, $reference:ident) => {
        pub fn $name() -> QuantizeFn<$block> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() && simd_allowed() {
                fn kernel(xs: &[f32], out: &mut [$block]) {
                    // SAFETY: handed out only after `has_avx2()` confirmed AVX2 and FMA.
                    unsafe { avx2::$avx2(xs, out) }
                }
                return kernel;
            }
            $reference
        }
    };
}

quantize_picker!(
    pick_quantize_q8_0,
    BlockQ8_0,
    quantize_q8_0,
    quantize_q8_0_ref
);
quantize_picker!(pick_quantize_q8k, BlockQ8K, quantize_q8k, quantize_q8k_ref);

macro_rules! picker {
    ($name:ident, $block:ty, $avx2:ident) => {
        pub fn $name() -> VecDotFn<$block> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() && simd_allowed() {
                fn kernel(w: &[$block], x: &[<$block as GgmlBlock>::Dot]) -> f32 {
                    // SAFETY: this function is only handed out after `has_avx2()` confirmed
                    // AVX2, FMA and F16C at run time.
                    unsafe { avx2::$avx2(w, x) }
                }
                return kernel;
            }
            <$block as GgmlBlock>::vec_dot_scalar
        }
    };
}

/// `$one` picks the single dot product (the 1x1 tile) and `$tile` the `R x C` tiles.
macro_rules! tile_picker {
    ($one:ident, $tile:ident, $block:ty, $avx2:ident) => {
        pub fn $tile<const R: usize, const C: usize>() -> Option<TileFn<$block, R, C>> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() && simd_allowed() {
                fn kernel<const R: usize, const C: usize>(
                    w: [&[$block]; R],
                    x: [&[<$block as GgmlBlock>::Dot]; C],
                ) -> [[f32; C]; R] {
                    // SAFETY: handed out only after `has_avx2()` confirmed AVX2, FMA and F16C.
                    unsafe { avx2::$avx2::<R, C>(w, x) }
                }
                return Some(kernel::<R, C>);
            }
            None
        }

        pub fn $one() -> VecDotFn<$block> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() && simd_allowed() {
                fn kernel(w: &[$block], x: &[<$block as GgmlBlock>::Dot]) -> f32 {
                    // SAFETY: as above.
                    unsafe { avx2::$avx2::<1, 1>([w], [x])[0][0] }
                }
                return kernel;
            }
            <$block as GgmlBlock>::vec_dot_scalar
        }
    };
}

tile_picker!(pick_q4_0, tile_q4_0, BlockQ4_0, q4_0_tile);
tile_picker!(pick_q5_0, tile_q5_0, BlockQ5_0, q5_0_tile);
tile_picker!(pick_q8_0, tile_q8_0, BlockQ8_0, q8_0_tile);
tile_picker!(pick_q4k, tile_q4k, BlockQ4K, q4k_tile);
tile_picker!(pick_q5k, tile_q5k, BlockQ5K, q5k_tile);
tile_picker!(pick_q6k, tile_q6k, BlockQ6K, q6k_tile);
picker!(pick_q4_1, BlockQ4_1, q4_1_q8_1);

pub fn pick_q2k() -> VecDotFn<BlockQ2K> {
    BlockQ2K::vec_dot_scalar
}

pub fn pick_q3k() -> VecDotFn<BlockQ3K> {
    BlockQ3K::vec_dot_scalar
}

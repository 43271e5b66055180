//! AVX2 + FMA + F16C tiles for F16 and BF16 weights against activation rows rounded to the
//! same type (ggml's pairing, so results match llama.cpp's on the same file).
//!
//! Decode streams two bytes per weight and does one FMA per eight of them: memory bound, so
//! the tile's job is to keep enough loads in flight. Each step widens eight halves of every
//! weight row and every activation row to f32 once, and every (row, activation) pair adds
//! their product into its own accumulator; the ragged tail (`k` not a multiple of 8) is
//! summed in scalar code.

use crate::quantized::format::{HalfBF16, HalfF16};
use std::arch::x86_64::*;

/// Eight halves of one kind, widened to f32.
trait Widen: Copy {
    /// # Safety
    /// `p` holds at least 8 elements; the CPU has AVX2 and F16C.
    unsafe fn widen8(p: &[Self]) -> __m256;
    fn to_f32(self) -> f32;
}

impl Widen for HalfF16 {
    #[inline(always)]
    unsafe fn widen8(p: &[Self]) -> __m256 {
        debug_assert!(p.len() >= 8);
        // SAFETY: 8 halves = 16 bytes readable (caller); F16C enabled by the caller.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.as_ptr() as *const __m128i)) }
    }
    fn to_f32(self) -> f32 {
        HalfF16::to_f32(self)
    }
}

impl Widen for HalfBF16 {
    #[inline(always)]
    unsafe fn widen8(p: &[Self]) -> __m256 {
        debug_assert!(p.len() >= 8);
        // SAFETY: as for f16; a bf16 is the high half of an f32, so widening is a shift.
        unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.as_ptr() as *const __m128i));
            _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
        }
    }
    fn to_f32(self) -> f32 {
        HalfBF16::to_f32(self)
    }
}

#[inline(always)]
unsafe fn tile<H: Widen, const R: usize, const C: usize>(
    w: [&[H]; R],
    x: [&[H]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let k = x[0].len();
    let whole = k - k % 8;
    // SAFETY: the caller enables AVX2, FMA and F16C; every load reads 8 elements at
    // `i < whole <= len`, and all slices have length `k` (checked above). Loops, not
    // `array::from_fn`: a closure holding intrinsics may not be inlined (see `interleaved`).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut i = 0;
        while i < whole {
            let mut xs = [_mm256_setzero_ps(); C];
            for c in 0..C {
                xs[c] = H::widen8(&x[c][i..]);
            }
            for r in 0..R {
                let wv = H::widen8(&w[r][i..]);
                for c in 0..C {
                    acc[r][c] = _mm256_fmadd_ps(wv, xs[c], acc[r][c]);
                }
            }
            i += 8;
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let tail: f32 = (whole..k)
                    .map(|i| w[r][i].to_f32() * x[c][i].to_f32())
                    .sum();
                out[r][c] = super::avx2::hsum(acc[r][c]) + tail;
            }
        }
        out
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_tile<const R: usize, const C: usize>(
    w: [&[HalfF16]; R],
    x: [&[HalfF16]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features `tile` needs.
    unsafe { tile(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn bf16_tile<const R: usize, const C: usize>(
    w: [&[HalfBF16]; R],
    x: [&[HalfBF16]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in f16_tile.
    unsafe { tile(w, x) }
}

//! F16 decode on AVX-512: one weight row against the activation row widened to f32 once per
//! product (`Kernels::widened_dot`), sixteen weights a `vcvtph2ps`.
//!
//! The sums are the AVX2 1x1 tile's (`float_x86`), lane for lane: that tile keeps four
//! 8-lane accumulators and adds weights `8a..8a + 8` of each 32 into accumulator `a`; here
//! the two 512-bit accumulators hold accumulators 0|1 and 2|3 side by side, so every lane
//! adds the same products in the same order, and the result is the tile's bits (decode and
//! the small-batch tiles give a row the same float). Gemma 3 F16 decode on two threads of an
//! Emerald Rapids VM 1.18x the AVX2 tile's rate (docs/BENCHMARKS.md).

use crate::quantized::format::HalfF16;
use std::arch::x86_64::*;

/// `w · x`, `x` the activations rounded to f16 and widened back to f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn f16_dot_widened(w: &[HalfF16], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len());
    let k = x.len();
    let whole = k - k % 8;
    let stepped = whole - whole % 32;
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // SAFETY: every load reads elements below `stepped` or `whole`, both at most `k`, the
    // length of both slices.
    unsafe {
        let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut i = 0;
        while i < stepped {
            let w0 = _mm512_cvtph_ps(_mm256_loadu_si256(wp.add(i) as *const __m256i));
            let w1 = _mm512_cvtph_ps(_mm256_loadu_si256(wp.add(i + 16) as *const __m256i));
            lo = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp.add(i)), lo);
            hi = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(i + 16)), hi);
            i += 32;
        }
        let upper = |v: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        let mut a0 = _mm512_castps512_ps256(lo);
        let (a1, a2, a3) = (upper(lo), _mm512_castps512_ps256(hi), upper(hi));
        // The tile's ragged eights go into its first accumulator.
        while i < whole {
            let w8 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(i) as *const __m128i));
            a0 = _mm256_fmadd_ps(w8, _mm256_loadu_ps(xp.add(i)), a0);
            i += 8;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        let tail: f32 = (whole..k).map(|i| w[i].to_f32() * x[i]).sum();
        super::avx2::hsum(sum) + tail
    }
}

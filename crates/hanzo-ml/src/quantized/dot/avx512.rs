//! AVX-512 with VNNI: the Q4_0/Q5_0/Q8_0 tiles two blocks per 512-bit register, summed by
//! `vpdpbusd zmm`. Blocks are unpacked with the AVX2 helpers (one 256-bit half each); an odd
//! last block goes through the 256-bit form of the same instruction.

use super::avx2::{self, ByteDot, PREFETCH_BLOCKS};
use crate::quantized::blocks::*;
use std::arch::x86_64::*;

/// The 256-bit `vpdpbusd` of AVX512-VNNI + VL (CPUs with AVX-512 need not have AVX-VNNI).
struct Vnni256;

impl ByteDot for Vnni256 {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller enables AVX512-VNNI and AVX512-VL.
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }
}

/// Lanes 0-7 take lane 0 of `v`, lanes 8-15 lane 1: one scale per block half.
#[inline(always)]
unsafe fn broadcast_pair(v: __m128) -> __m512 {
    // SAFETY: the caller enables AVX-512F.
    unsafe {
        let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v))
    }
}

#[inline(always)]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: the caller enables AVX-512F.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

#[inline(always)]
unsafe fn legacy_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8_0]; C],
    levels: impl Fn(&B) -> (__m256i, half::f16) + Copy,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let nb = x[0].len();
    // SAFETY: the callers enable AVX2, FMA, F16C, AVX-512F/BW/VL and AVX512-VNNI; loads stay
    // inside block fields.
    unsafe {
        let zero = _mm512_setzero_si512();
        let bias = _mm512_set1_epi8(0x80u8 as i8);
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for i in (0..nb - nb % 2).step_by(2) {
            if C == 1 {
                // As in the AVX2 tile: decode streams each weight row once.
                for row in &w {
                    let ahead = row.as_ptr().wrapping_add(i + PREFETCH_BLOCKS);
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                }
            }
            // vpdpbusd wants one unsigned operand: x + 128 (flipping the sign bit), with
            // 128·Σw taken back out of each row's sums below.
            let xs: [(__m512i, __m512); C] = std::array::from_fn(|c| {
                let (a, b) = (&x[c][i], &x[c][i + 1]);
                let q = join(avx2::load256_i8(&a.qs), avx2::load256_i8(&b.qs));
                let d = avx2::cvt_f16x2(a.d.to_bits() as u32 | (b.d.to_bits() as u32) << 16);
                (_mm512_xor_si512(q, bias), broadcast_pair(d))
            });
            for r in 0..R {
                let ((q0, d0), (q1, d1)) = (levels(&w[r][i]), levels(&w[r][i + 1]));
                let q = join(q0, q1);
                let wd = avx2::cvt_f16x2(d0.to_bits() as u32 | (d1.to_bits() as u32) << 16);
                let wd = broadcast_pair(wd);
                let offset = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, q));
                for c in 0..C {
                    let p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(offset, xs[c].0, q));
                    acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wd, xs[c].1), p, acc[r][c]);
                }
            }
        }
        let mut out = acc.map(|row| row.map(|a| _mm512_reduce_add_ps(a)));
        if nb % 2 == 1 {
            let last = avx2::legacy_tile::<Vnni256, _, R, C>(
                w.map(|row| &row[nb - 1..]),
                x.map(|col| &col[nb - 1..]),
                levels,
            );
            for (o, l) in out.iter_mut().zip(last) {
                for (o, l) in o.iter_mut().zip(l) {
                    *o += l;
                }
            }
        }
        out
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q8_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ8_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features legacy_tile needs.
    unsafe { legacy_tile(w, x, |b| avx2::q8_0_levels(b)) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q4_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q8_0_tile.
    unsafe { legacy_tile(w, x, |b| avx2::q4_0_levels(b)) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q8_0_tile.
    unsafe { legacy_tile(w, x, |b| avx2::q5_0_levels(b)) }
}

//! AVX-VNNI: the AVX2 Q4_0/Q5_0/Q8_0 tiles with `vpdpbusd` (four u8 × i8 products summed
//! straight into i32) in place of `maddubs` + `madd`. The integers are the same; the
//! k-quant types keep their AVX2 kernels, whose `madd` already applies the sub-block scales.

use super::avx2::{self, ByteDot};
use crate::quantized::format::*;
use std::arch::x86_64::*;

/// `vpdpbusd ymm` from the AVX-VNNI extension (Alder Lake, Sapphire Rapids, Zen 5).
pub(super) struct AvxVnni;

impl ByteDot for AvxVnni {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller enables AVX-VNNI.
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, s) }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn q8_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ8_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features legacy_tile and AvxVnni need.
    unsafe { avx2::legacy_tile::<AvxVnni, _, _, R, C>(w, x, |b| avx2::q8_0_levels(b)) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn q4_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q8_0_tile.
    unsafe { avx2::legacy_tile::<AvxVnni, _, _, R, C>(w, x, |b| avx2::q4_0_levels(b)) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn q5_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q8_0_tile.
    unsafe { avx2::legacy_tile::<AvxVnni, _, _, R, C>(w, x, |b| avx2::q5_0_levels(b)) }
}

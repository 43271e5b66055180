//! AVX2 tiles for the lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) against Q8_K.
//!
//! Per group of 32 weights each type gives three things: the 32 magnitudes (lattice points
//! looked up by index, four or eight bytes each, all below 64), the 32 sign bits, and the
//! group's integer multiplier (one per 16 weights for IQ2_XS and IQ2_S). The signs go onto
//! the activations (`sign_epi8`, exact because our Q8_K levels stay within ±127), the
//! magnitudes are the unsigned operand of `maddubs`, and the multiplier scales the i16 pair
//! sums into i32, so every block's sum is the scalar dot's integer. The types' power-of-two
//! factor (1/8, 1/4, 1) is applied once at the end, as the scalar dot does.

use super::avx2::{f16_to_f32, hsum, load256_i8};
use crate::quantized::format::{
    iq2s_grid, iq2xs_grid, iq2xxs_grid, iq3s_grid, iq3xxs_grid, ksigns, BlockIQ2S, BlockIQ2XS,
    BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQ8K,
};
use std::arch::x86_64::*;

/// One group of 32 weights: magnitudes, sign bits (bit `i` for weight `i`), and the i16
/// multipliers (the low 128-bit lane's for weights 0-15, the high lane's for 16-31).
struct Group {
    mag: __m256i,
    signs: u32,
    mult: __m256i,
}

/// The 32 sign bits as bytes of ±1 (-1 where the bit is set).
#[inline(always)]
unsafe fn sign_bytes(bits: u32) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        // Byte i takes source byte i / 8, then its bit i % 8.
        let spread = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let b = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
        _mm256_or_si256(set, _mm256_set1_epi8(1))
    }
}

/// The same multiplier for all 32 weights.
#[inline(always)]
unsafe fn mult32(m: u32) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set1_epi16(m as i16) }
}

/// One multiplier per 16 weights: the two nibbles of `scales`, each `2s + 1`.
#[inline(always)]
unsafe fn mult16(scales: u8) -> __m256i {
    let (lo, hi) = (2 * (scales & 15) as i16 + 1, 2 * (scales >> 4) as i16 + 1);
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo)) }
}

/// Eight 4-magnitude points, in order, as 32 bytes.
#[inline(always)]
unsafe fn points4(grid: &[[i8; 4]], idx: [usize; 8]) -> __m256i {
    let p = |i: usize| i32::from_le_bytes(grid[idx[i]].map(|v| v as u8));
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set_epi32(p(7), p(6), p(5), p(4), p(3), p(2), p(1), p(0)) }
}

/// Four 8-magnitude points, in order, as 32 bytes.
#[inline(always)]
unsafe fn points8(grid: &[[i8; 8]], idx: [usize; 4]) -> __m256i {
    let p = |i: usize| i64::from_le_bytes(grid[idx[i]].map(|v| v as u8));
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set_epi64x(p(3), p(2), p(1), p(0)) }
}

/// Four 7-bit sign indices (bits 0-27 of `aux`) as 32 sign bits.
#[inline(always)]
fn ksigns32(aux: u32) -> u32 {
    (0..4).fold(0, |s, l| s | (ksigns(aux >> (7 * l)) as u32) << (8 * l))
}

/// `factor · Σ_blocks d_w · d_x · Σ_groups mult · Σ magnitude · sign · x` for every (row,
/// activation) pair of the tile; `group(b, g)` decodes group `g` of block `b`.
#[inline(always)]
unsafe fn lattice_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    factor: f32,
    d: impl Fn(&B) -> half::f16,
    group: impl Fn(&B, usize) -> Group,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: the callers enable AVX2, FMA and F16C; every activation load is 32 bytes inside
    // a block's 256 `qs`.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            for r in 0..R {
                let b = &w[r][i];
                let mut sumi = [_mm256_setzero_si256(); C];
                for g in 0..8 {
                    let Group { mag, signs, mult } = group(b, g);
                    let s = sign_bytes(signs);
                    for c in 0..C {
                        let xs = _mm256_sign_epi8(load256_i8(&xb[c].qs[32 * g..]), s);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, xs), mult);
                        sumi[c] = _mm256_add_epi32(sumi[c], p);
                    }
                }
                let dw = f16_to_f32(d(b));
                for c in 0..C {
                    let s = _mm256_set1_ps(dw * xb[c].d);
                    acc[r][c] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        acc.map(|row| row.map(|a| factor * hsum(a)))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq3xxs_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ3XXS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq3xxs_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        lattice_tile(
            w,
            x,
            0.25,
            |b| b.d,
            |b, g| {
                let (idx, words) = b.qs.split_at(64);
                let aux = u32::from_le_bytes(words[4 * g..4 * g + 4].try_into().expect("4 bytes"));
                Group {
                    mag: points4(grid, std::array::from_fn(|j| idx[8 * g + j] as usize)),
                    signs: ksigns32(aux),
                    mult: mult32(2 * (aux >> 28) + 1),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq3s_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ3S]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq3s_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        lattice_tile(
            w,
            x,
            1.0,
            |b| b.d,
            |b, g| {
                let high = b.qh[g] as usize;
                let idx = std::array::from_fn(|j| b.qs[8 * g + j] as usize | (high >> j & 1) << 8);
                let signs = &b.signs[4 * g..4 * g + 4];
                Group {
                    mag: points4(grid, idx),
                    signs: u32::from_le_bytes(signs.try_into().expect("4 bytes")),
                    mult: mult32(2 * (b.scales[g / 2] >> (4 * (g % 2)) & 15) as u32 + 1),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq2xxs_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ2XXS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2xxs_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b, g| {
                let q = &b.qs[4 * g..4 * g + 4];
                let aux = q[2] as u32 | (q[3] as u32) << 16;
                let idx = [q[0] & 255, q[0] >> 8, q[1] & 255, q[1] >> 8].map(|i| i as usize);
                Group {
                    mag: points8(grid, idx),
                    signs: ksigns32(aux),
                    mult: mult32(2 * (aux >> 28) + 1),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq2xs_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ2XS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2xs_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b, g| {
                let q = &b.qs[4 * g..4 * g + 4];
                let signs = (0..4).fold(0, |s, l| s | (ksigns(q[l] as u32 >> 9) as u32) << (8 * l));
                Group {
                    mag: points8(grid, std::array::from_fn(|l| (q[l] & 511) as usize)),
                    signs,
                    mult: mult16(b.scales[g]),
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq2s_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ2S]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2s_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b, g| {
                let (low, signs) = b.qs.split_at(32);
                let high = b.qh[g] as usize;
                let idx =
                    std::array::from_fn(|l| low[4 * g + l] as usize | (high >> (2 * l) & 3) << 8);
                let signs = &signs[4 * g..4 * g + 4];
                Group {
                    mag: points8(grid, idx),
                    signs: u32::from_le_bytes(signs.try_into().expect("4 bytes")),
                    mult: mult16(b.scales[g]),
                }
            },
        )
    }
}

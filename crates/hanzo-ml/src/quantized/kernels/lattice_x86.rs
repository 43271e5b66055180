//! AVX2 tiles for the lattice types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S)
//! and the ternary TQ1_0 and TQ2_0 against Q8_K.
//!
//! Per group of 32 weights each type gives three things: the 32 magnitudes (lattice points
//! looked up by index, four or eight bytes each, all below 64), their signs, and the group's
//! integer multiplier (one per 16 weights for IQ1_M, IQ2_XS and IQ2_S). The signs go onto
//! the activations (`sign_epi8`, exact because our Q8_K levels stay within ±127), the
//! magnitudes are the unsigned operand of `maddubs`, and the multiplier scales the i16 pair
//! sums into i32, so every block's sum is the scalar dot's integer. The types' power-of-two
//! factor (1/8, 1/4, 1) is applied once at the end, as the scalar dot does. IQ1's values
//! `grid ± 1/8` are the integers `8·grid ± 1` under the factor 1/8, and TQ2_0's stored
//! `q + 1` the integer `q`, so all take the same loop. IQ1_S, whose `±1` is one sign per
//! group of 32, adds it as `±Σ x` from the activations' sums of 16 instead. TQ1_0 has a loop
//! of its own: its trits, decoded by multiplication, stay unsigned (`tq1_0_tile`).

use super::avx2::{f16_to_f32, hsum, load256_i8};
use crate::quantized::format::{
    iq1s_grid, iq2s_grid, iq2xs_grid, iq2xxs_grid, iq3s_grid, iq3xxs_grid, BlockIQ1M, BlockIQ1S,
    BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQ8K, BlockTQ1_0, BlockTQ2_0,
    KSIGNS,
};
use std::arch::x86_64::*;

/// One group of 32 weights: magnitudes, signs (a byte per weight whose sign is the weight's;
/// zero where the weight is), and the i16 multipliers (the low 128-bit lane's for weights
/// 0-15, the high lane's for 16-31).
struct Group {
    mag: __m256i,
    sign: __m256i,
    mult: __m256i,
}

impl Group {
    /// Signed levels (within ±127) as magnitude and sign.
    #[inline(always)]
    unsafe fn signed(w: __m256i, mult: __m256i) -> Group {
        // SAFETY: register-only AVX2, which the callers enable.
        unsafe {
            Group {
                mag: _mm256_abs_epi8(w),
                sign: w,
                mult,
            }
        }
    }
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

/// Four 8-value IQ1 points in {-1, 0, 1}, each shifted by ±1/8 (`minus[l]` for run `l`),
/// in eighths: `8·grid ± 1`.
#[inline(always)]
unsafe fn iq1_eighths(grid: &[[i8; 8]], idx: [usize; 4], minus: [bool; 4]) -> __m256i {
    // Eight bytes of -1 or of +1.
    let shift = |l: usize| if minus[l] { -1 } else { 0x0101_0101_0101_0101 };
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        let g = points8(grid, idx);
        let eight = _mm256_sign_epi8(_mm256_set1_epi8(8), g);
        _mm256_add_epi8(
            eight,
            _mm256_set_epi64x(shift(3), shift(2), shift(1), shift(0)),
        )
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

/// ggml's 128 sign patterns as bytes of ±1 (-1 where the pattern's bit is set): the signs of
/// 8 weights from one 7-bit index in one load, where expanding bits would take a shuffle.
static SIGN_BYTES: [u64; 128] = sign_bytes_table();

const fn sign_bytes_table() -> [u64; 128] {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let mut j = 0;
        while j < 8 {
            let byte: u64 = if KSIGNS[i] >> j & 1 == 1 { 0xff } else { 0x01 };
            t[i] |= byte << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
}

/// Four 7-bit sign indices (the low 7 bits of each) as 32 bytes of ±1.
#[inline(always)]
unsafe fn ksign_bytes(idx: [u32; 4]) -> __m256i {
    let t = |l: usize| SIGN_BYTES[(idx[l] & 127) as usize] as i64;
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set_epi64x(t(3), t(2), t(1), t(0)) }
}

/// The four sign indices packed in bits 0-27 of an IQ2_XXS/IQ3_XXS word.
fn packed_signs(aux: u32) -> [u32; 4] {
    [aux, aux >> 7, aux >> 14, aux >> 21]
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
    // SAFETY: the caller's guarantees pass on; a zero shift adds nothing (and folds away).
    unsafe { shifted_lattice_tile(w, x, factor, d, group, |_, _| 0) }
}

/// `lattice_tile` plus `shift(b, g) · Σ x` over each group's 32 activations, taken from Q8_K's
/// sums of 16 (`bsums`) rather than added to every weight: IQ1_S's `±1/8` is one sign for a
/// whole group.
#[inline(always)]
unsafe fn shifted_lattice_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    factor: f32,
    d: impl Fn(&B) -> half::f16,
    group: impl Fn(&B, usize) -> Group,
    shift: impl Fn(&B, usize) -> i32,
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
                let mut shifted = [0i32; C];
                for g in 0..8 {
                    let Group { mag, sign, mult } = group(b, g);
                    let k = shift(b, g);
                    for c in 0..C {
                        let xs = _mm256_sign_epi8(load256_i8(&xb[c].qs[32 * g..]), sign);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, xs), mult);
                        sumi[c] = _mm256_add_epi32(sumi[c], p);
                        let sums = &xb[c].bsums;
                        shifted[c] += k * (sums[2 * g] as i32 + sums[2 * g + 1] as i32);
                    }
                }
                let dw = f16_to_f32(d(b));
                for c in 0..C {
                    let s = _mm256_set1_ps(dw * xb[c].d);
                    let lane0 = _mm256_zextsi128_si256(_mm_cvtsi32_si128(shifted[c]));
                    let sumi = _mm256_add_epi32(sumi[c], lane0);
                    acc[r][c] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sumi), acc[r][c]);
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
                    sign: ksign_bytes(packed_signs(aux)),
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
                    sign: sign_bytes(u32::from_le_bytes(signs.try_into().expect("4 bytes"))),
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
                    sign: ksign_bytes(packed_signs(aux)),
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
                Group {
                    mag: points8(grid, std::array::from_fn(|l| (q[l] & 511) as usize)),
                    sign: ksign_bytes(std::array::from_fn(|l| q[l] as u32 >> 9)),
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
                    sign: sign_bytes(u32::from_le_bytes(signs.try_into().expect("4 bytes"))),
                    mult: mult16(b.scales[g]),
                }
            },
        )
    }
}

/// IQ1_S's group multiplier `2s + 1` from its `qh` word.
fn iq1s_mult(h: usize) -> u32 {
    2 * (h >> 12 & 7) as u32 + 1
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq1s_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ1S]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq1s_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        shifted_lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b, g| {
                let h = b.qh[g] as usize;
                let idx =
                    std::array::from_fn(|l| b.qs[4 * g + l] as usize | (h >> (3 * l) & 7) << 8);
                // `8·grid` in eighths: the multiplier carries the 8, the shift comes after.
                Group::signed(points8(grid, idx), mult32(8 * iq1s_mult(h)))
            },
            |b, g| {
                let h = b.qh[g] as usize;
                let m = iq1s_mult(h) as i32;
                if h & 0x8000 != 0 {
                    -m
                } else {
                    m
                }
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq1m_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ1M]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq1s_grid();
    let scales = |b: &BlockIQ1M| -> [u16; 4] {
        std::array::from_fn(|k| u16::from_le_bytes([b.scales[2 * k], b.scales[2 * k + 1]]))
    };
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        lattice_tile(
            w,
            x,
            0.125,
            |b| {
                let sc = scales(b);
                let bits =
                    (sc[0] >> 12) | (sc[1] >> 8 & 0xf0) | (sc[2] >> 4 & 0xf00) | (sc[3] & 0xf000);
                half::f16::from_bits(bits)
            },
            |b, g| {
                // Runs 4g..4g + 4: a nibble each (index top bits, shift sign), two per byte.
                let nib = |l: usize| (b.qh[2 * g + l / 2] >> (4 * (l % 2)) & 15) as usize;
                let idx = std::array::from_fn(|l| b.qs[4 * g + l] as usize | (nib(l) & 7) << 8);
                let minus = std::array::from_fn(|l| nib(l) & 8 != 0);
                // Scales 2g and 2g + 1, three bits each, four per little-endian word.
                let sc = scales(b);
                let s = |s: usize| 2 * (sc[s / 4] >> (3 * (s % 4)) & 7) as i16 + 1;
                let mult = _mm256_set_m128i(_mm_set1_epi16(s(2 * g + 1)), _mm_set1_epi16(s(2 * g)));
                Group::signed(iq1_eighths(grid, idx, minus), mult)
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tq2_0_tile<const R: usize, const C: usize>(
    w: [&[BlockTQ2_0]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features lattice_tile needs; the load reads 32 of
    // the 64 bytes of `qs`.
    unsafe {
        lattice_tile(
            w,
            x,
            1.0,
            |b| b.d,
            |b, g| {
                // Weights 32g..32g + 32: bits 2(g % 4) of bytes 32(g / 4)..+32, stored q + 1.
                let bytes = super::avx2::load256(&b.qs[32 * (g / 4)..]);
                let shifted = _mm256_srlv_epi32(bytes, _mm256_set1_epi32(2 * (g % 4) as i32));
                let q = _mm256_and_si256(shifted, _mm256_set1_epi8(3));
                Group::signed(_mm256_sub_epi8(q, _mm256_set1_epi8(1)), mult32(1))
            },
        )
    }
}

/// The trits of 32 TQ1_0 bytes already multiplied by `3^n` (mod 256): trit `n` of byte `q`
/// is `(3·(q·3^n mod 256)) >> 8`, which is 0, 1 or 2 as the product is at most 85, at most
/// 170, or more. Two signed compares (after moving the bytes to the signed range) count it.
#[inline(always)]
unsafe fn trits(scaled: __m256i) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        let v = _mm256_xor_si256(scaled, _mm256_set1_epi8(i8::MIN));
        let above_85 = _mm256_cmpgt_epi8(v, _mm256_set1_epi8((85u8 ^ 0x80) as i8));
        let above_170 = _mm256_cmpgt_epi8(v, _mm256_set1_epi8((170u8 ^ 0x80) as i8));
        _mm256_abs_epi8(_mm256_add_epi8(above_85, above_170))
    }
}

/// Bytes times 3, mod 256.
#[inline(always)]
unsafe fn triple(v: __m256i) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_add_epi8(v, _mm256_add_epi8(v, v)) }
}

/// The eight groups of 32 weights of a TQ1_0 block as bytes times the power of 3 that brings
/// each weight's trit to the top (`trits`), in weight order.
#[inline(always)]
unsafe fn tq1_0_scaled(b: &BlockTQ1_0) -> [__m256i; 8] {
    // SAFETY: the callers enable AVX2; the loads read 32 of the 48 bytes of `qs` at 0 and 16
    // of them at 32.
    unsafe {
        // Weights 32n + j (n < 5): trit n of byte j.
        let mut g = [super::avx2::load256(&b.qs[..]); 8];
        for n in 1..5 {
            g[n] = triple(g[n - 1]);
        }
        // Weights 160 + 16n + j: trit n of byte 32 + j, two n per group, the last n with
        // weights 240 + 4n + j (trit n of `qh[j]`) in its upper half.
        let half = _mm_loadu_si128(b.qs[32..48].as_ptr() as *const __m128i);
        let t = |v: __m128i| _mm_add_epi8(v, _mm_add_epi8(v, v));
        let h3 = t(half);
        let h9 = t(h3);
        let h27 = t(h9);
        let h81 = t(h27);
        let qh = _mm_set1_epi32(i32::from_le_bytes(b.qh));
        let qh3 = t(qh);
        let qh9 = t(qh3);
        let qh27 = t(qh9);
        // Bytes 4n..4n + 4 of the upper half are `qh` times 3^n.
        let tail = _mm_blend_epi32::<0b1000>(
            _mm_blend_epi32::<0b0100>(_mm_blend_epi32::<0b0010>(qh, qh3), qh9),
            qh27,
        );
        g[5] = _mm256_set_m128i(h3, half);
        g[6] = _mm256_set_m128i(h27, h9);
        g[7] = _mm256_set_m128i(tail, h81);
        g
    }
}

/// TQ1_0 against Q8_K. Each trit `u` (0..=2, the weight `u − 1`) is the unsigned operand of
/// `maddubs`, the eight groups' pair sums add up in i16 (at most 8 · 2 · 2 · 128 = 4,096), and
/// `Σ x` of the block (its sums of 16) comes off once, so the block's sum is the scalar dot's
/// integer `Σ (u − 1)·x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tq1_0_tile<const R: usize, const C: usize>(
    w: [&[BlockTQ1_0]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: the features are enabled above; every activation load is 32 bytes inside a
    // block's 256 `qs` or its 16 `bsums`.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            let mut xsum = [_mm256_setzero_si256(); C];
            for c in 0..C {
                let sums = _mm256_loadu_si256(xb[c].bsums.as_ptr() as *const __m256i);
                xsum[c] = _mm256_madd_epi16(sums, ones);
            }
            for r in 0..R {
                let b = &w[r][i];
                let scaled = tq1_0_scaled(b);
                let mut pairs = [_mm256_setzero_si256(); C];
                for (g, scaled) in scaled.into_iter().enumerate() {
                    let u = trits(scaled);
                    for c in 0..C {
                        let xs = load256_i8(&xb[c].qs[32 * g..]);
                        pairs[c] = _mm256_add_epi16(pairs[c], _mm256_maddubs_epi16(u, xs));
                    }
                }
                let dw = f16_to_f32(b.d);
                for c in 0..C {
                    let s = _mm256_sub_epi32(_mm256_madd_epi16(pairs[c], ones), xsum[c]);
                    let scale = _mm256_set1_ps(dw * xb[c].d);
                    acc[r][c] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s), acc[r][c]);
                }
            }
        }
        acc.map(|row| row.map(|a| hsum(a)))
    }
}

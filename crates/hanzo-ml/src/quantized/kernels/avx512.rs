//! AVX-512 with VNNI: 512-bit tiles.
//! - Q4_0/Q5_0/Q8_0: two blocks per register, summed by `vpdpbusd zmm`; an odd last block
//!   goes through the 256-bit form of the same instruction. Q4_0/Q5_0 take their unsigned
//!   levels as they are and subtract the zero point through the activations' sums (fewer
//!   shuffles; see docs/QUANTIZATION.md for the measurement).
//! - Q2_K/Q3_K/Q4_K/Q5_K/Q6_K: 64 levels per step through the AVX512-BW `maddubs` + `madd`
//!   pair (the `madd` applies the sub-block scales, which `vpdpbusd` cannot).

use super::avx2::{self, ByteDot};
use crate::quantized::format::*;
use std::arch::x86_64::*;

/// The 256-bit `vpdpbusd` of AVX512-VNNI + VL (CPUs with AVX-512 need not have AVX-VNNI).
pub(super) struct Vnni256;

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

/// `pair(a, b)` gives two consecutive blocks' 64 signed levels, `scale` a block's scale and
/// `levels` one block's levels and scale (for an odd last block).
#[inline(always)]
unsafe fn legacy_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8_0]; C],
    levels: impl Fn(&B) -> (__m256i, half::f16) + Copy,
    pair: impl Fn(&B, &B) -> __m512i,
    scale: impl Fn(&B) -> half::f16,
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
            // vpdpbusd wants one unsigned operand: x + 128 (flipping the sign bit), with
            // 128·Σw taken back out of each row's sums below.
            let xs: [(__m512i, __m512); C] = std::array::from_fn(|c| {
                let (a, b) = (&x[c][i], &x[c][i + 1]);
                let q = join(avx2::load256_i8(&a.qs), avx2::load256_i8(&b.qs));
                let d = avx2::cvt_f16_pair(a.d, b.d);
                (_mm512_xor_si512(q, bias), broadcast_pair(d))
            });
            for r in 0..R {
                let (b0, b1) = (&w[r][i], &w[r][i + 1]);
                let q = pair(b0, b1);
                let wd = broadcast_pair(avx2::cvt_f16_pair(scale(b0), scale(b1)));
                let offset = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, q));
                for c in 0..C {
                    let p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(offset, xs[c].0, q));
                    acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wd, xs[c].1), p, acc[r][c]);
                }
            }
        }
        let mut out = acc.map(|row| row.map(|a| _mm512_reduce_add_ps(a)));
        if nb % 2 == 1 {
            let last = avx2::legacy_tile::<Vnni256, _, _, R, C>(
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
    // SAFETY: this function enables the features legacy_tile needs; qs is 32 bytes.
    unsafe {
        legacy_tile(
            w,
            x,
            |b| avx2::q8_0_levels(b),
            |a, b| join(avx2::load256_i8(&a.qs), avx2::load256_i8(&b.qs)),
            |b| b.d,
        )
    }
}

/// Q4_0 and Q5_0: levels are unsigned values less a zero point (nibble − 8, 5-bit value − 16),
/// and a pair of consecutive blocks (`2 · size_of::<B>()` bytes, under 64) comes in with one
/// masked load. `pair(v, blocks)` unpacks the loaded pair into its 64 unsigned values, block by
/// block in level order; `levels` gives one block's signed levels (for an odd last block).
///
/// `vpdpbusd` multiplies the unsigned values by the signed activations as they are; the zero
/// point comes off through `−zero · Σx`, computed once per activation pair and used as every
/// row's starting sum. Fewer shuffles per block than the signed form of `legacy_tile`.
#[inline(always)]
unsafe fn zero_point_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8_0]; C],
    zero: u8,
    levels: impl Fn(&B) -> (__m256i, half::f16) + Copy,
    pair: impl Fn(__m512i, &[B]) -> __m512i,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let nb = x[0].len();
    let size = std::mem::size_of::<B>();
    debug_assert!(size.is_multiple_of(2) && 2 * size <= 64);
    let pair_bytes: u64 = (1u64 << (2 * size)) - 1;
    // SAFETY: the callers enable AVX2, FMA, F16C, AVX-512F/BW/VL and AVX512-VNNI. The masked
    // load reads blocks i and i + 1 of a row, both in the slice; masked-off bytes are not
    // accessed.
    unsafe {
        let zero_i32 = _mm512_setzero_si512();
        let zero_point = _mm512_set1_epi8(zero as i8);
        // The two scales (each block's first field, `d`) to 16-bit lanes 0-7 and 8-15.
        let scale_idx: [i16; 32] =
            std::array::from_fn(|l| if l < 8 { 0 } else { (size / 2) as i16 });
        let scale_idx = _mm512_loadu_si512(scale_idx.as_ptr() as *const __m512i);
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for i in (0..nb - nb % 2).step_by(2) {
            let xs: [(__m512i, __m512i, __m512); C] = std::array::from_fn(|c| {
                let (a, b) = (&x[c][i], &x[c][i + 1]);
                let q = join(avx2::load256_i8(&a.qs), avx2::load256_i8(&b.qs));
                let correction =
                    _mm512_sub_epi32(zero_i32, _mm512_dpbusd_epi32(zero_i32, zero_point, q));
                (q, correction, broadcast_pair(avx2::cvt_f16_pair(a.d, b.d)))
            });
            for r in 0..R {
                let blocks = &w[r][i..i + 2];
                let v = _mm512_maskz_loadu_epi8(pair_bytes, blocks.as_ptr() as *const i8);
                let q = pair(v, blocks);
                let wd = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(
                    scale_idx, v,
                )));
                for c in 0..C {
                    let p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(xs[c].1, q, xs[c].0));
                    acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wd, xs[c].2), p, acc[r][c]);
                }
            }
        }
        let mut out = acc.map(|row| row.map(|a| _mm512_reduce_add_ps(a)));
        if nb % 2 == 1 {
            let last = avx2::legacy_tile::<Vnni256, _, _, R, C>(
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

/// A loaded block pair's 16-byte nibble arrays, which start `qs` bytes into each block (an even
/// offset), as 64 nibbles: block by block, low nibbles then high ones (level order).
#[inline(always)]
unsafe fn pair_nibbles(v: __m512i, qs: usize, size: usize) -> __m512i {
    // SAFETY: the caller enables AVX-512F/BW.
    unsafe {
        // Words 0-7 and 8-15 both take the first block's eight words, 16-31 the second's.
        let idx: [i16; 32] = std::array::from_fn(|l| {
            let block = l / 16;
            ((block * size + qs) / 2 + l % 8) as i16
        });
        let idx = _mm512_loadu_si512(idx.as_ptr() as *const __m512i);
        let bytes = _mm512_permutexvar_epi16(idx, v);
        // Shifting 16-bit words by 4 leaves each byte's high nibble in its low nibble.
        let shifted = _mm512_mask_srli_epi16(bytes, 0xFF00_FF00, bytes, 4);
        _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F))
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q4_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features zero_point_tile needs.
    unsafe {
        zero_point_tile(
            w,
            x,
            8,
            |b| avx2::q4_0_levels(b),
            |v, _| {
                pair_nibbles(
                    v,
                    std::mem::offset_of!(BlockQ4_0, qs),
                    std::mem::size_of::<BlockQ4_0>(),
                )
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features zero_point_tile needs.
    unsafe {
        zero_point_tile(
            w,
            x,
            16,
            |b| avx2::q5_0_levels(b),
            |v, pair| {
                let size = std::mem::size_of::<BlockQ5_0>();
                let nibbles = pair_nibbles(v, std::mem::offset_of!(BlockQ5_0, qs), size);
                // The 5th bits: bit j of a block's qh belongs to its level j.
                let set = u32::from_le_bytes(pair[0].qh) as u64
                    | (u32::from_le_bytes(pair[1].qh) as u64) << 32;
                _mm512_mask_add_epi8(nibbles, set, nibbles, _mm512_set1_epi8(16))
            },
        )
    }
}

#[inline(always)]
unsafe fn load512(p: &[u8]) -> __m512i {
    debug_assert!(p.len() >= 64);
    // SAFETY: every caller passes a slice of at least 64 bytes; loadu has no alignment need.
    unsafe { _mm512_loadu_si512(p.as_ptr() as *const __m512i) }
}

#[inline(always)]
unsafe fn load512_i8(p: &[i8]) -> __m512i {
    debug_assert!(p.len() >= 64);
    // SAFETY: as `load512`.
    unsafe { _mm512_loadu_si512(p.as_ptr() as *const __m512i) }
}

/// i16 lane indices for `permutexvar_epi16`: lanes `16j..16j+16` take lane `first + j`
/// (two scales, one per 32 levels) or, with `per == 8`, lanes `8j..8j+8` take `first + j`.
#[inline(always)]
unsafe fn spread_i16(first: i16, per: usize) -> __m512i {
    let idx: [i16; 32] = std::array::from_fn(|l| first + (l / per) as i16);
    // SAFETY: 64 bytes read from a 64-byte array.
    unsafe { _mm512_loadu_si512(idx.as_ptr() as *const __m512i) }
}

/// The Q4_K/Q5_K tile, 64 levels per step: `levels(block, k)` gives sub-block 2k in the low
/// 256 bits and 2k+1 in the high 256 (unsigned), matching 64 consecutive activations. As in
/// the AVX2 form, `maddubs` pairs them and `madd` applies the 6-bit scales; the mins come off
/// through the activations' group sums.
#[inline(always)]
unsafe fn k4_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    header: impl Fn(&B) -> (half::f16, half::f16, &[u8; 12]),
    levels: impl Fn(&B, usize) -> __m512i,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: the callers enable AVX2, FMA, F16C and AVX-512F/BW; loads stay inside block
    // fields.
    unsafe {
        let pick: [__m512i; 4] = std::array::from_fn(|k| spread_i16(2 * k as i16, 16));
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let mut acc_min = [[_mm_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            let bsums = xb.map(|x| avx2::subblock_sums(x));
            for r in 0..R {
                let b = &w[r][i];
                let (d, dmin, packed) = header(b);
                let sm = avx2::k4_scales_mins(packed);
                let (d, dmin) = avx2::k4_scales(d, dmin);
                let mins = _mm256_extracti128_si256(sm, 1);
                let scales = _mm512_castsi256_si512(sm);
                let mut sumi = [_mm512_setzero_si512(); C];
                for (k, pick) in pick.iter().enumerate() {
                    let q = levels(b, k);
                    let sc = _mm512_permutexvar_epi16(*pick, scales);
                    for c in 0..C {
                        let p = _mm512_maddubs_epi16(q, load512_i8(&xb[c].qs[64 * k..]));
                        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_madd_epi16(p, sc));
                    }
                }
                for c in 0..C {
                    let s = _mm512_set1_ps(d * xb[c].d);
                    acc[r][c] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(sumi[c]), acc[r][c]);
                    let m = _mm_cvtepi32_ps(_mm_madd_epi16(mins, bsums[c]));
                    acc_min[r][c] = _mm_fmadd_ps(_mm_set1_ps(dmin * xb[c].d), m, acc_min[r][c]);
                }
            }
        }
        std::array::from_fn(|r| {
            std::array::from_fn(|c| _mm512_reduce_add_ps(acc[r][c]) - avx2::hsum128(acc_min[r][c]))
        })
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q4k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features k4_tile needs; loads are 32 bytes of qs.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        k4_tile(
            w,
            x,
            |b| (b.d, b.dmin, &b.scales),
            |b, k| {
                let q = avx2::load256(&b.qs[32 * k..]);
                _mm512_and_si512(join(q, _mm256_srli_epi16(q, 4)), low)
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q4k_tile; qh is exactly 32 bytes.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let fifth = _mm512_set1_epi8(0x10);
        k4_tile(
            w,
            x,
            |b| (b.d, b.dmin, &b.scales),
            |b, k| {
                let q = avx2::load256(&b.qs[32 * k..]);
                let nibbles = _mm512_and_si512(join(q, _mm256_srli_epi16(q, 4)), low);
                // Bit 2k (low half) and 2k+1 (high half) of qh give the 5th bit, moved to 0x10.
                let qh = avx2::load256(&b.qh);
                let h = join(
                    _mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)), 4),
                    _mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32 + 1)), 4),
                );
                _mm512_or_si512(nibbles, _mm512_and_si512(h, fifth))
            },
        )
    }
}

/// The tile of the k-quants with 16-element groups (Q2_K, Q3_K, Q6_K), 64 levels per step:
/// `levels(block, s)` gives the unsigned levels of elements `64s..64s + 64`, four groups of 16.
/// As in the AVX2 form, `maddubs` pairs them and `madd` applies each group's scale (one
/// `permutexvar` spreads four scales per step); levels stored `+ 2^SHIFT` come off through the
/// activations' group sums, as do Q2_K's mins.
#[inline(always)]
unsafe fn k16_tile<B, const R: usize, const C: usize, const SHIFT: i32>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    header: impl Fn(&B) -> avx2::K16Header,
    levels: impl Fn(&B, usize) -> __m512i,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: the callers enable AVX2, FMA, F16C and AVX-512F/BW; the bsum loads read exactly
    // 32 bytes, the activation loads 64 bytes inside `qs`.
    unsafe {
        let pick: [__m512i; 4] = std::array::from_fn(|s| spread_i16(4 * s as i16, 8));
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let mut acc_min = [[_mm256_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            let bsums = xb.map(|x| _mm256_loadu_si256(x.bsums.as_ptr() as *const __m256i));
            for r in 0..R {
                let b = &w[r][i];
                let h = header(b);
                let scales = _mm512_castsi256_si512(h.scales);
                let mut sumi: [__m512i; C] = std::array::from_fn(|c| {
                    if SHIFT > 0 {
                        _mm512_zextsi256_si512(avx2::stored_offset::<SHIFT>(h.scales, bsums[c]))
                    } else {
                        _mm512_setzero_si512()
                    }
                });
                for (s, pick) in pick.iter().enumerate() {
                    let q = levels(b, s);
                    let sc = _mm512_permutexvar_epi16(*pick, scales);
                    for c in 0..C {
                        let p = _mm512_maddubs_epi16(q, load512_i8(&xb[c].qs[64 * s..]));
                        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_madd_epi16(p, sc));
                    }
                }
                for c in 0..C {
                    let s = _mm512_set1_ps(h.d * xb[c].d);
                    acc[r][c] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(sumi[c]), acc[r][c]);
                    if let Some((dmin, mins)) = h.mins {
                        let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums[c]));
                        let s = _mm256_set1_ps(dmin * xb[c].d);
                        acc_min[r][c] = _mm256_fmadd_ps(s, m, acc_min[r][c]);
                    }
                }
            }
        }
        std::array::from_fn(|r| {
            std::array::from_fn(|c| _mm512_reduce_add_ps(acc[r][c]) - avx2::hsum(acc_min[r][c]))
        })
    }
}

/// Step `s` of Q2_K's and Q3_K's 2-bit planes: elements `64s..64s + 64` are bit pairs
/// `4j, 4j + 2` (`j = s % 2`) of `qs[32n..32n + 32]` (`n = s / 2`), low 256 bits then high.
#[inline(always)]
unsafe fn two_bit_step(qs: &[u8; 64], s: usize) -> __m512i {
    // SAFETY: the caller enables AVX-512F/BW; the load reads 32 of the 64 bytes.
    unsafe {
        let q = _mm512_broadcast_i64x4(avx2::load256(&qs[32 * (s / 2)..]));
        let j = 4 * (s % 2) as i16;
        let shifts = join(_mm256_set1_epi16(j), _mm256_set1_epi16(j + 2));
        _mm512_and_si512(_mm512_srlv_epi16(q, shifts), _mm512_set1_epi8(3))
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q2k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ2K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features k16_tile and the level helpers need.
    unsafe { k16_tile::<_, R, C, 0>(w, x, |b| avx2::q2k_header(b), |b, s| two_bit_step(&b.qs, s)) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q3k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ3K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features k16_tile and the level helpers need; the
    // hmask load reads its 32 bytes.
    unsafe {
        k16_tile::<_, R, C, 2>(
            w,
            x,
            |b| avx2::q3k_header(b),
            |b, s| {
                // Stored level + 4: the two low bits, plus 4 where the element's hmask bit
                // (bit 2s for the low 32 elements, 2s + 1 for the high) is set.
                let hm = _mm512_broadcast_i64x4(avx2::load256(&b.hmask));
                let bits = join(
                    _mm256_set1_epi8(1 << (2 * s)),
                    _mm256_set1_epi8((1u8 << (2 * s + 1)) as i8),
                );
                let set = _mm512_test_epi8_mask(hm, bits);
                let q = two_bit_step(&b.qs, s);
                _mm512_mask_add_epi8(q, set, q, _mm512_set1_epi8(4))
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q6k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ6K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features k16_tile needs; the loads read 64 bytes of
    // ql and 32 of qh.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let three = _mm512_set1_epi8(3);
        k16_tile::<_, R, C, 5>(
            w,
            x,
            |b| avx2::q6k_header(b),
            |b, s| {
                // ql[64n..64n + 64] holds elements 128n.. (low nibbles) and 128n + 64..
                // (high); qh[32n..32n + 32] their top bits: pairs 0, 2 for the first 64
                // elements' halves, 4, 6 for the second 64's.
                let (n, j) = (s / 2, s % 2);
                let ql = load512(&b.ql[64 * n..]);
                let qh = avx2::load256(&b.qh[32 * n..]);
                let h = join(qh, _mm256_srli_epi16(qh, 2));
                let (lo, hi) = if j == 0 {
                    (_mm512_and_si512(ql, low), _mm512_and_si512(h, three))
                } else {
                    (
                        _mm512_and_si512(_mm512_srli_epi16(ql, 4), low),
                        _mm512_and_si512(_mm512_srli_epi16(h, 4), three),
                    )
                };
                _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4))
            },
        )
    }
}

/// An IQ4_XS block's eight group multipliers (6 bits stored +32), one per i32 lane: the low
/// four bits from `scales_l` (group `g` in the nibble `g % 2` of byte `g / 2`), the top two
/// from `scales_h` (bits `2g..2g + 2`).
///
/// # Safety
/// AVX2 must be enabled in the caller.
#[inline(always)]
unsafe fn iq4xs_mults(b: &BlockIQ4XS) -> __m256i {
    // SAFETY: register operations only; the caller enables AVX2.
    unsafe {
        let low = _mm_cvtsi32_si128(i32::from_le_bytes(b.scales_l));
        let low = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(low, low));
        let low = _mm256_srlv_epi32(low, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
        let high = _mm256_srlv_epi32(
            _mm256_set1_epi32(b.scales_h as i32),
            _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14),
        );
        let m = _mm256_or_si256(
            _mm256_and_si256(low, _mm256_set1_epi32(15)),
            _mm256_slli_epi32(_mm256_and_si256(high, _mm256_set1_epi32(3)), 4),
        );
        _mm256_sub_epi32(m, _mm256_set1_epi32(32))
    }
}

/// IQ4_XS against Q8_K, 64 levels (two groups of 32) per step. The nibbles look up IQ4_NL's
/// levels plus 128 (unsigned, at most 241), so `vpdpbusd` multiplies them by the signed
/// activations as they are, -128 included, into i32 lanes that each hold one group's products;
/// `vpmulld` then applies each group's multiplier. The offset comes off once per block:
/// `128 · Σ_g mult_g · Σ x_g`, from the activations' sums of 16. The block's integer is the
/// scalar dot's, and so are the float steps after it (one product and sum per block), so the
/// result is the scalar dot's bit for bit.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn iq4xs_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ4XS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: this function enables the features used; the loads read 16 bytes of the level
    // table, 32 of a block's `qs` or of the activations' `bsums`, and 64 of their `qs`.
    unsafe {
        let table = _mm_xor_si128(
            _mm_loadu_si128(IQ4NL_VALUES.as_ptr() as *const __m128i),
            _mm_set1_epi8(i8::MIN),
        );
        let table = _mm512_broadcast_i32x4(table);
        let low = _mm512_set1_epi8(0x0F);
        // Step k: 64-bit lanes [0, 1, 0, 1, 2, 3, 2, 3] of the 32 bytes of groups 2k and
        // 2k + 1, the second copy of each group shifted down four bits: each group's low
        // nibbles (levels 0-15) then its high ones (16-31), in activation order.
        let spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
        let shifts = _mm512_setr_epi64(
            0,
            0,
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
            0,
            0,
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
        );
        // i32 lanes 0-7 take group 2k's multiplier, 8-15 group 2k + 1's.
        let pick: [__m512i; 4] = std::array::from_fn(|k| {
            let (a, b) = (2 * k as i32, 2 * k as i32 + 1);
            _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
        });
        let mut acc = [[0f32; C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            // Σ x per group of 32: adjacent sums of 16 added.
            let group_sums = xb.map(|x| {
                let bsums = _mm256_loadu_si256(x.bsums.as_ptr() as *const __m256i);
                _mm256_madd_epi16(bsums, _mm256_set1_epi16(1))
            });
            for r in 0..R {
                let b = &w[r][i];
                let mults = iq4xs_mults(b);
                let mults512 = _mm512_castsi256_si512(mults);
                let mut sumi: [__m512i; C] = std::array::from_fn(|c| {
                    let offset = _mm256_slli_epi32(_mm256_mullo_epi32(group_sums[c], mults), 7);
                    _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), offset))
                });
                for (k, pick) in pick.iter().enumerate() {
                    let q = _mm512_castsi256_si512(avx2::load256(&b.qs[32 * k..]));
                    let q = _mm512_srlv_epi16(_mm512_permutexvar_epi64(spread, q), shifts);
                    let u = _mm512_shuffle_epi8(table, _mm512_and_si512(q, low));
                    let mult = _mm512_permutexvar_epi32(*pick, mults512);
                    for c in 0..C {
                        let xq = load512_i8(&xb[c].qs[64 * k..]);
                        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, xq);
                        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(p, mult));
                    }
                }
                // The block's integer, then the scalar dot's float steps: bit for bit its sum.
                let d = avx2::f16_to_f32(b.d);
                for c in 0..C {
                    acc[r][c] += d * xb[c].d * _mm512_reduce_add_epi32(sumi[c]) as f32;
                }
            }
        }
        acc
    }
}

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
//!
//! Where a grid index is split over two fields (IQ3_S, IQ2_S, IQ1_S, IQ1_M: low byte and top
//! bits), a block's indices are put together once, in vector registers, and each group reads
//! its own from there (`indexed_lattice_tile`); built one at a time in scalar registers they
//! cost more than the rest of the group's work.

use super::avx2::{f16_to_f32, hsum, load256, load256_i8};
use crate::quantized::format::{
    iq1s_grid, iq2s_grid, iq2xs_grid, iq2xxs_grid, iq3s_grid, iq3xxs_grid, BlockIQ1M, BlockIQ1S,
    BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQ8K, BlockTQ1_0, BlockTQ2_0,
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

/// Shuffles that spread bytes `4k..4k + 4` of a lane over it, eight bytes each.
static SIGN_SPREAD: [[u8; 32]; 4] = {
    let mut t = [[0u8; 32]; 4];
    let mut k = 0;
    while k < 4 {
        let mut i = 0;
        while i < 32 {
            t[k][i] = (4 * k + i / 8) as u8;
            i += 1;
        }
        k += 1;
    }
    t
};

/// 32 sign bits as bytes of ±1 (-1 where the bit is set): bytes `4k..4k + 4` of `src`'s
/// lane, the same in both lanes, bit `i` of byte `j` for weight `8j + i`.
#[inline(always)]
unsafe fn spread_signs(src: __m256i, k: usize) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable, and a 32-byte table row load.
    unsafe {
        // Byte i takes source byte 4k + i / 8, then its bit i % 8.
        let spread = _mm256_loadu_si256(SIGN_SPREAD[k].as_ptr() as *const __m256i);
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let b = _mm256_shuffle_epi8(src, spread);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
        _mm256_or_si256(set, _mm256_set1_epi8(1))
    }
}

/// A group's 32 signs (`spread_signs`) from the four bytes at the start of `bits`.
#[inline(always)]
unsafe fn sign_bytes(bits: &[u8]) -> __m256i {
    let bits = u32::from_le_bytes(bits[..4].try_into().expect("4 bytes"));
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { spread_signs(_mm256_set1_epi32(bits as i32), 0) }
}

/// A vector's 32 bytes in memory, for `sign_bytes` to read a group's four from.
#[inline(always)]
unsafe fn stored(v: __m256i) -> [u8; 32] {
    let mut out = [0u8; 32];
    // SAFETY: a 32-byte store into a 32-byte array; the callers enable AVX2.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, v) };
    out
}

/// A block's 256 sign bits as `sign_bytes` takes them, held in registers so that a group's
/// four bytes spread into its 32 sign bytes with one shuffle: bytes 0-15 in both 128-bit
/// lanes of `low`, bytes 16-31 in both of `high`. Faster than `sign_bytes` from memory for
/// IQ2_XXS and IQ2_XS (77 against 89 µs and 90 against 94 for the 640x2048 product), slower
/// for the other lattice types (IQ2_S 100 against 91), which keep a block's indices in
/// memory too.
#[derive(Clone, Copy)]
struct BlockSigns {
    low: __m256i,
    high: __m256i,
}

impl BlockSigns {
    /// From the 32 sign bytes in order.
    #[inline(always)]
    unsafe fn new(bits: __m256i) -> BlockSigns {
        // SAFETY: register-only AVX2, which the callers enable.
        unsafe {
            BlockSigns {
                low: _mm256_permute2x128_si256::<0x00>(bits, bits),
                high: _mm256_permute2x128_si256::<0x11>(bits, bits),
            }
        }
    }

    /// Group `g`'s 32 signs (`spread_signs`).
    #[inline(always)]
    unsafe fn group(&self, g: usize) -> __m256i {
        let half = if g < 4 { self.low } else { self.high };
        // SAFETY: register-only AVX2, which the callers enable.
        unsafe { spread_signs(half, g % 4) }
    }
}

/// Bytes of 7-bit sign indices with ggml's eighth sign on top, which makes the count of set
/// bits even (`KSIGNS`, computed: the parity of the low and the high nibble, looked up).
#[inline(always)]
unsafe fn with_parity(s7: __m256i) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        let odd = _mm256_broadcastsi128_si256(_mm_setr_epi8(
            0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
        ));
        let fifteen = _mm256_set1_epi8(15);
        let lo = _mm256_and_si256(s7, fifteen);
        let hi = _mm256_and_si256(_mm256_srli_epi16(s7, 4), fifteen);
        let parity = _mm256_xor_si256(_mm256_shuffle_epi8(odd, lo), _mm256_shuffle_epi8(odd, hi));
        _mm256_or_si256(s7, parity)
    }
}

/// The sign bits of a block of IQ2_XXS or IQ3_XXS from its eight group words (one per 32-bit
/// lane, in group order), each holding four 7-bit sign indices in bits 0-27.
#[inline(always)]
unsafe fn packed_block_signs(words: __m256i) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        // Field k (bits 7k..7k + 7) to byte k: shifted left by k, masked.
        let field = |k: i32, v: __m256i| _mm256_and_si256(v, _mm256_set1_epi32(0x7f << (8 * k)));
        let s7 = _mm256_or_si256(
            _mm256_or_si256(field(0, words), field(1, _mm256_slli_epi32(words, 1))),
            _mm256_or_si256(
                field(2, _mm256_slli_epi32(words, 2)),
                field(3, _mm256_slli_epi32(words, 3)),
            ),
        );
        with_parity(s7)
    }
}

/// Four 8-value IQ1 points `g` in {-1, 0, 1}, each shifted by ±1/8, in eighths:
/// `8·g ± 1`. `minus` holds, per run of 8, eight bytes of -1 (shift down) or of +1.
#[inline(always)]
unsafe fn iq1_eighths(g: __m256i, minus: __m256i) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), minus) }
}

/// The same multiplier for all 32 weights.
#[inline(always)]
unsafe fn mult32(m: u32) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set1_epi16(m as i16) }
}

/// One multiplier per 16 weights, `2s + 1` for the two nibbles of each of the eight
/// `scales` bytes: the low nibbles (group g's first 16 weights) as i16 in the low lane, the
/// high ones in the high lane, word g of each lane for group g (`pick_word`).
#[inline(always)]
unsafe fn mult16_block(scales: &[u8; 8]) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        let s = _mm_cvtsi64_si128(i64::from_le_bytes(*scales));
        let fifteen = _mm_set1_epi8(15);
        let lo = _mm_cvtepu8_epi16(_mm_and_si128(s, fifteen));
        let hi = _mm_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), fifteen));
        let both = _mm256_set_m128i(hi, lo);
        _mm256_add_epi16(_mm256_add_epi16(both, both), _mm256_set1_epi16(1))
    }
}

/// Byte shuffles that broadcast word `n` of each 128-bit lane over that lane.
static WORD_PICK: [[u8; 32]; 8] = {
    let mut t = [[0u8; 32]; 8];
    let mut n = 0;
    while n < 8 {
        let mut i = 0;
        while i < 32 {
            t[n][i] = (2 * n + i % 2) as u8;
            i += 1;
        }
        n += 1;
    }
    t
};

/// Word `n` of each lane of `v`, broadcast over its lane.
#[inline(always)]
unsafe fn pick_word(v: __m256i, n: usize) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable, and a 32-byte load of a table row.
    unsafe {
        _mm256_shuffle_epi8(
            v,
            _mm256_loadu_si256(WORD_PICK[n].as_ptr() as *const __m256i),
        )
    }
}

/// Eight 4-magnitude points, in order, as 32 bytes.
#[inline(always)]
unsafe fn pack4(p: [&[i8; 4]; 8]) -> __m256i {
    let p = |i: usize| i32::from_le_bytes(p[i].map(|v| v as u8));
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set_epi32(p(7), p(6), p(5), p(4), p(3), p(2), p(1), p(0)) }
}

/// Four 8-magnitude points, in order, as 32 bytes.
#[inline(always)]
unsafe fn pack8(p: [&[i8; 8]; 4]) -> __m256i {
    let p = |i: usize| i64::from_le_bytes(p[i].map(|v| v as u8));
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { _mm256_set_epi64x(p(3), p(2), p(1), p(0)) }
}

/// The grid points at eight indices, packed (`pack4`).
#[inline(always)]
unsafe fn points4<const N: usize>(grid: &[[i8; 4]; N], idx: [usize; 8]) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { pack4(idx.map(|i| &grid[i])) }
}

/// The grid points at four indices, packed (`pack8`).
#[inline(always)]
unsafe fn points8<const N: usize>(grid: &[[i8; 8]; N], idx: [usize; 4]) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe { pack8(idx.map(|i| &grid[i])) }
}

/// Index `l` of four packed in a word as 16-bit fields.
#[inline(always)]
fn field16(word: u64, l: usize) -> usize {
    (word >> (16 * l)) as u16 as usize
}

/// `points4` at indices a block's index decoder built, four 16-bit fields to a word, all
/// below `N` by construction; they are read without a check, as a masked index would be
/// turned into vector extracts. Read as words, the decoded indices leave the vector
/// registers two extracts per four rather than one each (`vpextrw`, which was the bottleneck
/// of IQ1_S).
///
/// # Safety
/// Every index is below `N`; AVX2 is enabled.
#[inline(always)]
unsafe fn decoded_points4<const N: usize>(grid: &[[i8; 4]; N], idx: [u64; 2]) -> __m256i {
    debug_assert!((0..8).all(|i| field16(idx[i / 4], i % 4) < N));
    // SAFETY: the caller guarantees the indices are in bounds and enables AVX2.
    unsafe {
        pack4(std::array::from_fn(|i| {
            grid.get_unchecked(field16(idx[i / 4], i % 4))
        }))
    }
}

/// `points8` at indices a block's index decoder built (see `decoded_points4`).
///
/// # Safety
/// Every index is below `N`; AVX2 is enabled.
#[inline(always)]
unsafe fn decoded_points8<const N: usize>(grid: &[[i8; 8]; N], idx: u64) -> __m256i {
    debug_assert!((0..4).all(|l| field16(idx, l) < N));
    // SAFETY: the caller guarantees the indices are in bounds and enables AVX2.
    unsafe { pack8(std::array::from_fn(|l| grid.get_unchecked(field16(idx, l)))) }
}

/// Sixteen grid indices, byte `i` of `low` with byte `i` of `high` above it, stored in
/// `out[..4]`, four to a word.
#[inline(always)]
unsafe fn store_indices16(low: __m128i, high: __m128i, out: &mut [u64]) {
    let out = out[..4].as_mut_ptr() as *mut __m128i;
    // SAFETY: register-only SSE2 and two 16-byte stores into the 32 bytes of `out[..4]`.
    unsafe {
        _mm_storeu_si128(out, _mm_unpacklo_epi8(low, high));
        _mm_storeu_si128(out.add(1), _mm_unpackhi_epi8(low, high));
    }
}

/// Sixteen bytes of `p` from `at`.
#[inline(always)]
unsafe fn load128(p: &[u8], at: usize) -> __m128i {
    let p = &p[at..at + 16];
    // SAFETY: a 16-byte load from a 16-byte slice.
    unsafe { _mm_loadu_si128(p.as_ptr() as *const __m128i) }
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
    // SAFETY: the caller's guarantees pass on; no shift adds nothing (and folds away).
    unsafe { prepared_lattice_tile(w, x, factor, d, |_| (), |b, _, g| group(b, g), |_, _| None) }
}

/// `lattice_tile` with a per-block step: `prepare(b)` runs once per block and row and hands
/// its result to each of the block's eight `group` calls (the whole block's grid indices,
/// signs or multipliers, computed in vector registers rather than group by group in scalar
/// ones).
#[inline(always)]
unsafe fn indexed_lattice_tile<B, P, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    factor: f32,
    d: impl Fn(&B) -> half::f16,
    prepare: impl Fn(&B) -> P,
    group: impl Fn(&B, &P, usize) -> Group,
) -> [[f32; C]; R] {
    // SAFETY: the caller's guarantees pass on; no shift adds nothing (and folds away).
    unsafe { prepared_lattice_tile(w, x, factor, d, prepare, group, |_, _| None) }
}

/// The general form of the tiles above, plus `k_g · Σ x` over each group `g`'s 32
/// activations, taken from Q8_K's sums of 16 (`bsums`) rather than added to every weight:
/// IQ1_S's `±1/8` is one sign for a whole group. `shift(b, &prepared)` gives the eight
/// `k_g` as i16, each twice in a row, for one `madd` with the sums.
#[inline(always)]
unsafe fn prepared_lattice_tile<B, P, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    factor: f32,
    d: impl Fn(&B) -> half::f16,
    prepare: impl Fn(&B) -> P,
    group: impl Fn(&B, &P, usize) -> Group,
    shift: impl Fn(&B, &P) -> Option<__m256i>,
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
                let prepared = prepare(b);
                if let Some(k) = shift(b, &prepared) {
                    for c in 0..C {
                        let sums = _mm256_loadu_si256(xb[c].bsums.as_ptr() as *const __m256i);
                        sumi[c] = _mm256_madd_epi16(sums, k);
                    }
                }
                for g in 0..8 {
                    let Group { mag, sign, mult } = group(b, &prepared, g);
                    for c in 0..C {
                        let xs = _mm256_sign_epi8(load256_i8(&xb[c].qs[32 * g..]), sign);
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
        indexed_lattice_tile(
            w,
            x,
            0.25,
            |b| b.d,
            |b| stored(packed_block_signs(load256(&b.qs[64..]))),
            |b, signs, g| {
                let (idx, words) = b.qs.split_at(64);
                let aux = u32::from_le_bytes(words[4 * g..4 * g + 4].try_into().expect("4 bytes"));
                Group {
                    mag: points4(grid, std::array::from_fn(|j| idx[8 * g + j] as usize)),
                    sign: sign_bytes(&signs[4 * g..]),
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
        indexed_lattice_tile(
            w,
            x,
            1.0,
            |b| b.d,
            |b| iq3s_indices(b),
            |b, idx, g| {
                Group {
                    // SAFETY: `iq3s_indices` builds indices below 512.
                    mag: decoded_points4(grid, [idx[2 * g], idx[2 * g + 1]]),
                    sign: sign_bytes(&b.signs[4 * g..]),
                    mult: mult32(2 * (b.scales[g / 2] >> (4 * (g % 2)) & 15) as u32 + 1),
                }
            },
        )
    }
}

/// IQ3_S's 64 grid indices: `qs[i]` with bit `i % 8` of `qh[i / 8]` above it.
#[inline(always)]
unsafe fn iq3s_indices(b: &BlockIQ3S) -> [u64; 16] {
    let mut idx = [0u64; 16];
    // SAFETY: register-only AVX2, which the callers enable, and in-bounds loads and stores.
    unsafe {
        // Bytes 0-7 take `qh` byte 2n, bytes 8-15 byte 2n + 1, then each its own bit.
        let spread = _mm_set_epi64x(0x0101_0101_0101_0101, 0);
        let bit = _mm_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        for n in 0..4 {
            let pair = u16::from_le_bytes([b.qh[2 * n], b.qh[2 * n + 1]]);
            let bits = _mm_shuffle_epi8(_mm_set1_epi16(pair as i16), spread);
            let high = _mm_min_epu8(_mm_and_si128(bits, bit), _mm_set1_epi8(1));
            store_indices16(load128(&b.qs, 16 * n), high, &mut idx[4 * n..]);
        }
    }
    idx
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq2xxs_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ2XXS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2xxs_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        indexed_lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b| iq2xxs_signs(b),
            |b, signs, g| {
                let q = &b.qs[4 * g..4 * g + 4];
                let aux = q[2] as u32 | (q[3] as u32) << 16;
                let idx = [q[0] & 255, q[0] >> 8, q[1] & 255, q[1] >> 8].map(|i| i as usize);
                Group {
                    mag: points8(grid, idx),
                    sign: signs.group(g),
                    mult: mult32(2 * (aux >> 28) + 1),
                }
            },
        )
    }
}

/// IQ2_XXS's signs: each group's second word (`qs` words 2g + 1, as 32-bit words) holds them.
#[inline(always)]
unsafe fn iq2xxs_signs(b: &BlockIQ2XXS) -> BlockSigns {
    // SAFETY: register-only AVX2, which the callers enable, and two 32-byte loads from the
    // 64 bytes of `qs`.
    unsafe {
        let qs = b.qs.as_ptr() as *const __m256;
        let (a, c) = (
            _mm256_loadu_ps(qs as *const f32),
            _mm256_loadu_ps(qs.add(1) as *const f32),
        );
        // Odd words of each lane: groups 0, 1, 4, 5 low and 2, 3, 6, 7 high; then in order.
        let odd = _mm256_castps_si256(_mm256_shuffle_ps::<0b11_01_11_01>(a, c));
        BlockSigns::new(packed_block_signs(
            _mm256_permute4x64_epi64::<0b11_01_10_00>(odd),
        ))
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
        indexed_lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b| (iq2xs_signs(b), mult16_block(&b.scales)),
            |b, (signs, mult), g| {
                let q = &b.qs[4 * g..4 * g + 4];
                Group {
                    mag: points8(grid, std::array::from_fn(|l| (q[l] & 511) as usize)),
                    sign: signs.group(g),
                    mult: pick_word(*mult, g),
                }
            },
        )
    }
}

/// IQ2_XS's signs: the 7-bit sign index in the top bits of each of the 32 words.
#[inline(always)]
unsafe fn iq2xs_signs(b: &BlockIQ2XS) -> BlockSigns {
    // SAFETY: register-only AVX2, which the callers enable, and two 32-byte loads from the
    // 64 bytes of `qs`.
    unsafe {
        let qs = b.qs.as_ptr() as *const __m256i;
        let (a, c) = (_mm256_loadu_si256(qs), _mm256_loadu_si256(qs.add(1)));
        let s7 = _mm256_packus_epi16(_mm256_srli_epi16(a, 9), _mm256_srli_epi16(c, 9));
        // The pack interleaves the halves by lane: words 0-7, 16-23, 8-15, 24-31.
        BlockSigns::new(with_parity(_mm256_permute4x64_epi64::<0b11_01_10_00>(s7)))
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
        indexed_lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b| (iq2s_indices(b), mult16_block(&b.scales)),
            |b, (idx, mult), g| {
                Group {
                    // SAFETY: `iq2s_indices` builds indices below 1024.
                    mag: decoded_points8(grid, idx[g]),
                    sign: sign_bytes(&b.qs[32 + 4 * g..]),
                    mult: pick_word(*mult, g),
                }
            },
        )
    }
}

/// IQ2_S's 32 grid indices: `qs[l]` with bits `2(l % 4)..+2` of `qh[l / 4]` above it.
#[inline(always)]
unsafe fn iq2s_indices(b: &BlockIQ2S) -> [u64; 8] {
    let mut idx = [0u64; 8];
    // SAFETY: register-only AVX2, which the callers enable, and in-bounds loads and stores.
    unsafe {
        let qh = _mm_loadl_epi64(b.qh.as_ptr() as *const __m128i);
        let three = _mm_set1_epi8(3);
        // Bits 2k..2k + 2 of every `qh` byte, then interleaved into index order.
        let part = |k: i32| _mm_and_si128(_mm_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), three);
        let (p01, p23) = (
            _mm_unpacklo_epi8(part(0), part(1)),
            _mm_unpacklo_epi8(part(2), part(3)),
        );
        let high = [_mm_unpacklo_epi16(p01, p23), _mm_unpackhi_epi16(p01, p23)];
        for h in 0..2 {
            store_indices16(load128(&b.qs, 16 * h), high[h], &mut idx[4 * h..]);
        }
    }
    idx
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq1s_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ1S]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq1s_grid();
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        prepared_lattice_tile(
            w,
            x,
            0.125,
            |b| b.d,
            |b| (iq1s_indices(b), iq1s_mults(b)),
            |_, (idx, (mult, _)), g| {
                // SAFETY: `iq1s_indices` builds indices below 2048.
                let points = decoded_points8(grid, idx[g]);
                Group::signed(points, pick_word(*mult, g))
            },
            |_, (_, (_, shift))| Some(*shift),
        )
    }
}

/// IQ1_S's group multipliers `m = 2s + 1` (3-bit `s` in bits 12-14 of each `qh` word) for
/// `pick_word`: `8m`, the `8·grid` part in eighths, word g of both lanes; and for the shift
/// `±m` (minus where bit 15 is set), each twice in a row, word pair g.
#[inline(always)]
unsafe fn iq1s_mults(b: &BlockIQ1S) -> (__m256i, __m256i) {
    // SAFETY: register-only AVX2, which the callers enable, and a 16-byte load of `qh`.
    unsafe {
        let qh = _mm_loadu_si128(b.qh.as_ptr() as *const __m128i);
        let s = _mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7));
        let m = _mm_add_epi16(_mm_add_epi16(s, s), _mm_set1_epi16(1));
        let mult = _mm256_broadcastsi128_si256(_mm_slli_epi16(m, 3));
        // -1 where bit 15 is set, else 1.
        let sign = _mm_or_si128(_mm_srai_epi16(qh, 15), _mm_set1_epi16(1));
        let k = _mm_sign_epi16(m, sign);
        let shift = _mm256_set_m128i(_mm_unpackhi_epi16(k, k), _mm_unpacklo_epi16(k, k));
        (mult, shift)
    }
}

/// IQ1_S's 32 grid indices: `qs[4g + l]` with bits `3l..3l + 3` of `qh[g]` above it.
#[inline(always)]
unsafe fn iq1s_indices(b: &BlockIQ1S) -> [u64; 8] {
    let mut idx = [0u64; 8];
    // SAFETY: register-only AVX2, which the callers enable, and in-bounds loads and stores.
    unsafe {
        let qh = _mm_loadu_si128(b.qh.as_ptr() as *const __m128i);
        let (seven, high7) = (_mm_set1_epi16(7), _mm_set1_epi16(0x700));
        // Per group, u16 lanes holding the tops of runs 0 and 1 (low and high byte), then of
        // runs 2 and 3; interleaved, four bytes per group in run order.
        let r01 = _mm_or_si128(
            _mm_and_si128(qh, seven),
            _mm_and_si128(_mm_slli_epi16(qh, 5), high7),
        );
        let r23 = _mm_or_si128(
            _mm_and_si128(_mm_srli_epi16(qh, 6), seven),
            _mm_and_si128(_mm_srli_epi16(qh, 1), high7),
        );
        let high = [_mm_unpacklo_epi16(r01, r23), _mm_unpackhi_epi16(r01, r23)];
        for h in 0..2 {
            store_indices16(load128(&b.qs, 16 * h), high[h], &mut idx[4 * h..]);
        }
    }
    idx
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq1m_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ1M]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq1s_grid();
    let scales = |b: &BlockIQ1M| u64::from_le_bytes(b.scales);
    // SAFETY: this function enables the features lattice_tile needs.
    unsafe {
        indexed_lattice_tile(
            w,
            x,
            0.125,
            |b| {
                let sc = scales(b);
                let bits =
                    (sc >> 12 & 0xf) | (sc >> 24 & 0xf0) | (sc >> 36 & 0xf00) | (sc >> 48 & 0xf000);
                half::f16::from_bits(bits as u16)
            },
            |b| iq1m_runs(b),
            |_, runs, g| {
                // Each run's sign byte (0 or -1) widened to eight bytes, then -1 or +1.
                let sign =
                    i32::from_le_bytes(runs.minus[4 * g..4 * g + 4].try_into().expect("4 bytes"));
                let wide = _mm256_cvtepi8_epi64(_mm_cvtsi32_si128(sign));
                let minus = _mm256_or_si256(wide, _mm256_set1_epi8(1));
                // SAFETY: `iq1m_runs` builds indices below 2048.
                let eighths = iq1_eighths(decoded_points8(grid, runs.idx[g]), minus);
                // Scale 2g is word g / 2 of the shift-0 quarter (g even) or of the shift-6 one.
                Group::signed(eighths, pick_word(runs.mult, g / 2 + 4 * (g % 2)))
            },
        )
    }
}

/// An IQ1_M block's 32 runs of 8, decoded from their nibbles at once.
struct Iq1mRuns {
    /// Grid index: `qs[l]` with the nibble's low three bits above it.
    idx: [u64; 8],
    /// -1 where the run's shift is down (the nibble's top bit), else 0.
    minus: [u8; 32],
    /// The block's multipliers (`iq1m_mults`).
    mult: __m256i,
}

#[inline(always)]
unsafe fn iq1m_runs(b: &BlockIQ1M) -> Iq1mRuns {
    // SAFETY: register-only AVX2, which the callers enable; the loads read the 16 bytes of
    // `qh`, the stores write 16 of the 32 bytes of `minus` at 0 and 16.
    unsafe {
        let mut runs = Iq1mRuns {
            idx: [0; 8],
            minus: [0; 32],
            mult: iq1m_mults(u64::from_le_bytes(b.scales)),
        };
        let qh = _mm_loadu_si128(b.qh.as_ptr() as *const __m128i);
        let high = _mm_srli_epi16(qh, 4);
        let seven = _mm_set1_epi8(7);
        let (lo, hi) = (_mm_and_si128(qh, seven), _mm_and_si128(high, seven));
        // Runs 0-15 and 16-31: the low nibble of each byte is the earlier run.
        let nib = [_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)];
        let eight = _mm_set1_epi8(8);
        let (lo, hi) = (_mm_and_si128(qh, eight), _mm_and_si128(high, eight));
        let minus = [_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)];
        for h in 0..2 {
            store_indices16(load128(&b.qs, 16 * h), nib[h], &mut runs.idx[4 * h..]);
            let m = _mm_cmpeq_epi8(minus[h], eight);
            _mm_storeu_si128(runs.minus[16 * h..].as_mut_ptr() as *mut __m128i, m);
        }
        runs
    }
}

/// IQ1_M's multipliers `2s + 1`, scale 2g for group g's first 16 weights (the low lane),
/// 2g + 1 for the rest. The sixteen 3-bit scales sit four to a little-endian word, in its
/// bits 0-11; shifting the words (broadcast) by 0, 6, 3 and 9 puts the even scales in the
/// low lane and the odd ones in the high lane, at the same place for each group.
#[inline(always)]
unsafe fn iq1m_mults(scales: u64) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        let words = _mm256_srlv_epi64(
            _mm256_set1_epi64x(scales as i64),
            _mm256_set_epi64x(9, 3, 6, 0),
        );
        let s = _mm256_and_si256(words, _mm256_set1_epi16(7));
        _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1))
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
                let bytes = load256(&b.qs[32 * (g / 4)..]);
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
        let mut g = [load256(&b.qs[..]); 8];
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

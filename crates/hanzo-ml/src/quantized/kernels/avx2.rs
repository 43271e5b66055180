//! AVX2 + FMA (+ F16C for the block scales) dot products of weight blocks with quantized
//! activations. Every function here requires those features; `dot::pick_*` checks them.
//!
//! The common step: 32 signed 8-bit products summed in pairs by `maddubs` (u8 × i8 → i16),
//! then in fours by `madd` (i16 × i16 → i32), then scaled in f32. The Q4_0/Q5_0/Q8_0 tile is
//! generic over that step (`ByteDot`), so `vnni.rs` reuses it with a single `vpdpbusd`.

use crate::quantized::format::*;
use std::arch::x86_64::*;

#[inline(always)]
pub(super) unsafe fn load256(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    // SAFETY: every caller passes a slice of at least 32 bytes; loadu has no alignment need.
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

#[inline(always)]
pub(super) unsafe fn load256_i8(p: &[i8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    // SAFETY: as `load256`.
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

/// Two halves (`bits` low and high 16) → lanes 0 and 1, by `vmovd` from a general register
/// and `vcvtph2ps`. Written as assembly because LLVM, left to itself, loads a lone half with
/// `vpinsrw` into whatever vector register is free, often a live accumulator, which chains
/// every block to the previous block's sum (a serial dependency through every dot product:
/// `cargo bench --bench quant -- qmatvec` shows it on Q8_0). `vmovd` writes
/// the whole register, so nothing waits on older values. (Converting in general registers
/// instead is slow too: k-quant super-block scales of real weights are mostly subnormal.)
#[inline(always)]
pub(super) fn cvt_f16x2(bits: u32) -> __m128 {
    let out: __m128;
    // SAFETY: two register-only instructions; every caller runs with F16C enabled (the
    // kernels here are reached only after `has_avx2()` checked AVX2, FMA and F16C).
    unsafe {
        std::arch::asm!(
            "vmovd {v}, {g:e}",
            "vcvtph2ps {v}, {v}",
            g = in(reg) bits,
            v = out(xmm_reg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

#[inline(always)]
pub(super) fn f16_to_f32(h: half::f16) -> f32 {
    // SAFETY: reading lane 0 of a vector has no preconditions.
    unsafe { _mm_cvtss_f32(cvt_f16x2(h.to_bits() as u32)) }
}

/// Two halves converted together: `a` in lane 0, `b` in lane 1.
#[inline(always)]
pub(super) fn cvt_f16_pair(a: half::f16, b: half::f16) -> __m128 {
    cvt_f16x2(a.to_bits() as u32 | (b.to_bits() as u32) << 16)
}

/// `a · b` for two halves, converted together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_product(a: half::f16, b: half::f16) -> f32 {
    let v = cvt_f16_pair(a, b);
    _mm_cvtss_f32(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn hsum128(s: __m128) -> f32 {
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// 16 packed bytes → 32 bytes: the low nibbles in the low half, the high nibbles above.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn nibbles_32(qs: &[u8; 16]) -> __m256i {
    // SAFETY: qs is exactly 16 bytes; loadu has no alignment need.
    let lo = unsafe { _mm_loadu_si128(qs.as_ptr() as *const __m128i) };
    let hi = _mm_srli_epi16(lo, 4);
    _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
}

/// 32 bits → 32 bytes, 0xFF where the bit is set.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn bits_32(qh: [u8; 4]) -> __m256i {
    let word = _mm256_set1_epi32(i32::from_le_bytes(qh));
    // Byte k of the result takes byte k/8 of the word...
    let spread = _mm256_shuffle_epi8(
        word,
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    // ...and is all ones exactly when bit k%8 of it was set.
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1))
}

/// Σ of unsigned × signed bytes, in 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_u8_i32(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// `acc` plus the sums of 4 adjacent `u8 × i8` products, in 8 i32 lanes. The callers keep
/// every pair sum within i16 (|u| ≤ 128, |s| ≤ 127), so `maddubs` never saturates and every
/// implementation gives the same integers.
pub(super) trait ByteDot {
    /// # Safety
    /// The implementation's CPU features must be enabled in the caller.
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;
}

/// AVX2: `maddubs` then `madd` by ones.
pub(super) struct Madd;

impl ByteDot for Madd {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller enables AVX2.
        unsafe { _mm256_add_epi32(acc, dot_u8_i32(u, s)) }
    }
}

/// A block scale as `legacy_tile` reads it: an f16 (most types) or an f32 (MXFP4's E8M0).
pub(super) trait Scale: Copy {
    fn to_f32(self) -> f32;
}

impl Scale for half::f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16_to_f32(self)
    }
}

impl Scale for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

/// The tile of the 32-element types multiplied against Q8_0 (Q4_0, Q5_0, Q8_0, IQ4_NL,
/// MXFP4): `levels` gives a block's 32 signed levels (|level| ≤ 127) and its scale.
#[inline(always)]
pub(super) unsafe fn legacy_tile<D: ByteDot, B, S: Scale, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8_0]; C],
    levels: impl Fn(&B) -> (__m256i, S),
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: the callers enable AVX2, FMA, F16C and `D`'s features; loads stay inside
    // block fields.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xs: [(__m256i, f32); C] =
                std::array::from_fn(|c| (load256_i8(&x[c][i].qs), f16_to_f32(x[c][i].d)));
            for r in 0..R {
                let (q, d) = levels(&w[r][i]);
                let wd = d.to_f32();
                // maddubs wants one unsigned operand: move the weight's sign onto x.
                let aq = _mm256_sign_epi8(q, q);
                for c in 0..C {
                    let sx = _mm256_sign_epi8(xs[c].0, q);
                    let p = _mm256_cvtepi32_ps(D::dot(_mm256_setzero_si256(), aq, sx));
                    acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(wd * xs[c].1), p, acc[r][c]);
                }
            }
        }
        acc.map(|row| row.map(|a| hsum(a)))
    }
}

/// A Q8_0 block's levels and scale.
#[inline(always)]
pub(super) unsafe fn q8_0_levels(b: &BlockQ8_0) -> (__m256i, half::f16) {
    // SAFETY: qs is 32 bytes; the caller enables AVX2.
    unsafe { (load256_i8(&b.qs), b.d) }
}

/// A Q4_0 block's levels (nibble - 8) and scale.
#[inline(always)]
pub(super) unsafe fn q4_0_levels(b: &BlockQ4_0) -> (__m256i, half::f16) {
    // SAFETY: the caller enables AVX2.
    unsafe { (_mm256_sub_epi8(nibbles_32(&b.qs), _mm256_set1_epi8(8)), b.d) }
}

/// A Q5_0 block's levels (5-bit value - 16) and scale.
#[inline(always)]
pub(super) unsafe fn q5_0_levels(b: &BlockQ5_0) -> (__m256i, half::f16) {
    // SAFETY: the caller enables AVX2.
    unsafe {
        // level - 16 as a signed byte: the nibble where the 5th bit is set, the nibble
        // with 0xF0 or-ed in (i.e. minus 16) where it is not.
        let high = _mm256_andnot_si256(bits_32(b.qh), _mm256_set1_epi8(0xF0u8 as i8));
        (_mm256_or_si256(nibbles_32(&b.qs), high), b.d)
    }
}

/// 16 signed bytes broadcast to both 128-bit lanes, for `shuffle_epi8` lookups.
#[inline(always)]
unsafe fn table16(t: &[i8; 16]) -> __m256i {
    // SAFETY: t is 16 bytes; the caller enables AVX2.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr() as *const __m128i)) }
}

/// An IQ4_NL block's levels (its nibbles looked up in the non-linear table) and scale.
#[inline(always)]
pub(super) unsafe fn iq4nl_levels(b: &BlockIQ4NL) -> (__m256i, half::f16) {
    // SAFETY: the caller enables AVX2.
    unsafe {
        (
            _mm256_shuffle_epi8(table16(&IQ4NL_VALUES), nibbles_32(&b.qs)),
            b.d,
        )
    }
}

/// An MXFP4 block's levels (the doubled E2M1 values) and its E8M0 scale, halved.
#[inline(always)]
pub(super) unsafe fn mxfp4_levels(b: &BlockMXFP4) -> (__m256i, f32) {
    // SAFETY: the caller enables AVX2.
    unsafe {
        let q = _mm256_shuffle_epi8(table16(&MXFP4_VALUES), nibbles_32(&b.qs));
        (q, e8m0_half(b.e))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq4nl_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ4NL]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features legacy_tile and Madd need.
    unsafe { legacy_tile::<Madd, _, _, R, C>(w, x, |b| iq4nl_levels(b)) }
}

/// IQ4_XS against Q8_K: per group of 32, the nibbles looked up in IQ4_NL's table, summed in
/// i16 pairs and then by the group's multiplier (6 bits stored +32) into i32; one f16 scale
/// per 256. `sign_epi8` cannot negate an activation level of -128 (ggml's Q8_K has them; ours
/// stop at -127), so the activations' sign moves onto the weights (|level| ≤ 127) and `|x|`
/// (at most 128) is the unsigned operand.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq4xs_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ4XS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: this function enables the features used; every load is 16 bytes of a group's
    // `qs` or 32 bytes of the activations' `qs`.
    unsafe {
        let table = table16(&IQ4NL_VALUES);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            for r in 0..R {
                let b = &w[r][i];
                let mut sumi = [_mm256_setzero_si256(); C];
                for (g, qs) in b.qs.chunks_exact(16).enumerate() {
                    let mult = _mm256_set1_epi16(b.group_mult(g) as i16);
                    let q = _mm256_shuffle_epi8(table, nibbles_32(qs.try_into().unwrap()));
                    for c in 0..C {
                        let x = load256_i8(&xb[c].qs[32 * g..]);
                        let (ax, sq) = (_mm256_abs_epi8(x), _mm256_sign_epi8(q, x));
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sq), mult);
                        sumi[c] = _mm256_add_epi32(sumi[c], p);
                    }
                }
                let d = f16_to_f32(b.d);
                for c in 0..C {
                    let s = _mm256_set1_ps(d * xb[c].d);
                    acc[r][c] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        acc.map(|row| row.map(|a| hsum(a)))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn mxfp4_tile<const R: usize, const C: usize>(
    w: [&[BlockMXFP4]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in iq4nl_tile.
    unsafe { legacy_tile::<Madd, _, _, R, C>(w, x, |b| mxfp4_levels(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q8_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ8_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features legacy_tile and Madd need.
    unsafe { legacy_tile::<Madd, _, _, R, C>(w, x, |b| q8_0_levels(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q8_0_tile.
    unsafe { legacy_tile::<Madd, _, _, R, C>(w, x, |b| q4_0_levels(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q8_0_tile.
    unsafe { legacy_tile::<Madd, _, _, R, C>(w, x, |b| q5_0_levels(b)) }
}

/// A Q4_1/Q5_1 row against Q8_1 activations: per block `d_w·d_x·Σ u·q + m·s`, where `parts`
/// gives the block's unsigned levels `u`, its scale `d_w` and its `m`.
#[inline(always)]
unsafe fn affine_q8_1<B>(
    w: &[B],
    x: &[BlockQ8_1],
    parts: impl Fn(&B) -> (__m256i, half::f16, half::f16),
) -> f32 {
    // SAFETY: the callers enable AVX2, FMA and F16C; loads stay inside block fields.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut mins = 0f32;
        for (w, x) in w.iter().zip(x) {
            let (levels, d, m) = parts(w);
            let d = _mm256_set1_ps(f16_product(d, x.d));
            mins += f16_to_f32(m) * f16_to_f32(x.s);
            let p = dot_u8_i32(levels, load256_i8(&x.qs));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        }
        hsum(acc) + mins
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4_1_q8_1(w: &[BlockQ4_1], x: &[BlockQ8_1]) -> f32 {
    // SAFETY: this function enables the features affine_q8_1 and nibbles_32 need.
    unsafe { affine_q8_1(w, x, |w| (nibbles_32(&w.qs), w.d, w.m)) }
}

/// Q5_1: Q4_1's levels with each one's fifth bit (`bits_32`) or-ed in as 16.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5_1_q8_1(w: &[BlockQ5_1], x: &[BlockQ8_1]) -> f32 {
    // SAFETY: as in q4_1_q8_1.
    unsafe {
        affine_q8_1(w, x, |w| {
            let fifth = _mm256_and_si256(bits_32(w.qh), _mm256_set1_epi8(0x10));
            (_mm256_or_si256(nibbles_32(&w.qs), fifth), w.d, w.m)
        })
    }
}

/// Q4_K/Q5_K packed 6-bit scales and mins → 16 i16 lanes: the 8 scales, then the 8 mins.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn k4_scales_mins(q: &[u8; 12]) -> __m256i {
    const M1: u32 = 0x3f3f_3f3f;
    const M2: u32 = 0x0f0f_0f0f;
    const M3: u32 = 0x0303_0303;
    let u = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let sc_lo = u0 & M1;
    let sc_hi = (u2 & M2) | (((u0 >> 6) & M3) << 4);
    let m_lo = u1 & M1;
    let m_hi = ((u2 >> 4) & M2) | (((u1 >> 6) & M3) << 4);
    let bytes = _mm_set_epi32(m_hi as i32, m_lo as i32, sc_hi as i32, sc_lo as i32);
    _mm256_cvtepu8_epi16(bytes)
}

/// For `shuffle_epi8` on 8 i16 per 128-bit half: every lane takes lane `k`.
#[inline(always)]
fn pick_i16(k: i32) -> i32 {
    let pair = (2 * k) | ((2 * k + 1) << 8);
    pair | (pair << 16)
}

/// A Q8_K block's sums per 32-level sub-block (two 16-element groups each), in 8 i16 lanes.
#[inline(always)]
pub(super) unsafe fn subblock_sums(x: &BlockQ8K) -> __m128i {
    // SAFETY: bsums is 32 bytes; the caller enables AVX2.
    unsafe {
        let b = _mm256_loadu_si256(x.bsums.as_ptr() as *const __m256i);
        _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1))
    }
}

/// A Q4_K/Q5_K header's super-block scale and min scale as f32.
#[inline(always)]
pub(super) unsafe fn k4_scales(d: half::f16, dmin: half::f16) -> (f32, f32) {
    let dd = cvt_f16_pair(d, dmin);
    // SAFETY: register-only SSE3, which the callers' AVX2 includes.
    unsafe { (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd))) }
}

/// Levels stored `+ 2^SHIFT` (Q6_K: 32, Q3_K: 4): `-2^SHIFT · Σ scale·group sum`, the
/// block's integer correction in 8 i32 lanes (`scales16`: the 16 scales as i16; `bsums`: the
/// 16 group sums).
#[inline(always)]
pub(super) unsafe fn stored_offset<const SHIFT: i32>(scales16: __m256i, bsums: __m256i) -> __m256i {
    // SAFETY: register-only AVX2, which the callers enable.
    unsafe {
        let offset = _mm256_slli_epi32::<SHIFT>(_mm256_madd_epi16(scales16, bsums));
        _mm256_sub_epi32(_mm256_setzero_si256(), offset)
    }
}

/// The Q4_K/Q5_K tile. `levels(block, c)` yields the 64 unsigned levels of sub-blocks 2c and
/// 2c+1 (two 32-byte vectors); each is multiplied by the activations and its 6-bit scale, and
/// the mins come off through the activations' group sums.
#[inline(always)]
unsafe fn k4_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    header: impl Fn(&B) -> (half::f16, half::f16, &[u8; 12]),
    levels: impl Fn(&B, usize) -> (__m256i, __m256i),
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: the callers enable AVX2, FMA and F16C; loads stay inside block fields.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut acc_min = [[_mm_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            let bsums = xb.map(|x| subblock_sums(x));
            for r in 0..R {
                let b = &w[r][i];
                let (d, dmin, packed) = header(b);
                let sm = k4_scales_mins(packed);
                let (d, dmin) = k4_scales(d, dmin);
                let mins = _mm256_extracti128_si256(sm, 1);
                let sc = _mm256_castsi256_si128(sm);
                let scales = _mm256_set_m128i(sc, sc);
                let mut sumi = [_mm256_setzero_si256(); C];
                for k in 0..4 {
                    let (lo, hi) = levels(b, k);
                    let sl = _mm256_shuffle_epi8(scales, _mm256_set1_epi32(pick_i16(2 * k as i32)));
                    let sh =
                        _mm256_shuffle_epi8(scales, _mm256_set1_epi32(pick_i16(2 * k as i32 + 1)));
                    for c in 0..C {
                        let pl = _mm256_maddubs_epi16(lo, load256_i8(&xb[c].qs[64 * k..]));
                        let ph = _mm256_maddubs_epi16(hi, load256_i8(&xb[c].qs[64 * k + 32..]));
                        let p =
                            _mm256_add_epi32(_mm256_madd_epi16(pl, sl), _mm256_madd_epi16(ph, sh));
                        sumi[c] = _mm256_add_epi32(sumi[c], p);
                    }
                }
                for c in 0..C {
                    let s = _mm256_set1_ps(d * xb[c].d);
                    acc[r][c] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                    let m = _mm_cvtepi32_ps(_mm_madd_epi16(mins, bsums[c]));
                    acc_min[r][c] = _mm_fmadd_ps(_mm_set1_ps(dmin * xb[c].d), m, acc_min[r][c]);
                }
            }
        }
        std::array::from_fn(|r| std::array::from_fn(|c| hsum(acc[r][c]) - hsum128(acc_min[r][c])))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let low = _mm256_set1_epi8(0x0F);
    // SAFETY: this function enables the features k4_tile needs; loads are 32 bytes of qs.
    unsafe {
        k4_tile(
            w,
            x,
            |b| (b.d, b.dmin, &b.scales),
            |b, k| {
                let q4 = load256(&b.qs[32 * k..]);
                (
                    _mm256_and_si256(q4, low),
                    _mm256_and_si256(_mm256_srli_epi16(q4, 4), low),
                )
            },
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let low = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    // SAFETY: as in q4k_tile; qh is exactly 32 bytes.
    unsafe {
        k4_tile(
            w,
            x,
            |b| (b.d, b.dmin, &b.scales),
            |b, k| {
                let q4 = load256(&b.qs[32 * k..]);
                let hbits = load256(&b.qh);
                // Bit 2k (low half) and 2k+1 (high half) of qh give the 5th bit, moved to 0x10.
                let hl = _mm256_and_si256(
                    _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * k as i32)),
                    one,
                );
                let hh = _mm256_and_si256(
                    _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * k as i32 + 1)),
                    one,
                );
                (
                    _mm256_or_si256(_mm256_and_si256(q4, low), _mm256_slli_epi16(hl, 4)),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(q4, 4), low),
                        _mm256_slli_epi16(hh, 4),
                    ),
                )
            },
        )
    }
}

/// A block of the k-quants with 16-element groups (Q2_K, Q3_K, Q6_K) as `k16_tile` reads it:
/// the scale, the 16 group multipliers as i16, and for Q2_K the min scale and 16 mins.
pub(super) struct K16Header {
    pub d: f32,
    pub scales: __m256i,
    pub mins: Option<(f32, __m256i)>,
}

/// The tile of the k-quants with 16-element groups. `levels(block, n)` gives the unsigned
/// levels of elements `128n..128n + 128` as four vectors of 32 (two groups each); each pair
/// of products is summed by `maddubs`, then by its group's multiplier into i32. Levels stored
/// `+ 2^SHIFT` (SHIFT > 0) come off through the activations' group sums, as do Q2_K's mins.
#[inline(always)]
unsafe fn k16_tile<B, const R: usize, const C: usize, const SHIFT: i32>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    header: impl Fn(&B) -> K16Header,
    levels: impl Fn(&B, usize) -> [__m256i; 4],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    // SAFETY: the callers enable AVX2, FMA and F16C; the bsum loads read exactly 32 bytes,
    // the activation loads 32 bytes inside `qs`.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..x[0].len() {
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| &x[c][i]);
            let bsums = xb.map(|x| _mm256_loadu_si256(x.bsums.as_ptr() as *const __m256i));
            for r in 0..R {
                let b = &w[r][i];
                let h = header(b);
                // Scales 0-7 in both halves, then 8-15: one byte shuffle per 32 levels picks a
                // pair of them (the first for the low 16 products, the second for the high).
                let halves = [
                    _mm256_permute2x128_si256::<0x00>(h.scales, h.scales),
                    _mm256_permute2x128_si256::<0x11>(h.scales, h.scales),
                ];
                let mut sumi = [_mm256_setzero_si256(); C];
                if SHIFT > 0 {
                    for c in 0..C {
                        sumi[c] = stored_offset::<SHIFT>(h.scales, bsums[c]);
                    }
                }
                for n in 0..2 {
                    for (k, q) in levels(b, n).into_iter().enumerate() {
                        let g = 8 * n + 2 * k;
                        let (lo, hi) = (g % 8, g % 8 + 1);
                        let pick = _mm256_set_m128i(
                            _mm_set1_epi32(pick_i16(hi as i32)),
                            _mm_set1_epi32(pick_i16(lo as i32)),
                        );
                        let sc = _mm256_shuffle_epi8(halves[g / 8], pick);
                        for c in 0..C {
                            let p =
                                _mm256_maddubs_epi16(q, load256_i8(&xb[c].qs[128 * n + 32 * k..]));
                            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, sc));
                        }
                    }
                }
                for c in 0..C {
                    let s = _mm256_set1_ps(h.d * xb[c].d);
                    acc[r][c] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                    if let Some((dmin, mins)) = h.mins {
                        let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums[c]));
                        let s = _mm256_set1_ps(-dmin * xb[c].d);
                        acc[r][c] = _mm256_fmadd_ps(s, m, acc[r][c]);
                    }
                }
            }
        }
        acc.map(|row| row.map(|a| hsum(a)))
    }
}

/// The 2-bit planes of Q2_K and Q3_K: element `128n + 32k + i` is bits `2k, 2k + 1` of
/// `qs[32n + i]`.
#[inline(always)]
unsafe fn two_bit_planes(qs: &[u8; 64], n: usize) -> [__m256i; 4] {
    // SAFETY: the caller enables AVX2; the load reads 32 of the 64 bytes.
    unsafe {
        let q = load256(&qs[32 * n..]);
        let three = _mm256_set1_epi8(3);
        [
            _mm256_and_si256(q, three),
            _mm256_and_si256(_mm256_srli_epi16::<2>(q), three),
            _mm256_and_si256(_mm256_srli_epi16::<4>(q), three),
            _mm256_and_si256(_mm256_srli_epi16::<6>(q), three),
        ]
    }
}

/// A Q2_K block's scales and mins (4 bits each, one byte per group of 16) and its two f16
/// multipliers.
#[inline(always)]
pub(super) unsafe fn q2k_header(b: &BlockQ2K) -> K16Header {
    // SAFETY: the caller enables AVX2 and F16C; the load reads the 16 bytes of `scales`.
    unsafe {
        let (d, dmin) = k4_scales(b.d, b.dmin);
        let packed = _mm_loadu_si128(b.scales.as_ptr() as *const __m128i);
        let low = _mm_set1_epi8(0x0F);
        let scales = _mm256_cvtepu8_epi16(_mm_and_si128(packed, low));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), low));
        K16Header {
            d,
            scales,
            mins: Some((dmin, mins)),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q2k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ2K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features k16_tile and q2k_header need.
    unsafe { k16_tile::<_, R, C, 0>(w, x, |b| q2k_header(b), |b, n| two_bit_planes(&b.qs, n)) }
}

/// Q3_K's sixteen 6-bit scales (biased by 32) as i16, bias removed: four low bits from
/// `q[0..8]` (low nibbles, then high), two high bits from `q[8..12]` (scale `j` from bits
/// `2(j / 4)` of byte `j % 4`).
#[inline(always)]
unsafe fn q3k_scales16(q: &[u8; 12]) -> __m256i {
    // SAFETY: the caller enables AVX2; the loads read bytes 0-7 and 8-11 of the 12.
    unsafe {
        let low = _mm_loadl_epi64(q.as_ptr() as *const __m128i);
        let nibbles = _mm_and_si128(
            _mm_unpacklo_epi64(low, _mm_srli_epi16::<4>(low)),
            _mm_set1_epi8(0x0F),
        );
        let h = _mm_set1_epi32(i32::from_le_bytes([q[8], q[9], q[10], q[11]]));
        let high = _mm_and_si128(
            _mm_srlv_epi32(h, _mm_setr_epi32(0, 2, 4, 6)),
            _mm_set1_epi8(3),
        );
        let bytes = _mm_or_si128(nibbles, _mm_slli_epi16::<4>(high));
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(bytes), _mm256_set1_epi16(32))
    }
}

/// A Q3_K block's scale and its sixteen group scales (stored levels are +4: no mins).
#[inline(always)]
pub(super) unsafe fn q3k_header(b: &BlockQ3K) -> K16Header {
    // SAFETY: the caller enables AVX2; q3k_scales16 reads inside the 12 bytes of `scales`.
    unsafe {
        K16Header {
            d: f16_to_f32(b.d),
            scales: q3k_scales16(&b.scales),
            mins: None,
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q3k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ3K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features k16_tile needs; the hmask load reads its 32
    // bytes.
    unsafe {
        k16_tile::<_, R, C, 2>(
            w,
            x,
            |b| q3k_header(b),
            |b, n| {
                // Stored level + 4: the two low bits, plus 4 where bit 4n + k of hmask is set.
                let hm = load256(&b.hmask);
                let four = _mm256_set1_epi8(4);
                let mut q = two_bit_planes(&b.qs, n);
                for (k, q) in q.iter_mut().enumerate() {
                    let bit = _mm256_set1_epi8(1 << (4 * n + k));
                    let set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                    *q = _mm256_or_si256(*q, _mm256_and_si256(set, four));
                }
                q
            },
        )
    }
}

/// A Q6_K block's scale and its sixteen signed 8-bit group scales (levels stored +32).
#[inline(always)]
pub(super) unsafe fn q6k_header(b: &BlockQ6K) -> K16Header {
    // SAFETY: the caller enables AVX2; the load reads the 16 bytes of `scales`.
    unsafe {
        K16Header {
            d: f16_to_f32(b.d),
            scales: _mm256_cvtepi8_epi16(_mm_loadu_si128(b.scales.as_ptr() as *const __m128i)),
            mins: None,
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q6k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ6K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let low = _mm256_set1_epi8(0x0F);
    let three = _mm256_set1_epi8(3);
    // SAFETY: this function enables the features k16_tile needs; every load reads 32 bytes
    // inside ql or qh.
    unsafe {
        k16_tile::<_, R, C, 5>(
            w,
            x,
            |b| q6k_header(b),
            |b, n| {
                let ql1 = load256(&b.ql[64 * n..]);
                let ql2 = load256(&b.ql[64 * n + 32..]);
                let qh = load256(&b.qh[32 * n..]);
                let parts = [
                    (_mm256_and_si256(ql1, low), _mm256_and_si256(qh, three)),
                    (
                        _mm256_and_si256(ql2, low),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), three),
                    ),
                    (
                        _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 4), three),
                    ),
                    (
                        _mm256_and_si256(_mm256_srli_epi16(ql2, 4), low),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 6), three),
                    ),
                ];
                parts.map(|(lo, hi)| _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)))
            },
        )
    }
}

/// Any lane NaN or ±inf? Such blocks go to the reference quantizer, whose scalar NaN rules
/// the vector instructions do not share.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn any_nonfinite(abs: __m256) -> bool {
    _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLE_UQ>(abs, _mm256_set1_ps(f32::MAX))) != 0
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
}

/// `f32::round` (halves away from zero), exactly: truncate, then step out where the
/// (exactly computed) remainder is at least a half.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn round_half_away(y: __m256) -> __m256 {
    let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
    let abs_frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0), _mm256_sub_ps(y, t));
    let step = _mm256_or_ps(_mm256_and_ps(y, _mm256_set1_ps(-0.0)), _mm256_set1_ps(1.0));
    let away = _mm256_cmp_ps::<_CMP_GE_OQ>(abs_frac, _mm256_set1_ps(0.5));
    _mm256_add_ps(t, _mm256_and_ps(away, step))
}

/// Four vectors of 8 i32 (each within i8 range) → 32 bytes in order.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_i32x32(v: [__m256i; 4]) -> __m256i {
    let a = _mm256_packs_epi32(v[0], v[1]);
    let b = _mm256_packs_epi32(v[2], v[3]);
    // The packs interleave 128-bit lanes: undo it with one cross-lane permute.
    let bytes = _mm256_packs_epi16(a, b);
    _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// `BlockQ8_0::quantize`, byte for byte, 32 floats at a time.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn quantize_q8_0(xs: &[f32], out: &mut [BlockQ8_0]) {
    let sign = _mm256_set1_ps(-0.0);
    for (x, b) in xs.chunks_exact(QK).zip(out) {
        // SAFETY: x holds exactly 32 floats; the store writes the 32 bytes of b.qs.
        unsafe {
            let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x[8 * i..].as_ptr()));
            let abs = v.map(|v| _mm256_andnot_ps(sign, v));
            let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
            if any_nonfinite(m) {
                crate::quantized::format::quantize_q8_0_ref(x, std::slice::from_mut(b));
                continue;
            }
            let d = hmax(m) / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            if !id.is_finite() {
                // A subnormal scale: its reciprocal overflows, and the reference's saturating
                // casts of ±inf and NaN decide the bytes.
                crate::quantized::format::quantize_q8_0_ref(x, std::slice::from_mut(b));
                continue;
            }
            let id = _mm256_set1_ps(id);
            let q = v.map(|v| _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v, id))));
            _mm256_storeu_si256(b.qs.as_mut_ptr() as *mut __m256i, pack_i32x32(q));
            b.d = half::f16::from_f32(d);
        }
    }
}

/// `BlockQ8K::quantize`, byte for byte, 256 floats at a time.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn quantize_q8k(xs: &[f32], out: &mut [BlockQ8K]) {
    let sign = _mm256_set1_ps(-0.0);
    for (x, b) in xs.chunks_exact(QK_K).zip(out) {
        // SAFETY: x holds exactly 256 floats, read 8 at a time; each store writes 32 bytes
        // inside b.qs.
        unsafe {
            let mut m = _mm256_setzero_ps();
            for c in x.chunks_exact(8) {
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(c.as_ptr())));
            }
            if any_nonfinite(m) {
                crate::quantized::format::quantize_q8k_ref(x, std::slice::from_mut(b));
                continue;
            }
            let amax = hmax(m);
            if amax == 0.0 {
                *b = bytemuck::Zeroable::zeroed();
                continue;
            }
            // The reference scales by the first element of largest magnitude, sign included.
            let target = _mm256_set1_ps(amax);
            let max = x
                .chunks_exact(8)
                .find_map(|c| {
                    let a = _mm256_andnot_ps(sign, _mm256_loadu_ps(c.as_ptr()));
                    let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(a, target));
                    (hit != 0).then(|| c[hit.trailing_zeros() as usize])
                })
                .expect("amax is some element's magnitude");
            let iscale = -127.0 / max;
            if !iscale.is_finite() {
                crate::quantized::format::quantize_q8k_ref(x, std::slice::from_mut(b));
                continue;
            }
            let is = _mm256_set1_ps(iscale);
            let ones = _mm256_set1_epi8(1);
            let ones16 = _mm256_set1_epi16(1);
            for (c, x) in x.chunks_exact(32).enumerate() {
                // cvtps rounds halves to even, as nearest_int's magic-number trick does.
                let q = std::array::from_fn(|i| {
                    let v = _mm256_mul_ps(is, _mm256_loadu_ps(x[8 * i..].as_ptr()));
                    _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127))
                });
                let bytes = pack_i32x32(q);
                _mm256_storeu_si256(b.qs[32 * c..].as_mut_ptr() as *mut __m256i, bytes);
                // Sums of 4 consecutive levels, then of 16: groups 2c and 2c+1.
                let s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, bytes), ones16);
                let s8 = _mm256_hadd_epi32(s4, s4);
                let s16 = _mm256_hadd_epi32(s8, s8);
                b.bsums[2 * c] = _mm256_extract_epi32::<0>(s16) as i16;
                b.bsums[2 * c + 1] = _mm256_extract_epi32::<4>(s16) as i16;
            }
            b.d = 1.0 / iscale;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn f16_to_f32_matches_half_for_every_bit_pattern() {
        use crate::cpu::features::{test_kernels_at, Isa};
        if !test_kernels_at(Isa::Avx2, "f16_to_f32") {
            return;
        }
        for b in 0..=u16::MAX {
            let h = half::f16::from_bits(b);
            let (ours, reference) = (super::f16_to_f32(h), h.to_f32());
            assert!(
                ours.to_bits() == reference.to_bits() || (ours.is_nan() && reference.is_nan()),
                "{b:#06x}: {ours} != {reference}"
            );
        }
    }

    /// Rows with ties at every rounding step, zeros, denormals, equal-magnitude extremes of
    /// both signs, NaN and inf: the SIMD quantizers must give the reference's bytes.
    #[test]
    fn simd_activation_quantizers_match_the_reference_bytes() {
        use crate::cpu::features::{test_kernels_at, Isa};
        if !test_kernels_at(Isa::Avx2, "activation quantizers") {
            return;
        }
        use crate::quantized::format::*;
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut rows: Vec<Vec<f32>> = (0..40)
            .map(|r| {
                (0..512)
                    .map(|i| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                        match r % 4 {
                            // Multiples of 1/2 of the step: exact ties after scaling.
                            0 => ((u * 254.0).round() / 2.0) * if i % 32 == 0 { 1.0 } else { 0.5 },
                            1 => u * 1e-38,
                            2 => (u * 8.0).round(),
                            _ => u,
                        }
                    })
                    .collect()
            })
            .collect();
        rows[1][3] = f32::NAN;
        rows[2][300] = f32::INFINITY;
        rows[3].iter_mut().take(256).for_each(|v| *v = 0.0);
        rows[4][0] = -3.0;
        rows[4][1] = 3.0;
        for x in &rows {
            let mut a = vec![<BlockQ8_0 as bytemuck::Zeroable>::zeroed(); 16];
            let mut b = a.clone();
            quantize_q8_0_ref(x, &mut a);
            // SAFETY: has_avx2() was checked above.
            unsafe { super::quantize_q8_0(x, &mut b) };
            assert_eq!(
                bytemuck::cast_slice::<_, u8>(&a),
                bytemuck::cast_slice::<_, u8>(&b)
            );
            let mut a = vec![<BlockQ8K as bytemuck::Zeroable>::zeroed(); 2];
            let mut b = a.clone();
            quantize_q8k_ref(x, &mut a);
            // SAFETY: as above.
            unsafe { super::quantize_q8k(x, &mut b) };
            assert_eq!(
                bytemuck::cast_slice::<_, u8>(&a),
                bytemuck::cast_slice::<_, u8>(&b)
            );
        }
    }
}

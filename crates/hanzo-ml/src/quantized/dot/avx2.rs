//! AVX2 + FMA (+ F16C for the block scales) dot products of weight blocks with quantized
//! activations. Every function here requires those features; `dot::pick_*` checks them.
//!
//! The common step: 32 signed 8-bit products summed in pairs by `maddubs` (u8 × i8 → i16),
//! then in fours by `madd` (i16 × i16 → i32), then scaled in f32.

use crate::quantized::blocks::*;
use std::arch::x86_64::*;

#[inline(always)]
unsafe fn load256(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    // SAFETY: every caller passes a slice of at least 32 bytes; loadu has no alignment need.
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

#[inline(always)]
unsafe fn load256_i8(p: &[i8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    // SAFETY: as `load256`.
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_to_f32(h: half::f16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.to_bits() as i32)))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// 16 packed bytes → 32 bytes: the low nibbles in the low half, the high nibbles above.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibbles_32(qs: &[u8; 16]) -> __m256i {
    // SAFETY: qs is exactly 16 bytes; loadu has no alignment need.
    let lo = unsafe { _mm_loadu_si128(qs.as_ptr() as *const __m128i) };
    let hi = _mm_srli_epi16(lo, 4);
    _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
}

/// 32 bits → 32 bytes, 0xFF where the bit is set.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn bits_32(qh: [u8; 4]) -> __m256i {
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

/// Σ of signed × signed bytes, in 8 i32 lanes (each the sum of four products).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_i8_i32(x: __m256i, y: __m256i) -> __m256i {
    // maddubs wants one unsigned operand: move x's sign onto y.
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
}

/// Σ of unsigned × signed bytes, in 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_u8_i32(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q8_0_q8_0(w: &[BlockQ8_0], x: &[BlockQ8_0]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (w, x) in w.iter().zip(x) {
        // SAFETY: f16_to_f32 and the loads need the features this function enables.
        unsafe {
            let d = _mm256_set1_ps(f16_to_f32(w.d) * f16_to_f32(x.d));
            let p = dot_i8_i32(load256_i8(&w.qs), load256_i8(&x.qs));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        }
    }
    // SAFETY: same features.
    unsafe { hsum(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4_0_q8_0(w: &[BlockQ4_0], x: &[BlockQ8_0]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (w, x) in w.iter().zip(x) {
        // SAFETY: as in q8_0_q8_0.
        unsafe {
            let d = _mm256_set1_ps(f16_to_f32(w.d) * f16_to_f32(x.d));
            let q = _mm256_sub_epi8(nibbles_32(&w.qs), _mm256_set1_epi8(8));
            let p = dot_i8_i32(q, load256_i8(&x.qs));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        }
    }
    // SAFETY: same features.
    unsafe { hsum(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5_0_q8_0(w: &[BlockQ5_0], x: &[BlockQ8_0]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (w, x) in w.iter().zip(x) {
        // SAFETY: as in q8_0_q8_0.
        unsafe {
            let d = _mm256_set1_ps(f16_to_f32(w.d) * f16_to_f32(x.d));
            // level - 16 as a signed byte: the nibble where the 5th bit is set, the nibble
            // with 0xF0 or-ed in (i.e. minus 16) where it is not.
            let high = _mm256_andnot_si256(bits_32(w.qh), _mm256_set1_epi8(0xF0u8 as i8));
            let q = _mm256_or_si256(nibbles_32(&w.qs), high);
            let p = dot_i8_i32(q, load256_i8(&x.qs));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        }
    }
    // SAFETY: same features.
    unsafe { hsum(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4_1_q8_1(w: &[BlockQ4_1], x: &[BlockQ8_1]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0f32;
    for (w, x) in w.iter().zip(x) {
        // SAFETY: as in q8_0_q8_0.
        unsafe {
            let d = _mm256_set1_ps(f16_to_f32(w.d) * f16_to_f32(x.d));
            mins += f16_to_f32(w.m) * f16_to_f32(x.s);
            let p = dot_u8_i32(nibbles_32(&w.qs), load256_i8(&x.qs));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        }
    }
    // SAFETY: same features.
    unsafe { hsum(acc) + mins }
}

/// Q4_K/Q5_K packed 6-bit scales and mins → ([scale; 8], [min; 8]).
#[inline(always)]
fn k4_scales_mins(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const M1: u32 = 0x3f3f_3f3f;
    const M2: u32 = 0x0f0f_0f0f;
    const M3: u32 = 0x0303_0303;
    let u = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let sc_lo = u0 & M1;
    let sc_hi = (u2 & M2) | (((u0 >> 6) & M3) << 4);
    let m_lo = u1 & M1;
    let m_hi = ((u2 >> 4) & M2) | (((u1 >> 6) & M3) << 4);
    let cat = |a: u32, b: u32| {
        let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    };
    (cat(sc_lo, sc_hi), cat(m_lo, m_hi))
}

/// Σ_j mins[j] · (sum of activation sub-block j), from the 16-element group sums.
#[inline(always)]
fn k4_min_term(mins: &[u8; 8], bsums: &[i16; 16]) -> i32 {
    (0..8)
        .map(|j| mins[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32))
        .sum()
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4k_q8k(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0f32;
    let low = _mm256_set1_epi8(0x0F);
    for (w, x) in w.iter().zip(x) {
        let (scales, mins) = k4_scales_mins(&w.scales);
        // SAFETY: as in q8_0_q8_0; every load is 32 bytes inside a block field.
        unsafe {
            let d = x.d * f16_to_f32(w.d);
            acc_min += x.d * f16_to_f32(w.dmin) * k4_min_term(&mins, &x.bsums) as f32;
            let mut sumi = _mm256_setzero_si256();
            for c in 0..4 {
                let q4 = load256(&w.qs[32 * c..]);
                let q4l = _mm256_and_si256(q4, low);
                let q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low);
                let pl = _mm256_maddubs_epi16(q4l, load256_i8(&x.qs[64 * c..]));
                let ph = _mm256_maddubs_epi16(q4h, load256_i8(&x.qs[64 * c + 32..]));
                let pl = _mm256_madd_epi16(pl, _mm256_set1_epi16(scales[2 * c] as i16));
                let ph = _mm256_madd_epi16(ph, _mm256_set1_epi16(scales[2 * c + 1] as i16));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    // SAFETY: same features.
    unsafe { hsum(acc) - acc_min }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5k_q8k(w: &[BlockQ5K], x: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0f32;
    let low = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    for (w, x) in w.iter().zip(x) {
        let (scales, mins) = k4_scales_mins(&w.scales);
        // SAFETY: as in q4k_q8k.
        unsafe {
            let d = x.d * f16_to_f32(w.d);
            acc_min += x.d * f16_to_f32(w.dmin) * k4_min_term(&mins, &x.bsums) as f32;
            let hbits = load256(&w.qh);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..4 {
                let q4 = load256(&w.qs[32 * c..]);
                // Bit 2c (low half) and 2c+1 (high half) of qh give the 5th bit, moved to 0x10.
                let hl = _mm256_and_si256(
                    _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32)),
                    one,
                );
                let hh = _mm256_and_si256(
                    _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32 + 1)),
                    one,
                );
                let q5l = _mm256_or_si256(_mm256_and_si256(q4, low), _mm256_slli_epi16(hl, 4));
                let q5h = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(q4, 4), low),
                    _mm256_slli_epi16(hh, 4),
                );
                let pl = _mm256_maddubs_epi16(q5l, load256_i8(&x.qs[64 * c..]));
                let ph = _mm256_maddubs_epi16(q5h, load256_i8(&x.qs[64 * c + 32..]));
                let pl = _mm256_madd_epi16(pl, _mm256_set1_epi16(scales[2 * c] as i16));
                let ph = _mm256_madd_epi16(ph, _mm256_set1_epi16(scales[2 * c + 1] as i16));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    // SAFETY: same features.
    unsafe { hsum(acc) - acc_min }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q6k_q8k(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let low = _mm256_set1_epi8(0x0F);
    let three = _mm256_set1_epi8(3);
    for (w, x) in w.iter().zip(x) {
        // SAFETY: as in q4k_q8k; the scale and bsum loads read exactly 16 and 32 bytes.
        unsafe {
            let d = x.d * f16_to_f32(w.d);
            let scales16 =
                _mm256_cvtepi8_epi16(_mm_loadu_si128(w.scales.as_ptr() as *const __m128i));
            // Levels are stored +32: take Σ sc·32·Σy back out once per block.
            let bsums = _mm256_loadu_si256(x.bsums.as_ptr() as *const __m256i);
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 5);
            let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), offset);
            for n in 0..2 {
                let ql1 = load256(&w.ql[64 * n..]);
                let ql2 = load256(&w.ql[64 * n + 32..]);
                let qh = load256(&w.qh[32 * n..]);
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
                for (k, (lo, hi)) in parts.into_iter().enumerate() {
                    let q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                    let g = 8 * n + 2 * k;
                    let p = _mm256_maddubs_epi16(q, load256_i8(&x.qs[128 * n + 32 * k..]));
                    let sc = _mm256_set_m128i(
                        _mm_set1_epi16(w.scales[g + 1] as i16),
                        _mm_set1_epi16(w.scales[g] as i16),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    // SAFETY: same features.
    unsafe { hsum(acc) }
}

//! AVX2 + FMA dot products of 4- and 8-bit AFQ rows (see `afq`). Per 32 weights: the levels
//! as bytes, `maddubs` against the activation bytes, `madd` to i32, then one FMA with the
//! block's `d`; the group's scale once per group.

use super::afq::AfqDot;
use super::avx2::{hsum, load256_i8};
use super::{isa, Isa};
use crate::quantized::format::afq::scale_bias;
use crate::quantized::format::AfqType;
use std::arch::x86_64::*;

pub(super) fn pick(t: AfqType) -> Option<AfqDot> {
    if isa() < Isa::Avx2 {
        return None;
    }
    let dot: super::afq::AfqDotFn = match (t.bits(), t.group()) {
        (4, 32) => dot4_entry::<32>,
        (4, 64) => dot4_entry::<64>,
        (4, 128) => dot4_entry::<128>,
        (8, 32) => dot8_entry::<32>,
        (8, 64) => dot8_entry::<64>,
        (8, 128) => dot8_entry::<128>,
        _ => return None,
    };
    Some(AfqDot {
        dot,
        nibble_order: t.bits() == 4,
    })
}

/// Checks the lengths the kernels read through raw pointers.
fn check(t: AfqType, g: usize, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) {
    let groups = gsum.len();
    assert!(t.group() == g && w.len() == groups * t.block_bytes());
    assert!(q.len() == groups * g && d.len() == groups * g / 32);
}

fn dot4_entry<const G: usize>(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    check(t, G, w, q, d, gsum);
    // SAFETY: `pick` hands this out only where AVX2 and FMA run; lengths checked above.
    unsafe { dot4::<G>(t, w, q, d, gsum) }
}

fn dot8_entry<const G: usize>(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    check(t, G, w, q, d, gsum);
    // SAFETY: as `dot4_entry`.
    unsafe { dot8::<G>(t, w, q, d, gsum) }
}

/// 4-bit: a block's 16 bytes hold elements `2i` (low nibble) and `2i + 1` (high nibble),
/// so the low nibbles meet the block's even activation bytes and the high nibbles its odd
/// ones (`nibble_order`).
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4<const G: usize>(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    let bb = 4 + G / 2;
    let mask = _mm_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut total = _mm256_setzero_ps();
    let mut biases = 0f32;
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        let (scale, bias) = scale_bias(t, block);
        let mut acc = _mm256_setzero_ps();
        for j in 0..G / 32 {
            // SAFETY: `block` holds 4 + G/2 bytes, so bytes 4 + 16j .. 4 + 16j + 16 are in it;
            // `q` holds G bytes per group (checked), read 32 at a time.
            unsafe {
                let v = _mm_loadu_si128(block.as_ptr().add(4 + 16 * j) as *const __m128i);
                let lo = _mm_and_si128(v, mask);
                let hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
                let levels = _mm256_set_m128i(hi, lo);
                let x = load256_i8(&q[gi * G + 32 * j..]);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(levels, x), ones);
                let dj = _mm256_set1_ps(*d.get_unchecked(gi * G / 32 + j));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dj, acc);
            }
        }
        total = _mm256_fmadd_ps(acc, _mm256_set1_ps(scale), total);
        biases += bias * gsum[gi];
    }
    // SAFETY: AVX2 enabled on this function.
    biases + unsafe { hsum(total) }
}

/// 8-bit: levels `u` up to 255 would overflow `maddubs`'s i16 pair sums against bytes up to
/// ±127, so they are centred (`u - 128`, one `xor`) and multiplied by sign (`|u - 128|` as
/// unsigned bytes against `x` carrying the sign); the bias takes back the `128 · scale`.
#[target_feature(enable = "avx2,fma")]
unsafe fn dot8<const G: usize>(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    let bb = 4 + G;
    let flip = _mm256_set1_epi8(-128);
    let ones = _mm256_set1_epi16(1);
    let mut total = _mm256_setzero_ps();
    let mut biases = 0f32;
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        let (scale, bias) = scale_bias(t, block);
        let mut acc = _mm256_setzero_ps();
        for j in 0..G / 32 {
            // SAFETY: `block` holds 4 + G bytes, so bytes 4 + 32j .. 4 + 32j + 32 are in it;
            // `q` as in `dot4`.
            unsafe {
                let v = _mm256_loadu_si256(block.as_ptr().add(4 + 32 * j) as *const __m256i);
                let c = _mm256_xor_si256(v, flip);
                let x = load256_i8(&q[gi * G + 32 * j..]);
                let p = _mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(x, c));
                let p = _mm256_madd_epi16(p, ones);
                let dj = _mm256_set1_ps(*d.get_unchecked(gi * G / 32 + j));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dj, acc);
            }
        }
        total = _mm256_fmadd_ps(acc, _mm256_set1_ps(scale), total);
        biases += (bias + 128.0 * scale) * gsum[gi];
    }
    // SAFETY: AVX2 enabled on this function.
    biases + unsafe { hsum(total) }
}

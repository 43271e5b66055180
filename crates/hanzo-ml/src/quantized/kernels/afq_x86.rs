//! AVX2 + FMA (+ F16C for f16 scales) dot products of 4- and 8-bit AFQ rows (see `afq`): the
//! levels as bytes, `maddubs` against the activation bytes, `madd` to i32, each block of 32
//! scaled by its `d` in f32, the group's scale once per group.

use super::afq::{check_lengths, AfqDot};
use super::avx2::{hsum, load256_i8};
use super::{isa, Isa};
use crate::quantized::format::{AfqScale, AfqType};
use std::arch::x86_64::*;

pub(super) fn pick(t: AfqType, k: usize) -> Option<AfqDot> {
    // The 4-bit kernel reads 64 weights at a time.
    if isa() < Isa::Avx2 || (t.bits() == 4 && !k.is_multiple_of(64)) {
        return None;
    }
    let dot: super::afq::AfqDotFn = match t.bits() {
        4 => dot4_entry,
        8 => dot8_entry,
        _ => return None,
    };
    Some(AfqDot {
        dot,
        nibble_order: t.bits() == 4,
    })
}

// The group size and scale type are read at run time: a copy per layout (12) cost the
// binary more than the branches cost a product.
fn dot4_entry(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    check_lengths(t, w, q, d, gsum);
    let bf16 = t.scale() == AfqScale::BF16;
    // SAFETY: `pick` hands this out only where AVX2, FMA and F16C run; lengths checked above.
    unsafe { dot4(t.group(), bf16, w, q, d, gsum) }
}

fn dot8_entry(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    check_lengths(t, w, q, d, gsum);
    let bf16 = t.scale() == AfqScale::BF16;
    // SAFETY: as `dot4_entry`.
    unsafe { dot8(t.group(), bf16, w, q, d, gsum) }
}

/// A block's scale and bias: bf16 by a shift, f16 by F16C (a software conversion per group
/// cost as much as the group's products).
#[inline(always)]
unsafe fn scale_bias(bf16: bool, block: &[u8]) -> (f32, f32) {
    let s = u16::from_le_bytes([block[0], block[1]]);
    let b = u16::from_le_bytes([block[2], block[3]]);
    if bf16 {
        (
            f32::from_bits((s as u32) << 16),
            f32::from_bits((b as u32) << 16),
        )
    } else {
        // SAFETY: F16C is enabled on every caller.
        unsafe {
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128((s as u32 | (b as u32) << 16) as i32));
            (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_shuffle_ps(v, v, 1)))
        }
    }
}

/// 4-bit, 64 weights at a time: 32 bytes, whose low nibbles are the chunk's even elements
/// and high nibbles its odd ones, against the activations in that order (`nibble_order`).
/// The two `maddubs` sums add in i16 (at most 4 · 15 · 127); lanes 0-3 of the `madd` then
/// hold the chunk's first 32 elements, lanes 4-7 its second, each scaled by its block's `d`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4(g: usize, bf16: bool, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    let bb = 4 + g / 2;
    let mask = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut total = _mm256_setzero_ps();
    let mut biases = 0f32;
    if g == 32 {
        // Two groups per chunk: lanes 0-3 take the first group's scale, 4-7 the second's.
        for (c, pair) in w.chunks_exact(2 * bb).enumerate() {
            // SAFETY: F16C is enabled here; `pair` holds two blocks.
            let ((s0, b0), (s1, b1)) =
                unsafe { (scale_bias(bf16, pair), scale_bias(bf16, &pair[bb..])) };
            let mut levels = [0u8; 32];
            levels[..16].copy_from_slice(&pair[4..4 + 16]);
            levels[16..].copy_from_slice(&pair[bb + 4..bb + 4 + 16]);
            let scales = _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0));
            // SAFETY: `levels` holds 32 bytes; chunk `c` is below k / 64.
            let p = unsafe { chunk4(levels.as_ptr(), q, d, c, mask, ones) };
            total = _mm256_fmadd_ps(p, scales, total);
            biases += b0 * gsum[2 * c] + b1 * gsum[2 * c + 1];
        }
    } else {
        for (gi, block) in w.chunks_exact(bb).enumerate() {
            // SAFETY: F16C is enabled here.
            let (scale, bias) = unsafe { scale_bias(bf16, block) };
            let mut acc = _mm256_setzero_ps();
            for j in 0..g / 64 {
                // SAFETY: bytes 4 + 32j .. 4 + 32j + 32 lie in the block of 4 + g/2 bytes;
                // the chunk index is below k / 64.
                let p = unsafe {
                    chunk4(
                        block.as_ptr().add(4 + 32 * j),
                        q,
                        d,
                        gi * g / 64 + j,
                        mask,
                        ones,
                    )
                };
                acc = _mm256_add_ps(acc, p);
            }
            total = _mm256_fmadd_ps(acc, _mm256_set1_ps(scale), total);
            biases += bias * gsum[gi];
        }
    }
    // SAFETY: AVX2 enabled on this function.
    biases + unsafe { hsum(total) }
}

/// One chunk of 64 4-bit weights (`levels`, 32 bytes) against chunk `c` of the activations:
/// its products as f32, scaled by the blocks' `d`. Inlined into `dot4`, whose features it
/// compiles with (a closure there was not, and ran its intrinsics as calls).
///
/// # Safety
/// AVX2 must run; `levels` points to 32 readable bytes; `q` holds 64 bytes and `d` 8 floats
/// for chunk `c`.
#[inline(always)]
unsafe fn chunk4(
    levels: *const u8,
    q: &[i8],
    d: &[f32],
    c: usize,
    mask: __m256i,
    ones: __m256i,
) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe {
        let v = _mm256_loadu_si256(levels as *const __m256i);
        let lo = _mm256_and_si256(v, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
        let even = _mm256_loadu_si256(q.as_ptr().add(64 * c) as *const __m256i);
        let odd = _mm256_loadu_si256(q.as_ptr().add(64 * c + 32) as *const __m256i);
        let p = _mm256_add_epi16(
            _mm256_maddubs_epi16(lo, even),
            _mm256_maddubs_epi16(hi, odd),
        );
        let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
        _mm256_mul_ps(p, _mm256_loadu_ps(d.as_ptr().add(8 * c)))
    }
}

/// 8-bit: levels `u` up to 255 would overflow `maddubs`'s i16 pair sums against bytes up to
/// ±127, so they are centred (`u - 128`, one `xor`) and multiplied by sign (`|u - 128|` as
/// unsigned bytes against `x` carrying the sign); the bias takes back the `128 · scale`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot8(g: usize, bf16: bool, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    let bb = 4 + g;
    let flip = _mm256_set1_epi8(-128);
    let ones = _mm256_set1_epi16(1);
    let mut total = _mm256_setzero_ps();
    let mut biases = 0f32;
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        // SAFETY: F16C is enabled here.
        let (scale, bias) = unsafe { scale_bias(bf16, block) };
        let mut acc = _mm256_setzero_ps();
        for j in 0..g / 32 {
            // SAFETY: `block` holds 4 + G bytes, so bytes 4 + 32j .. 4 + 32j + 32 are in it;
            // `q` as in `dot4`.
            unsafe {
                let v = _mm256_loadu_si256(block.as_ptr().add(4 + 32 * j) as *const __m256i);
                let c = _mm256_xor_si256(v, flip);
                let x = load256_i8(&q[gi * g + 32 * j..]);
                let p = _mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(x, c));
                let p = _mm256_madd_epi16(p, ones);
                let dj = _mm256_set1_ps(*d.get_unchecked(gi * g / 32 + j));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dj, acc);
            }
        }
        total = _mm256_fmadd_ps(acc, _mm256_set1_ps(scale), total);
        biases += (bias + 128.0 * scale) * gsum[gi];
    }
    // SAFETY: AVX2 enabled on this function.
    biases + unsafe { hsum(total) }
}

//! NEON (AArch64) dot products of 4- and 8-bit AFQ rows (see `afq`), on baseline NEON
//! (`Widening`) or ARMv8.2's `sdot` (`DotProd`, at `Isa::NeonDot`). The 4-bit one reads the
//! activations in `nibble_order`, as AVX2's does: per 64 weights, 32 bytes whose low nibbles
//! meet the chunk's even activations and high nibbles its odd ones; each half of the chunk's
//! bytes is one of its two blocks of 32, summed apart and scaled by that block's `d`.

use super::afq::{check_lengths, AfqDot, AfqDotFn};
use super::neon::{DotProd, I8Dot, Widening};
use super::{isa, Isa};
use crate::quantized::format::afq::scale_bias;
use crate::quantized::format::AfqType;
use std::arch::aarch64::*;

pub(super) fn pick(t: AfqType, k: usize) -> Option<AfqDot> {
    let dot = isa() >= Isa::NeonDot;
    let f: AfqDotFn = match (t.bits(), dot) {
        (4, _) if !k.is_multiple_of(64) => return None,
        (4, false) => {
            |t, w, q, d, s| check(t, w, q, d, s, || unsafe { dot4::<Widening>(t, w, q, d, s) })
        }
        (4, true) => |t, w, q, d, s| check(t, w, q, d, s, || unsafe { dot4_sdot(t, w, q, d, s) }),
        (8, false) => {
            |t, w, q, d, s| check(t, w, q, d, s, || unsafe { dot8::<Widening>(t, w, q, d, s) })
        }
        (8, true) => |t, w, q, d, s| check(t, w, q, d, s, || unsafe { dot8_sdot(t, w, q, d, s) }),
        _ => return None,
    };
    Some(AfqDot {
        dot: f,
        nibble_order: t.bits() == 4,
    })
}

/// Checks the lengths the kernels read through raw pointers, then runs `f`.
#[inline(always)]
fn check(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32], f: impl FnOnce() -> f32) -> f32 {
    check_lengths(t, w, q, d, gsum);
    f()
}

/// # Safety
/// The CPU has `dotprod`; lengths as `check` asserts.
#[target_feature(enable = "dotprod")]
unsafe fn dot4_sdot(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    // SAFETY: the caller's contract.
    unsafe { dot4::<DotProd>(t, w, q, d, gsum) }
}

/// # Safety
/// As `dot4_sdot`.
#[target_feature(enable = "dotprod")]
unsafe fn dot8_sdot(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    // SAFETY: the caller's contract.
    unsafe { dot8::<DotProd>(t, w, q, d, gsum) }
}

/// One chunk of 64 4-bit weights (`levels`, 32 bytes) against chunk `c` of the activations:
/// its two halves' products as f32, each scaled by its block's `d`.
///
/// # Safety
/// `levels` points to 32 readable bytes; `q` holds 64 bytes and `d` 8 floats for chunk `c`;
/// the CPU has what `D` needs.
#[inline(always)]
unsafe fn chunk4<D: I8Dot>(
    levels: *const u8,
    q: &[i8],
    d: &[f32],
    c: usize,
) -> (float32x4_t, float32x4_t) {
    // SAFETY: the caller's contract.
    unsafe {
        let mask = vdupq_n_u8(0x0f);
        let (v0, v1) = (vld1q_u8(levels), vld1q_u8(levels.add(16)));
        let x = q.as_ptr().add(64 * c);
        let (e0, e1) = (vld1q_s8(x), vld1q_s8(x.add(16)));
        let (o0, o1) = (vld1q_s8(x.add(32)), vld1q_s8(x.add(48)));
        let lo = |v: uint8x16_t| vreinterpretq_s8_u8(vandq_u8(v, mask));
        let hi = |v: uint8x16_t| vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        let first = D::dot(D::dot(vdupq_n_s32(0), lo(v0), e0), hi(v0), o0);
        let second = D::dot(D::dot(vdupq_n_s32(0), lo(v1), e1), hi(v1), o1);
        let (d0, d1) = (*d.get_unchecked(8 * c), *d.get_unchecked(8 * c + 4));
        (
            vmulq_n_f32(vcvtq_f32_s32(first), d0),
            vmulq_n_f32(vcvtq_f32_s32(second), d1),
        )
    }
}

/// # Safety
/// As `chunk4`, for every chunk of the row.
#[inline(always)]
unsafe fn dot4<D: I8Dot>(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    let (g, bb) = (t.group(), t.block_bytes());
    let mut total = 0f32;
    if g == 32 {
        let mut levels = [0u8; 32];
        for (c, pair) in w.chunks_exact(2 * bb).enumerate() {
            let ((s0, b0), (s1, b1)) = (scale_bias(t, pair), scale_bias(t, &pair[bb..]));
            levels[..16].copy_from_slice(&pair[4..20]);
            levels[16..].copy_from_slice(&pair[bb + 4..bb + 20]);
            // The chunk's halves are the two groups, each scaled by its own.
            // SAFETY: `levels` holds 32 bytes; chunk `c` is below k / 64.
            let (h0, h1) = unsafe {
                let (a, b) = chunk4::<D>(levels.as_ptr(), q, d, c);
                (vaddvq_f32(a), vaddvq_f32(b))
            };
            total += s0 * h0 + s1 * h1 + b0 * gsum[2 * c] + b1 * gsum[2 * c + 1];
        }
        return total;
    }
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        let (scale, bias) = scale_bias(t, block);
        // SAFETY: NEON is baseline on AArch64.
        let mut acc = unsafe { vdupq_n_f32(0.0) };
        for j in 0..g / 64 {
            // SAFETY: bytes 4 + 32j .. 4 + 32j + 32 lie in the block; the chunk is below k / 64.
            acc = unsafe {
                let (a, b) = chunk4::<D>(block.as_ptr().add(4 + 32 * j), q, d, gi * g / 64 + j);
                vaddq_f32(acc, vaddq_f32(a, b))
            };
        }
        // SAFETY: NEON is baseline on AArch64.
        total += scale * unsafe { vaddvq_f32(acc) } + bias * gsum[gi];
    }
    total
}

/// 8-bit: levels centred (`u - 128`, so every product fits `I8Dot`'s signed bytes), the
/// bias taking back `128 · scale`.
///
/// # Safety
/// Lengths as `check` asserts; the CPU has what `D` needs.
#[inline(always)]
unsafe fn dot8<D: I8Dot>(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    let (g, bb) = (t.group(), t.block_bytes());
    let mut total = 0f32;
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        let (scale, bias) = scale_bias(t, block);
        let mut acc = 0f32;
        for j in 0..g / 32 {
            // SAFETY: bytes 4 + 32j .. + 32 lie in the block; `q` holds g bytes per group.
            let sum = unsafe {
                let flip = vdupq_n_u8(0x80);
                let p = block.as_ptr().add(4 + 32 * j);
                let c0 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), flip));
                let c1 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p.add(16)), flip));
                let x = q.as_ptr().add(gi * g + 32 * j);
                let s = D::dot(
                    D::dot(vdupq_n_s32(0), c0, vld1q_s8(x)),
                    c1,
                    vld1q_s8(x.add(16)),
                );
                vaddvq_s32(s)
            };
            acc += d[gi * g / 32 + j] * sum as f32;
        }
        total += scale * acc + (bias + 128.0 * scale) * gsum[gi];
    }
    total
}

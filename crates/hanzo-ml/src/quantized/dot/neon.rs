//! NEON (baseline AArch64): the Q4_0/Q5_0/Q8_0 tiles. Products of signed bytes widen to i16
//! (`smull`) and pair-add into i32 lanes (`sadalp`); each block's integer sum is then scaled
//! in f32. Every other type takes the scalar dot on AArch64.

use crate::quantized::blocks::*;
use std::arch::aarch64::*;

/// A block's 32 signed levels as two 16-byte vectors.
type Levels = (int8x16_t, int8x16_t);

#[inline(always)]
unsafe fn load_i8(p: &[i8]) -> Levels {
    debug_assert!(p.len() >= 32);
    // SAFETY: every caller passes at least 32 bytes; vld1q has no alignment need.
    unsafe { (vld1q_s8(p.as_ptr()), vld1q_s8(p.as_ptr().add(16))) }
}

/// 16 packed bytes → the 16 low nibbles, then the 16 high nibbles.
#[inline(always)]
unsafe fn nibbles(qs: &[u8; 16]) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: qs is 16 bytes; NEON is baseline on AArch64.
    unsafe {
        let v = vld1q_u8(qs.as_ptr());
        (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
    }
}

/// Σ w·x over one block: |w| ≤ 128 and |x| ≤ 127, so every i16 product is exact.
#[inline(always)]
unsafe fn block_dot(w: Levels, x: Levels) -> i32 {
    // SAFETY: register-only NEON.
    unsafe {
        let mut acc = vdupq_n_s32(0);
        for (w, x) in [(w.0, x.0), (w.1, x.1)] {
            acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
            acc = vpadalq_s16(acc, vmull_high_s8(w, x));
        }
        vaddvq_s32(acc)
    }
}

#[inline(always)]
unsafe fn legacy_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8_0]; C],
    levels: impl Fn(&B) -> (Levels, half::f16),
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        // SAFETY: loads stay inside block fields; NEON is baseline on AArch64.
        unsafe {
            let xs: [(Levels, f32); C] =
                std::array::from_fn(|c| (load_i8(&x[c][i].qs), x[c][i].d.to_f32()));
            for r in 0..R {
                let (q, d) = levels(&w[r][i]);
                let d = d.to_f32();
                for c in 0..C {
                    acc[r][c] += d * xs[c].1 * block_dot(q, xs[c].0) as f32;
                }
            }
        }
    }
    acc
}

/// # Safety
/// None beyond NEON, which every AArch64 CPU has; `unsafe` to match the other kernel sets.
pub unsafe fn q8_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ8_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: qs is 32 bytes.
    unsafe { legacy_tile(w, x, |b| (load_i8(&b.qs), b.d)) }
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q4_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: nibbles reads the 16 bytes of qs.
    unsafe {
        legacy_tile(w, x, |b| {
            let (lo, hi) = nibbles(&b.qs);
            let eight = vdupq_n_s8(8);
            let q = (
                vsubq_s8(vreinterpretq_s8_u8(lo), eight),
                vsubq_s8(vreinterpretq_s8_u8(hi), eight),
            );
            (q, b.d)
        })
    }
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q5_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: nibbles reads the 16 bytes of qs; the bit table is 16 bytes.
    unsafe {
        const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
        let bit = vld1q_u8(BIT.as_ptr());
        legacy_tile(w, x, |b| {
            let (lo, hi) = nibbles(&b.qs);
            // Level j's fifth bit is bit j of qh: 0xFF lanes where it is set.
            let set = |a: u8, b: u8| vtstq_u8(vcombine_u8(vdup_n_u8(a), vdup_n_u8(b)), bit);
            let (set_lo, set_hi) = (set(b.qh[0], b.qh[1]), set(b.qh[2], b.qh[3]));
            // level - 16 as a signed byte: the nibble where the bit is set, the nibble with
            // 0xF0 or-ed in (minus 16) where it is not.
            let f0 = vdupq_n_u8(0xF0);
            let q = (
                vreinterpretq_s8_u8(vorrq_u8(lo, vbicq_u8(f0, set_lo))),
                vreinterpretq_s8_u8(vorrq_u8(hi, vbicq_u8(f0, set_hi))),
            );
            (q, b.d)
        })
    }
}

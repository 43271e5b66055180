//! WebAssembly SIMD128 dot products of 4- and 8-bit AFQ rows (see `afq`). The 4-bit one reads
//! the activations in `nibble_order`, as the AVX2 and NEON ones do: per 64 weights, 32 bytes
//! whose low nibbles meet the chunk's even activations and high nibbles its odd ones, each
//! half of the bytes one block of 32. The levels (0..=15, or 0..=255 widened as unsigned)
//! meet the activation bytes in exact i32 sums; each block's sum is scaled by its `d` in f32
//! as the portable dot scales it.

use super::afq::{check_lengths, AfqDot};
use super::simd128::{dot16_small, hsum_i32, load16};
use crate::quantized::format::afq::scale_bias;
use crate::quantized::format::AfqType;
use std::arch::wasm32::*;

pub(super) fn pick(t: AfqType, k: usize) -> Option<AfqDot> {
    match t.bits() {
        // The 4-bit kernel reads 64 weights at a time.
        4 if k.is_multiple_of(64) => Some(AfqDot {
            dot: dot4,
            nibble_order: true,
        }),
        8 => Some(AfqDot {
            dot: dot8,
            nibble_order: false,
        }),
        _ => None,
    }
}

/// One chunk of 64 4-bit weights (`levels`, 32 bytes) against its 64 activation bytes in
/// nibble order: the integer sums of its two blocks of 32.
#[inline(always)]
fn chunk4(levels: &[u8], x: &[i8]) -> (i32, i32) {
    let mask = u8x16_splat(0x0f);
    let (v0, v1) = (load16(&levels[..16]), load16(&levels[16..32]));
    let lo = |v: v128| v128_and(v, mask);
    let hi = |v: v128| u8x16_shr(v, 4);
    let zero = i32x4_splat(0);
    let first = dot16_small(
        hi(v0),
        load16(&x[32..48]),
        dot16_small(lo(v0), load16(&x[..16]), zero),
    );
    let second = dot16_small(
        hi(v1),
        load16(&x[48..64]),
        dot16_small(lo(v1), load16(&x[16..32]), zero),
    );
    (hsum_i32(first), hsum_i32(second))
}

fn dot4(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    check_lengths(t, w, q, d, gsum);
    let (g, bb) = (t.group(), t.block_bytes());
    let mut total = 0f32;
    if g == 32 {
        // Two groups make a chunk, each scaled by its own.
        let mut levels = [0u8; 32];
        for (c, pair) in w.chunks_exact(2 * bb).enumerate() {
            let ((s0, b0), (s1, b1)) = (scale_bias(t, pair), scale_bias(t, &pair[bb..]));
            levels[..16].copy_from_slice(&pair[4..20]);
            levels[16..].copy_from_slice(&pair[bb + 4..bb + 20]);
            let (i0, i1) = chunk4(&levels, &q[64 * c..64 * c + 64]);
            total += s0 * (d[8 * c] * i0 as f32)
                + s1 * (d[8 * c + 4] * i1 as f32)
                + b0 * gsum[2 * c]
                + b1 * gsum[2 * c + 1];
        }
        return total;
    }
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        let (scale, bias) = scale_bias(t, block);
        let mut acc = 0f32;
        for j in 0..g / 64 {
            let c = gi * g / 64 + j;
            let (i0, i1) = chunk4(&block[4 + 32 * j..4 + 32 * j + 32], &q[64 * c..64 * c + 64]);
            acc += d[8 * c] * i0 as f32 + d[8 * c + 4] * i1 as f32;
        }
        total += scale * acc + bias * gsum[gi];
    }
    total
}

/// Σ u·x over 16 unsigned level bytes and 16 signed activation bytes, in four i32 lanes
/// (exact: both widen to i16, 255 · 128 fits, and the pairs add in i32).
#[inline(always)]
fn dot16_unsigned(u: v128, x: v128) -> v128 {
    let lo = i32x4_dot_i16x8(u16x8_extend_low_u8x16(u), i16x8_extend_low_i8x16(x));
    let hi = i32x4_dot_i16x8(u16x8_extend_high_u8x16(u), i16x8_extend_high_i8x16(x));
    i32x4_add(lo, hi)
}

fn dot8(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    check_lengths(t, w, q, d, gsum);
    let (g, bb) = (t.group(), t.block_bytes());
    let mut total = 0f32;
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        let (scale, bias) = scale_bias(t, block);
        let mut acc = 0f32;
        for j in 0..g / 32 {
            let p = &block[4 + 32 * j..4 + 32 * j + 32];
            let x = &q[gi * g + 32 * j..gi * g + 32 * j + 32];
            let lanes = i32x4_add(
                dot16_unsigned(load16(&p[..16]), load16(&x[..16])),
                dot16_unsigned(load16(&p[16..]), load16(&x[16..])),
            );
            acc += d[gi * g / 32 + j] * hsum_i32(lanes) as f32;
        }
        total += scale * acc + bias * gsum[gi];
    }
    total
}

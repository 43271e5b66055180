//! NEON (AArch64) tiles for the IQ2 and IQ3 lattice types: each 16 weights are their grid
//! points (two 8-byte ones, or four 4-byte ones) read into one vector and their signs applied
//! as a byte mask, `(p ^ m) - m`, straight from the block into registers; the products then
//! go through `neon::k16_tile` against Q8_K. As in `neon`, each kernel has both multiply
//! forms and gives the scalar dot's results bit for bit.

use super::neon::{entries, k16_tile, widen_f16, DotProd, I8Dot, Widening};
use crate::quantized::format::*;
use std::arch::aarch64::*;

entries!(
    iq2xxs_tile: BlockIQ2XXS => iq2xxs,
    iq2xs_tile: BlockIQ2XS => iq2xs,
    iq2s_tile: BlockIQ2S => iq2s,
    iq3xxs_tile: BlockIQ3XXS => iq3xxs,
    iq3s_tile: BlockIQ3S => iq3s,
);

/// For each sign byte, eight bytes of 0xFF where its bit is set (element `j`, bit `j`).
const SIGN_MASKS: [u64; 256] = {
    let mut masks = [0u64; 256];
    let mut s = 0;
    while s < 256 {
        let mut j = 0;
        while j < 8 {
            if (s >> j) & 1 == 1 {
                masks[s] |= 0xFF << (8 * j);
            }
            j += 1;
        }
        s += 1;
    }
    masks
};

/// Sixteen grid magnitudes (two 8-byte halves) under their two sign bytes.
#[inline(always)]
fn signed16(low: u64, high: u64, signs: [u8; 2]) -> int8x16_t {
    // SAFETY: register-only NEON.
    unsafe {
        let p = vcombine_s8(vcreate_s8(low), vcreate_s8(high));
        let m = vcombine_s8(
            vcreate_s8(SIGN_MASKS[signs[0] as usize]),
            vcreate_s8(SIGN_MASKS[signs[1] as usize]),
        );
        vsubq_s8(veorq_s8(p, m), m)
    }
}

/// An 8-magnitude grid point as one word.
#[inline(always)]
fn word8(point: &[i8; 8]) -> u64 {
    u64::from_le_bytes(point.map(|v| v as u8))
}

/// Two 4-magnitude grid points as one word.
#[inline(always)]
fn word4x2(a: &[i8; 4], c: &[i8; 4]) -> u64 {
    let w = |p: &[i8; 4]| u32::from_le_bytes(p.map(|v| v as u8)) as u64;
    w(a) | w(c) << 32
}

/// Each 32-weight group's multiplier for both of its 16-weight halves (`k16_tile`'s form).
#[inline(always)]
fn per_16(mult: impl Fn(usize) -> i32) -> [i32; 16] {
    std::array::from_fn(|g| mult(g / 2))
}

/// A 4-bit scale `s` of `scales` (two per byte) as the odd multiplier `2s + 1`.
#[inline(always)]
fn odd_mult(scales: &[u8], g: usize) -> i32 {
    2 * (scales[g / 2] >> (4 * (g % 2)) & 15) as i32 + 1
}

/// The lattice tile: `k16_tile` with the block's f16 scale, and the type's factor once at
/// the end, as `dot_levels` applies it.
#[inline(always)]
unsafe fn lattice<D: I8Dot, B: DecodesToLevels, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    d: impl Fn(&B) -> half::f16,
    mult: impl Fn(&B) -> [i32; 16],
    levels: impl Fn(&B, usize) -> [int8x16_t; 8],
) -> [[f32; C]; R] {
    let finish = |b: &B, x: &BlockQ8K, sum: i32| widen_f16(d(b)) * x.d * sum as f32;
    // SAFETY: forwarded from the caller.
    let acc = unsafe { k16_tile::<D, _, R, C>(w, x, mult, levels, finish) };
    acc.map(|row| row.map(|v| B::FACTOR * v))
}

#[inline(always)]
unsafe fn iq2xxs<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ2XXS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2xxs_grid();
    // Group ib: four grid indices (bytes of words 4ib, 4ib + 1), then a word of four 7-bit
    // sign indices under the 4-bit scale.
    let aux =
        |b: &BlockIQ2XXS, ib: usize| b.qs[4 * ib + 2] as u32 | (b.qs[4 * ib + 3] as u32) << 16;
    let levels = |b: &BlockIQ2XXS, n: usize| -> [int8x16_t; 8] {
        std::array::from_fn(|g| {
            let (ib, half) = (4 * n + g / 2, g % 2);
            let q = b.qs[4 * ib + half];
            let signs = aux(b, ib) >> (14 * half);
            signed16(
                word8(&grid[(q & 255) as usize]),
                word8(&grid[(q >> 8) as usize]),
                [ksigns(signs), ksigns(signs >> 7)],
            )
        })
    };
    let mult = |b: &BlockIQ2XXS| per_16(|ib| 2 * (aux(b, ib) >> 28) as i32 + 1);
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, R, C>(w, x, |b| b.d, mult, levels) }
}

#[inline(always)]
unsafe fn iq2xs<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ2XS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2xs_grid();
    // Run e of 8 weights: a 9-bit grid index under a 7-bit sign index.
    let levels = |b: &BlockIQ2XS, n: usize| -> [int8x16_t; 8] {
        std::array::from_fn(|g| {
            let (p, q) = (b.qs[16 * n + 2 * g], b.qs[16 * n + 2 * g + 1]);
            signed16(
                word8(&grid[(p & 511) as usize]),
                word8(&grid[(q & 511) as usize]),
                [ksigns(p as u32 >> 9), ksigns(q as u32 >> 9)],
            )
        })
    };
    let mult = |b: &BlockIQ2XS| std::array::from_fn(|g| odd_mult(&b.scales, g));
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, R, C>(w, x, |b| b.d, mult, levels) }
}

#[inline(always)]
unsafe fn iq2s<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ2S]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2s_grid();
    // Run e: the low 8 bits of its grid index in qs[e], two more in qh, its signs as a byte
    // in qs[32 + e].
    let point = |b: &BlockIQ2S, e: usize| {
        let high = (b.qh[e / 4] >> (2 * (e % 4)) & 3) as usize;
        word8(&grid[b.qs[e] as usize | high << 8])
    };
    let levels = |b: &BlockIQ2S, n: usize| -> [int8x16_t; 8] {
        std::array::from_fn(|g| {
            let e = 16 * n + 2 * g;
            signed16(point(b, e), point(b, e + 1), [b.qs[32 + e], b.qs[33 + e]])
        })
    };
    let mult = |b: &BlockIQ2S| std::array::from_fn(|g| odd_mult(&b.scales, g));
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, R, C>(w, x, |b| b.d, mult, levels) }
}

#[inline(always)]
unsafe fn iq3xxs<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ3XXS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq3xxs_grid();
    // 64 grid indices of 4-magnitude points, then per group of 32 a word of four 7-bit sign
    // indices (one per 8 weights) under the 4-bit scale.
    let aux = |b: &BlockIQ3XXS, ib: usize| {
        u32::from_le_bytes([0, 1, 2, 3].map(|k| b.qs[64 + 4 * ib + k]))
    };
    let levels = |b: &BlockIQ3XXS, n: usize| -> [int8x16_t; 8] {
        std::array::from_fn(|g| {
            let (ib, half) = (4 * n + g / 2, g % 2);
            let idx = &b.qs[8 * ib + 4 * half..8 * ib + 4 * half + 4];
            let signs = aux(b, ib) >> (14 * half);
            let pair =
                |k: usize| word4x2(&grid[idx[2 * k] as usize], &grid[idx[2 * k + 1] as usize]);
            signed16(pair(0), pair(1), [ksigns(signs), ksigns(signs >> 7)])
        })
    };
    let mult = |b: &BlockIQ3XXS| per_16(|ib| 2 * (aux(b, ib) >> 28) as i32 + 1);
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, R, C>(w, x, |b| b.d, mult, levels) }
}

#[inline(always)]
unsafe fn iq3s<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ3S]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq3s_grid();
    // Point e of 4 weights: the low 8 bits of its grid index in qs[e], the ninth in bit
    // e % 8 of qh[e / 8]; the signs of weights 8p..8p + 8 a byte, signs[p].
    let point = |b: &BlockIQ3S, e: usize| {
        let high = (b.qh[e / 8] >> (e % 8) & 1) as usize;
        &grid[b.qs[e] as usize | high << 8]
    };
    let levels = |b: &BlockIQ3S, n: usize| -> [int8x16_t; 8] {
        std::array::from_fn(|g| {
            let (e, p) = (32 * n + 4 * g, 16 * n + 2 * g);
            signed16(
                word4x2(point(b, e), point(b, e + 1)),
                word4x2(point(b, e + 2), point(b, e + 3)),
                [b.signs[p], b.signs[p + 1]],
            )
        })
    };
    let mult = |b: &BlockIQ3S| per_16(|ib| odd_mult(&b.scales, ib));
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, R, C>(w, x, |b| b.d, mult, levels) }
}

//! NEON (AArch64) tiles for the IQ2 and IQ3 lattice types: each 16 weights are their grid
//! points (two 8-byte ones, or four 4-byte ones) read into one vector and multiplied by their
//! signs as ±1 bytes from a table, straight from the block into registers; the products then
//! go through `neon::k16_tile` against Q8_K. As in `neon`, each kernel has both multiply
//! forms and gives the scalar dot's results bit for bit.

use super::neon::{bit_bytes, entries, k16_tile, widen_f16, DotProd, I8Dot, Widening};
use crate::quantized::format::*;
use std::arch::aarch64::*;

entries!(
    iq2xxs_tile: BlockIQ2XXS => iq2xxs,
    iq2xs_tile: BlockIQ2XS => iq2xs,
    iq2s_tile: BlockIQ2S => iq2s,
    iq3xxs_tile: BlockIQ3XXS => iq3xxs,
    iq3s_tile: BlockIQ3S => iq3s,
);

/// Eight sign factors, ±1 bytes (element `j` negative where bit `j` is set), for every sign
/// byte (IQ2_S and IQ3_S store them so)...
const SIGNS: [u64; 256] = bit_bytes(0xFF, 0x01);

/// ... and for every 7-bit sign index (IQ2_XXS, IQ2_XS, IQ3_XXS), whose eighth sign makes
/// the count of minus signs even (ggml's `ksigns`), looked up by the index directly.
const EVEN_SIGNS: [u64; 128] = {
    let mut signs = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        signs[i] = SIGNS[i | ((i as u32).count_ones() as usize & 1) << 7];
        i += 1;
    }
    signs
};

/// The sign factors of a 7-bit index (the low 7 bits of `index`).
#[inline(always)]
fn even_signs(index: u32) -> u64 {
    EVEN_SIGNS[(index & 127) as usize]
}

/// Sixteen grid magnitudes (two 8-byte halves) times their sign factors.
#[inline(always)]
fn signed16(low: u64, high: u64, signs: [u64; 2]) -> int8x16_t {
    // SAFETY: register-only NEON.
    unsafe {
        let p = vcombine_s8(vcreate_s8(low), vcreate_s8(high));
        vmulq_s8(p, vcombine_s8(vcreate_s8(signs[0]), vcreate_s8(signs[1])))
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

/// A 4-bit scale `s` of `scales` (two per byte) as the odd multiplier `2s + 1`.
#[inline(always)]
fn odd_mult(scales: &[u8], g: usize) -> i32 {
    2 * (scales[g / 2] >> (4 * (g % 2)) & 15) as i32 + 1
}

/// The lattice tile: `k16_tile` (a multiplier per `SPAN` groups of 16) with the block's f16
/// scale, and the type's factor once at the end, as `dot_levels` applies it.
#[inline(always)]
unsafe fn lattice<D: I8Dot, B: LevelsFactor, const SPAN: usize, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    d: impl Fn(&B) -> half::f16,
    mult: impl Fn(&B) -> [i32; 16],
    level: impl Fn(&B, usize) -> int8x16_t,
) -> [[f32; C]; R] {
    let finish = |b: &B, x: &BlockQ8K, sum: i32| widen_f16(d(b)) * x.d * sum as f32;
    // SAFETY: forwarded from the caller.
    let acc = unsafe { k16_tile::<D, _, SPAN, false, R, C>(w, x, mult, level, finish) };
    acc.map(|row| row.map(|v| B::FACTOR * v))
}

#[inline(always)]
unsafe fn iq2xxs<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ2XXS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2xxs_grid();
    // Group ib of 32: four grid indices (bytes of words 4ib, 4ib + 1), then a word of four
    // 7-bit sign indices under the 4-bit scale.
    let aux =
        |b: &BlockIQ2XXS, ib: usize| b.qs[4 * ib + 2] as u32 | (b.qs[4 * ib + 3] as u32) << 16;
    let level = |b: &BlockIQ2XXS, g: usize| {
        let (ib, half) = (g / 2, g % 2);
        let q = b.qs[4 * ib + half];
        let signs = aux(b, ib) >> (14 * half);
        signed16(
            word8(&grid[(q & 255) as usize]),
            word8(&grid[(q >> 8) as usize]),
            [even_signs(signs), even_signs(signs >> 7)],
        )
    };
    let mult = |b: &BlockIQ2XXS| std::array::from_fn(|ib| 2 * (aux(b, ib % 8) >> 28) as i32 + 1);
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, 2, R, C>(w, x, |b| b.d, mult, level) }
}

#[inline(always)]
unsafe fn iq2xs<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ2XS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let grid = iq2xs_grid();
    // Run e of 8 weights: a 9-bit grid index under a 7-bit sign index.
    let level = |b: &BlockIQ2XS, g: usize| {
        let (p, q) = (b.qs[2 * g], b.qs[2 * g + 1]);
        signed16(
            word8(&grid[(p & 511) as usize]),
            word8(&grid[(q & 511) as usize]),
            [even_signs(p as u32 >> 9), even_signs(q as u32 >> 9)],
        )
    };
    let mult = |b: &BlockIQ2XS| std::array::from_fn(|g| odd_mult(&b.scales, g));
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, 1, R, C>(w, x, |b| b.d, mult, level) }
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
        word8(&grid[(b.qs[e] as usize | high << 8) & 1023])
    };
    let level = |b: &BlockIQ2S, g: usize| {
        let e = 2 * g;
        let signs = [b.qs[32 + e], b.qs[33 + e]].map(|s| SIGNS[s as usize]);
        signed16(point(b, e), point(b, e + 1), signs)
    };
    let mult = |b: &BlockIQ2S| std::array::from_fn(|g| odd_mult(&b.scales, g));
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, 1, R, C>(w, x, |b| b.d, mult, level) }
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
    let level = |b: &BlockIQ3XXS, g: usize| {
        let (ib, half) = (g / 2, g % 2);
        let idx = &b.qs[4 * g..4 * g + 4];
        let signs = aux(b, ib) >> (14 * half);
        let pair = |k: usize| word4x2(&grid[idx[2 * k] as usize], &grid[idx[2 * k + 1] as usize]);
        signed16(
            pair(0),
            pair(1),
            [even_signs(signs), even_signs(signs >> 7)],
        )
    };
    let mult = |b: &BlockIQ3XXS| std::array::from_fn(|ib| 2 * (aux(b, ib % 8) >> 28) as i32 + 1);
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, 2, R, C>(w, x, |b| b.d, mult, level) }
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
        &grid[(b.qs[e] as usize | high << 8) & 511]
    };
    let level = |b: &BlockIQ3S, g: usize| {
        let (e, p) = (4 * g, 2 * g);
        signed16(
            word4x2(point(b, e), point(b, e + 1)),
            word4x2(point(b, e + 2), point(b, e + 3)),
            [SIGNS[b.signs[p] as usize], SIGNS[b.signs[p + 1] as usize]],
        )
    };
    let mult = |b: &BlockIQ3S| std::array::from_fn(|ib| odd_mult(&b.scales, ib % 8));
    // SAFETY: forwarded from the caller.
    unsafe { lattice::<D, _, 2, R, C>(w, x, |b| b.d, mult, level) }
}

//! WebAssembly SIMD128: the dot kernel over blocks of eight interleaved rows
//! (`format::interleaved`) for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.
//!
//! Each of a block's eight steps holds four levels of each of the eight rows, rows 0–3 in
//! one vector and 4–7 in the other (four bytes a row). With relaxed SIMD one
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s` against the step's four activation bytes broadcast
//! advances four rows' sums, each in its own lane: no per-row horizontal sum and no scale
//! gathered row by row, which the row kernels (`simd128`) pay. Without relaxed SIMD (and for
//! Q8_0's signed levels, which are not 7-bit) the levels widen to i16 and `i32x4.dot_i16x8_s`
//! leaves each row's sum in two lanes, added once per block. The integer block sums are
//! `dot_scalar`'s, and so is each float step, so the results are its floats bit for bit.

use super::simd128::load16;
use crate::cpu::simd::simd128::{store4, widen_f16x8};
use crate::quantized::format::interleaved::{Interleave, XRow, ROWS};
use crate::quantized::format::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
use std::arch::wasm32::*;

/// A block's eight steps, `[t] = (rows 0–3, rows 4–7)`: byte `4r + b` of a half is level
/// `4t + b` of its row `r`.
type Steps = [(v128, v128); 8];

/// A type whose repacked blocks this module reads.
pub(super) trait Simd128Steps: Interleave {
    /// `steps` gives `level + OFFSET` in 0..=31 (the relaxed dot's 7-bit operand) where
    /// true; Q8_0's levels as stored (signed) where false.
    const SMALL: bool = true;
    fn steps(b: &Self::X8) -> Steps;
    /// The eight f16 scales widened (rows 0–3, rows 4–7).
    fn scale_vectors(b: &Self::X8) -> (v128, v128);
    fn min_vectors(_: &Self::X8) -> Option<(v128, v128)> {
        None
    }
}

/// Steps `j` and `j + 4` share bytes `32j..32j + 32` of the nibble planes: the low nibbles
/// and the high ones.
#[inline(always)]
fn nibble_steps(qs: &[u8; 128]) -> Steps {
    let mut s = [(u8x16_splat(0), u8x16_splat(0)); 8];
    for j in 0..4 {
        let (a, b) = (load16(&qs[32 * j..]), load16(&qs[32 * j + 16..]));
        let low = u8x16_splat(0x0F);
        s[j] = (v128_and(a, low), v128_and(b, low));
        s[j + 4] = (u8x16_shr(a, 4), u8x16_shr(b, 4));
    }
    s
}

/// The nibbles with each level's fifth bit or-ed in as 16: step `t`'s is bit `t` of the
/// `qh` byte at the level's position.
#[inline(always)]
fn five_bit_steps(qs: &[u8; 128], qh: &[u8; 32]) -> Steps {
    let mut s = nibble_steps(qs);
    let (h0, h1) = (load16(&qh[..16]), load16(&qh[16..]));
    for (t, s) in s.iter_mut().enumerate() {
        // Bit t moved to bit 4 (a constant shift once the loop unrolls).
        let at_4 = |h| {
            let moved = if t < 4 {
                i8x16_shl(h, 4 - t as u32)
            } else {
                u8x16_shr(h, t as u32 - 4)
            };
            v128_and(moved, u8x16_splat(0x10))
        };
        *s = (v128_or(s.0, at_4(h0)), v128_or(s.1, at_4(h1)));
    }
    s
}

impl Simd128Steps for BlockQ4_0 {
    fn steps(b: &Self::X8) -> Steps {
        nibble_steps(&b.qs)
    }
    fn scale_vectors(b: &Self::X8) -> (v128, v128) {
        widen_f16x8(&b.d)
    }
}

impl Simd128Steps for BlockQ4_1 {
    fn steps(b: &Self::X8) -> Steps {
        nibble_steps(&b.qs)
    }
    fn scale_vectors(b: &Self::X8) -> (v128, v128) {
        widen_f16x8(&b.d)
    }
    fn min_vectors(b: &Self::X8) -> Option<(v128, v128)> {
        Some(widen_f16x8(&b.m))
    }
}

impl Simd128Steps for BlockQ5_0 {
    fn steps(b: &Self::X8) -> Steps {
        five_bit_steps(&b.qs, &b.qh)
    }
    fn scale_vectors(b: &Self::X8) -> (v128, v128) {
        widen_f16x8(&b.d)
    }
}

impl Simd128Steps for BlockQ5_1 {
    fn steps(b: &Self::X8) -> Steps {
        five_bit_steps(&b.qs, &b.qh)
    }
    fn scale_vectors(b: &Self::X8) -> (v128, v128) {
        widen_f16x8(&b.d)
    }
    fn min_vectors(b: &Self::X8) -> Option<(v128, v128)> {
        Some(widen_f16x8(&b.m))
    }
}

impl Simd128Steps for BlockQ8_0 {
    const SMALL: bool = false;
    fn steps(b: &Self::X8) -> Steps {
        std::array::from_fn(|t| (load16(&b.qs[32 * t..]), load16(&b.qs[32 * t + 16..])))
    }
    fn scale_vectors(b: &Self::X8) -> (v128, v128) {
        widen_f16x8(&b.d)
    }
}

/// Σ u·x of the eight rows over one block, rows 0–3 and 4–7 (relaxed SIMD, `u` ≤ 127: the
/// instruction's result is then fixed and exact).
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn small_sums(s: &Steps, x: &[i8; 32]) -> (v128, v128) {
    let (mut lo, mut hi) = (i32x4_splat(0), i32x4_splat(0));
    for (t, s) in s.iter().enumerate() {
        let xs = u32x4_splat(u32::from_le_bytes(std::array::from_fn(|b| {
            x[4 * t + b] as u8
        })));
        lo = i32x4_relaxed_dot_i8x16_i7x16_add(xs, s.0, lo);
        hi = i32x4_relaxed_dot_i8x16_i7x16_add(xs, s.1, hi);
    }
    (lo, hi)
}

/// Σ level·x of the eight rows over one block, with the levels (signed, or unsigned below
/// 128) widened to i16: each `dot_i16x8` lane holds half a row's step, so the two halves
/// of each row add up at the end.
#[inline(always)]
fn widened_sums(s: &Steps, x: &[i8; 32]) -> (v128, v128) {
    let (x0, x1) = (load16(&x[..16]), load16(&x[16..]));
    let xw = [
        i16x8_extend_low_i8x16(x0),
        i16x8_extend_high_i8x16(x0),
        i16x8_extend_low_i8x16(x1),
        i16x8_extend_high_i8x16(x1),
    ];
    let mut acc = [i32x4_splat(0); 4];
    for (t, s) in s.iter().enumerate() {
        // Step t's four activations, widened, in both halves.
        let v = xw[t / 2];
        let xs = if t % 2 == 0 {
            i64x2_shuffle::<0, 0>(v, v)
        } else {
            i64x2_shuffle::<1, 1>(v, v)
        };
        let halves = [
            i16x8_extend_low_i8x16(s.0),
            i16x8_extend_high_i8x16(s.0),
            i16x8_extend_low_i8x16(s.1),
            i16x8_extend_high_i8x16(s.1),
        ];
        for (acc, h) in acc.iter_mut().zip(halves) {
            *acc = i32x4_add(*acc, i32x4_dot_i16x8(h, xs));
        }
    }
    let rows = |a, b| {
        i32x4_add(
            i32x4_shuffle::<0, 2, 4, 6>(a, b),
            i32x4_shuffle::<1, 3, 5, 7>(a, b),
        )
    };
    (rows(acc[0], acc[1]), rows(acc[2], acc[3]))
}

/// The eight rows of the group `w` against one activation row.
#[inline(always)]
fn dot_row<B: Simd128Steps>(w: &[B::X8], x: &XRow) -> [f32; ROWS] {
    let (q, xd, sum) = (&x.q[..w.len()], &x.d[..w.len()], &x.sum[..w.len()]);
    let offset = if B::SMALL { B::OFFSET } else { 0 };
    let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for (i, b) in w.iter().enumerate() {
        let steps = B::steps(b);
        #[cfg(target_feature = "relaxed-simd")]
        let ints = if B::SMALL {
            small_sums(&steps, &q[i].qs)
        } else {
            widened_sums(&steps, &q[i].qs)
        };
        #[cfg(not(target_feature = "relaxed-simd"))]
        let ints = widened_sums(&steps, &q[i].qs);
        let ints = if offset != 0 {
            let off = i32x4_splat(offset * sum[i]);
            (i32x4_sub(ints.0, off), i32x4_sub(ints.1, off))
        } else {
            ints
        };
        let (d0, d1) = B::scale_vectors(b);
        let xdi = f32x4_splat(xd[i]);
        let term = |d, s| f32x4_mul(f32x4_mul(d, xdi), f32x4_convert_i32x4(s));
        lo = f32x4_add(term(d0, ints.0), lo);
        hi = f32x4_add(term(d1, ints.1), hi);
        if let Some((m0, m1)) = B::min_vectors(b) {
            let sx = f32x4_splat(sum[i] as f32);
            lo = f32x4_add(f32x4_mul(f32x4_mul(m0, xdi), sx), lo);
            hi = f32x4_add(f32x4_mul(f32x4_mul(m1, xdi), sx), hi);
        }
    }
    let mut out = [0f32; ROWS];
    store4(&mut out[..4], lo);
    store4(&mut out[4..], hi);
    out
}

/// `[c][r]` = row `r` of the group times activation row `c`, as `DotFn`.
pub(super) fn dot<B: Simd128Steps, const C: usize>(w: &[B::X8], x: &[XRow; C]) -> [[f32; ROWS]; C] {
    std::array::from_fn(|c| dot_row::<B>(w, &x[c]))
}

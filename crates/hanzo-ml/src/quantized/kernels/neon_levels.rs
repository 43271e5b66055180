//! NEON (AArch64) tiles for the 256-element types against Q8_K that `neon` and
//! `neon_lattice` leave out: IQ4_XS, TQ2_0 and TQ1_0 unpacked in vector registers, IQ1_S and
//! IQ1_M from their runs. As in `neon`, each kernel has both multiply forms
//! and gives the scalar dot's results bit for bit.

use super::neon::{crumbs, dot16, entries, k16_tile, load_i8, widen_f16, DotProd, I8Dot, Widening};
use crate::quantized::format::*;
use std::arch::aarch64::*;

entries!(
    iq4xs_tile: BlockIQ4XS => iq4xs,
    tq2_0_tile: BlockTQ2_0 => tq2_0,
    tq1_0_tile: BlockTQ1_0 => tq1_0,
    iq1s_tile: BlockIQ1S => runs::<BlockIQ1S>,
    iq1m_tile: BlockIQ1M => runs::<BlockIQ1M>,
);

#[inline(always)]
unsafe fn iq4xs<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ4XS]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // Group g of 16: the low nibbles (g even) or the high ones of qs[16 (g / 2)..], looked up
    // in IQ4_NL's table; a multiplier per 32.
    let level = |b: &BlockIQ4XS, g: usize| {
        // SAFETY: 16 bytes of qs from 16 (g / 2) < 128; the table is 16 bytes.
        unsafe {
            let q = vld1q_u8(b.qs.as_ptr().add(16 * (g / 2)));
            let index = if g.is_multiple_of(2) {
                vandq_u8(q, vdupq_n_u8(0x0F))
            } else {
                vshrq_n_u8::<4>(q)
            };
            vqtbl1q_s8(vld1q_s8(IQ4NL_VALUES.as_ptr()), index)
        }
    };
    let mult = |b: &BlockIQ4XS| std::array::from_fn(|g| b.group_mult(g % 8));
    // IQ4_XS's factor is 1: the scalar dot's final product changes nothing.
    let finish = |b: &BlockIQ4XS, x: &BlockQ8K, sum: i32| widen_f16(b.d) * x.d * sum as f32;
    // SAFETY: forwarded from the caller.
    unsafe { k16_tile::<D, _, 2, true, R, C>(w, x, mult, level, finish) }
}

#[inline(always)]
unsafe fn tq2_0<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockTQ2_0]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // Element 128n + 32l + j: bits 2l..2l + 2 of qs[32n + j], less 1 (Q2_K's layout).
    let level = |b: &BlockTQ2_0, g: usize| {
        let (n, local) = (g / 8, g % 8);
        // SAFETY: 16 bytes from 32n + 16 (local % 2) < 64.
        unsafe {
            let q = vld1q_u8(b.qs.as_ptr().add(32 * n + 16 * (local % 2)));
            vsubq_s8(vreinterpretq_s8_u8(crumbs(q, local / 2)), vdupq_n_s8(1))
        }
    };
    // One multiplier (1) for the block, the factor 1: as the scalar dot of `Levels`.
    let finish = |b: &BlockTQ2_0, x: &BlockQ8K, sum: i32| widen_f16(b.d) * x.d * sum as f32;
    // SAFETY: forwarded from the caller.
    unsafe { k16_tile::<D, _, 4, true, R, C>(w, x, |_| [1; 16], level, finish) }
}

#[inline(always)]
unsafe fn tq1_0<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockTQ1_0]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // Five trits a byte: trit n of byte b is the top of `3 · (b · 3ⁿ mod 256)` in 16 bits.
    // Groups 0..10 are trit g / 2 of bytes 16 (g % 2)..; 10..15 trit g - 10 of bytes 32..48;
    // group 15 trit j / 4 of qh[j % 4] for its element j.
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    const QH_POW3: [u8; 16] = [1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27];
    let level = |b: &BlockTQ1_0, g: usize| {
        // SAFETY: 16 bytes of qs from 16 (g % 2) or 32 (both within its 48); qh is 4 bytes;
        // register-only NEON otherwise.
        unsafe {
            let (bytes, pow3) = if g < 15 {
                let (at, n) = if g < 10 {
                    (16 * (g % 2), g / 2)
                } else {
                    (32, g - 10)
                };
                (vld1q_u8(b.qs.as_ptr().add(at)), vdupq_n_u8(POW3[n]))
            } else {
                let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(b.qh)));
                (qh, vld1q_u8(QH_POW3.as_ptr()))
            };
            let m = vmulq_u8(bytes, pow3);
            let three = vdupq_n_u8(3);
            let low = vshrn_n_u16::<8>(vmull_u8(vget_low_u8(m), vget_low_u8(three)));
            let high = vshrn_n_u16::<8>(vmull_high_u8(m, three));
            vsubq_s8(vreinterpretq_s8_u8(vcombine_u8(low, high)), vdupq_n_s8(1))
        }
    };
    let finish = |b: &BlockTQ1_0, x: &BlockQ8K, sum: i32| widen_f16(b.d) * x.d * sum as f32;
    // SAFETY: forwarded from the caller.
    unsafe { k16_tile::<D, _, 4, true, R, C>(w, x, |_| [1; 16], level, finish) }
}

/// The sums of the 32 runs of 8 activations, four to a vector.
#[inline(always)]
unsafe fn run_sums(qs: &[i8; QK_K]) -> [int32x4_t; 8] {
    // SAFETY: 32 bytes from 32v (v < 8).
    std::array::from_fn(|v| unsafe {
        let (a, b) = load_i8(&qs[32 * v..]);
        let quads = |q| vpaddlq_s16(vpaddlq_s8(q));
        vpaddq_s32(quads(a), quads(b))
    })
}

/// IQ1_S and IQ1_M: `d · x.d · (Σ mult · Σ grid·q + 1/8 · Σ ±mult · Σ q)` per block, the
/// grid sums 16 weights (two runs under one multiplier) at a time, the shift's from the
/// activation's run sums.
#[inline(always)]
unsafe fn runs<D: I8Dot, B: DecodesToRuns, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let grid = iq1s_grid();
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        // SAFETY: qs is 256 bytes.
        let sums: [[int32x4_t; 8]; C] = std::array::from_fn(|c| unsafe { run_sums(&x[c][i].qs) });
        for r in 0..R {
            let runs = w[r][i].runs();
            let mut level = [0i8; QK_K];
            for (e, l) in level.chunks_exact_mut(8).enumerate() {
                l.copy_from_slice(&grid[runs.point[e] as usize & 2047]);
            }
            let signed: [i32; 32] = std::array::from_fn(|e| {
                if runs.minus[e] {
                    -runs.mult[e]
                } else {
                    runs.mult[e]
                }
            });
            for c in 0..C {
                let xq = &x[c][i].qs;
                // SAFETY: register-only NEON; 16 bytes from 16t of both 256-byte arrays, four
                // multipliers from 4v of the 32; forwarded from the caller.
                let (on_grid, shift) = unsafe {
                    let mut on_grid = vdupq_n_s32(0);
                    for t in 0..QK_K / 16 {
                        let p = dot16::<D>(
                            vld1q_s8(level.as_ptr().add(16 * t)),
                            vld1q_s8(xq.as_ptr().add(16 * t)),
                        );
                        on_grid = vmlaq_n_s32(on_grid, p, runs.mult[2 * t]);
                    }
                    let mut shift = vdupq_n_s32(0);
                    for (v, &s) in sums[c].iter().enumerate() {
                        shift = vmlaq_s32(shift, s, vld1q_s32(signed.as_ptr().add(4 * v)));
                    }
                    (vaddvq_s32(on_grid), vaddvq_s32(shift))
                };
                acc[r][c] += runs.d * x[c][i].d * (on_grid as f32 + IQ1_DELTA * shift as f32);
            }
        }
    }
    acc
}

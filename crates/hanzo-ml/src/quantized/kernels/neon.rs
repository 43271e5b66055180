//! NEON (baseline AArch64): the Q4_0/Q5_0/Q8_0 and Q4_K/Q5_K/Q6_K tiles. Products of signed
//! bytes widen to i16 (`smull`) and pair-add into i32 lanes (`sadalp`); each block's integer
//! sums are then scaled in f32 by the scalar dot's own formula, so the tiles give its results
//! bit for bit. Every other type takes the scalar dot on AArch64.

use crate::quantized::format::*;
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
unsafe fn legacy_tile<B, S: Into<f32>, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8_0]; C],
    levels: impl Fn(&B) -> (Levels, S),
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
                let d: f32 = d.into();
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

/// The 32 levels of 16 packed nibbles looked up in a 16-entry table.
#[inline(always)]
unsafe fn table_levels(table: &[i8; 16], qs: &[u8; 16]) -> Levels {
    // SAFETY: the table is 16 bytes; nibbles reads the 16 bytes of qs.
    unsafe {
        let t = vld1q_s8(table.as_ptr());
        let (lo, hi) = nibbles(qs);
        (vqtbl1q_s8(t, lo), vqtbl1q_s8(t, hi))
    }
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn iq4nl_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ4NL]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: table_levels reads the 16 bytes of qs.
    unsafe { legacy_tile(w, x, |b| (table_levels(&IQ4NL_VALUES, &b.qs), b.d)) }
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn mxfp4_tile<const R: usize, const C: usize>(
    w: [&[BlockMXFP4]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: table_levels reads the 16 bytes of qs.
    unsafe {
        legacy_tile(w, x, |b| {
            (table_levels(&MXFP4_VALUES, &b.qs), e8m0_half(b.e))
        })
    }
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

/// Σ w·x over 16 bytes each (|w| ≤ 63 here, |x| ≤ 127: exact in i16).
#[inline(always)]
unsafe fn dot16(w: int8x16_t, x: int8x16_t) -> i32 {
    // SAFETY: register-only NEON.
    unsafe {
        let acc = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x)));
        vaddvq_s32(vpadalq_s16(acc, vmull_high_s8(w, x)))
    }
}

/// Two 32-level sub-blocks of a Q4_K/Q5_K block (levels 0..=31, so they are valid `i8`).
type SubBlocks = (Levels, Levels);

/// The Q4_K/Q5_K tile: `meta` gives a block's `d`, `dmin` and packed scales, `levels(b, k)`
/// the levels of elements `64k..64k + 64` as sub-blocks `2k` and `2k + 1`.
#[inline(always)]
unsafe fn k4_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    meta: impl Fn(&B) -> (half::f16, half::f16, &[u8; 12]),
    levels: impl Fn(&B, usize) -> SubBlocks,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        for r in 0..R {
            let b = &w[r][i];
            let (d, dmin, packed) = meta(b);
            let scale_min: [(u8, u8); 8] = std::array::from_fn(|j| scale_min_k4(j, packed));
            let mut sum = [0i32; C];
            for k in 0..4 {
                let (l0, l1) = levels(b, k);
                for c in 0..C {
                    let xq = &x[c][i].qs[64 * k..];
                    // SAFETY: 64 bytes remain in qs from 64k (k < 4).
                    let (x0, x1) = unsafe { (load_i8(xq), load_i8(&xq[32..])) };
                    // SAFETY: register-only NEON.
                    let (p0, p1) = unsafe { (block_dot(l0, x0), block_dot(l1, x1)) };
                    sum[c] += scale_min[2 * k].0 as i32 * p0 + scale_min[2 * k + 1].0 as i32 * p1;
                }
            }
            for c in 0..C {
                let xb = &x[c][i];
                let sum_min: i32 = (0..8)
                    .map(|j| {
                        let s = xb.bsums[2 * j] as i32 + xb.bsums[2 * j + 1] as i32;
                        scale_min[j].1 as i32 * s
                    })
                    .sum();
                acc[r][c] += xb.d * (d.to_f32() * sum[c] as f32 - dmin.to_f32() * sum_min as f32);
            }
        }
    }
    acc
}

/// Low and high nibbles of 32 bytes: levels `0..32` and `32..64` of a 64-element chunk.
#[inline(always)]
unsafe fn nibbles_32(q: &[u8]) -> SubBlocks {
    debug_assert!(q.len() >= 32);
    // SAFETY: q holds at least 32 bytes.
    unsafe {
        let (a, b) = (vld1q_u8(q.as_ptr()), vld1q_u8(q.as_ptr().add(16)));
        let low = vdupq_n_u8(0x0F);
        let s = vreinterpretq_s8_u8;
        (
            (s(vandq_u8(a, low)), s(vandq_u8(b, low))),
            (s(vshrq_n_u8::<4>(a)), s(vshrq_n_u8::<4>(b))),
        )
    }
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q4k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: chunk k < 4 reads bytes 32k..32k + 32 of the 128 in qs.
    unsafe {
        k4_tile(
            w,
            x,
            |b| (b.d, b.dmin, &b.scales),
            |b, k| nibbles_32(&b.qs[32 * k..]),
        )
    }
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q5k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q4k_tile; qh is exactly 32 bytes.
    unsafe {
        k4_tile(
            w,
            x,
            |b| (b.d, b.dmin, &b.scales),
            |b, k| {
                let (lo, hi) = nibbles_32(&b.qs[32 * k..]);
                let qh = (vld1q_u8(b.qh.as_ptr()), vld1q_u8(b.qh.as_ptr().add(16)));
                // Level i of sub-block 2k + h takes bit 2k + h of qh[i] as its 0x10 bit.
                let fifth = |h: usize, v: uint8x16_t| {
                    let bit =
                        vandq_u8(vshlq_u8(v, vdupq_n_s8(-((2 * k + h) as i8))), vdupq_n_u8(1));
                    vreinterpretq_s8_u8(vshlq_n_u8::<4>(bit))
                };
                (
                    (
                        vorrq_s8(lo.0, fifth(0, qh.0)),
                        vorrq_s8(lo.1, fifth(0, qh.1)),
                    ),
                    (
                        vorrq_s8(hi.0, fifth(1, qh.0)),
                        vorrq_s8(hi.1, fifth(1, qh.1)),
                    ),
                )
            },
        )
    }
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q6k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ6K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        for r in 0..R {
            let b = &w[r][i];
            let mut sum = [0i32; C];
            for n in 0..2 {
                // SAFETY: ql[64n..64n + 64] and qh[32n..32n + 32] lie in the block.
                let (ql, qh) = unsafe {
                    let ql = b.ql.as_ptr().add(64 * n);
                    let qh = b.qh.as_ptr().add(32 * n);
                    (
                        [
                            vld1q_u8(ql),
                            vld1q_u8(ql.add(16)),
                            vld1q_u8(ql.add(32)),
                            vld1q_u8(ql.add(48)),
                        ],
                        [vld1q_u8(qh), vld1q_u8(qh.add(16))],
                    )
                };
                for k in 0..4 {
                    // Element 128n + 32k + i: nibble k / 2 of ql[64n + 32(k % 2) + i], bits
                    // 2k..2k + 2 of qh[32n + i] above it, minus 32.
                    let levels: [int8x16_t; 2] = std::array::from_fn(|half| {
                        // SAFETY: register-only NEON.
                        unsafe {
                            let l = ql[2 * (k % 2) + half];
                            let low = if k < 2 {
                                vandq_u8(l, vdupq_n_u8(0x0F))
                            } else {
                                vshrq_n_u8::<4>(l)
                            };
                            let high = vandq_u8(
                                vshlq_u8(qh[half], vdupq_n_s8(-(2 * k as i8))),
                                vdupq_n_u8(3),
                            );
                            let v = vorrq_u8(low, vshlq_n_u8::<4>(high));
                            vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(32))
                        }
                    });
                    let g = 8 * n + 2 * k;
                    for c in 0..C {
                        let xq = &x[c][i].qs[128 * n + 32 * k..];
                        // SAFETY: 32 bytes remain in qs from 128n + 32k.
                        let (p0, p1) = unsafe {
                            let (x0, x1) = load_i8(xq);
                            (dot16(levels[0], x0), dot16(levels[1], x1))
                        };
                        sum[c] += b.scales[g] as i32 * p0 + b.scales[g + 1] as i32 * p1;
                    }
                }
            }
            for c in 0..C {
                acc[r][c] += x[c][i].d * b.d.to_f32() * sum[c] as f32;
            }
        }
    }
    acc
}

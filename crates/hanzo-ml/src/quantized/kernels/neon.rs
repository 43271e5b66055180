//! NEON (AArch64) tiles for the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4)
//! and the k-quants (Q2_K to Q6_K), and what the other NEON files share; the IQ2/IQ3 lattice
//! types are in `neon_lattice`, IQ4_XS, IQ1 and the ternary types in `neon_levels`, the float
//! weights in `neon_float`.
//!
//! Every kernel multiplies signed bytes in one of two forms (`I8Dot`): `Widening`, products
//! widened to i16 (`smull`) and pair-added into i32 lanes (`sadalp`), on every AArch64 CPU;
//! and `DotProd`, ARMv8.2's `sdot`, four products into each i32 lane in one instruction, at
//! the `NeonDot` level. The two spread the products over the lanes differently, so a kernel
//! only ever uses a lane vector's total (or scales it as a whole), an exact integer either
//! way; each block's integer sums are then scaled in f32 by the scalar dot's own formula, so
//! every kernel gives the scalar dot's results bit for bit.

use crate::quantized::format::*;
use std::arch::aarch64::*;
use std::arch::asm;

/// How a kernel multiplies 16 signed bytes by 16 signed bytes into four i32 lanes.
pub(super) trait I8Dot {
    /// `acc` plus the 16 products of `w` and `x`, spread over its lanes. Their total is
    /// exact: no byte is below -128, so every product fits an i16.
    ///
    /// # Safety
    /// The CPU has what the form needs (`DotProd`: the `dotprod` feature).
    unsafe fn dot(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t;
}

/// `smull` + `sadalp`: baseline NEON.
pub(super) struct Widening;

impl I8Dot for Widening {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
        // SAFETY: register-only NEON, which every AArch64 CPU has.
        unsafe {
            let acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
            vpadalq_s16(acc, vmull_high_s8(w, x))
        }
    }
}

/// ARMv8.2's `sdot` (Rust's intrinsic for it is not stable yet, so written as assembly).
pub(super) struct DotProd;

impl I8Dot for DotProd {
    #[inline(always)]
    unsafe fn dot(mut acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
        // SAFETY: registers only; the caller's CPU has `dotprod` (the trait's contract).
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {w:v}.16b, {x:v}.16b",
                acc = inout(vreg) acc,
                w = in(vreg) w,
                x = in(vreg) x,
                options(pure, nomem, nostack),
            );
        }
        acc
    }
}

/// Each generic kernel's entry points, one per form: `$name` here on `Widening`, and
/// `dotprod::$name` on `DotProd`, compiled with the `dotprod` feature. A kernel generic over
/// the block type too names it: `name: Block => kernel::<Block>`.
macro_rules! entries {
    ($($name:ident: $block:ty => $generic:ident $(::<$by:ty>)?),* $(,)?) => {
        $(
            /// # Safety
            /// None beyond NEON, which every AArch64 CPU has; `unsafe` to match the other
            /// kernel sets.
            pub unsafe fn $name<const R: usize, const C: usize>(
                w: [&[$block]; R],
                x: [&[<$block as GgmlBlock>::Dot]; C],
            ) -> [[f32; C]; R] {
                // SAFETY: `Widening` needs baseline NEON only.
                unsafe { $generic::<Widening, $($by,)? R, C>(w, x) }
            }
        )*

        /// The same kernels on ARMv8.2's `sdot`.
        pub mod dotprod {
            use super::*;
            $(
                /// # Safety
                /// The CPU has the `dotprod` feature (`Isa::NeonDot`).
                #[target_feature(enable = "dotprod")]
                pub unsafe fn $name<const R: usize, const C: usize>(
                    w: [&[$block]; R],
                    x: [&[<$block as GgmlBlock>::Dot]; C],
                ) -> [[f32; C]; R] {
                    // SAFETY: the caller's CPU has `dotprod`.
                    unsafe { $generic::<DotProd, $($by,)? R, C>(w, x) }
                }
            )*
        }
    };
}
pub(super) use entries;

entries!(
    q4_0_tile: BlockQ4_0 => q4_0,
    q4_1_tile: BlockQ4_1 => q4_1,
    q5_0_tile: BlockQ5_0 => q5_0,
    q5_1_tile: BlockQ5_1 => q5_1,
    q8_0_tile: BlockQ8_0 => q8_0,
    iq4nl_tile: BlockIQ4NL => iq4nl,
    mxfp4_tile: BlockMXFP4 => mxfp4,
    q2k_tile: BlockQ2K => q2k,
    q3k_tile: BlockQ3K => q3k,
    q4k_tile: BlockQ4K => q4k,
    q5k_tile: BlockQ5K => q5k,
    q6k_tile: BlockQ6K => q6k,
);

/// An f16 widened by the CPU (`fcvt`, base AArch64): the `half` crate converts in software
/// on CPUs without FEAT_FP16's arithmetic, and asks which one it runs on at every call.
#[inline(always)]
pub(super) fn widen_f16(h: half::f16) -> f32 {
    let out: f32;
    // SAFETY: registers only; `fmov` and `fcvt` are base AArch64.
    unsafe {
        asm!(
            "fmov {out:s}, {bits:w}",
            "fcvt {out:s}, {out:h}",
            bits = in(reg) h.to_bits() as u32,
            out = out(vreg) out,
            options(pure, nomem, nostack),
        );
    }
    out
}

/// A block's 32 signed levels as two 16-byte vectors.
type Levels = (int8x16_t, int8x16_t);

#[inline(always)]
pub(super) unsafe fn load_i8(p: &[i8]) -> Levels {
    debug_assert!(p.len() >= 32);
    // SAFETY: every caller passes at least 32 bytes; vld1q has no alignment need.
    unsafe { (vld1q_s8(p.as_ptr()), vld1q_s8(p.as_ptr().add(16))) }
}

/// 16 packed bytes → the 16 low nibbles, then the 16 high nibbles.
#[inline(always)]
pub(super) unsafe fn nibbles(qs: &[u8; 16]) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: qs is 16 bytes; NEON is baseline on AArch64.
    unsafe {
        let v = vld1q_u8(qs.as_ptr());
        (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
    }
}

/// Σ w·x over 32 levels, as i32 lanes whose total is the sum.
#[inline(always)]
pub(super) unsafe fn dot32<D: I8Dot>(w: Levels, x: Levels) -> int32x4_t {
    // SAFETY: forwarded from the caller (the form's CPU features).
    unsafe { D::dot(D::dot(vdupq_n_s32(0), w.0, x.0), w.1, x.1) }
}

/// Σ w·x over 16 levels, as i32 lanes whose total is the sum.
#[inline(always)]
pub(super) unsafe fn dot16<D: I8Dot>(w: int8x16_t, x: int8x16_t) -> int32x4_t {
    // SAFETY: forwarded from the caller.
    unsafe { D::dot(vdupq_n_s32(0), w, x) }
}

/// What a 32-element tile needs of one block of either side: its 32 levels, its scale, and
/// (Q4_1/Q5_1 weights, Q8_1 activations) the second term of its affine form.
type Block32 = (Levels, f32, f32);

/// The 32-element types' tile: `levels` and `act` give each side's block, `finish(w, x, sum)`
/// the block's float from both sides' scales and the integer dot, as the scalar dot writes it.
#[inline(always)]
unsafe fn tile32<D: I8Dot, B, X, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[X]; C],
    levels: impl Fn(&B) -> Block32,
    act: impl Fn(&X) -> Block32,
    finish: impl Fn(&Block32, &Block32, i32) -> f32,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        let xs: [Block32; C] = std::array::from_fn(|c| act(&x[c][i]));
        for r in 0..R {
            let wb = levels(&w[r][i]);
            for c in 0..C {
                // SAFETY: forwarded from the caller (the form's CPU features).
                let sum = unsafe { vaddvq_s32(dot32::<D>(wb.0, xs[c].0)) };
                acc[r][c] += finish(&wb, &xs[c], sum);
            }
        }
    }
    acc
}

/// Q8_0 activations: levels and scale.
#[inline(always)]
fn act_q8_0(b: &BlockQ8_0) -> Block32 {
    // SAFETY: qs is 32 bytes.
    (unsafe { load_i8(&b.qs) }, widen_f16(b.d), 0.0)
}

/// Q8_1 activations: levels, scale and the stored `d · Σ q`.
#[inline(always)]
fn act_q8_1(b: &BlockQ8_1) -> Block32 {
    // SAFETY: qs is 32 bytes.
    (unsafe { load_i8(&b.qs) }, widen_f16(b.d), widen_f16(b.s))
}

/// `d_w · d_x · Σ`, the Q8_0 pairing's float.
#[inline(always)]
fn scaled(w: &Block32, x: &Block32, sum: i32) -> f32 {
    w.1 * x.1 * sum as f32
}

/// `d_w · d_x · Σ + m_w · s_x`, the Q8_1 pairing's.
#[inline(always)]
fn affine(w: &Block32, x: &Block32, sum: i32) -> f32 {
    w.1 * x.1 * sum as f32 + w.2 * x.2
}

/// Unsigned 4-bit levels (Q4_0 and Q4_1 store them so) as signed bytes less `offset`.
#[inline(always)]
unsafe fn levels4(qs: &[u8; 16], offset: i8) -> Levels {
    // SAFETY: nibbles reads the 16 bytes of qs.
    unsafe {
        let (lo, hi) = nibbles(qs);
        let offset = vdupq_n_s8(offset);
        (
            vsubq_s8(vreinterpretq_s8_u8(lo), offset),
            vsubq_s8(vreinterpretq_s8_u8(hi), offset),
        )
    }
}

/// For each byte value, eight bytes: `set` where the byte's bit `j` is set, `clear` where it
/// is not (element `j`): a table that spreads a byte of per-element bits over a vector.
pub(super) const fn bit_bytes(set: u8, clear: u8) -> [u64; 256] {
    let mut bytes = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut j = 0;
        while j < 8 {
            let v = if (b >> j) & 1 == 1 { set } else { clear };
            bytes[b] |= (v as u64) << (8 * j);
            j += 1;
        }
        b += 1;
    }
    bytes
}

/// Or-ed into a Q5_1 nibble: its fifth bit (the level, 0..=31).
const FIFTH_BIT: [u64; 256] = bit_bytes(0x10, 0);
/// Or-ed into a Q5_0 nibble: nothing where the fifth bit is set, 0xF0 (minus 16 as a signed
/// byte) where it is not (the level less 16, -16..=15).
const LESS_16: [u64; 256] = bit_bytes(0, 0xF0);

/// The 32 nibbles of a Q5_0/Q5_1 block with `table`'s bytes for the fifth bits of `qh` or-ed
/// in.
#[inline(always)]
unsafe fn levels5(qs: &[u8; 16], qh: [u8; 4], table: &[u64; 256]) -> Levels {
    let fifth = |a: u8, b: u8| {
        let (a, b) = (table[a as usize], table[b as usize]);
        // SAFETY: register-only NEON.
        unsafe { vcombine_u8(vcreate_u8(a), vcreate_u8(b)) }
    };
    // SAFETY: nibbles reads the 16 bytes of qs.
    unsafe {
        let (lo, hi) = nibbles(qs);
        (
            vreinterpretq_s8_u8(vorrq_u8(lo, fifth(qh[0], qh[1]))),
            vreinterpretq_s8_u8(vorrq_u8(hi, fifth(qh[2], qh[3]))),
        )
    }
}

#[inline(always)]
unsafe fn q8_0<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ8_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { tile32::<D, _, _, R, C>(w, x, act_q8_0, act_q8_0, scaled) }
}

#[inline(always)]
unsafe fn q4_0<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ4_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: levels4 reads the 16 bytes of qs; the rest is forwarded from the caller.
    let levels = |b: &BlockQ4_0| (unsafe { levels4(&b.qs, 8) }, widen_f16(b.d), 0.0);
    unsafe { tile32::<D, _, _, R, C>(w, x, levels, act_q8_0, scaled) }
}

#[inline(always)]
unsafe fn q4_1<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ4_1]; R],
    x: [&[BlockQ8_1]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q4_0.
    let levels = |b: &BlockQ4_1| (unsafe { levels4(&b.qs, 0) }, widen_f16(b.d), widen_f16(b.m));
    unsafe { tile32::<D, _, _, R, C>(w, x, levels, act_q8_1, affine) }
}

#[inline(always)]
unsafe fn q5_0<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ5_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: levels5 reads the 16 bytes of qs; the rest is forwarded from the caller.
    let levels = |b: &BlockQ5_0| {
        (
            unsafe { levels5(&b.qs, b.qh, &LESS_16) },
            widen_f16(b.d),
            0.0,
        )
    };
    unsafe { tile32::<D, _, _, R, C>(w, x, levels, act_q8_0, scaled) }
}

#[inline(always)]
unsafe fn q5_1<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ5_1]; R],
    x: [&[BlockQ8_1]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q5_0.
    let levels = |b: &BlockQ5_1| {
        let level = unsafe { levels5(&b.qs, b.qh, &FIFTH_BIT) };
        (level, widen_f16(b.d), widen_f16(b.m))
    };
    unsafe { tile32::<D, _, _, R, C>(w, x, levels, act_q8_1, affine) }
}

/// The 32 levels of 16 packed nibbles looked up in a 16-entry table.
#[inline(always)]
pub(super) unsafe fn table_levels(table: &[i8; 16], qs: &[u8; 16]) -> Levels {
    // SAFETY: the table is 16 bytes; nibbles reads the 16 bytes of qs.
    unsafe {
        let t = vld1q_s8(table.as_ptr());
        let (lo, hi) = nibbles(qs);
        (vqtbl1q_s8(t, lo), vqtbl1q_s8(t, hi))
    }
}

#[inline(always)]
unsafe fn iq4nl<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockIQ4NL]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: table_levels reads the 16 bytes of qs; the rest is forwarded from the caller.
    let levels = |b: &BlockIQ4NL| {
        let level = unsafe { table_levels(&IQ4NL_VALUES, &b.qs) };
        (level, widen_f16(b.d), 0.0)
    };
    unsafe { tile32::<D, _, _, R, C>(w, x, levels, act_q8_0, scaled) }
}

#[inline(always)]
unsafe fn mxfp4<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockMXFP4]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in iq4nl.
    let levels = |b: &BlockMXFP4| {
        let level = unsafe { table_levels(&MXFP4_VALUES, &b.qs) };
        (level, e8m0_half(b.e), 0.0)
    };
    unsafe { tile32::<D, _, _, R, C>(w, x, levels, act_q8_0, scaled) }
}

/// `Σ m_j · (bsums[2j] + bsums[2j + 1])`: eight 32-element sub-blocks' mins against the
/// activation's sums per 16.
#[inline(always)]
unsafe fn mins_by_pairs(mins: &[u8; 8], bsums: &[i16; 16]) -> i32 {
    // SAFETY: eight and sixteen elements read; register-only NEON.
    unsafe {
        let b = vpaddq_s16(vld1q_s16(bsums.as_ptr()), vld1q_s16(bsums.as_ptr().add(8)));
        let m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins.as_ptr())));
        let p = vmull_s16(vget_low_s16(m), vget_low_s16(b));
        vaddvq_s32(vmlal_high_s16(p, m, b))
    }
}

/// `Σ m_g · bsums[g]` over the sixteen 16-element groups (Q2_K's 4-bit mins).
#[inline(always)]
unsafe fn mins_by_groups(mins: uint8x16_t, bsums: &[i16; 16]) -> i32 {
    // SAFETY: sixteen elements read; register-only NEON.
    unsafe {
        let (b0, b1) = (vld1q_s16(bsums.as_ptr()), vld1q_s16(bsums.as_ptr().add(8)));
        let m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
        let m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
        let p = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
        let p = vmlal_high_s16(p, m0, b0);
        let p = vmlal_s16(p, vget_low_s16(m1), vget_low_s16(b1));
        vaddvq_s32(vmlal_high_s16(p, m1, b1))
    }
}

/// Two 32-level sub-blocks of a Q4_K/Q5_K block (levels 0..=31, so they are valid `i8`).
type SubBlocks = (Levels, Levels);

/// The Q4_K/Q5_K tile: `meta` gives a block's `d`, `dmin` and packed scales, `levels(b, k)`
/// the levels of elements `64k..64k + 64` as sub-blocks `2k` and `2k + 1`.
#[inline(always)]
unsafe fn k4_tile<D: I8Dot, B, const R: usize, const C: usize>(
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
            let (scales, mins) = scales_mins_k4(packed);
            // SAFETY: register-only NEON.
            let mut sum = [unsafe { vdupq_n_s32(0) }; C];
            for k in 0..4 {
                let (l0, l1) = levels(b, k);
                for (c, sum) in sum.iter_mut().enumerate() {
                    let xq = &x[c][i].qs[64 * k..];
                    // SAFETY: 64 bytes remain in qs from 64k (k < 4); the rest is forwarded
                    // from the caller.
                    unsafe {
                        let (x0, x1) = (load_i8(xq), load_i8(&xq[32..]));
                        *sum = vmlaq_n_s32(*sum, dot32::<D>(l0, x0), scales[2 * k] as i32);
                        *sum = vmlaq_n_s32(*sum, dot32::<D>(l1, x1), scales[2 * k + 1] as i32);
                    }
                }
            }
            for c in 0..C {
                let xb = &x[c][i];
                // SAFETY: register-only NEON; mins and bsums are arrays of the sizes read.
                let (sum, sum_min) =
                    unsafe { (vaddvq_s32(sum[c]), mins_by_pairs(&mins, &xb.bsums)) };
                acc[r][c] += xb.d * (widen_f16(d) * sum as f32 - widen_f16(dmin) * sum_min as f32);
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

#[inline(always)]
unsafe fn q4k<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ4K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: chunk k < 4 reads bytes 32k..32k + 32 of the 128 in qs; the rest is forwarded.
    unsafe {
        k4_tile::<D, _, R, C>(
            w,
            x,
            |b| (b.d, b.dmin, &b.scales),
            |b, k| nibbles_32(&b.qs[32 * k..]),
        )
    }
}

#[inline(always)]
unsafe fn q5k<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ5K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in q4k; qh is exactly 32 bytes.
    unsafe {
        k4_tile::<D, _, R, C>(
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

/// The 2-bit fields `2j..2j + 2` of 16 bytes (element `32j + i` of a Q2_K/Q3_K/TQ2_0 half
/// block lies in byte `i`).
#[inline(always)]
pub(super) unsafe fn crumbs(q: uint8x16_t, j: usize) -> uint8x16_t {
    // SAFETY: register-only NEON.
    unsafe { vandq_u8(vshlq_u8(q, vdupq_n_s8(-2 * j as i8)), vdupq_n_u8(3)) }
}

/// The 256-element types against Q8_K by groups of 16 levels: `level(b, g)` gives group `g`
/// (elements `16g..16g + 16`) as a vector, each `SPAN` consecutive groups share a multiplier,
/// `mult(b)[s]` that of groups `SPAN·s..` (Q2_K, Q3_K, Q6_K and IQ2_XS/IQ2_S: one per group;
/// the other lattice types one per 32), and `finish(b, x, sum)` the block's float from the
/// integer sum `Σ mult · group dot`. Each group is unpacked once per weight row and block, and
/// used at once by every activation row. `UNROLL` compiles the two halves of a block apart,
/// so that every group index is a constant and the shifts and branches on it fold (TQ1_0's
/// dot takes 46% fewer instructions, Q3_K's and Q6_K's prefill 10%); the lattice types, whose
/// work is lookups, take 15-25% more that way (`scripts/neon_instructions.sh`).
#[inline(always)]
pub(super) unsafe fn k16_tile<
    D: I8Dot,
    B,
    const SPAN: usize,
    const UNROLL: bool,
    const R: usize,
    const C: usize,
>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    mult: impl Fn(&B) -> [i32; 16],
    level: impl Fn(&B, usize) -> int8x16_t,
    finish: impl Fn(&B, &BlockQ8K, i32) -> f32,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        for r in 0..R {
            let b = &w[r][i];
            let m = mult(b);
            // SAFETY: register-only NEON.
            let mut sum = [unsafe { vdupq_n_s32(0) }; C];
            // Half n's eight groups.
            let mut half = |n: usize| {
                let l: [int8x16_t; 8] = std::array::from_fn(|local| level(b, 8 * n + local));
                for (c, sum) in sum.iter_mut().enumerate() {
                    let xq = &x[c][i].qs[128 * n..];
                    for s in 0..8 / SPAN {
                        // SAFETY: 16 bytes from 16g (g < 8) of the 128 left in qs; forwarded
                        // from the caller.
                        unsafe {
                            let mut p = vdupq_n_s32(0);
                            for k in 0..SPAN {
                                let g = SPAN * s + k;
                                p = D::dot(p, l[g], vld1q_s8(xq.as_ptr().add(16 * g)));
                            }
                            *sum = vmlaq_n_s32(*sum, p, m[8 / SPAN * n + s]);
                        }
                    }
                }
            };
            if UNROLL {
                half(0);
                half(1);
            } else {
                for n in 0..2 {
                    half(n);
                }
            }
            for c in 0..C {
                // SAFETY: register-only NEON.
                let s = unsafe { vaddvq_s32(sum[c]) };
                acc[r][c] += finish(b, &x[c][i], s);
            }
        }
    }
    acc
}

/// Q2_K's unsigned 2-bit levels of group `g`: element `128n + 32j + i` lies in bits `2j..`
/// of byte `32n + i`, so group `g` is field `(g % 8) / 2` of bytes `32n + 16 (g % 2)..`.
#[inline(always)]
unsafe fn q2k_group(qs: &[u8; 64], g: usize) -> uint8x16_t {
    let (n, local) = (g / 8, g % 8);
    // SAFETY: 16 bytes from 32n + 16 (local % 2) < 64.
    unsafe {
        crumbs(
            vld1q_u8(qs.as_ptr().add(32 * n + 16 * (local % 2))),
            local / 2,
        )
    }
}

#[inline(always)]
unsafe fn q2k<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ2K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    let finish = |b: &BlockQ2K, x: &BlockQ8K, sum: i32| {
        // SAFETY: scales is 16 bytes; bsums 16 elements.
        let sum_min =
            unsafe { mins_by_groups(vshrq_n_u8::<4>(vld1q_u8(b.scales.as_ptr())), &x.bsums) };
        x.d * (widen_f16(b.d) * sum as f32 - widen_f16(b.dmin) * sum_min as f32)
    };
    // SAFETY: q2k_group reads within qs; the rest is forwarded from the caller.
    unsafe {
        k16_tile::<D, _, 1, true, R, C>(
            w,
            x,
            |b| b.scales.map(|s| (s & 0x0F) as i32),
            |b, g| vreinterpretq_s8_u8(q2k_group(&b.qs, g)),
            finish,
        )
    }
}

#[inline(always)]
unsafe fn q3k<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ3K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // Level of element 128n + 32j + i: Q2_K's two bits less 4 where bit 4n + j of hmask[i]
    // is clear.
    let level = |b: &BlockQ3K, g: usize| {
        let (n, local) = (g / 8, g % 8);
        // SAFETY: 16 bytes of hmask from 16 (local % 2) < 32; q2k_group reads within qs.
        unsafe {
            let h = vld1q_u8(b.hmask.as_ptr().add(16 * (local % 2)));
            let bit = vdupq_n_u8(1 << (4 * n + local / 2));
            let four = vbicq_u8(vdupq_n_u8(4), vtstq_u8(h, bit));
            vsubq_s8(
                vreinterpretq_s8_u8(q2k_group(&b.qs, g)),
                vreinterpretq_s8_u8(four),
            )
        }
    };
    let finish = |b: &BlockQ3K, x: &BlockQ8K, sum: i32| x.d * widen_f16(b.d) * sum as f32;
    let mult = |b: &BlockQ3K| q3k_scales_by_words(&b.scales).map(i32::from);
    // SAFETY: forwarded from the caller.
    unsafe { k16_tile::<D, _, 1, true, R, C>(w, x, mult, level, finish) }
}

#[inline(always)]
unsafe fn q6k<D: I8Dot, const R: usize, const C: usize>(
    w: [&[BlockQ6K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    // Element 128n + 32k + i: nibble k / 2 of ql[64n + 32(k % 2) + i], bits 2k..2k + 2 of
    // qh[32n + i] above it, minus 32; group g = 8n + 2k + (i >= 16).
    let level = |b: &BlockQ6K, g: usize| {
        let (n, k, half) = (g / 8, (g % 8) / 2, g % 2);
        // SAFETY: 16 bytes of ql from 64n + 32 (k % 2) + 16 half < 128, of qh from
        // 32n + 16 half < 64.
        unsafe {
            let l = vld1q_u8(b.ql.as_ptr().add(64 * n + 32 * (k % 2) + 16 * half));
            let h = vld1q_u8(b.qh.as_ptr().add(32 * n + 16 * half));
            let low = if k < 2 {
                vandq_u8(l, vdupq_n_u8(0x0F))
            } else {
                vshrq_n_u8::<4>(l)
            };
            let v = vorrq_u8(low, vshlq_n_u8::<4>(crumbs(h, k)));
            vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(32))
        }
    };
    let finish = |b: &BlockQ6K, x: &BlockQ8K, sum: i32| x.d * widen_f16(b.d) * sum as f32;
    // SAFETY: forwarded from the caller.
    unsafe { k16_tile::<D, _, 1, true, R, C>(w, x, |b| b.scales.map(i32::from), level, finish) }
}

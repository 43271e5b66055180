//! NEON (AArch64) tiles for F16 and BF16 weights against activation rows rounded to the same
//! type, as on x86 (`float_x86`): decode streams two bytes per weight, so the kernel's job is
//! to keep loads in flight and widen cheaply, f16 by `fcvtl` (base AArch64; Rust's intrinsic
//! for it is not stable, so it is written as assembly), bf16 by a shift.

use super::neon::widen_f16;
use crate::quantized::format::{HalfBF16, HalfF16};
use std::arch::aarch64::*;
use std::arch::asm;

/// Halves of one kind, widened to f32.
trait Widen: Copy {
    /// Four halves from `p`.
    ///
    /// # Safety
    /// `p` points at 4 readable elements.
    unsafe fn widen4(p: *const Self) -> float32x4_t;
    /// Eight halves from `p`, as elements `0..4` and `4..8`.
    ///
    /// # Safety
    /// `p` points at 8 readable elements.
    unsafe fn widen8(p: *const Self) -> [float32x4_t; 2];
    fn to_f32(self) -> f32;
}

impl Widen for HalfF16 {
    #[inline(always)]
    unsafe fn widen4(p: *const Self) -> float32x4_t {
        let out: float32x4_t;
        // SAFETY: 8 bytes readable (caller); `fcvtl` is base AArch64.
        unsafe {
            let h = vld1_u16(p as *const u16);
            asm!(
                "fcvtl {out:v}.4s, {h:v}.4h",
                h = in(vreg) h,
                out = lateout(vreg) out,
                options(pure, nomem, nostack),
            );
        }
        out
    }
    #[inline(always)]
    unsafe fn widen8(p: *const Self) -> [float32x4_t; 2] {
        let (low, high): (float32x4_t, float32x4_t);
        // SAFETY: 16 bytes readable (caller); `fcvtl`/`fcvtl2` are base AArch64.
        unsafe {
            let h = vld1q_u16(p as *const u16);
            asm!(
                "fcvtl {low:v}.4s, {h:v}.4h",
                "fcvtl2 {high:v}.4s, {h:v}.8h",
                h = in(vreg) h,
                // `low` is written before `h` is read again: not a late output.
                low = out(vreg) low,
                high = lateout(vreg) high,
                options(pure, nomem, nostack),
            );
        }
        [low, high]
    }
    fn to_f32(self) -> f32 {
        widen_f16(self)
    }
}

impl Widen for HalfBF16 {
    #[inline(always)]
    unsafe fn widen4(p: *const Self) -> float32x4_t {
        // SAFETY: 8 bytes readable (caller); a bf16 is the high half of an f32.
        unsafe { vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p as *const u16))) }
    }
    #[inline(always)]
    unsafe fn widen8(p: *const Self) -> [float32x4_t; 2] {
        // SAFETY: 16 bytes readable (caller).
        unsafe {
            let h = vld1q_u16(p as *const u16);
            [
                vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
                vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
            ]
        }
    }
    fn to_f32(self) -> f32 {
        HalfBF16::to_f32(self)
    }
}

/// Accumulators per (weight row, activation row) pair: the multiply-add latency covers four
/// independent ones, so decode's single row is not held back by one dependency chain.
const ACCS: usize = 4;
/// Elements per step of all `ACCS` accumulators.
const STEP: usize = 4 * ACCS;

/// Every tile shape sums in the same order, so a product does not depend on which tile
/// computed it: elements `4a..4a + 4` of each whole step go to accumulator `a`, the whole
/// groups of four after the last step to accumulator 0, the accumulators are added as
/// `(a0 + a1) + (a2 + a3)`, and the ragged tail (`k` not a multiple of 4) is summed in scalar
/// code.
#[inline(always)]
unsafe fn tile<H: Widen, const R: usize, const C: usize>(
    w: [&[H]; R],
    x: [&[H]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let k = x[0].len();
    let whole = k - k % 4;
    let stepped = whole - whole % STEP;
    // SAFETY: every load reads at most `STEP` elements at `i < stepped` or 4 at
    // `i < whole`, within the `k` all slices hold (checked above); register-only NEON
    // otherwise.
    unsafe {
        let mut acc = [[[vdupq_n_f32(0.0); ACCS]; C]; R];
        if R * C * ACCS <= 16 {
            // Few pairs (decode's single row): all accumulators in registers, one pass.
            let mut i = 0;
            while i < stepped {
                add_step(&w, &x, i, &mut acc);
                i += STEP;
            }
        } else {
            // More pairs than registers: one pass over the rows per accumulator (the rows
            // are in L1 by the second pass).
            for a in 0..ACCS {
                let mut one = [[[vdupq_n_f32(0.0); 1]; C]; R];
                let mut i = 0;
                while i < stepped {
                    add_group(&w, &x, i + 4 * a, &mut one, 0);
                    i += STEP;
                }
                for (acc, one) in acc.iter_mut().zip(&one) {
                    for (acc, one) in acc.iter_mut().zip(one) {
                        acc[a] = one[0];
                    }
                }
            }
        }
        let mut i = stepped;
        while i < whole {
            add_group(&w, &x, i, &mut acc, 0);
            i += 4;
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let [a0, a1, a2, a3] = acc[r][c];
                let sum = vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3));
                let tail: f32 = (whole..k)
                    .map(|i| w[r][i].to_f32() * x[c][i].to_f32())
                    .sum();
                out[r][c] = vaddvq_f32(sum) + tail;
            }
        }
        out
    }
}

/// The whole step at `i` of every pair: elements `4a..4a + 4` into accumulator `a`, widened
/// eight at a time.
///
/// # Safety
/// Every slice holds `i + STEP` elements.
#[inline(always)]
unsafe fn add_step<H: Widen, const R: usize, const C: usize>(
    w: &[&[H]; R],
    x: &[&[H]; C],
    i: usize,
    acc: &mut [[[float32x4_t; ACCS]; C]; R],
) {
    // SAFETY: as documented above (the caller's bounds); register-only NEON otherwise.
    unsafe {
        let mut xs = [[vdupq_n_f32(0.0); ACCS]; C];
        for c in 0..C {
            let p = x[c].as_ptr().add(i);
            let [a0, a1] = H::widen8(p);
            let [a2, a3] = H::widen8(p.add(8));
            xs[c] = [a0, a1, a2, a3];
        }
        for r in 0..R {
            let p = w[r].as_ptr().add(i);
            let [w0, w1] = H::widen8(p);
            let [w2, w3] = H::widen8(p.add(8));
            for c in 0..C {
                for (a, wv) in [w0, w1, w2, w3].into_iter().enumerate() {
                    acc[r][c][a] = vfmaq_f32(acc[r][c][a], wv, xs[c][a]);
                }
            }
        }
    }
}

/// Elements `i..i + 4` of every pair, added into accumulator `a` of each.
///
/// # Safety
/// Every slice holds `i + 4` elements.
#[inline(always)]
unsafe fn add_group<H: Widen, const R: usize, const C: usize, const N: usize>(
    w: &[&[H]; R],
    x: &[&[H]; C],
    i: usize,
    acc: &mut [[[float32x4_t; N]; C]; R],
    a: usize,
) {
    // SAFETY: as documented above (the caller's bounds); register-only NEON otherwise.
    unsafe {
        let mut xs = [vdupq_n_f32(0.0); C];
        for c in 0..C {
            xs[c] = H::widen4(x[c].as_ptr().add(i));
        }
        for r in 0..R {
            let wv = H::widen4(w[r].as_ptr().add(i));
            for c in 0..C {
                acc[r][c][a] = vfmaq_f32(acc[r][c][a], wv, xs[c]);
            }
        }
    }
}

/// # Safety
/// None beyond NEON, which every AArch64 CPU has; `unsafe` to match the other kernel sets.
pub unsafe fn f16_tile<const R: usize, const C: usize>(
    w: [&[HalfF16]; R],
    x: [&[HalfF16]; C],
) -> [[f32; C]; R] {
    // SAFETY: baseline NEON.
    unsafe { tile(w, x) }
}

/// # Safety
/// As `f16_tile`.
pub unsafe fn bf16_tile<const R: usize, const C: usize>(
    w: [&[HalfBF16]; R],
    x: [&[HalfBF16]; C],
) -> [[f32; C]; R] {
    // SAFETY: baseline NEON.
    unsafe { tile(w, x) }
}

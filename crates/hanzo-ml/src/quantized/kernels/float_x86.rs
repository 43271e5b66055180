//! AVX2 + FMA + F16C tiles for F16 and BF16 weights against activation rows rounded to the
//! same type (ggml's pairing, so results match llama.cpp's on the same file).
//!
//! Decode streams two bytes per weight and does one FMA per eight of them: memory bound, so
//! the kernel's job is to keep enough loads in flight. Each step widens eight halves of every
//! weight row and every activation row to f32 once, and every (row, activation) pair adds
//! their product into its own accumulators.

use crate::quantized::format::{HalfBF16, HalfF16};
use std::arch::x86_64::*;

/// Eight halves of one kind, widened to f32.
pub(super) trait Widen: Copy {
    /// # Safety
    /// `p` holds at least 8 elements; the CPU has AVX2 and F16C.
    unsafe fn widen8(p: &[Self]) -> __m256;
    /// Group `a` of the `STEP` elements at the start of `p`, widened: eight elements whose
    /// products with the same group of another row go into accumulator `a`. Elements
    /// `8a..8a + 8` (`widen8`) unless a kind has a cheaper split of the step.
    ///
    /// # Safety
    /// `p` holds at least `STEP` elements and `a < ACCS`; the CPU has AVX2 and F16C.
    #[inline(always)]
    unsafe fn step_group(p: &[Self], a: usize) -> __m256 {
        // SAFETY: forwarded from the caller (`8a + 8 <= STEP`).
        unsafe { Self::widen8(&p[8 * a..]) }
    }
    fn to_f32(self) -> f32;
}

impl Widen for HalfF16 {
    #[inline(always)]
    unsafe fn widen8(p: &[Self]) -> __m256 {
        debug_assert!(p.len() >= 8);
        // SAFETY: 8 halves = 16 bytes readable (caller); F16C enabled by the caller.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.as_ptr() as *const __m128i)) }
    }
    fn to_f32(self) -> f32 {
        HalfF16::to_f32(self)
    }
}

impl Widen for HalfBF16 {
    #[inline(always)]
    unsafe fn widen8(p: &[Self]) -> __m256 {
        debug_assert!(p.len() >= 8);
        // SAFETY: as for f16; a bf16 is the high half of an f32, so widening is a shift.
        unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.as_ptr() as *const __m128i));
            _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
        }
    }
    /// A bf16 is the high half of an f32, so one 32-byte load of sixteen gives eight as
    /// f32 by a shift (the even elements, groups 0 and 2) or a mask (the odd ones, groups 1
    /// and 3): no widening shuffle, where `widen8`'s takes one per eight (BF16 decode from
    /// cache 25.6 → 33.9 GiB/s, one thread, Zen 4; F16 runs 32–33.5).
    #[inline(always)]
    unsafe fn step_group(p: &[Self], a: usize) -> __m256 {
        debug_assert!(p.len() >= STEP && a < ACCS);
        // SAFETY: the load reads elements `16 (a / 2)..` + 16, inside the step (caller).
        unsafe {
            let v = _mm256_loadu_si256(p.as_ptr().add(16 * (a / 2)) as *const __m256i);
            _mm256_castsi256_ps(match a % 2 {
                0 => _mm256_slli_epi32(v, 16),
                _ => _mm256_and_si256(v, _mm256_set1_epi32(-65536)),
            })
        }
    }
    fn to_f32(self) -> f32 {
        HalfBF16::to_f32(self)
    }
}

/// Activations already widened: F16 decode widens the activation row once per product
/// (`f16_dot_widened`) instead of once per weight row.
impl Widen for f32 {
    #[inline(always)]
    unsafe fn widen8(p: &[Self]) -> __m256 {
        debug_assert!(p.len() >= 8);
        // SAFETY: the load reads eight elements from `p`, which holds them (caller).
        unsafe { _mm256_loadu_ps(p.as_ptr()) }
    }
    fn to_f32(self) -> f32 {
        self
    }
}

/// Accumulators per (weight row, activation row) pair: one FMA's latency covers four
/// independent ones, so a single row (decode) is not held back by one dependency chain.
const ACCS: usize = 4;
/// Elements per step of all `ACCS` accumulators.
const STEP: usize = 8 * ACCS;

/// Every tile shape sums in the same order, so a product does not depend on which tile
/// computed it (`forward_rows_alone` relies on that): group `a` of each whole `STEP`
/// (`Widen::step_group`) goes to accumulator `a`, the few whole groups of eight after the
/// last step to accumulator 0, the accumulators are added as `(a0 + a1) + (a2 + a3)`, and
/// the ragged tail (`k` not a multiple of 8) is summed in scalar code.
#[inline(always)]
unsafe fn tile<H: Widen, X: Widen, const R: usize, const C: usize>(
    w: [&[H]; R],
    x: [&[X]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let k = x[0].len();
    let whole = k - k % 8;
    let stepped = whole - whole % STEP;
    // SAFETY: the caller enables AVX2, FMA and F16C; every load reads 8 elements at
    // `i < whole <= len`, and all slices have length `k` (checked above). Loops, not
    // `array::from_fn`: a closure holding intrinsics may not be inlined (see `interleaved`).
    unsafe {
        let mut acc = [[[_mm256_setzero_ps(); ACCS]; C]; R];
        if R * C * ACCS <= 12 {
            // Few pairs (decode's single row): all accumulators in registers, one pass.
            let mut i = 0;
            while i < stepped {
                for a in 0..ACCS {
                    add_group(&w, &x, i, Group::OfStep(a), &mut acc, a);
                }
                i += STEP;
            }
        } else {
            // More pairs than registers: one pass over the rows per accumulator (the rows
            // are in L1 by the second pass).
            for a in 0..ACCS {
                let mut one = [[[_mm256_setzero_ps(); 1]; C]; R];
                let mut i = 0;
                while i < stepped {
                    add_group(&w, &x, i, Group::OfStep(a), &mut one, 0);
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
            add_group(&w, &x, i, Group::Eight, &mut acc, 0);
            i += 8;
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let [a0, a1, a2, a3] = acc[r][c];
                let sum = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
                let tail: f32 = (whole..k)
                    .map(|i| w[r][i].to_f32() * x[c][i].to_f32())
                    .sum();
                out[r][c] = super::avx2::hsum(sum) + tail;
            }
        }
        out
    }
}

/// Which eight elements at `i` a pass takes from every slice.
#[derive(Clone, Copy)]
enum Group {
    /// Group `g` of the whole step at `i` (`Widen::step_group`).
    OfStep(usize),
    /// Elements `i..i + 8` (a whole group after the last step).
    Eight,
}

impl Group {
    /// # Safety
    /// As for `add_group`, with `p` starting at `i`.
    #[inline(always)]
    unsafe fn widen<T: Widen>(self, p: &[T]) -> __m256 {
        // SAFETY: forwarded from the caller.
        unsafe {
            match self {
                Group::OfStep(g) => T::step_group(p, g),
                Group::Eight => T::widen8(p),
            }
        }
    }
}

/// `group` at `i` of every pair, added into accumulator `a` of each.
///
/// # Safety
/// AVX2, FMA and F16C are enabled; every slice holds the elements `group` reads (`i + STEP`
/// for a group of a step, `g < ACCS`; `i + 8` otherwise).
#[inline(always)]
unsafe fn add_group<H: Widen, X: Widen, const R: usize, const C: usize, const N: usize>(
    w: &[&[H]; R],
    x: &[&[X]; C],
    i: usize,
    group: Group,
    acc: &mut [[[__m256; N]; C]; R],
    a: usize,
) {
    // SAFETY: as documented above (the caller's bounds).
    unsafe {
        let mut xs = [_mm256_setzero_ps(); C];
        for c in 0..C {
            xs[c] = group.widen(&x[c][i..]);
        }
        for r in 0..R {
            let wv = group.widen(&w[r][i..]);
            for c in 0..C {
                acc[r][c][a] = _mm256_fmadd_ps(wv, xs[c], acc[r][c][a]);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_tile<const R: usize, const C: usize>(
    w: [&[HalfF16]; R],
    x: [&[HalfF16]; C],
) -> [[f32; C]; R] {
    // SAFETY: this function enables the features `tile` needs.
    unsafe { tile(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn bf16_tile<const R: usize, const C: usize>(
    w: [&[HalfBF16]; R],
    x: [&[HalfBF16]; C],
) -> [[f32; C]; R] {
    // SAFETY: as in f16_tile.
    unsafe { tile(w, x) }
}

/// F16 weights against an activation row rounded to f16 and widened back to f32 (exactly):
/// the same sums in the same order as `f16_tile::<1, 1>`, so bit-identical to it, with one
/// `vcvtph2ps` per eight weights instead of two.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_dot_widened(w: &[HalfF16], x: &[f32]) -> f32 {
    // SAFETY: this function enables the features `tile` needs.
    unsafe { tile([w], [x])[0][0] }
}

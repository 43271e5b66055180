//! NEON: `F32Vector` over 4 f32 lanes.

use super::vector::{row_kernels, F32Vector};
use std::arch::aarch64::*;

/// Proof that this CPU has NEON.
#[derive(Clone, Copy)]
pub(super) struct Neon(());

impl Neon {
    /// # Safety
    /// The CPU must have NEON.
    pub(super) unsafe fn assume() -> Self {
        Neon(())
    }
}

row_kernels!(Neon, "neon", "neon");

// SAFETY (for every `unsafe` block below): a `Neon` exists only on a CPU with NEON (see
// `assume`), and these intrinsics need nothing more; loads and stores are bounds-checked by
// the slice index first.
unsafe impl F32Vector for Neon {
    type V = float32x4_t;
    type Mask = uint32x4_t;
    const LANES: usize = 4;

    #[inline(always)]
    fn splat(self, x: f32) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vdupq_n_f32(x) }
    }
    #[inline(always)]
    fn load(self, c: &[f32]) -> float32x4_t {
        let c = &c[..4];
        // SAFETY: see the impl; `c` holds 4 elements.
        unsafe { vld1q_f32(c.as_ptr()) }
    }
    #[inline(always)]
    fn store(self, c: &mut [f32], v: float32x4_t) {
        let c = &mut c[..4];
        // SAFETY: see the impl; `c` holds 4 elements.
        unsafe { vst1q_f32(c.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn load_pairs(self, c: &[f32]) -> float32x4_t {
        let c = &c[..2];
        // SAFETY: see the impl; `c` holds 2 elements.
        unsafe {
            let d = vld1_f32(c.as_ptr());
            vcombine_f32(vdup_lane_f32::<0>(d), vdup_lane_f32::<1>(d))
        }
    }
    #[inline(always)]
    fn swap_pairs(self, v: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vrev64q_f32(v) }
    }
    #[inline(always)]
    fn add(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vaddq_f32(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vsubq_f32(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vmulq_f32(a, b) }
    }
    #[inline(always)]
    fn div(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vdivq_f32(a, b) }
    }
    #[inline(always)]
    fn fma(self, a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vfmaq_f32(c, a, b) }
    }
    #[inline(always)]
    fn max(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // `fmax` gives NaN when either operand is.
        // SAFETY: see the impl.
        unsafe { vmaxq_f32(a, b) }
    }
    #[inline(always)]
    fn min(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vminq_f32(a, b) }
    }
    #[inline(always)]
    fn round(self, v: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vrndnq_f32(v) }
    }
    #[inline(always)]
    fn floor(self, v: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vrndmq_f32(v) }
    }
    #[inline(always)]
    fn pow2i(self, q: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe {
            let biased = vaddq_s32(vcvtnq_s32_f32(q), vdupq_n_s32(127));
            vreinterpretq_f32_s32(vshlq_n_s32::<23>(biased))
        }
    }
    #[inline(always)]
    fn ge(self, a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vcgeq_f32(a, b) }
    }
    #[inline(always)]
    fn le(self, a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vcleq_f32(a, b) }
    }
    #[inline(always)]
    fn is_nan(self, a: float32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vmvnq_u32(vceqq_f32(a, a)) }
    }
    #[inline(always)]
    fn or(self, a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vorrq_u32(a, b) }
    }
    #[inline(always)]
    fn any(self, m: uint32x4_t) -> bool {
        // SAFETY: see the impl.
        unsafe { vmaxvq_u32(m) != 0 }
    }
    #[inline(always)]
    fn select(self, m: uint32x4_t, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vbslq_f32(m, a, b) }
    }
    #[inline(always)]
    fn hsum(self, v: float32x4_t) -> f32 {
        // SAFETY: see the impl.
        unsafe { vaddvq_f32(v) }
    }
    #[inline(always)]
    fn hmax(self, v: float32x4_t) -> f32 {
        // SAFETY: see the impl.
        unsafe { vmaxvq_f32(v) }
    }
}

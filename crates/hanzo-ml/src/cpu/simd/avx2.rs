//! AVX2 + FMA: `F32Vector` over 8 f32 lanes.

use super::vector::{row_kernels, F32Vector};
use std::arch::x86_64::*;

/// Proof that this CPU has AVX2 and FMA.
#[derive(Clone, Copy)]
pub(super) struct Avx2(());

impl Avx2 {
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    pub(super) unsafe fn assume() -> Self {
        Avx2(())
    }
}

row_kernels!(Avx2, "avx2", "avx2,fma");

// SAFETY (for every `unsafe` block below): an `Avx2` exists only on a CPU with AVX2 and FMA
// (see `assume`), and these intrinsics need nothing more; loads and stores are bounds-checked
// by the slice index first.
unsafe impl F32Vector for Avx2 {
    type V = __m256;
    type Mask = __m256;
    const LANES: usize = 8;

    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    fn load(self, c: &[f32]) -> __m256 {
        let c = &c[..8];
        // SAFETY: see the impl; `c` holds 8 elements.
        unsafe { _mm256_loadu_ps(c.as_ptr()) }
    }
    #[inline(always)]
    fn store(self, c: &mut [f32], v: __m256) {
        let c = &mut c[..8];
        // SAFETY: see the impl; `c` holds 8 elements.
        unsafe { _mm256_storeu_ps(c.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn load_pairs(self, c: &[f32]) -> __m256 {
        let c = &c[..4];
        // SAFETY: see the impl; `c` holds 4 elements.
        unsafe {
            let dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(c.as_ptr())), dup)
        }
    }
    #[inline(always)]
    fn swap_pairs(self, v: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_permute_ps::<0xB1>(v) }
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_div_ps(a, b) }
    }
    #[inline(always)]
    fn fma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        // `maxps` returns its second operand when either is NaN.
        // SAFETY: see the impl.
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_min_ps(a, b) }
    }
    #[inline(always)]
    fn round(self, v: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v) }
    }
    #[inline(always)]
    fn floor(self, v: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_floor_ps(v) }
    }
    #[inline(always)]
    fn pow2i(self, q: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe {
            let biased = _mm256_add_epi32(_mm256_cvtps_epi32(q), _mm256_set1_epi32(127));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(biased))
        }
    }
    #[inline(always)]
    fn ge(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cmp_ps::<_CMP_GE_OQ>(a, b) }
    }
    #[inline(always)]
    fn le(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cmp_ps::<_CMP_LE_OQ>(a, b) }
    }
    #[inline(always)]
    fn is_nan(self, a: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    fn or(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_or_ps(a, b) }
    }
    #[inline(always)]
    fn any(self, m: __m256) -> bool {
        // SAFETY: see the impl.
        unsafe { _mm256_movemask_ps(m) != 0 }
    }
    #[inline(always)]
    fn select(self, m: __m256, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_blendv_ps(b, a, m) }
    }
    #[inline(always)]
    fn hsum(self, v: __m256) -> f32 {
        // SAFETY: see the impl.
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
    }
    #[inline(always)]
    fn hmax(self, v: __m256) -> f32 {
        // SAFETY: see the impl.
        unsafe {
            let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
        }
    }
}

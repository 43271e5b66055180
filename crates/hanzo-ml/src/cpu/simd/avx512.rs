//! AVX-512F: `F32Vector` over 16 f32 lanes.

use super::vector::{row_kernels, F32Vector};
use std::arch::x86_64::*;

/// Proof that this CPU has AVX-512F.
#[derive(Clone, Copy)]
pub(super) struct Avx512(());

impl Avx512 {
    /// # Safety
    /// The CPU must have AVX-512F.
    pub(super) unsafe fn assume() -> Self {
        Avx512(())
    }
}

row_kernels!(Avx512, "avx512", "avx512f");

// SAFETY (for every `unsafe` block below): an `Avx512` exists only on a CPU with AVX-512F
// (see `assume`), and these intrinsics need nothing more; loads and stores are bounds-checked
// by the slice index first.
unsafe impl F32Vector for Avx512 {
    type V = __m512;
    type Mask = __mmask16;
    const LANES: usize = 16;

    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    fn load(self, c: &[f32]) -> __m512 {
        let c = &c[..16];
        // SAFETY: see the impl; `c` holds 16 elements.
        unsafe { _mm512_loadu_ps(c.as_ptr()) }
    }
    #[inline(always)]
    fn store(self, c: &mut [f32], v: __m512) {
        let c = &mut c[..16];
        // SAFETY: see the impl; `c` holds 16 elements.
        unsafe { _mm512_storeu_ps(c.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn load_pairs(self, c: &[f32]) -> __m512 {
        let c = &c[..8];
        // SAFETY: see the impl; `c` holds 8 elements.
        unsafe {
            let dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
            _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(c.as_ptr())))
        }
    }
    #[inline(always)]
    fn swap_pairs(self, v: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_permute_ps::<0xB1>(v) }
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_div_ps(a, b) }
    }
    #[inline(always)]
    fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        // `vmaxps` returns its second operand when either is NaN.
        // SAFETY: see the impl.
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_min_ps(a, b) }
    }
    #[inline(always)]
    fn round(self, v: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v) }
    }
    #[inline(always)]
    fn floor(self, v: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(v) }
    }
    #[inline(always)]
    fn pow2i(self, q: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe {
            let biased = _mm512_add_epi32(_mm512_cvtps_epi32(q), _mm512_set1_epi32(127));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(biased))
        }
    }
    #[inline(always)]
    fn ge(self, a: __m512, b: __m512) -> __mmask16 {
        // SAFETY: see the impl.
        unsafe { _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, b) }
    }
    #[inline(always)]
    fn le(self, a: __m512, b: __m512) -> __mmask16 {
        // SAFETY: see the impl.
        unsafe { _mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, b) }
    }
    #[inline(always)]
    fn is_nan(self, a: __m512) -> __mmask16 {
        // SAFETY: see the impl.
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    fn or(self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }
    #[inline(always)]
    fn any(self, m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn select(self, m: __mmask16, a: __m512, b: __m512) -> __m512 {
        // `mask_blend` takes its second operand where the mask is set.
        // SAFETY: see the impl.
        unsafe { _mm512_mask_blend_ps(m, b, a) }
    }
    #[inline(always)]
    fn hsum(self, v: __m512) -> f32 {
        // SAFETY: see the impl.
        unsafe { _mm512_reduce_add_ps(v) }
    }
    #[inline(always)]
    fn hmax(self, v: __m512) -> f32 {
        // SAFETY: see the impl.
        unsafe { _mm512_reduce_max_ps(v) }
    }
}

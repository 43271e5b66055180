//! AVX2 / AVX-512 pieces of the attention kernel (F16C for the f16 cache).
use super::Elem;
use half::f16;
use std::arch::x86_64::*;

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn round_f16(xs: &mut [f32]) {
    for c in xs.chunks_exact_mut(8) {
        // SAFETY: c holds 8 f32s; unaligned loads/stores.
        unsafe {
            let v = _mm256_loadu_ps(c.as_ptr());
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn mad_f16(acc: &mut [f32], v: &[f16], s: f32) {
    let sv = _mm256_set1_ps(s);
    for (a, x) in acc.chunks_exact_mut(8).zip(v.chunks_exact(8)) {
        // SAFETY: both chunks hold 8 elements.
        unsafe {
            let r = _mm256_fmadd_ps(f16::load8(x.as_ptr()), sv, _mm256_loadu_ps(a.as_ptr()));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r);
            _mm256_storeu_ps(a.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
}

/// `super::accumulate` over column chunks held in registers (64 columns, then 8 at a
/// time) while every value row passes.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn accumulate(acc: &mut [f32], vals: &[f32], ms: f32, weights: &[f32]) {
    let d = acc.len();
    assert!(d.is_multiple_of(8) && vals.len() == d * weights.len());
    let mut c = 0;
    while c + 64 <= d {
        // SAFETY: c + 64 <= d, for `acc` and every row of `vals`.
        unsafe { accumulate_chunk::<8>(acc, vals, c, ms, weights) };
        c += 64;
    }
    while c < d {
        // SAFETY: c + 8 <= d (d is a multiple of 8).
        unsafe { accumulate_chunk::<1>(acc, vals, c, ms, weights) };
        c += 8;
    }
}

/// Columns `c..c + 8 * N` of `accumulate`.
#[inline(always)]
unsafe fn accumulate_chunk<const N: usize>(
    acc: &mut [f32],
    vals: &[f32],
    c: usize,
    ms: f32,
    weights: &[f32],
) {
    let d = acc.len();
    // SAFETY: the caller guarantees c + 8N <= d; the target features come from the
    // caller's `target_feature` (inlined into it).
    unsafe {
        let a = acc.as_mut_ptr().add(c);
        let mut r: [__m256; N] = std::array::from_fn(|i| _mm256_loadu_ps(a.add(8 * i)));
        if ms != 1.0 {
            let m = _mm256_set1_ps(ms);
            for x in r.iter_mut() {
                *x = _mm256_mul_ps(*x, m);
            }
        }
        for (j, &w) in weights.iter().enumerate() {
            let v = vals.as_ptr().add(j * d + c);
            let w = _mm256_set1_ps(w);
            for (i, x) in r.iter_mut().enumerate() {
                *x = _mm256_fmadd_ps(_mm256_loadu_ps(v.add(8 * i)), w, *x);
            }
        }
        for (i, x) in r.iter().enumerate() {
            _mm256_storeu_ps(a.add(8 * i), *x);
        }
    }
}

/// `dot` with each pair of its 8-lane accumulators in one 16-lane register: every lane
/// sums the same products in the same order, and the final reduction adds the same
/// pairs, so the result is bit-identical.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn dot_avx512<K: Elem>(a: &[K], b: &[f32]) -> f32 {
    // lo = [s0 | s1], hi = [s2 | s3] in `dot`'s terms.
    let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for (x, y) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
        // SAFETY: each 32-element chunk holds two 16-lane vectors.
        unsafe {
            let (x0, y0) = (K::load16(x.as_ptr()), _mm512_loadu_ps(y.as_ptr()));
            let (x1, y1) = (
                K::load16(x.as_ptr().add(16)),
                _mm512_loadu_ps(y.as_ptr().add(16)),
            );
            lo = _mm512_fmadd_ps(x0, y0, lo);
            hi = _mm512_fmadd_ps(x1, y1, hi);
        }
    }
    // [s0 + s2 | s1 + s3], then (s0 + s2) + (s1 + s3).
    let pair = _mm512_add_ps(lo, hi);
    let x0 = _mm256_add_ps(
        _mm512_castps512_ps256(pair),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(pair))),
    );
    let t0 = _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps::<1>(x0));
    let t1 = _mm_hadd_ps(t0, t0);
    _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot<K: Elem>(a: &[K], b: &[f32]) -> f32 {
    // SAFETY: the features are enabled here.
    let t0 = unsafe { quarter_sums(a, b) };
    let t1 = _mm_hadd_ps(t0, t0);
    _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
}

/// `dot` up to its last two additions: `[t0, t1, t2, t3]`, whose sum in ggml's order is
/// `(t0 + t1) + (t2 + t3)`.
///
/// # Safety
/// AVX2, FMA and F16C are enabled in the caller.
#[inline(always)]
unsafe fn quarter_sums<K: Elem>(a: &[K], b: &[f32]) -> __m128 {
    // SAFETY: each 32-element chunk holds four 8-lane vectors; the caller enables the
    // features.
    unsafe {
        let mut s = [_mm256_setzero_ps(); 4];
        for (x, y) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
            for (j, acc) in s.iter_mut().enumerate() {
                let xv = K::load8(x.as_ptr().add(8 * j));
                let yv = _mm256_loadu_ps(y.as_ptr().add(8 * j));
                *acc = _mm256_fmadd_ps(xv, yv, *acc);
            }
        }
        let x0 = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
        _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps::<1>(x0))
    }
}

/// `out[j] = dot(keys[j·d..(j + 1)·d], q)` (`d = q.len()`), bit for bit, four keys at a time:
/// `hadd(hadd(a, b), hadd(c, e))` makes lane `i` of four keys' quarter sums `(t0 + t1) + (t2 +
/// t3)`, the pairing `dot` ends with, in three instructions instead of eight.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dots<K: Elem>(keys: &[K], q: &[f32], out: &mut [f32]) {
    let d = q.len();
    assert!(keys.len() == d * out.len());
    let whole = out.len() - out.len() % 4;
    for (j, o) in out[..whole].chunks_exact_mut(4).enumerate() {
        let key = |i: usize| &keys[(4 * j + i) * d..][..d];
        // SAFETY: the features are enabled here; the store writes the four floats of `o`.
        unsafe {
            let (a, b) = (quarter_sums(key(0), q), quarter_sums(key(1), q));
            let (c, e) = (quarter_sums(key(2), q), quarter_sums(key(3), q));
            let four = _mm_hadd_ps(_mm_hadd_ps(a, b), _mm_hadd_ps(c, e));
            _mm_storeu_ps(o.as_mut_ptr(), four);
        }
    }
    for (j, o) in out.iter_mut().enumerate().skip(whole) {
        // SAFETY: the features are enabled here.
        *o = unsafe { dot(&keys[j * d..][..d], q) };
    }
}

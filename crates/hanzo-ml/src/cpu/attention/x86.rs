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
    // SAFETY: the features are enabled here.
    unsafe { reduce_pair(lo, hi) }
}

/// The end of `dot_avx512`: `[s0 + s2 | s1 + s3]`, then `(s0 + s2) + (s1 + s3)` and `dot`'s
/// last four additions.
///
/// # Safety
/// AVX-512F is enabled in the caller.
#[inline(always)]
unsafe fn reduce_pair(lo: __m512, hi: __m512) -> f32 {
    // SAFETY: the caller enables the features.
    unsafe {
        let pair = _mm512_add_ps(lo, hi);
        let x0 = _mm256_add_ps(
            _mm512_castps512_ps256(pair),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(pair))),
        );
        let t0 = _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps::<1>(x0));
        let t1 = _mm_hadd_ps(t0, t0);
        _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
    }
}

/// `out[i][j] = dot_avx512(keys[j·d..(j + 1)·d], qs[i])` for every query `i` and key `j`,
/// bit for bit, in tiles of 4 queries by 3 keys: each pair keeps its own two accumulators
/// and the same products in the same order, but a key's vectors are loaded once for four
/// queries and a query's once for three keys (two loads per multiply-add become 7 per 12).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn scores_avx512(keys: &[f32], qs: &[&[f32]], out: &mut [[f32; super::KEY_BLOCK]]) {
    let d = qs.first().map_or(0, |q| q.len());
    let n = keys.len().checked_div(d).unwrap_or(0);
    assert!(d.is_multiple_of(32) && keys.len() == n * d && n <= super::KEY_BLOCK);
    assert!(out.len() == qs.len() && qs.iter().all(|q| q.len() == d));
    let key = |j: usize| keys[j * d..].as_ptr();
    let mut i = 0;
    while i < qs.len() {
        let four = qs.len() - i >= 4;
        let mut j = 0;
        while j < n {
            let three = n - j >= 3;
            // SAFETY: rows j.. of `keys` and queries i.. exist for the tile's counts, each
            // of d floats (asserted above); the features are enabled here.
            unsafe {
                match (four, three) {
                    (true, true) => score_tile::<4, 3>(&qs[i..], key(j), d, &mut out[i..], j),
                    (true, false) => score_tile::<4, 1>(&qs[i..], key(j), d, &mut out[i..], j),
                    (false, true) => score_tile::<1, 3>(&qs[i..], key(j), d, &mut out[i..], j),
                    (false, false) => score_tile::<1, 1>(&qs[i..], key(j), d, &mut out[i..], j),
                }
            }
            j += if three { 3 } else { 1 };
        }
        i += if four { 4 } else { 1 };
    }
}

/// Queries `qs[..Q]` times the `K` key rows from `keys` (`d` apart): `out[i][j0 + j]`.
///
/// # Safety
/// `qs` has `Q` rows and `keys` `K` rows of `d` floats, `d` a multiple of 32; AVX-512F is
/// enabled in the caller.
#[inline(always)]
unsafe fn score_tile<const Q: usize, const K: usize>(
    qs: &[&[f32]],
    keys: *const f32,
    d: usize,
    out: &mut [[f32; super::KEY_BLOCK]],
    j0: usize,
) {
    let q: [*const f32; Q] = std::array::from_fn(|i| qs[i].as_ptr());
    // SAFETY: every offset is below d within a row the caller guarantees; the caller
    // enables the features.
    unsafe {
        let mut lo = [[_mm512_setzero_ps(); K]; Q];
        let mut hi = [[_mm512_setzero_ps(); K]; Q];
        for c in (0..d).step_by(32) {
            let x: [__m512; K] = std::array::from_fn(|j| _mm512_loadu_ps(keys.add(j * d + c)));
            for i in 0..Q {
                let y = _mm512_loadu_ps(q[i].add(c));
                for j in 0..K {
                    lo[i][j] = _mm512_fmadd_ps(x[j], y, lo[i][j]);
                }
            }
            let x: [__m512; K] = std::array::from_fn(|j| _mm512_loadu_ps(keys.add(j * d + c + 16)));
            for i in 0..Q {
                let y = _mm512_loadu_ps(q[i].add(c + 16));
                for j in 0..K {
                    hi[i][j] = _mm512_fmadd_ps(x[j], y, hi[i][j]);
                }
            }
        }
        for i in 0..Q {
            for j in 0..K {
                out[i][j0 + j] = reduce_pair(lo[i][j], hi[i][j]);
            }
        }
    }
}

/// `super::accumulate` for several queries over the same value rows, `accs[i] = accs[i] ·
/// ms[i] + Σ_j weights[i][j] · vals[j]` (the first `n` rows of `d = accs[i].len()`), every
/// lane through the same operations in the same order (bit-identical), with four queries'
/// 64-column chunks in registers while each value vector is loaded once.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn accumulate_many_avx512(
    accs: &mut [&mut [f32]],
    vals: &[f32],
    ms: &[f32],
    weights: &[[f32; super::KEY_BLOCK]],
    n: usize,
) {
    let d = accs.first().map_or(0, |a| a.len());
    assert!(d.is_multiple_of(16) && n <= super::KEY_BLOCK && vals.len() >= n * d);
    assert!(accs.iter().all(|a| a.len() == d) && ms.len() == accs.len());
    assert!(weights.len() == accs.len());
    let mut i = 0;
    while i < accs.len() {
        let q = if accs.len() - i >= 4 { 4 } else { 1 };
        let mut c = 0;
        while c < d {
            let wide = d - c >= 64;
            let (a, m, w) = (&mut accs[i..], &ms[i..], &weights[i..]);
            // SAFETY: columns c..c + 64 (or + 16) are within d for every row (d is a
            // multiple of 16), queries i..i + q exist; the features are enabled here.
            unsafe {
                match (q, wide) {
                    (4, true) => value_tile::<4, 4>(a, vals, d, c, m, w, n),
                    (4, false) => value_tile::<4, 1>(a, vals, d, c, m, w, n),
                    (_, true) => value_tile::<1, 4>(a, vals, d, c, m, w, n),
                    (_, false) => value_tile::<1, 1>(a, vals, d, c, m, w, n),
                }
            }
            c += if wide { 64 } else { 16 };
        }
        i += q;
    }
}

/// Columns `c..c + 16 · C` of `accumulate_many_avx512` for queries `accs[..Q]`.
///
/// # Safety
/// As `accumulate_many_avx512` guarantees for its tiles.
// Register tiles: the indices name queries, keys and column vectors.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn value_tile<const Q: usize, const C: usize>(
    accs: &mut [&mut [f32]],
    vals: &[f32],
    d: usize,
    c: usize,
    ms: &[f32],
    weights: &[[f32; super::KEY_BLOCK]],
    n: usize,
) {
    // SAFETY: c + 16C <= d for every row; the caller enables the features.
    unsafe {
        let a: [*mut f32; Q] = std::array::from_fn(|i| accs[i].as_mut_ptr().add(c));
        let mut r: [[__m512; C]; Q] =
            std::array::from_fn(|i| std::array::from_fn(|k| _mm512_loadu_ps(a[i].add(16 * k))));
        for i in 0..Q {
            if ms[i] != 1.0 {
                let m = _mm512_set1_ps(ms[i]);
                for x in r[i].iter_mut() {
                    *x = _mm512_mul_ps(*x, m);
                }
            }
        }
        for j in 0..n {
            let v = vals.as_ptr().add(j * d + c);
            let w: [__m512; Q] = std::array::from_fn(|i| _mm512_set1_ps(weights[i][j]));
            for k in 0..C {
                let x = _mm512_loadu_ps(v.add(16 * k));
                for i in 0..Q {
                    r[i][k] = _mm512_fmadd_ps(x, w[i], r[i][k]);
                }
            }
        }
        for i in 0..Q {
            for k in 0..C {
                _mm512_storeu_ps(a[i].add(16 * k), r[i][k]);
            }
        }
    }
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

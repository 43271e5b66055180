//! Causal attention (full or sliding-window, grouped-query) over an f16 KV cache with the numerics of ggml's CPU flash attention (what
//! llama.cpp runs by default): keys and values stored as f16, each query rounded to f16,
//! f32 dot products, an online softmax, and the weighted sum of values accumulated in f16.
//! From 64 queries on (prefill), like ggml's tiled kernel, the softmax advances a block of
//! keys at a time (one rescale and one vector `exp` per block) and the sums stay in f32.
//!
//! Small quantized models are chaotic under rounding: Gemma 3 270M's next-token
//! log-probabilities move by ~0.1 when only the KV cache's rounding changes. Reproducing
//! llama.cpp's greedy output therefore means rounding where it rounds. Storing the cache in
//! f16 also halves its memory.

use half::{f16, slice::HalfFloatSliceExt};
use rayon::prelude::*;

/// Which keys a query may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    Full,
    /// Gemma / Mistral style: a query at position `p` sees keys at `p - w < j <= p`.
    Sliding(usize),
}

impl Window {
    /// First position a query at `p` can see.
    pub fn first_key(self, p: usize) -> usize {
        match self {
            Window::Full => 0,
            Window::Sliding(w) => (p + 1).saturating_sub(w),
        }
    }
}

/// One layer's keys and values, `[position][kv_head][head_dim]`, as f16.
#[derive(Default)]
pub struct KvF16 {
    k: Vec<f16>,
    v: Vec<f16>,
    len: usize,
}

impl KvF16 {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn truncate(&mut self, len: usize, row: usize) {
        self.len = self.len.min(len);
        self.k.truncate(self.len * row);
        self.v.truncate(self.len * row);
    }

    /// Appends `t` positions of `k`, `v` (`[t][kv_heads][head_dim]`, f32, rounded to f16).
    pub fn append(&mut self, k: &[f32], v: &[f32], t: usize) {
        debug_assert_eq!(k.len(), v.len());
        for (cache, new) in [(&mut self.k, k), (&mut self.v, v)] {
            let at = cache.len();
            cache.resize(at + new.len(), f16::ZERO);
            cache[at..].convert_from_f32_slice(new); // F16C, round to nearest even
        }
        self.len += t;
    }
}

/// Queries per call from which ggml uses its tiled kernel.
const TILED_FROM: usize = 64;

/// Shapes of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// `q` `[t][heads][head_dim]` (already scaled) for positions `start..start + t`, whose keys
/// are already in `kv`; returns `[t][heads][head_dim]`.
pub fn attention(q: &[f32], kv: &KvF16, start: usize, window: Window, dims: Dims) -> Vec<f32> {
    let Dims {
        heads,
        kv_heads,
        head_dim: d,
    } = dims;
    let t = q.len() / (heads * d);
    let k0 = window.first_key(start);
    let n = start + t - k0;
    // ggml switches to a tiled kernel (f32 queries, f32 value sums) from 64 queries on. That
    // path reads each key and value row once per query block, so it first widens the visible
    // ones into head-major f32 copies (f16 → f32 is exact); the per-query path (decode among
    // others) reads each row once per task and converts it as it goes.
    let f16_sums = t < TILED_FROM;
    let widen = |src: &[f16]| -> Vec<f32> {
        let mut out = vec![0f32; kv_heads * n * d];
        out.par_chunks_mut(n * d).enumerate().for_each(|(h, o)| {
            for (j, row) in o.chunks_mut(d).enumerate() {
                let s = ((k0 + j) * kv_heads + h) * d;
                src[s..s + d].convert_to_f32_slice(row); // F16C, 8 at a time
            }
        });
        out
    };
    let wide = (!f16_sums).then(|| (widen(&kv.k), widen(&kv.v)));
    let g = heads / kv_heads;
    let call = Call {
        q,
        kv,
        wide: wide.as_ref().map(|(k, v)| (k.as_slice(), v.as_slice())),
        start,
        k0,
        n,
        window,
        dims,
    };
    let row = heads * d;
    let mut out = vec![0f32; q.len()];
    if t > QUERY_POSITIONS {
        // A task takes QUERY_POSITIONS positions and every head.
        out.par_chunks_mut(QUERY_POSITIONS * row)
            .enumerate()
            .for_each(|(blk, out)| {
                let i0 = blk * QUERY_POSITIONS;
                let positions = i0..i0 + out.len() / row;
                for kh in 0..kv_heads {
                    let heads = kh * g..(kh + 1) * g;
                    call.attend(positions.clone(), heads.clone(), |i, h, o| {
                        let at = (i - i0) * row + h * d;
                        out[at..at + d].copy_from_slice(o)
                    });
                }
            });
        return out;
    }
    // Decode (a few positions): one task per KV head, its query heads split so that every
    // thread of the decode team has one (rayon's wake-ups would cost more than the work).
    let team = hanzo_ml::cpu::team::global();
    let split = team.threads().div_ceil(kv_heads).clamp(1, g);
    let tasks: Vec<std::ops::Range<usize>> = (0..kv_heads)
        .flat_map(|kh| {
            (0..split).map(move |s| kh * g + s * g / split..kh * g + (s + 1) * g / split)
        })
        .collect();
    // Each task's rows, `[position][its heads][head_dim]`, then scattered into `out`.
    let rows: Vec<std::sync::Mutex<Vec<f32>>> = tasks.iter().map(|_| Default::default()).collect();
    let run = |i: usize| {
        let mut r = Vec::with_capacity(t * tasks[i].len() * d);
        call.attend(0..t, tasks[i].clone(), |_, _, o| r.extend_from_slice(o));
        *rows[i].lock().unwrap_or_else(|e| e.into_inner()) = r;
    };
    if !team.run(tasks.len(), &run) {
        (0..tasks.len()).for_each(run);
    }
    for (heads, r) in tasks.iter().zip(rows) {
        let r = r.into_inner().unwrap_or_else(|e| e.into_inner());
        for (k, o) in r.chunks_exact(d).enumerate() {
            let (i, h) = (k / heads.len(), heads.start + k % heads.len());
            out[i * row + h * d..][..d].copy_from_slice(o);
        }
    }
    out
}

/// What every attention task of one call shares: scaled queries `[t][heads][head_dim]`, the
/// cache, and for the tiled path the visible keys and values widened to f32, head-major
/// (`[kv_head][n][head_dim]`, from position `k0`).
struct Call<'a> {
    q: &'a [f32],
    kv: &'a KvF16,
    wide: Option<(&'a [f32], &'a [f32])>,
    start: usize,
    k0: usize,
    n: usize,
    window: Window,
    dims: Dims,
}

impl Call<'_> {
    /// Attention of query heads `heads` (all of one KV head's group, or part of it) at
    /// positions `positions` of this call; hands each `(position, head, output row)` to
    /// `emit`, position by position and head by head within each. The queries of one KV head pass over its keys together, so each key and value
    /// row comes from memory once per task and from L1 for the rest; each query's arithmetic
    /// does not depend on which others share its task.
    fn attend(
        &self,
        positions: std::ops::Range<usize>,
        heads: std::ops::Range<usize>,
        mut emit: impl FnMut(usize, usize, &[f32]),
    ) {
        let Dims {
            heads: n_heads,
            kv_heads,
            head_dim: d,
        } = self.dims;
        let kh = heads.start / (n_heads / kv_heads);
        let f16_sums = self.wide.is_none();
        let mut group: Vec<(usize, usize, Query)> = positions
            .flat_map(|i| heads.clone().map(move |h| (i, h)))
            .map(|(i, h)| {
                let p = self.start + i;
                let at = (i * n_heads + h) * d;
                let first = self.window.first_key(p).max(self.k0) - self.k0;
                let keys = first..p - self.k0 + 1;
                (i, h, Query::new(&self.q[at..at + d], keys, f16_sums))
            })
            .collect();
        let from = group.iter().map(|q| q.2.keys.start).min().unwrap_or(0);
        let to = group.iter().map(|q| q.2.keys.end).max().unwrap_or(0);
        match self.wide {
            None => {
                for j in from..to {
                    let at = ((self.k0 + j) * kv_heads + kh) * d;
                    let (key, val) = (&self.kv.k[at..at + d], &self.kv.v[at..at + d]);
                    for (_, _, q) in group.iter_mut().filter(|q| q.2.keys.contains(&j)) {
                        q.step(key, val);
                    }
                }
            }
            Some((keys, vals)) => {
                let rows = kh * self.n * d..(kh + 1) * self.n * d;
                let (keys, vals) = (&keys[rows.clone()], &vals[rows]);
                for j0 in (from..to).step_by(KEY_BLOCK) {
                    let block = j0..(j0 + KEY_BLOCK).min(to);
                    for (_, _, q) in group.iter_mut() {
                        q.steps_f32(keys, vals, block.clone());
                    }
                }
            }
        }
        let mut row = vec![0f32; d];
        for (i, h, q) in &group {
            q.finish(&mut row);
            emit(*i, *h, &row);
        }
    }
}

/// Query positions per attention task: with 4 query heads per KV head, 16 queries whose
/// vectors and sums (2 KB each for head_dim 256) stay in L1 beside the shared key row.
const QUERY_POSITIONS: usize = 4;

/// Keys per block in the f32-sum path: the block's weights come from one vector `exp`, and a
/// query's running sums stay in registers across the block's values.
const KEY_BLOCK: usize = 16;

/// One query's online softmax over its keys, accumulating values in f16 key by key (`step`,
/// ggml's per-query kernel) or in f32 a block of keys at a time (`steps_f32`, its tiled
/// kernel).
struct Query {
    q: Vec<f32>,
    keys: std::ops::Range<usize>,
    max: f32,
    sum: f32,
    acc: Vec<f32>,
}

impl Query {
    fn new(q: &[f32], keys: std::ops::Range<usize>, f16_sums: bool) -> Self {
        let mut q = q.to_vec();
        if f16_sums {
            round_f16(&mut q);
        }
        let acc = vec![0f32; q.len()];
        Self {
            q,
            keys,
            max: f32::NEG_INFINITY,
            sum: 0.0,
            acc,
        }
    }

    /// The online-softmax bookkeeping for one more score: returns the factor the value sums
    /// are first scaled by (1 where the max did not move) and the weight of this key's value.
    fn weigh(&mut self, s: f32) -> (f32, f32) {
        let (mut ms, mut vs) = (1f32, 1f32);
        if s > self.max {
            ms = (self.max - s).exp();
            self.max = s;
        } else {
            vs = (s - self.max).exp();
        }
        self.sum = self.sum * ms + vs;
        (ms, vs)
    }

    /// One more key, value sums rounded to f16.
    fn step(&mut self, key: &[f16], val: &[f16]) {
        let (ms, vs) = self.weigh(dot(key, &self.q));
        // Scaling by exactly 1 would change nothing (the sums are already f16).
        if ms != 1.0 {
            scale(&mut self.acc, ms, true);
        }
        mad_f16(&mut self.acc, val, vs);
    }

    /// The keys of `block` this query sees, together: their scores, one rescale of the sums
    /// if the block raises the running max, their weights by one vector `exp`, and the value
    /// sums with `acc` held in registers (f32 throughout).
    fn steps_f32(&mut self, keys: &[f32], vals: &[f32], block: std::ops::Range<usize>) {
        let d = self.q.len();
        let lo = block.start.max(self.keys.start);
        let hi = block.end.min(self.keys.end);
        if lo >= hi {
            return;
        }
        let n = hi - lo;
        let mut scores = [0f32; KEY_BLOCK];
        for (s, j) in scores.iter_mut().zip(lo..hi) {
            *s = dot(&keys[j * d..(j + 1) * d], &self.q);
        }
        let block_max = scores[..n]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let mut ms = 1.0;
        if block_max > self.max {
            ms = (self.max - block_max).exp();
            self.max = block_max;
        }
        for s in &mut scores[..n] {
            *s -= self.max;
        }
        let mut weights = [0f32; KEY_BLOCK];
        hanzo_ml::cpu::simd::exp_f32(&scores[..n], &mut weights[..n]);
        self.sum = self.sum * ms + weights[..n].iter().sum::<f32>();
        accumulate(&mut self.acc, &vals[lo * d..hi * d], ms, &weights[..n]);
    }

    fn finish(&self, out: &mut [f32]) {
        let inv = 1.0 / self.sum;
        for (o, a) in out.iter_mut().zip(&self.acc) {
            *o = a * inv;
        }
    }
}

/// AVX2, FMA and F16C: what the f16/f32 kernels here and in `numerics` need (the workspace's
/// one feature detection, which `HANZO_ISA` caps).
#[cfg(target_arch = "x86_64")]
pub(super) fn has_f16c() -> bool {
    hanzo_ml::cpu::features::isa() >= hanzo_ml::cpu::features::Isa::Avx2
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    hanzo_ml::cpu::features::isa() >= hanzo_ml::cpu::features::Isa::Avx512
}

/// Rounds every value to the nearest f16 (ties to even), kept as f32.
pub fn round_f16(xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() && xs.len().is_multiple_of(8) {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above).
        unsafe { x86::round_f16(xs) };
        return;
    }
    for x in xs {
        *x = f16::from_f32(*x).to_f32();
    }
}

/// `acc = acc * s` element-wise, rounded to f16 if `f16`.
fn scale(acc: &mut [f32], s: f32, f16: bool) {
    for a in acc.iter_mut() {
        *a *= s;
    }
    if f16 {
        round_f16(acc);
    }
}

/// `acc = fma(v, s, acc)` element-wise, rounded to f16.
fn mad_f16(acc: &mut [f32], v: &[f16], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() && acc.len().is_multiple_of(8) {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { x86::mad_f16(acc, v, s) };
        return;
    }
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = f16::from_f32(x.to_f32().mul_add(s, *a)).to_f32();
    }
}

/// `acc = acc * ms + Σ_j weights[j] · vals[j]` (value rows in order, fused multiply-adds).
fn accumulate(acc: &mut [f32], vals: &[f32], ms: f32, weights: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() && acc.len().is_multiple_of(8) {
        // SAFETY: the CPU supports avx2/fma (checked above); `vals` holds one row per weight.
        unsafe { x86::accumulate(acc, vals, ms, weights) };
        return;
    }
    accumulate_portable(acc, vals, ms, weights);
}

/// `accumulate` one element at a time (the same roundings as the x86 kernel).
fn accumulate_portable(acc: &mut [f32], vals: &[f32], ms: f32, weights: &[f32]) {
    if ms != 1.0 {
        scale(acc, ms, false);
    }
    for (v, &w) in vals.chunks_exact(acc.len()).zip(weights) {
        for (a, &x) in acc.iter_mut().zip(v) {
            *a = x.mul_add(w, *a);
        }
    }
}

/// A key or value element: f32 in the widened copies, f16 in the cache.
trait Elem: Copy {
    fn widen(self) -> f32;
    /// Eight elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// `p..p + 8` is readable and the CPU has AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    /// Sixteen elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// `p..p + 16` is readable and the CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
}

impl Elem for f32 {
    fn widen(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller guarantees 8 readable floats and AVX.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller guarantees 16 readable floats and AVX-512F.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }
}

impl Elem for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable halves (16 bytes) and F16C.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 16 readable halves (32 bytes) and AVX-512F.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
}

/// f32 dot product summed in ggml's AVX2 order (4×8 lanes, pairwise reduction), so scores
/// are bit-identical to llama.cpp's. Keys are widened exactly, so f16 and f32 keys of the
/// same values give the same score.
fn dot<K: Elem>(a: &[K], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() && a.len().is_multiple_of(32) {
        if has_avx512() {
            // SAFETY: the CPU supports avx512f (checked above); lengths are equal.
            return unsafe { x86::dot_avx512(a, b) };
        }
        // SAFETY: the CPU supports avx2/fma (checked above); lengths are equal.
        return unsafe { x86::dot(a, b) };
    }
    a.iter().zip(b).map(|(x, y)| x.widen() * y).sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
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
        let mut s = [_mm256_setzero_ps(); 4];
        for (x, y) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
            for (j, acc) in s.iter_mut().enumerate() {
                // SAFETY: each 32-element chunk holds four 8-lane vectors.
                unsafe {
                    let xv = K::load8(x.as_ptr().add(8 * j));
                    let yv = _mm256_loadu_ps(y.as_ptr().add(8 * j));
                    *acc = _mm256_fmadd_ps(xv, yv, *acc);
                }
            }
        }
        let x0 = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
        let t0 = _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps::<1>(x0));
        let t1 = _mm_hadd_ps(t0, t0);
        _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
    }

    /// Softmax attention in f64 over the cache's f16 keys and values.
    fn naive(q: &[f32], kv: &KvF16, start: usize, window: Window, dims: Dims) -> Vec<f32> {
        let Dims {
            heads,
            kv_heads,
            head_dim: d,
        } = dims;
        let t = q.len() / (heads * d);
        let mut out = vec![0f32; q.len()];
        for i in 0..t {
            let p = start + i;
            for h in 0..heads {
                let kh = h / (heads / kv_heads);
                let qv = &q[(i * heads + h) * d..][..d];
                let at = |c: &[f16], j: usize, e: usize| c[(j * kv_heads + kh) * d + e].to_f64();
                let keys: Vec<usize> = (window.first_key(p)..=p).collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&j| (0..d).map(|e| qv[e] as f64 * at(&kv.k, j, e)).sum())
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = w.iter().sum();
                for e in 0..d {
                    let v: f64 = keys.iter().zip(&w).map(|(&j, w)| w * at(&kv.v, j, e)).sum();
                    out[(i * heads + h) * d + e] = (v / total) as f32;
                }
            }
        }
        out
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn wide_kernels_round_like_the_narrow_ones() {
        use hanzo_ml::cpu::features::{test_kernels_at, Isa};
        if !test_kernels_at(Isa::Avx2, "attention dot products") {
            return;
        }
        let (a, b) = (values(256, 7), values(256, 8));
        let a16: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
        let a16_wide: Vec<f32> = a16.iter().map(|x| x.to_f32()).collect();
        // SAFETY: AVX2/FMA/F16C checked above.
        let narrow = unsafe { x86::dot(&a16_wide, &b) };
        // Keys read from the f16 cache score exactly like their widened copies.
        // SAFETY: as above.
        assert_eq!(narrow.to_bits(), unsafe { x86::dot(&a16, &b) }.to_bits());
        if test_kernels_at(Isa::Avx512, "attention dot products") {
            // SAFETY: AVX-512F checked on the line above.
            unsafe {
                assert_eq!(narrow.to_bits(), x86::dot_avx512(&a16_wide, &b).to_bits());
                assert_eq!(narrow.to_bits(), x86::dot_avx512(&a16, &b).to_bits());
            }
        }
        let mut wide = b.clone();
        // SAFETY: as above.
        unsafe { x86::mad_f16(&mut wide, &a16, 0.37) };
        let scalar: Vec<f32> = b
            .iter()
            .zip(&a16_wide)
            .map(|(b, a)| f16::from_f32(a.mul_add(0.37, *b)).to_f32())
            .collect();
        assert_eq!(wide, scalar);
    }

    #[test]
    fn blocked_softmax_matches_f64_softmax() {
        // head_dim 64 takes 64-column register chunks on x86, 72 adds an 8-column one, 96
        // with 2 KV heads both; the window cuts blocks of keys at arbitrary offsets.
        for d in [64, 72, 96] {
            for window in [Window::Full, Window::Sliding(20)] {
                let dims = Dims {
                    heads: 4,
                    kv_heads: 2,
                    head_dim: d,
                };
                let (n, row) = (100, 2 * d);
                let mut kv = KvF16::default();
                kv.append(&values(n * row, 4), &values(n * row, 5), n);
                // Scores spread over ~±20 so the max moves inside and across key blocks.
                let q: Vec<f32> = values(n * 4 * d, 6).iter().map(|x| x * 3.0).collect();
                let got = attention(&q, &kv, 0, window, dims);
                let want = naive(&q, &kv, 0, window, dims);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5,
                        "d {d} {window:?} element {i}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn register_chunked_value_sums_match_the_portable_loop() {
        use hanzo_ml::cpu::features::{test_kernels_at, Isa};
        if !test_kernels_at(Isa::Avx2, "attention value sums") {
            return;
        }
        for d in [64, 72, 200] {
            let acc0 = values(d, 9);
            let vals = values(d * 5, 10);
            let weights = [0.5, 0.25, 1.0, 0.125, 0.75];
            let mut wide = acc0.clone();
            // SAFETY: AVX2/FMA checked above; vals holds 5 rows of d.
            unsafe { x86::accumulate(&mut wide, &vals, 0.5, &weights) };
            let mut want = acc0.clone();
            accumulate_portable(&mut want, &vals, 0.5, &weights);
            assert_eq!(wide, want, "d {d}");
        }
    }

    #[test]
    fn grouped_queries_give_each_query_its_own_softmax() {
        let dims = Dims {
            heads: 4,
            kv_heads: 2,
            head_dim: 32,
        };
        let row = dims.kv_heads * dims.head_dim;
        // Prefill from an empty cache past the tiled threshold, then a short continuation
        // (f16 sums) and a single decode step, with full and sliding windows.
        for (start, t) in [(0, 70), (70, 9), (79, 1)] {
            for window in [Window::Full, Window::Sliding(16)] {
                let n = start + t;
                let mut kv = KvF16::default();
                let k = values(n * row, 1);
                let v = values(n * row, 2);
                kv.append(&k, &v, n);
                let q: Vec<f32> = values(t * dims.heads * dims.head_dim, 3 + t as u64)
                    .iter()
                    .map(|x| x * 2.0)
                    .collect();
                let got = attention(&q, &kv, start, window, dims);
                let want = naive(&q, &kv, start, window, dims);
                // f16 rounding of queries and (below 64 queries) of the value sums.
                let tol = if t < TILED_FROM { 5e-3 } else { 1e-5 };
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= tol,
                        "start {start} t {t} {window:?} element {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

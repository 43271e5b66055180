//! Attention over the paged KV store with the numerics of ggml's CPU flash attention (what
//! llama.cpp runs by default): keys and values stored as f16, each query rounded to f16, f32
//! dot products, an online softmax, and the weighted sum of values accumulated in f16. From
//! 64 queries on (prefill), like ggml's tiled kernel, the softmax advances a block of keys at
//! a time (one rescale and one vector `exp` per block) and the sums stay in f32.
//!
//! Small quantized models are chaotic under rounding: Gemma 3 270M's next-token
//! log-probabilities move by ~0.1 when only the KV cache's rounding changes. Reproducing
//! llama.cpp's greedy output therefore means rounding where it rounds.

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "x86_64")]
use crate::cpu::features;
use crate::cpu::par::for_each_chunk;
use crate::kv::{Heads, KvDtype, LayerView, Mask};
use half::f16;

/// Queries per call from which ggml uses its tiled kernel.
const TILED_FROM: usize = 64;

/// `q` `[t][heads][head_dim]` (already scaled) at positions `start..start + t`, whose keys
/// and values `kv` holds up to `start + t`; returns `[t][heads][head_dim]`. The queries end
/// a run of `run` positions (at least `t`; more where the run's first positions were
/// computed before, as with a cached prefix), and the kernel follows the run's length: each
/// query gets what it gets when the whole run is computed at once.
pub fn attend(
    q: &[f32],
    kv: LayerView<'_>,
    start: usize,
    run: usize,
    mask: Mask,
    dims: Heads,
) -> Vec<f32> {
    let Heads {
        heads,
        kv_heads,
        head_dim: d,
    } = dims;
    let t = q.len() / (heads * d);
    let end = start + t;
    let k0 = mask.keys(start, end).start;
    let n = end - k0;
    // ggml switches to a tiled kernel (f32 queries, f32 value sums) from 64 queries on. That
    // path reads each key and value row once per query block, so it first widens the visible
    // ones into head-major f32 copies (f16 → f32 is exact); the per-query path (decode among
    // others) reads each row once per task and converts it as it goes.
    // A Q8_0 cache is always read through the widened copies (dequantized once per call).
    let f16_sums = run.max(t) < TILED_FROM && kv.dtype() == KvDtype::F16;
    let widen = |value: bool| -> Vec<f32> {
        let mut out = vec![0f32; kv_heads * n * d];
        for_each_chunk(&mut out, n * d, &|h, o| {
            for (j, row) in o.chunks_mut(d).enumerate() {
                if value {
                    kv.value_into(k0 + j, h * d, row); // F16C, 8 at a time
                } else {
                    kv.key_into(k0 + j, h * d, row);
                }
            }
        });
        out
    };
    let wide = (!f16_sums).then(|| (widen(false), widen(true)));
    let g = heads / kv_heads;
    let call = Call {
        q,
        kv,
        wide: wide.as_ref().map(|(k, v)| (k.as_slice(), v.as_slice())),
        start,
        end,
        k0,
        n,
        mask,
        dims,
    };
    let row = heads * d;
    let mut out = vec![0f32; q.len()];
    if t > QUERY_POSITIONS {
        // A task takes QUERY_POSITIONS positions and every head.
        for_each_chunk(&mut out, QUERY_POSITIONS * row, &|blk, out| {
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
    let team = crate::cpu::team::global();
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
    kv: LayerView<'a>,
    wide: Option<(&'a [f32], &'a [f32])>,
    start: usize,
    end: usize,
    k0: usize,
    n: usize,
    mask: Mask,
    dims: Heads,
}

impl Call<'_> {
    /// Attention of query heads `heads` (all of one KV head's group, or part of it) at
    /// positions `positions` of this call; hands each `(position, head, output row)` to
    /// `emit`, position by position and head by head within each. The queries of one KV
    /// head pass over its keys together, so each key and value row comes from memory once
    /// per task and from L1 for the rest; each query's arithmetic does not depend on which
    /// others share its task.
    fn attend(
        &self,
        positions: std::ops::Range<usize>,
        heads: std::ops::Range<usize>,
        mut emit: impl FnMut(usize, usize, &[f32]),
    ) {
        let Heads {
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
                let visible = self.mask.keys(p, self.end);
                let keys = visible.start.max(self.k0) - self.k0..visible.end - self.k0;
                (i, h, Query::new(&self.q[at..at + d], keys, f16_sums))
            })
            .collect();
        let from = group.iter().map(|q| q.2.keys.start).min().unwrap_or(0);
        let to = group.iter().map(|q| q.2.keys.end).max().unwrap_or(0);
        match self.wide {
            None => {
                for j in from..to {
                    let (Some(key), Some(val)) = (
                        self.kv.key_f16(self.k0 + j, kh * d, d),
                        self.kv.value_f16(self.k0 + j, kh * d, d),
                    ) else {
                        unreachable!("only an f16 cache is read in place (see `attend`)")
                    };
                    for (_, _, q) in group.iter_mut().filter(|q| q.2.keys.contains(&j)) {
                        q.step(key, val);
                    }
                }
            }
            Some((keys, vals)) => {
                let rows = kh * self.n * d..(kh + 1) * self.n * d;
                let (keys, vals) = (&keys[rows.clone()], &vals[rows]);
                // Blocks aligned to absolute key positions, as ggml's tiles are: a query's
                // sums then do not depend on which queries share its call or task.
                let first = (self.k0 + from) / KEY_BLOCK * KEY_BLOCK;
                let mut blocked = Blocked::default();
                for a0 in (first..self.k0 + to).step_by(KEY_BLOCK) {
                    let block = a0.max(self.k0) - self.k0..(a0 + KEY_BLOCK - self.k0).min(to);
                    // The queries that see the whole block go together (most of them, off
                    // the causal diagonal and the window's edge); each other one alone.
                    let (whole, part): (Vec<&mut Query>, Vec<&mut Query>) = group
                        .iter_mut()
                        .map(|(_, _, q)| q)
                        .partition(|q| q.keys.start <= block.start && block.end <= q.keys.end);
                    blocked.steps_f32(whole, keys, vals, block.clone());
                    for q in part {
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
        dots(&keys[lo * d..hi * d], &self.q, &mut scores[..n]);
        let mut weights = [0f32; KEY_BLOCK];
        let ms = self.weigh_block(&mut scores[..n], &mut weights[..n]);
        accumulate(&mut self.acc, &vals[lo * d..hi * d], ms, &weights[..n]);
    }

    /// The softmax step of `steps_f32` for a block's `scores`: moves the running max and sum,
    /// writes the keys' weights, returns the factor the value sums are first scaled by.
    fn weigh_block(&mut self, scores: &mut [f32], weights: &mut [f32]) -> f32 {
        let block_max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut ms = 1.0;
        if block_max > self.max {
            ms = (self.max - block_max).exp();
            self.max = block_max;
        }
        for s in scores.iter_mut() {
            *s -= self.max;
        }
        crate::cpu::simd::exp_f32(scores, weights);
        self.sum = self.sum * ms + weights.iter().sum::<f32>();
        ms
    }

    fn finish(&self, out: &mut [f32]) {
        let inv = 1.0 / self.sum;
        for (o, a) in out.iter_mut().zip(&self.acc) {
            *o = a * inv;
        }
    }
}

/// `Query::steps_f32` for queries that all see every key of a block, with the same floats
/// as each one's own: on AVX-512 their scores and value sums are computed together (see
/// `x86::scores_avx512`); the buffers are reused from block to block.
#[derive(Default)]
// Only the x86 kernels take the buffers.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Blocked {
    scores: Vec<[f32; KEY_BLOCK]>,
    weights: Vec<[f32; KEY_BLOCK]>,
    ms: Vec<f32>,
}

impl Blocked {
    fn steps_f32(
        &mut self,
        qs: Vec<&mut Query>,
        keys: &[f32],
        vals: &[f32],
        block: std::ops::Range<usize>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if qs.len() > 1 && has_avx512() && qs[0].q.len().is_multiple_of(32) {
            return self.steps_avx512(qs, keys, vals, block);
        }
        for q in qs {
            q.steps_f32(keys, vals, block.clone());
        }
    }

    /// `steps_f32` through the AVX-512 tiles, which the caller checked this CPU has, for
    /// more than one query of a head size that is a multiple of 32.
    #[cfg(target_arch = "x86_64")]
    fn steps_avx512(
        &mut self,
        mut qs: Vec<&mut Query>,
        keys: &[f32],
        vals: &[f32],
        block: std::ops::Range<usize>,
    ) {
        let (d, n, count) = (qs[0].q.len(), block.len(), qs.len());
        self.scores.resize(count, [0.0; KEY_BLOCK]);
        self.weights.resize(count, [0.0; KEY_BLOCK]);
        self.ms.resize(count, 1.0);
        let rows = block.start * d..block.end * d;
        let q: Vec<&[f32]> = qs.iter().map(|q| q.q.as_slice()).collect();
        // SAFETY: AVX-512F per the caller; every query has d floats (d a multiple of 32), the
        // block at most KEY_BLOCK rows of d, as the kernel asserts.
        unsafe { x86::scores_avx512(&keys[rows.clone()], &q, &mut self.scores) };
        for (i, q) in qs.iter_mut().enumerate() {
            let (s, w) = (&mut self.scores[i][..n], &mut self.weights[i][..n]);
            self.ms[i] = q.weigh_block(s, w);
        }
        let mut accs: Vec<&mut [f32]> = qs.iter_mut().map(|q| q.acc.as_mut_slice()).collect();
        // SAFETY: AVX-512F per the caller; each sum has d floats, `vals` the block's n rows,
        // as the kernel asserts.
        unsafe { x86::accumulate_many_avx512(&mut accs, &vals[rows], &self.ms, &self.weights, n) };
    }
}

/// AVX2, FMA and F16C: what the f16/f32 kernels here need (the one feature detection,
/// which `HANZO_ISA` caps).
#[cfg(target_arch = "x86_64")]
fn has_f16c() -> bool {
    features::isa() >= features::Isa::Avx2
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    features::isa() >= features::Isa::Avx512
}

/// Rounds every value to the nearest f16 (ties to even), kept as f32.
pub fn round_f16(xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() && xs.len().is_multiple_of(8) {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above).
        unsafe { x86::round_f16(xs) };
        return;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if xs.len().is_multiple_of(4) {
        return simd128::round_f16(xs);
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
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if acc.len().is_multiple_of(8) {
        return simd128::mad_f16(acc, v, s);
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
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if acc.len().is_multiple_of(16) {
        return simd128::accumulate(acc, vals, ms, weights);
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
    /// Eight elements from the front of `c` as two vectors of four f32 lanes.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn widen8(c: &[Self]) -> (std::arch::wasm32::v128, std::arch::wasm32::v128);
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
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn widen8(c: &[Self]) -> (std::arch::wasm32::v128, std::arch::wasm32::v128) {
        use crate::cpu::simd::simd128::load4;
        (load4(c), load4(&c[4..]))
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
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn widen8(c: &[Self]) -> (std::arch::wasm32::v128, std::arch::wasm32::v128) {
        crate::cpu::simd::simd128::widen_f16x8(c)
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
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if a.len().is_multiple_of(32) {
        return simd128::dot(a, b);
    }
    a.iter().zip(b).map(|(x, y)| x.widen() * y).sum()
}

/// `out[j] = dot(keys[j·d..(j + 1)·d], q)` (`d = q.len()`), the same floats as `dot` for
/// each key.
fn dots<K: Elem>(keys: &[K], q: &[f32], out: &mut [f32]) {
    let d = q.len();
    #[cfg(target_arch = "x86_64")]
    if has_f16c() && !has_avx512() && d.is_multiple_of(32) {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); `dots` checks the lengths.
        unsafe { x86::dots(keys, q, out) };
        return;
    }
    for (o, key) in out.iter_mut().zip(keys.chunks_exact(d)) {
        *o = dot(key, q);
    }
}

#[cfg(test)]
mod tests;

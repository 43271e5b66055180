//! AVX2 + FMA + F16C prefill for F16 and BF16 weights against f32 activations (not rounded to
//! the weight type, unlike decode).
//!
//! A task widens 256 columns of its panel of weight rows at a time to f32, packed in blocks
//! of 16 rows column by column (`[block][column][16]`, a GEMM's packed form). The tile then
//! multiplies two vectors of weights (16 rows at one column) by 6 broadcast activations: 12
//! FMAs per 2 weight loads, so the panel, read from L2, costs 64 bytes per 12 FMAs. A
//! dot-product form (4 weight rows by 3 activation rows, read as stored) needs 4 weight loads
//! per 12 FMAs, waits on L2 at large `k`, and sums across lanes at the end of every piece;
//! F16's `vcvtph2ps` in its inner loop also made it wait (docs/QUANTIZATION.md, "Float
//! weights").
//!
//! Every output sums along `k` in order (one f32 FMA chain per piece of 256 columns, the
//! pieces added up): no sums across lanes.

use super::float_x86::Widen;
use crate::quantized::format::{HalfBF16, HalfF16};
use std::arch::x86_64::*;

/// Weight rows per packed block: two vectors of 8 (one of 16 in the AVX-512 form).
pub(super) const BLOCK: usize = 16;
/// Activation rows per tile: 12 accumulators, 2 weights and a broadcast of the 16 registers.
const TILE_C: usize = 6;
/// Columns packed and multiplied at a time: a tile's block (16 KiB) and activations (6 KiB)
/// stay in L1, the task's packed panel in L2, and each pass over all activation rows reads
/// 1 KiB of each for `2 · rows · 256` flops per row, whatever `k` is.
const PIECE: usize = 256;

/// How a panel multiplies its packed blocks by the activations: at most `MOST` activation
/// rows a strip. Every form sums each output along `k` in the same order (one FMA chain per
/// piece), so the AVX2 and AVX-512 forms give the same bits.
pub(super) trait Strips {
    const MOST: usize;
    /// Up to `c` activation rows (`1..=MOST`) from `at.j` on, as `strip` below; returns how
    /// many it took (at least one).
    ///
    /// # Safety
    /// The form's features are enabled.
    unsafe fn strip(c: usize, packed: &[f32], x: &[f32], at: Strip, out: &mut [f32]) -> usize;
}

/// The AVX2 form: `tile` below.
struct Avx2Strips;

impl Strips for Avx2Strips {
    const MOST: usize = TILE_C;
    #[inline(always)]
    unsafe fn strip(c: usize, packed: &[f32], x: &[f32], at: Strip, out: &mut [f32]) -> usize {
        // SAFETY: the caller enables AVX2 and FMA.
        unsafe {
            match c {
                6 => strip::<6>(packed, x, at, out),
                5 => strip::<5>(packed, x, at, out),
                4 => strip::<4>(packed, x, at, out),
                3 => strip::<3>(packed, x, at, out),
                2 => strip::<2>(packed, x, at, out),
                _ => strip::<1>(packed, x, at, out),
            }
        }
        c.clamp(1, TILE_C)
    }
}

/// `w [rows, k]` times `x [m, k]` transposed, written as `out [m, rows]`.
///
/// # Safety
/// AVX2, FMA and F16C are enabled, and what `S` needs.
#[inline(always)]
pub(super) unsafe fn panel<H: Widen, S: Strips>(
    w: &[H],
    k: usize,
    x: &[f32],
    m: usize,
    out: &mut [f32],
) {
    assert!(k > 0 && w.len().is_multiple_of(k) && x.len() == m * k);
    let rows = w.len() / k;
    assert!(out.len() == m * rows);
    thread_local! {
        static PACKED: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    }
    // Taken out and put back rather than borrowed in a closure, which might not inherit the
    // caller's target features; `pack` writes every element it hands on, padding included.
    let mut packed = PACKED.take();
    packed.resize(rows.div_ceil(BLOCK) * BLOCK * PIECE.min(k), 0.0);
    // SAFETY: the caller enables the features; the shapes are checked above.
    unsafe {
        for k0 in (0..k).step_by(PIECE) {
            let len = PIECE.min(k - k0);
            let packed = &mut packed[..rows.div_ceil(BLOCK) * BLOCK * len];
            pack(w, k, k0, len, rows, packed);
            let mut j = 0;
            while j < m {
                let c = S::MOST.min(m - j);
                let at = Strip {
                    k,
                    k0,
                    len,
                    rows,
                    j,
                };
                j += S::strip(c, packed, x, at, out);
            }
        }
    }
    PACKED.set(packed);
}

/// Widens columns `k0..k0 + len` of `w [rows, k]` into `packed [ceil(rows / 16)][len][16]`,
/// whose rows past `rows` are zero.
///
/// # Safety
/// AVX2 and F16C are enabled.
#[inline(always)]
unsafe fn pack<H: Widen>(
    w: &[H],
    k: usize,
    k0: usize,
    len: usize,
    rows: usize,
    packed: &mut [f32],
) {
    assert!(k0 + len <= k && w.len() == rows * k);
    assert!(packed.len() == rows.div_ceil(BLOCK) * BLOCK * len);
    let whole = len - len % 8;
    // Eight rows at a time: eight columns of each, transposed into eight columns of eight.
    for r0 in (0..rows.div_ceil(BLOCK) * BLOCK).step_by(8) {
        let live = 8.min(rows.saturating_sub(r0));
        let base = (r0 / BLOCK) * BLOCK * len + r0 % BLOCK;
        for c0 in (0..whole).step_by(8) {
            // SAFETY: each widen reads 8 elements at `k0 + c0 + 8 <= k0 + len <= k` of a row
            // inside `w`; each store writes 8 at `base + (c0 + t) * 16 + 8 <= packed.len()`.
            unsafe {
                let mut v = [_mm256_setzero_ps(); 8];
                for (i, v) in v.iter_mut().enumerate().take(live) {
                    *v = H::widen8(&w[(r0 + i) * k + k0 + c0..][..8]);
                }
                for (t, c) in transpose8(v).iter().enumerate() {
                    _mm256_storeu_ps(packed[base + (c0 + t) * BLOCK..][..8].as_mut_ptr(), *c);
                }
            }
        }
        for c in whole..len {
            for i in 0..8 {
                packed[base + c * BLOCK + i] = match i < live {
                    true => w[(r0 + i) * k + k0 + c].to_f32(),
                    false => 0.0,
                };
            }
        }
    }
}

/// Eight rows of eight → eight columns of eight.
#[inline]
#[target_feature(enable = "avx")]
pub(super) fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves swapped.
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// Where a strip works: columns `k0..k0 + len` of rows `[.., k]`, activation rows `j..`, a
/// panel of `rows` weight rows.
#[derive(Clone, Copy)]
pub(super) struct Strip {
    pub k: usize,
    pub k0: usize,
    pub len: usize,
    pub rows: usize,
    pub j: usize,
}

/// Activation rows `j..j + C` against every block of the packed columns, set into `out
/// [m, rows]` (the first columns) or added to it.
///
/// # Safety
/// AVX2 and FMA are enabled.
#[inline(always)]
unsafe fn strip<const C: usize>(packed: &[f32], x: &[f32], at: Strip, out: &mut [f32]) {
    let Strip {
        k,
        k0,
        len,
        rows,
        j,
    } = at;
    assert!(packed.len() == rows.div_ceil(BLOCK) * BLOCK * len);
    assert!(k0 + len <= k && x.len() >= (j + C) * k && out.len() >= (j + C) * rows);
    for b in 0..rows.div_ceil(BLOCK) {
        let block = &packed[b * BLOCK * len..][..BLOCK * len];
        // SAFETY: `tile` reads `block` and C rows of `len` at stride k from x[j * k + k0..],
        // the last ending at (j + C - 1) * k + k0 + len <= (j + C) * k.
        let acc = unsafe { tile::<C>(block, &x[j * k + k0..(j + C - 1) * k + k0 + len], k) };
        let r0 = b * BLOCK;
        let live = BLOCK.min(rows - r0);
        for (c, acc) in acc.iter().enumerate() {
            let mut y = [0f32; BLOCK];
            // SAFETY: 8 floats stored at each of 0 and 8 of a 16-float array.
            unsafe {
                _mm256_storeu_ps(y.as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(y.as_mut_ptr().add(8), acc[1]);
            }
            let o = &mut out[(j + c) * rows + r0..][..live];
            if k0 == 0 {
                o.copy_from_slice(&y[..live]);
            } else {
                o.iter_mut().zip(&y).for_each(|(o, y)| *o += y);
            }
        }
    }
}

/// One block of 16 packed rows (`len` columns) against `C` activation rows (`x`'s rows at
/// stride `stride`, each `len` long): `acc[c][h]` holds rows `8h..8h + 8` of the block for
/// activation row `c`.
///
/// # Safety
/// AVX2 and FMA are enabled.
#[inline(always)]
unsafe fn tile<const C: usize>(block: &[f32], x: &[f32], stride: usize) -> [[__m256; 2]; C] {
    let len = block.len() / BLOCK;
    assert!(block.len() == BLOCK * len && x.len() == (C - 1) * stride + len);
    let (p, xp) = (block.as_ptr(), x.as_ptr());
    // SAFETY: `i < len`: the weight loads read 16 floats at `i * 16 < 16 · len`, the
    // broadcasts one at `c * stride + i < (C - 1) * stride + len` (lengths checked above).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; C];
        for i in 0..len {
            let w0 = _mm256_loadu_ps(p.add(i * BLOCK));
            let w1 = _mm256_loadu_ps(p.add(i * BLOCK + 8));
            for (c, acc) in acc.iter_mut().enumerate() {
                let xb = _mm256_broadcast_ss(&*xp.add(c * stride + i));
                acc[0] = _mm256_fmadd_ps(w0, xb, acc[0]);
                acc[1] = _mm256_fmadd_ps(w1, xb, acc[1]);
            }
        }
        acc
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_panel(w: &[HalfF16], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
    // SAFETY: this function enables the features `panel` needs.
    unsafe { panel::<_, Avx2Strips>(w, k, x, m, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn bf16_panel(w: &[HalfBF16], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
    // SAFETY: as in f16_panel.
    unsafe { panel::<_, Avx2Strips>(w, k, x, m, out) }
}

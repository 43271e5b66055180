//! AVX512-BF16 prefill for BF16 weights: `vdpbf16ps` multiplies pairs of bf16 and adds both
//! products into one f32 lane, 32 multiply-adds per instruction where the f32 panel
//! (`float_panel_x86`) does 8. The activations are rounded to bf16 for it, as decode already
//! rounds them (and as ggml does), so prefill and decode of a BF16 file see the same inputs.
//!
//! A task packs 256 columns of its weight rows at a time as pairs of adjacent columns, in
//! blocks of 32 rows (`[block][pair][32]`, each pair a 32-bit lane), and rounds the same
//! columns of every activation row to bf16 pairs. The tile multiplies the two vectors of one
//! pair (32 rows) by 8 broadcast activation pairs: 16 `vdpbf16ps` per 2 weight loads.

use super::float_panel_x86::transpose8;
use crate::quantized::format::HalfBF16;
use std::arch::x86_64::*;

/// Weight rows per packed block: two vectors of 16 lanes.
const BLOCK: usize = 32;
/// Activation rows per tile: 16 accumulators, 2 weights and a broadcast of the 32 registers.
const TILE_C: usize = 8;
/// Columns packed and multiplied at a time (128 pairs): a block's piece (16 KiB) stays in L1,
/// the task's packed panel in L2.
const PIECE: usize = 256;

/// `w [rows, k]` times `x [m, k]` transposed (`x` rounded to bf16), written as `out [m, rows]`.
///
/// # Safety
/// AVX-512 F/BW/VL, AVX512-BF16, AVX2 and FMA are enabled.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")]
pub unsafe fn bf16_pairs_panel(w: &[HalfBF16], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
    assert!(k > 0 && w.len().is_multiple_of(k) && x.len() == m * k);
    let rows = w.len() / k;
    assert!(out.len() == m * rows);
    thread_local! {
        static PACKED: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
        static XPAIRS: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
    }
    // Taken out and put back rather than borrowed in closures, which might not inherit this
    // function's target features.
    let (mut packed, mut xp) = (PACKED.take(), XPAIRS.take());
    let blocks = rows.div_ceil(BLOCK);
    for k0 in (0..k).step_by(PIECE) {
        let len = PIECE.min(k - k0);
        let pairs = len.div_ceil(2);
        packed.resize(blocks * BLOCK * pairs, 0);
        xp.resize(m * pairs, 0);
        // SAFETY: the features are enabled above; the shapes are checked above and in each.
        unsafe {
            pack(w, k, k0, len, rows, &mut packed);
            round_pairs(x, k, k0, len, &mut xp);
        }
        let mut j = 0;
        while j < m {
            // Tiles of 8, 4, 2 and 1 rows only (each shape is a copy of the loop in the binary).
            let c = [TILE_C, 4, 2, 1]
                .into_iter()
                .find(|&c| c <= m - j)
                .expect("m > j");
            let xs = &xp[j * pairs..(j + c) * pairs];
            for b in 0..blocks {
                let block = &packed[b * BLOCK * pairs..][..BLOCK * pairs];
                // SAFETY: as above; `tile` checks the lengths it reads.
                let acc = unsafe {
                    match c {
                        TILE_C => spill::<TILE_C>(tile::<TILE_C>(block, xs)),
                        4 => spill::<4>(tile::<4>(block, xs)),
                        2 => spill::<2>(tile::<2>(block, xs)),
                        _ => spill::<1>(tile::<1>(block, xs)),
                    }
                };
                let r0 = b * BLOCK;
                let live = BLOCK.min(rows - r0);
                for (cc, y) in acc.iter().take(c).enumerate() {
                    let o = &mut out[(j + cc) * rows + r0..][..live];
                    if k0 == 0 {
                        o.copy_from_slice(&y[..live]);
                    } else {
                        o.iter_mut().zip(y).for_each(|(o, y)| *o += y);
                    }
                }
            }
            j += c;
        }
    }
    PACKED.set(packed);
    XPAIRS.set(xp);
}

/// The bits of two adjacent bf16 values as one 32-bit lane, the first in the low half (the
/// order `vdpbf16ps` pairs them in); a missing second value is zero.
fn pair(lo: HalfBF16, hi: Option<HalfBF16>) -> u32 {
    lo.to_bits() as u32 | (hi.map_or(0, |h| h.to_bits()) as u32) << 16
}

/// Columns `k0..k0 + len` of `w [rows, k]` as pairs, into `packed [ceil(rows / 32)][pairs]
/// [32]`, whose rows past `rows` are zero.
///
/// # Safety
/// AVX2 is enabled.
#[inline(always)]
unsafe fn pack(w: &[HalfBF16], k: usize, k0: usize, len: usize, rows: usize, packed: &mut [u32]) {
    let pairs = len.div_ceil(2);
    assert!(k0 + len <= k && w.len() == rows * k);
    assert!(packed.len() == rows.div_ceil(BLOCK) * BLOCK * pairs);
    // Whole steps of 8 pairs (16 columns): eight rows of them transposed at once.
    let whole = pairs - pairs % 8;
    let whole = if 2 * whole > len { whole - 8 } else { whole };
    for r0 in (0..rows.div_ceil(BLOCK) * BLOCK).step_by(8) {
        let live = 8.min(rows.saturating_sub(r0));
        let base = (r0 / BLOCK) * BLOCK * pairs + r0 % BLOCK;
        for p0 in (0..whole).step_by(8) {
            // SAFETY: each load reads 16 elements at `k0 + 2 p0 + 16 <= k0 + len <= k` of a
            // row inside `w`; each store writes 8 lanes at `base + (p0 + t) * 32 + 8 <=
            // packed.len()`.
            unsafe {
                let mut v = [_mm256_setzero_ps(); 8];
                for (i, v) in v.iter_mut().enumerate().take(live) {
                    let at = w[(r0 + i) * k + k0 + 2 * p0..][..16].as_ptr();
                    *v = _mm256_loadu_ps(at as *const f32);
                }
                for (t, c) in transpose8(v).iter().enumerate() {
                    let to = packed[base + (p0 + t) * BLOCK..][..8].as_mut_ptr();
                    _mm256_storeu_ps(to as *mut f32, *c);
                }
            }
        }
        for p in whole..pairs {
            for i in 0..8 {
                packed[base + p * BLOCK + i] = match i < live {
                    true => {
                        let row = &w[(r0 + i) * k + k0..][..len];
                        pair(row[2 * p], row.get(2 * p + 1).copied())
                    }
                    false => 0,
                };
            }
        }
    }
}

/// Columns `k0..k0 + len` of every row of `x [m, k]` rounded to bf16 (to nearest, ties to
/// even, as `half::bf16::from_f32`), as pairs into `out [m][pairs]`.
///
/// # Safety
/// AVX-512 F and AVX512-BF16 are enabled.
#[inline(always)]
unsafe fn round_pairs(x: &[f32], k: usize, k0: usize, len: usize, out: &mut [u32]) {
    let pairs = len.div_ceil(2);
    let m = x.len() / k;
    assert!(k0 + len <= k && out.len() == m * pairs);
    for j in 0..m {
        let row = &x[j * k + k0..][..len];
        let o = &mut out[j * pairs..][..pairs];
        let whole = len - len % 16;
        for c0 in (0..whole).step_by(16) {
            // SAFETY: the load reads 16 floats of `row` at `c0 + 16 <= len`; the store writes
            // 8 pairs at `c0 / 2 + 8 <= pairs`.
            unsafe {
                let v = _mm512_loadu_ps(row[c0..].as_ptr());
                let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v));
                _mm256_storeu_si256(o[c0 / 2..].as_mut_ptr() as *mut __m256i, h);
            }
        }
        let b = |c: usize| row.get(c).map(|&v| HalfBF16::from_f32(v));
        for (p, o) in o.iter_mut().enumerate().skip(whole / 2) {
            *o = pair(b(2 * p).expect("inside the row"), b(2 * p + 1));
        }
    }
}

/// One block of 32 packed rows against `C` activation rows of pairs (`x`, `[C][pairs]`):
/// `acc[c][h]` holds rows `16h..16h + 16` of the block for activation row `c`.
///
/// # Safety
/// AVX-512 F and AVX512-BF16 are enabled.
#[inline(always)]
unsafe fn tile<const C: usize>(block: &[u32], x: &[u32]) -> [[__m512; 2]; C] {
    let pairs = block.len() / BLOCK;
    assert!(block.len() == BLOCK * pairs && x.len() == C * pairs);
    let (p, xp) = (block.as_ptr(), x.as_ptr());
    // SAFETY: `i < pairs`: the weight loads read 32 lanes at `i * 32 < 32 · pairs`, the
    // broadcasts one at `c * pairs + i < C · pairs` (lengths checked above).
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; C];
        for i in 0..pairs {
            let w0: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(p.add(i * BLOCK) as *const _));
            let w1: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(p.add(i * BLOCK + 16) as *const _));
            for (c, acc) in acc.iter_mut().enumerate() {
                let xb: __m512bh =
                    std::mem::transmute(_mm512_set1_epi32(*xp.add(c * pairs + i) as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], w0, xb);
                acc[1] = _mm512_dpbf16_ps(acc[1], w1, xb);
            }
        }
        acc
    }
}

/// The accumulators as floats, 32 rows per activation row.
///
/// # Safety
/// AVX-512 F is enabled.
#[inline(always)]
unsafe fn spill<const C: usize>(acc: [[__m512; 2]; C]) -> [[f32; BLOCK]; TILE_C] {
    let mut y = [[0f32; BLOCK]; TILE_C];
    for (y, acc) in y.iter_mut().zip(acc) {
        // SAFETY: 16 floats stored at each of 0 and 16 of a 32-float array.
        unsafe {
            _mm512_storeu_ps(y.as_mut_ptr(), acc[0]);
            _mm512_storeu_ps(y.as_mut_ptr().add(16), acc[1]);
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use crate::quantized::format::HalfBF16;

    /// The pair panel against an f64 sum of the bf16 weights times the activations rounded to
    /// bf16, wherever the process could run it (whichever panel BF16 prefill picks there): a last
    /// block of 32 rows part full, every tile shape, pieces of 256 columns and a last column
    /// without a pair.
    #[test]
    fn pair_panel_matches_an_f64_sum_of_the_rounded_products() {
        if !super::super::bf16_pairs_run() {
            eprintln!("NOT checking the AVX512-BF16 pair panel: this process cannot run it");
            return;
        }
        let mut seed = 11u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let (rows, k) = (57, 515);
        let w: Vec<HalfBF16> = (0..rows * k).map(|_| HalfBF16::from_f32(next())).collect();
        for m in [1, 2, 4, 8, 13] {
            let x: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let mut out = vec![0f32; m * rows];
            // SAFETY: the features were detected above.
            unsafe { super::bf16_pairs_panel(&w, k, &x, m, &mut out) };
            for j in 0..m {
                for r in 0..rows {
                    let (mut sum, mut size) = (0f64, 0f64);
                    for c in 0..k {
                        let xb = HalfBF16::from_f32(x[j * k + c]).to_f64();
                        let p = w[r * k + c].to_f64() * xb;
                        sum += p;
                        size += p.abs();
                    }
                    let got = out[j * rows + r] as f64;
                    assert!(
                        (got - sum).abs() <= 1e-5 * size,
                        "row {r}, activation {j}: {got} against {sum}"
                    );
                }
            }
        }
    }
}

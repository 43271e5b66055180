//! AVX512-BF16 tiles for BF16 weights against activation rows rounded to bf16 (decode and
//! the small batches that do not take the prefill panel): one `vdpbf16ps` multiplies 32
//! weights by 32 activations and adds the products pairwise into 16 f32 lanes, where the
//! AVX2 tile (`float_x86`) widens each half of a load to f32 and does two FMAs.
//!
//! Decode of a BF16 file is one load and one `vdpbf16ps` per 64 bytes of weights, so a
//! thread keeps more loads in flight at the same arithmetic; the sums are the AVX2 tile's
//! products, added in another order (see `bf16_tile`).

use crate::quantized::format::HalfBF16;
use std::arch::x86_64::*;

/// Independent accumulators per (weight row, activation row) pair: `vdpbf16ps`'s latency is
/// covered by four chains, so a single row (decode) is not held back by one.
const ACCS: usize = 4;
/// Elements per `vdpbf16ps`.
const LANES: usize = 32;
/// Elements per step of all `ACCS` accumulators.
const STEP: usize = LANES * ACCS;
/// Accumulators a pass may hold in registers (of 32), leaving room for the loads.
const LIVE: usize = 24;

/// `out[r][c] = w[r] · x[c]`, every shape summing in the same order, so that a product does
/// not depend on which tile computed it (`forward_rows_alone`): the 32 elements `32j..32j +
/// 32` of each whole step go to accumulator `j % ACCS`, the whole groups of 32 after the last
/// step to accumulator 0, then the ragged tail (zero-filled by a masked load) to accumulator
/// 0; the accumulators are added as `(a0 + a1) + (a2 + a3)` and their lanes by
/// `_mm512_reduce_add_ps`. `vdpbf16ps` treats subnormal inputs and results as zero.
///
/// # Safety
/// AVX-512 F and BW and AVX512-BF16 are enabled.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub unsafe fn bf16_tile<const R: usize, const C: usize>(
    w: [&[HalfBF16]; R],
    x: [&[HalfBF16]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let k = x[0].len();
    let stepped = k - k % STEP;
    let whole = k - k % LANES;
    // Accumulators per pass: all of them where they fit in registers, else one pass over the
    // rows per share of them (the rows are in L1 or L2 by the second pass).
    let per_pass = match R * C {
        n if n * ACCS <= LIVE => ACCS,
        n if n * 2 <= LIVE => 2,
        _ => 1,
    };
    // SAFETY: the features are enabled above; every full load reads 32 elements at `i +
    // 32 <= whole <= k`, and all slices have length `k` (checked above); the last load's
    // mask selects only the `k - whole` elements left. Loops, not closures holding
    // intrinsics, which might not be inlined (see `interleaved`).
    unsafe {
        let mut acc = [[[_mm512_setzero_ps(); ACCS]; C]; R];
        for first in (0..ACCS).step_by(per_pass) {
            let mut i = 0;
            while i < stepped {
                for a in first..first + per_pass {
                    add(&w, &x, i + LANES * a, ALL, &mut acc, a);
                }
                i += STEP;
            }
        }
        let mut i = stepped;
        while i < whole {
            add(&w, &x, i, ALL, &mut acc, 0);
            i += LANES;
        }
        if whole < k {
            add(&w, &x, whole, (1 << (k - whole)) - 1, &mut acc, 0);
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let [a0, a1, a2, a3] = acc[r][c];
                let sum = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
                out[r][c] = _mm512_reduce_add_ps(sum);
            }
        }
        out
    }
}

/// Every element of a load (`add`'s `mask`).
const ALL: __mmask32 = !0;

/// The 32 elements at `i` of every pair, those `mask` selects (the others read as zero, and
/// are not read at all), multiplied and added into accumulator `a` of each.
///
/// # Safety
/// AVX-512 F and BW and AVX512-BF16 are enabled; every slice holds the elements at `i + j`
/// for each bit `j` set in `mask`.
#[inline(always)]
unsafe fn add<const R: usize, const C: usize>(
    w: &[&[HalfBF16]; R],
    x: &[&[HalfBF16]; C],
    i: usize,
    mask: __mmask32,
    acc: &mut [[[__m512; ACCS]; C]; R],
    a: usize,
) {
    // SAFETY: as documented above (the caller's bounds); a masked load does not touch the
    // lanes its mask leaves out.
    unsafe {
        let mut xs = [cast(_mm512_setzero_si512()); C];
        for c in 0..C {
            xs[c] = cast(_mm512_maskz_loadu_epi16(mask, x[c][i..].as_ptr().cast()));
        }
        for r in 0..R {
            let wv = cast(_mm512_maskz_loadu_epi16(mask, w[r][i..].as_ptr().cast()));
            for c in 0..C {
                acc[r][c][a] = _mm512_dpbf16_ps(acc[r][c][a], wv, xs[c]);
            }
        }
    }
}

/// 32 bf16 bit patterns as the operand type of `vdpbf16ps`.
#[inline(always)]
fn cast(v: __m512i) -> __m512bh {
    // SAFETY: both are 64 bytes of plain bits; every bit pattern is a valid value of each.
    unsafe { std::mem::transmute(v) }
}

#[cfg(test)]
mod tests {
    use crate::quantized::format::HalfBF16;

    /// Every tile shape the matmul asks for against an f64 sum of the same bf16 products,
    /// wherever the process could run the tile (whether or not BF16 picks it there), and
    /// each shape's bits against the 1x1 tile's: widths below one load, with whole steps,
    /// whole groups after the last step, a masked tail, and one of Qwen2.5's (896).
    #[test]
    fn pairs_tile_matches_an_f64_sum_in_every_shape() {
        if !super::super::bf16_pairs_run() {
            eprintln!("NOT checking the AVX512-BF16 tile: this process cannot run it");
            return;
        }
        let mut seed = 5u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            HalfBF16::from_f32((seed >> 8) as f32 / (1 << 24) as f32 - 0.5)
        };
        for k in [1, 31, 32, 100, 128, 200, 643, 896] {
            let w: Vec<Vec<HalfBF16>> = (0..4).map(|_| (0..k).map(|_| next()).collect()).collect();
            let x: Vec<Vec<HalfBF16>> = (0..4).map(|_| (0..k).map(|_| next()).collect()).collect();
            // SAFETY: the features were detected above.
            let one =
                |r: usize, c: usize| unsafe { super::bf16_tile::<1, 1>([&w[r]], [&x[c]]) }[0][0];
            for (r, wr) in w.iter().enumerate() {
                for (c, xc) in x.iter().enumerate() {
                    let (mut sum, mut size) = (0f64, 0f64);
                    for (a, b) in wr.iter().zip(xc) {
                        let p = a.to_f64() * b.to_f64();
                        sum += p;
                        size += p.abs();
                    }
                    let got = one(r, c) as f64;
                    assert!(
                        (got - sum).abs() <= 1e-6 * size,
                        "k={k} ({r}, {c}): {got} vs {sum}"
                    );
                }
            }
            // SAFETY: as above.
            let (tile, rows) = unsafe {
                (
                    super::bf16_tile::<2, 4>([&w[0], &w[1]], std::array::from_fn(|c| &x[c][..])),
                    super::bf16_tile::<4, 1>(std::array::from_fn(|r| &w[r][..]), [&x[2]]),
                )
            };
            for (r, row) in tile.iter().enumerate() {
                for (c, &g) in row.iter().enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        one(r, c).to_bits(),
                        "k={k} 2x4 tile ({r}, {c})"
                    );
                }
            }
            for (r, row) in rows.iter().enumerate() {
                assert_eq!(
                    row[0].to_bits(),
                    one(r, 2).to_bits(),
                    "k={k} 4x1 tile, row {r}"
                );
            }
        }
    }
}

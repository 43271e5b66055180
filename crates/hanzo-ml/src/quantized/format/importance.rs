//! ggml's importance-weighted quantizers (`quantize_row_*_impl`), which `llama-quantize
//! --imatrix` runs. The importance of a column (an imatrix's mean squared activation over a
//! calibration text) weighs the squared error of every element in it, mostly as
//! `qw · √(σ² + x²)` with `σ²` a mean square of the row or super-block, so the error moves
//! to the columns the activations seldom use. (ggml's `make_qkx3_quants`, which these use for
//! the affine fits, is `make_qkx2_quants` with squared error once weights are given.) Without an importance matrix llama-quantize
//! runs the reference quantizers (each type's `quantize`), except for the IQ4 types, whose
//! one quantizer takes either.

// The block layouts index several arrays by the same element number.
#![allow(clippy::needless_range_loop)]

use super::kquants::{
    requantize_k4_family, store_q2k_levels, store_q3k_levels, BlockQ2K, BlockQ3K, K4Parts, QK_K,
};
use super::legacy::{pack, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, QK};
use super::search::{make_qkx2_quants, make_qp_quants, make_qx_quants};
use half::f16;

pub(super) fn sum_sq(x: &[f32]) -> f32 {
    x.iter().fold(0.0, |s, &v| s + v * v)
}

/// `qw · √(σ² + x²)` per element.
pub(super) fn weights<const N: usize>(x: &[f32], qw: &[f32], sigma2: f32) -> [f32; N] {
    std::array::from_fn(|i| qw[i] * (sigma2 + x[i] * x[i]).sqrt())
}

fn sum<const N: usize>(w: &[f32; N]) -> f32 {
    w.iter().fold(0.0, |s, &v| s + v)
}

/// The affine fit of each group of `N` in a super-block (levels into `l`): `(scales, mins,
/// the groups' total weights)`.
fn affine_groups<const N: usize, const G: usize>(
    x: &[f32],
    qw: &[f32],
    sigma2: f32,
    nmax: i32,
    l: &mut [u8; QK_K],
) -> ([f32; G], [f32; G], [f32; G]) {
    let (mut scales, mut mins, mut sw) = ([0f32; G], [0f32; G], [0f32; G]);
    for g in 0..G {
        let r = N * g..N * g + N;
        let w: [f32; N] = weights(&x[r.clone()], &qw[r.clone()], sigma2);
        sw[g] = sum(&w);
        (scales[g], mins[g]) =
            make_qkx2_quants(&x[r.clone()], &w, nmax, &mut l[r], -0.9, 0.05, 36, false);
    }
    (scales, mins, sw)
}

/// Q2_K: an affine fit per group of 16, then the group scales and mins to 4 bits under the
/// groups' total weights.
pub(super) fn q2k(xs: &[f32], qw: &[f32], out: &mut [BlockQ2K]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        let sigma2 = sum_sq(x) / QK_K as f32;
        let mut l = [0u8; QK_K];
        let (scales, mins, sw) = affine_groups::<16, 16>(x, qw, sigma2, 3, &mut l);
        let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
        b.d = f16::from_f32(make_qp_quants(&scales, 15, &mut ls, &sw));
        b.dmin = f16::from_f32(make_qp_quants(&mins, 15, &mut lm, &sw));
        b.scales = std::array::from_fn(|j| ls[j] | (lm[j] << 4));
        store_q2k_levels(b, x, &mut l);
    }
}

/// Q3_K: a signed fit per group of 16, the group scales to 6 bits by the same search under
/// the groups' total weights.
pub(super) fn q3k(xs: &[f32], qw: &[f32], out: &mut [BlockQ3K]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        let sigma2 = 2.0 * sum_sq(x) / QK_K as f32;
        let mut l = [0i8; QK_K];
        let (mut scales, mut sw) = ([0f32; 16], [0f32; 16]);
        for g in 0..16 {
            let r = 16 * g..16 * g + 16;
            let w: [f32; 16] = weights(&x[r.clone()], &qw[r.clone()], sigma2);
            sw[g] = sum(&w);
            scales[g] = make_qx_quants(&x[r.clone()], 4, &mut l[r], 1, Some(&w));
        }
        let mut ls = [0i8; 16];
        let d = make_qx_quants(&scales, 32, &mut ls, 1, Some(&sw));
        b.scales = super::kquants::pack_q3k_scales(&ls.map(|v| v as u8));
        b.d = f16::from_f32(d);
        store_q3k_levels(b, x, &mut l);
    }
}

/// Q4_K (`nmax` 15) and Q5_K (31): an affine fit per sub-block of 32, then the sub-block
/// scales and mins to 6 bits under the sub-blocks' total weights.
pub(super) fn k4_family(x: &[f32], qw: &[f32], nmax: i32) -> K4Parts {
    let sigma2 = 2.0 * sum_sq(x) / QK_K as f32;
    let mut l = [0u8; QK_K];
    let (scales, mins, sw) = affine_groups::<32, 8>(x, qw, sigma2, nmax, &mut l);
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d = make_qp_quants(&scales, 63, &mut ls, &sw);
    let m = make_qp_quants(&mins, 63, &mut lm, &sw);
    // ggml caps these at 63 for Q5_K only; the search never goes above it.
    let (ls, lm) = (ls.map(|v| v.min(63)), lm.map(|v| v.min(63)));
    requantize_k4_family(x, nmax, f16::from_f32(d), f16::from_f32(m), &ls, &lm, l)
}

/// The legacy types weigh by the mean square of the whole row, not of a block.
fn row_blocks<'a>(
    xs: &'a [f32],
    qw: &'a [f32],
) -> impl Iterator<Item = (&'a [f32], [f32; QK])> + 'a {
    let sigma2 = sum_sq(xs) / xs.len() as f32;
    xs.chunks_exact(QK)
        .zip(qw.chunks_exact(QK))
        .map(move |(x, qw)| (x, weights(x, qw, sigma2)))
}

pub(super) fn q4_0(xs: &[f32], qw: &[f32], out: &mut [BlockQ4_0]) {
    for ((x, w), b) in row_blocks(xs, qw).zip(out) {
        let mut l = [0i8; QK];
        b.d = f16::from_f32(make_qx_quants(x, 8, &mut l, 1, Some(&w)));
        b.qs = std::array::from_fn(|j| l[j] as u8 | ((l[j + 16] as u8) << 4));
    }
}

pub(super) fn q5_0(xs: &[f32], qw: &[f32], out: &mut [BlockQ5_0]) {
    for ((x, w), b) in row_blocks(xs, qw).zip(out) {
        let mut l = [0i8; QK];
        b.d = f16::from_f32(make_qx_quants(x, 16, &mut l, 1, Some(&w)));
        (b.qs, b.qh) = pack(&l.map(|v| v as u8));
    }
}

/// Q4_1 and Q5_1: `(d, m, levels)` of ggml's weighted affine fit.
fn affine(x: &[f32], w: &[f32; QK], nmax: i32) -> (f16, f16, [u8; QK]) {
    let mut l = [0u8; QK];
    let (d, neg_min) = make_qkx2_quants(x, w, nmax, &mut l, -0.9, 0.05, 36, false);
    (f16::from_f32(d), f16::from_f32(-neg_min), l)
}

pub(super) fn q4_1(xs: &[f32], qw: &[f32], out: &mut [BlockQ4_1]) {
    for ((x, w), b) in row_blocks(xs, qw).zip(out) {
        let l;
        (b.d, b.m, l) = affine(x, &w, 15);
        b.qs = std::array::from_fn(|j| l[j] | (l[j + 16] << 4));
    }
}

pub(super) fn q5_1(xs: &[f32], qw: &[f32], out: &mut [BlockQ5_1]) {
    for ((x, w), b) in row_blocks(xs, qw).zip(out) {
        let l;
        (b.d, b.m, l) = affine(x, &w, 31);
        (b.qs, b.qh) = pack(&l);
    }
}

//! ggml's IQ2_XXS, IQ2_XS and IQ2_S quantizers. Each run of 8 weights must land on a lattice
//! point (256, 512 or 1024 points) of 2-bit magnitude levels (`2l + 1`, `l < 3`), with the
//! signs stored apart: as one of 128 even-parity patterns (XXS, XS) or as 8 plain bits (S).
//! The search (`lattice_search`) tries scales around `max / 5` per group of 32 (XXS) or 16
//! (XS, S); the group scales become 4-bit multipliers of one f16 scale per 256. XXS and XS
//! need an importance matrix (as in ggml); S weighs by `σ²/4 + x²` without one.

// The block layouts index several arrays by the same element number.
#![allow(clippy::needless_range_loop)]

use super::iq2::{BlockIQ2S, BlockIQ2XS, BlockIQ2XXS};
use super::iq_grids::{IQ2S_PACKED, IQ2XS_PACKED, IQ2XXS_BITS, IQ2XXS_PACKED};
use super::kquants::QK_K;
use super::lattice::level_indices;
use super::lattice_search::{
    even_signs, even_signs32, fit_group, max_of, multipliers, Candidates, Lattice, Replace,
};
use super::search::{make_qp_quants, GROUP_MAX_EPS};
use half::f16;
use std::sync::OnceLock;

/// Why IQ2_XXS and IQ2_XS cannot be written without an importance matrix.
pub(super) const NEEDS_IMPORTANCE: &str =
    "IQ2_XXS and IQ2_XS are written only under an importance matrix (llama-imatrix's)";

/// An 8-weight lattice of 2-bit levels from its packed grid; ggml keeps the points at the
/// 2 smallest distances as neighbours (1 for IQ2_S's denser lattice).
fn lattice(packed: &[u8], nearest: usize) -> Lattice {
    let points = level_indices::<8>(packed, IQ2XXS_BITS)
        .iter()
        .flatten()
        .copied()
        .collect();
    Lattice::new(points, 8, 2, 3, nearest)
}

fn iq2xxs_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| lattice(&IQ2XXS_PACKED, 2))
}

fn iq2xs_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| lattice(&IQ2XS_PACKED, 2))
}

fn iq2s_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| lattice(&IQ2S_PACKED, 1))
}

/// Candidate scales `max_ref / (5 ± 0.1·is)`: `kMaxQ = 3` levels, magnitudes up to 5.
fn candidates(max_ref: f32, steps: i32, initial: f32) -> Candidates {
    Candidates {
        base: 5.0,
        step: 0.1,
        steps,
        max_ref,
        initial,
    }
}

/// The lattice index of each run of 8 in `l`.
fn indices<const R: usize>(lat: &Lattice, l: &[i8]) -> [usize; R] {
    std::array::from_fn(|k| {
        lat.point(&l[8 * k..])
            .expect("the search ends on the lattice")
    })
}

fn max_scale(scales: &[f32]) -> f32 {
    scales.iter().fold(0f32, |m, &s| if m > s { m } else { s })
}

#[inline(never)]
pub(super) fn quantize_iq2xxs(x: &[f32], qw: &[f32]) -> BlockIQ2XXS {
    let lat = iq2xxs_lattice();
    let sigma2 = super::importance::sum_sq(x) / QK_K as f32;
    let mut words = [0u32; 16];
    let mut scales = [0f32; 8];
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        let w: [f32; 32] = super::importance::weights(xb, &qw[32 * ib..], sigma2);
        let (xval, mut signs) = even_signs32(xb, &w);
        let max = max_of(&xval);
        if max < GROUP_MAX_EPS {
            continue;
        }
        // The candidates centre on the largest magnitude the 4-level fit reaches.
        let mut l = [0u8; 32];
        let qp_scale = make_qp_quants(&xval, 4, &mut l, &w);
        let eff_max = qp_scale * 3.0;
        if eff_max <= 0.0 {
            continue;
        }
        let mut l = [0i8; 32];
        let c = candidates(eff_max, 6, qp_scale);
        let mut scale = fit_group(lat, &xval, &w, &c, Replace::All, &mut l);
        if scale < 0.0 {
            scale = -scale;
            signs = signs.map(|s| !s & 127);
        }
        for (k, p) in indices::<4>(lat, &l).into_iter().enumerate() {
            words[2 * ib] |= (p as u32) << (8 * k);
            words[2 * ib + 1] |= signs[k] << (7 * k);
        }
        scales[ib] = scale;
    }
    let max_scale = max_scale(&scales);
    if max_scale == 0.0 {
        return bytemuck::Zeroable::zeroed();
    }
    let d = max_scale / 31.0;
    for (ib, m) in multipliers(&scales, d).iter().enumerate() {
        words[2 * ib + 1] |= m << 28;
    }
    let mut b = BlockIQ2XXS {
        d: f16::from_f32(d),
        qs: [0; QK_K / 8],
    };
    for (i, w) in words.iter().enumerate() {
        b.qs[2 * i] = *w as u16;
        b.qs[2 * i + 1] = (*w >> 16) as u16;
    }
    b
}

/// The 16-weight groups of a block of IQ2_XS or IQ2_S: each group's scale and two lattice
/// indices, and the sign byte of each run of 8.
struct Groups16 {
    scales: [f32; 16],
    idx: [[usize; 2]; 16],
    sgn: [[u8; 2]; 16],
}

/// Fits the 16-weight groups (`signs(xb, w, xval)` fills the magnitudes); `None` for a block
/// of zeros.
fn fit_groups16(
    lat: &Lattice,
    x: &[f32],
    weights: impl Fn(usize, &[f32]) -> [f32; 16],
    signs: impl Fn(&[f32], &[f32], &mut [f32]) -> u8,
    eps: f32,
    flip: u8,
) -> Option<Groups16> {
    let mut scales = [0f32; 16];
    let mut idx = [[0usize; 2]; 16];
    let mut sgn = [[0u8; 2]; 16];
    for ib in 0..16 {
        let xb = &x[16 * ib..16 * ib + 16];
        let w = weights(ib, xb);
        let mut xval = [0f32; 16];
        for k in 0..2 {
            let r = 8 * k..8 * k + 8;
            sgn[ib][k] = signs(&xb[r.clone()], &w[r.clone()], &mut xval[r]);
        }
        let max = max_of(&xval);
        if max < eps {
            sgn[ib] = [0; 2];
            continue;
        }
        let mut l = [0i8; 16];
        let c = candidates(max, 9, max / 5.0);
        let mut scale = fit_group(lat, &xval, &w, &c, Replace::OffLattice, &mut l);
        if scale < 0.0 {
            scale = -scale;
            sgn[ib] = sgn[ib].map(|s| !s & flip);
        }
        idx[ib] = indices::<2>(lat, &l);
        scales[ib] = scale;
    }
    (max_scale(&scales) > 0.0).then_some(Groups16 { scales, idx, sgn })
}

/// The 4-bit multipliers of 16 group scales, two per byte.
fn packed_multipliers(scales: &[f32; 16], d: f32) -> [u8; QK_K / 32] {
    let m = multipliers(scales, d);
    std::array::from_fn(|j| (m[2 * j] | m[2 * j + 1] << 4) as u8)
}

#[inline(never)]
pub(super) fn quantize_iq2xs(x: &[f32], qw: &[f32]) -> BlockIQ2XS {
    let sigma2 = super::importance::sum_sq(x) / QK_K as f32;
    let weights = |ib: usize, xb: &[f32]| super::importance::weights(xb, &qw[16 * ib..], sigma2);
    let Some(Groups16 { scales, idx, sgn }) =
        fit_groups16(iq2xs_lattice(), x, weights, even_signs, GROUP_MAX_EPS, 127)
    else {
        return bytemuck::Zeroable::zeroed();
    };
    let d = max_scale(&scales) / 31.0;
    BlockIQ2XS {
        d: f16::from_f32(d),
        qs: std::array::from_fn(|e| idx[e / 2][e % 2] as u16 | (sgn[e / 2][e % 2] as u16) << 9),
        scales: packed_multipliers(&scales, d),
    }
}

/// 8 magnitudes and their sign bits.
fn plain_signs(x: &[f32], _: &[f32], xval: &mut [f32]) -> u8 {
    let mut s = 0u8;
    for i in 0..8 {
        xval[i] = x[i].abs();
        s |= ((x[i] < 0.0) as u8) << i;
    }
    s
}

#[inline(never)]
pub(super) fn quantize_iq2s(x: &[f32], qw: Option<&[f32]>) -> BlockIQ2S {
    let sigma2 = 2.0 * super::importance::sum_sq(x) / QK_K as f32;
    let weights = |ib: usize, xb: &[f32]| match qw {
        Some(qw) => super::importance::weights(xb, &qw[16 * ib..], sigma2),
        None => std::array::from_fn(|i| 0.25 * sigma2 + xb[i] * xb[i]),
    };
    let Some(Groups16 { scales, idx, sgn }) =
        fit_groups16(iq2s_lattice(), x, weights, plain_signs, 1e-8, 255)
    else {
        return bytemuck::Zeroable::zeroed();
    };
    let d = max_scale(&scales) / 31.0;
    let mut b = BlockIQ2S {
        d: f16::from_f32(d * 0.9875),
        qs: [0; QK_K / 4],
        qh: [0; QK_K / 32],
        scales: packed_multipliers(&scales, d),
    };
    for e in 0..QK_K / 8 {
        let p = idx[e / 2][e % 2];
        b.qs[e] = p as u8;
        b.qh[e / 4] |= ((p >> 8) as u8) << (2 * (e % 4));
        b.qs[QK_K / 8 + e] = sgn[e / 2][e % 2];
    }
    b
}

pub(super) fn iq2xxs_rows(xs: &[f32], qw: &[f32], out: &mut [BlockIQ2XXS]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_iq2xxs(x, qw);
    }
}

pub(super) fn iq2xs_rows(xs: &[f32], qw: &[f32], out: &mut [BlockIQ2XS]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_iq2xs(x, qw);
    }
}

pub(super) fn iq2s_rows(xs: &[f32], out: &mut [BlockIQ2S]) {
    for (x, b) in xs.chunks_exact(QK_K).zip(out) {
        *b = quantize_iq2s(x, None);
    }
}

pub(super) fn iq2s_rows_weighted(xs: &[f32], qw: &[f32], out: &mut [BlockIQ2S]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_iq2s(x, Some(qw));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattices_match_ggmls_point_lists() {
        // The first points of ggml's `kgrid_2bit_256`, `_512` and `_1024` (2 bits per level).
        assert_eq!(iq2xxs_lattice().first_keys(5), [0, 2, 5, 8, 10]);
        assert_eq!(iq2xs_lattice().first_keys(5), [0, 2, 5, 8, 10]);
        assert_eq!(
            iq2xs_lattice().key(iq2xs_lattice().point_levels(511)),
            43690
        );
        // Every combination of levels below 3 is a point or has neighbours.
        for lat in [iq2xxs_lattice(), iq2xs_lattice(), iq2s_lattice()] {
            for u in 0..6561usize {
                let l: [i8; 8] = std::array::from_fn(|k| (u / 3usize.pow(k as u32) % 3) as i8);
                assert!(lat.point(&l).is_some() || !lat.neighbours(&l).is_empty());
            }
        }
    }
}

//! ggml's IQ1_S and IQ1_M quantizers. Each weight is one of three values `{-1, 0, 1} ± 1/8`
//! times its group's scale, and each run of 8 must be a point of a 2048-point lattice. With
//! three values the best split of a group is found exactly: sorted by value, every pair of
//! boundaries is scored by its least-squares fit (IQ1_M scores the two runs of a 16-weight
//! group with their own shift signs). Runs that are off the lattice then move to the nearest
//! point under the weighted error. IQ1_S needs an importance matrix (as in ggml); IQ1_M weighs
//! by `x²` without one.

// The block layouts index several arrays by the same element number.
#![allow(clippy::needless_range_loop)]

use super::iq1::{BlockIQ1M, BlockIQ1S};
use super::iq_grids::{IQ1S_BITS, IQ1S_PACKED};
use super::kquants::QK_K;
use super::lattice::level_indices;
use super::lattice_search::Lattice;
use super::search::nearest_int;
use half::f16;
use std::sync::OnceLock;

/// Why IQ1_S cannot be written without an importance matrix.
pub(super) const NEEDS_IMPORTANCE: &str =
    "IQ1_S is written only under an importance matrix (llama-imatrix's)";

const DELTA: f32 = 0.125;
/// The three values under a positive and under a negative shift.
const X_P: [f32; 3] = [-1.0 + DELTA, DELTA, 1.0 + DELTA];
const X_M: [f32; 3] = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];

/// ggml keeps the points at the 3 smallest distances as neighbours.
fn iq1_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| {
        let points = level_indices::<8>(&IQ1S_PACKED, IQ1S_BITS)
            .iter()
            .flatten()
            .copied()
            .collect();
        Lattice::new(points, 8, 2, 3, 3)
    })
}

/// The lattice point of the 8 levels `l` (values `xx[l]`), or, off the lattice, the neighbour
/// with the least `Σ w·(scale·xx[l] - x)²` (the first on ties), written back into `l`; and
/// whether `l` was on the lattice.
fn place(
    lat: &Lattice,
    l: &mut [i8],
    x: &[f32],
    w: &[f32],
    scale: f32,
    xx: &[f32; 3],
) -> (usize, bool) {
    if let Some(p) = lat.point(l) {
        return (p, true);
    }
    let (mut best_d2, mut best) = (f32::MAX, None);
    for &p in lat.neighbours(l) {
        let pl = lat.point_levels(p as usize);
        let mut d2 = 0f32;
        for i in 0..8 {
            let diff = scale * xx[pl[i] as usize] - x[i];
            d2 += w[i] * diff * diff;
        }
        if d2 < best_d2 {
            (best_d2, best) = (d2, Some(p as usize));
        }
    }
    // A NaN error leaves none best; the first neighbour is as good as any then.
    let best = best.unwrap_or(lat.neighbours(l)[0] as usize);
    l[..8].copy_from_slice(lat.point_levels(best));
    (best, false)
}

/// Adds to the fit `(Σ w·q·x, Σ w·q²)` the runs of 8 on lattice points `index`, run `k`
/// valued by `xx(k)` and every value times `mult` (one running sum, in ggml's order).
fn run_fit(
    lat: &Lattice,
    index: &[usize],
    x: &[f32],
    w: &[f32],
    xx: impl Fn(usize) -> &'static [f32; 3],
    mult: f32,
    (sumqx, sumq2): &mut (f32, f32),
) {
    for (k, &p) in index.iter().enumerate() {
        let pl = lat.point_levels(p);
        for j in 0..8 {
            let q = xx(k)[pl[j] as usize] * mult;
            *sumqx += w[8 * k + j] * q * x[8 * k + j];
            *sumq2 += w[8 * k + j] * q * q;
        }
    }
}

/// The group's elements in ascending order of value (stable on ties).
fn ascending<const N: usize>(x: &[f32]) -> [usize; N] {
    let mut idx: [usize; N] = std::array::from_fn(|i| i);
    idx.sort_by(|&a, &b| x[a].partial_cmp(&x[b]).unwrap_or(std::cmp::Ordering::Equal));
    idx
}

fn abs_max(x: &[f32]) -> f32 {
    x[1..]
        .iter()
        .fold(x[0].abs(), |m, &v| if m > v.abs() { m } else { v.abs() })
}

/// Levels of a split: below `i1` in sorted order 0, up to `i2` 1, the rest 2.
fn split_levels<const N: usize>(order: &[usize; N], i1: usize, i2: usize) -> [i8; N] {
    let mut l = [0i8; N];
    for (j, &i) in order.iter().enumerate() {
        l[i] = (j >= i1) as i8 + (j >= i2) as i8;
    }
    l
}

#[inline(never)]
pub(super) fn quantize_iq1s(x: &[f32], qw: &[f32]) -> BlockIQ1S {
    let lat = iq1_lattice();
    let sigma2 = 2.0 * super::importance::sum_sq(x) / QK_K as f32;
    let mut b: BlockIQ1S = bytemuck::Zeroable::zeroed();
    let mut scales = [0f32; 8];
    let mut shifts = [1i32; 8];
    let mut max_scale = 0f32;
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        let w: [f32; 32] = super::importance::weights(xb, &qw[32 * ib..], sigma2);
        let max = abs_max(xb);
        if max < 1e-12 {
            continue;
        }
        let order = ascending::<32>(xb);
        let (mut sumx, mut sumw) = ([0f32; 33], [0f32; 33]);
        for (j, &i) in order.iter().enumerate() {
            sumx[j + 1] = sumx[j] + w[i] * xb[i];
            sumw[j + 1] = sumw[j] + w[i];
        }
        let (mut best_score, mut scale) = (-f32::MAX, max);
        let mut best: Option<(usize, usize, i32)> = None;
        for i1 in 0..=32 {
            for i2 in i1..=32 {
                for (xs, shift) in [(&X_P, 1), (&X_M, -1)] {
                    let sumqx = (sumx[i1] - sumx[0]) * xs[0]
                        + (sumx[i2] - sumx[i1]) * xs[1]
                        + (sumx[32] - sumx[i2]) * xs[2];
                    let sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0]
                        + (sumw[i2] - sumw[i1]) * xs[1] * xs[1]
                        + (sumw[32] - sumw[i2]) * xs[2] * xs[2];
                    if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        best = Some((i1, i2, shift));
                    }
                }
            }
        }
        let Some((i1, i2, mut shift)) = best else {
            continue;
        };
        let mut l = split_levels(&order, i1, i2);
        if scale < 0.0 {
            l = l.map(|v| 2 - v);
            scale = -scale;
            shift = -shift;
        }
        let xx = if shift == 1 { &X_P } else { &X_M };
        let mut index = [0usize; 4];
        let mut all_on = true;
        for k in 0..4 {
            let r = 8 * k..8 * k + 8;
            let on;
            (index[k], on) = place(lat, &mut l[r.clone()], &xb[r.clone()], &w[r], scale, xx);
            all_on &= on;
        }
        if !all_on {
            let mut fit = (0f32, 0f32);
            run_fit(lat, &index, xb, &w, |_| xx, 1.0, &mut fit);
            let (sumqx, sumq2) = fit;
            if sumqx > 0.0 && sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        let mut h = 0u16;
        for k in 0..4 {
            b.qs[4 * ib + k] = index[k] as u8;
            h |= ((index[k] >> 8) as u16) << (3 * k);
        }
        b.qh[ib] = h;
        scales[ib] = scale;
        shifts[ib] = shift;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return b;
    }
    let d = max_scale / 15.0;
    b.d = f16::from_f32(d * 1.125);
    let id = 1.0 / d;
    for ib in 0..8 {
        let mut l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7) as u16;
        if shifts[ib] == -1 {
            l |= 8;
        }
        b.qh[ib] |= l << 12;
    }
    b
}

/// The shift values of run `k` of an IQ1_M group under shift pattern `s` (bit 1: the first
/// run's shift is negative, bit 0: the second's).
fn m_values(s: usize, k: usize) -> &'static [f32; 3] {
    let minus = if k == 0 { s >= 2 } else { s % 2 == 1 };
    if minus {
        &X_M
    } else {
        &X_P
    }
}

/// IQ1_M's error weights of group `ib` (16 elements).
fn m_weights(xb: &[f32], qw: Option<&[f32]>, ib: usize, sigma2: f32) -> [f32; 16] {
    match qw {
        Some(qw) => super::importance::weights(xb, &qw[16 * ib..], sigma2),
        None => std::array::from_fn(|i| xb[i] * xb[i]),
    }
}

/// The best split and shift pattern of one IQ1_M group: prefix sums kept per run, since each
/// run has its own shift; with `v[0] - v[1] = v[1] - v[2] = -1` a split's `Σ w·q·x` is
/// `T·v[2] - S(i1) - S(i2)`.
fn m_split(xb: &[f32], w: &[f32; 16], order: &[usize; 16]) -> Option<(usize, usize, usize, f32)> {
    let (mut px, mut pw) = ([[0f32; 17]; 2], [[0f32; 17]; 2]);
    for (j, &i) in order.iter().enumerate() {
        let h = (i >= 8) as usize;
        px[h][j + 1] = px[h][j] + w[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + w[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    let txs = [px[0][16], px[1][16]];
    let tws = [pw[0][16], pw[1][16]];
    let (p2, m2) = (X_P[2], X_M[2]);
    let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
    let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
    let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
    let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
    let mut best_score = -f32::MAX;
    let mut best = None;
    for i1 in 0..=16 {
        for i2 in i1..=16 {
            let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) =
                ([0f32; 2], [0f32; 2], [0f32; 2], [0f32; 2]);
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            let sumqx = [
                qx_p[0] + qx_p[1],
                qx_p[0] + qx_m[1],
                qx_m[0] + qx_p[1],
                qx_m[0] + qx_m[1],
            ];
            let sumq2 = [
                q2_p[0] + q2_p[1],
                q2_p[0] + q2_m[1],
                q2_m[0] + q2_p[1],
                q2_m[0] + q2_m[1],
            ];
            for k in 0..4 {
                if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                    let scale = sumqx[k] / sumq2[k];
                    best_score = scale * sumqx[k];
                    best = Some((i1, i2, k, scale));
                }
            }
        }
    }
    best
}

#[inline(never)]
pub(super) fn quantize_iq1m(x: &[f32], qw: Option<&[f32]>) -> BlockIQ1M {
    let lat = iq1_lattice();
    let sigma2 = 2.0 * super::importance::sum_sq(x) / QK_K as f32;
    let mut b: BlockIQ1M = bytemuck::Zeroable::zeroed();
    let mut scales = [0f32; 16];
    let mut shifts = [0usize; 16];
    let mut max_scale = 0f32;
    for ib in 0..16 {
        let xb = &x[16 * ib..16 * ib + 16];
        let w = m_weights(xb, qw, ib, sigma2);
        if abs_max(xb) < 1e-7 {
            continue;
        }
        let order = ascending::<16>(xb);
        let Some((i1, i2, mut s, mut scale)) = m_split(xb, &w, &order) else {
            continue;
        };
        let mut l = split_levels(&order, i1, i2);
        if scale < 0.0 {
            l = l.map(|v| 2 - v);
            scale = -scale;
            s = 3 - s;
        }
        let mut index = [0usize; 2];
        let mut all_on = true;
        for k in 0..2 {
            let r = 8 * k..8 * k + 8;
            let xx = m_values(s, k);
            let on;
            (index[k], on) = place(lat, &mut l[r.clone()], &xb[r.clone()], &w[r], scale, xx);
            all_on &= on;
        }
        if !all_on {
            let mut fit = (0f32, 0f32);
            run_fit(lat, &index, xb, &w, |k| m_values(s, k), 1.0, &mut fit);
            let (sumqx, sumq2) = fit;
            if sumqx > 0.0 && sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        b.qs[2 * ib] = index[0] as u8;
        b.qs[2 * ib + 1] = index[1] as u8;
        b.qh[ib] = (index[0] >> 8) as u8 | ((index[1] >> 8) as u8) << 4;
        scales[ib] = scale;
        shifts[ib] = s;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return b;
    }
    // The group multipliers, then the block scale refitted to the multiplied values.
    let mut sc = [0u16; 4];
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let mut fit = (0f32, 0f32);
    for ib in 0..16 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
        sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
        b.qh[ib] |= [0x00, 0x80, 0x08, 0x88][shifts[ib]];
        let xb = &x[16 * ib..16 * ib + 16];
        let w = m_weights(xb, qw, ib, sigma2);
        let index: [usize; 2] = std::array::from_fn(|k| {
            b.qs[2 * ib + k] as usize | ((b.qh[ib] as usize) << (8 - 4 * k) & 0x700)
        });
        let s = shifts[ib];
        run_fit(
            lat,
            &index,
            xb,
            &w,
            |k| m_values(s, k),
            (2 * l + 1) as f32,
            &mut fit,
        );
    }
    let (sumqx, sumq2) = fit;
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    let s = f16::from_f32(d * 1.1125).to_bits();
    sc[0] |= (s & 0x000f) << 12;
    sc[1] |= (s & 0x00f0) << 8;
    sc[2] |= (s & 0x0f00) << 4;
    sc[3] |= s & 0xf000;
    for (k, v) in sc.iter().enumerate() {
        b.scales[2 * k..2 * k + 2].copy_from_slice(&v.to_le_bytes());
    }
    b
}

pub(super) fn iq1s_rows(xs: &[f32], qw: &[f32], out: &mut [BlockIQ1S]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_iq1s(x, qw);
    }
}

pub(super) fn iq1m_rows(xs: &[f32], out: &mut [BlockIQ1M]) {
    for (x, b) in xs.chunks_exact(QK_K).zip(out) {
        *b = quantize_iq1m(x, None);
    }
}

pub(super) fn iq1m_rows_weighted(xs: &[f32], qw: &[f32], out: &mut [BlockIQ1M]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_iq1m(x, Some(qw));
    }
}

//! ggml's IQ3_XXS and IQ3_S quantizers. Each run of 4 weights must land on a lattice point (256
//! points for XXS, 512 for S) of 3-bit magnitude levels, with the signs stored apart. Per group
//! of 32 the search tries scales around `max / 15`; each run is rounded to the nearest levels,
//! and where those are not a lattice point, the best of its precomputed nearest points under
//! the weighted error is taken; the scale with the best least-squares fit wins and off-lattice
//! runs are then placed again against it. The group scales become 4-bit multipliers of one f16
//! scale per 256.

// The block layouts index several arrays by the same element number.
#![allow(clippy::needless_range_loop)]

use super::iq3::{BlockIQ3S, BlockIQ3XXS};
use super::iq_grids::{IQ3S_BITS, IQ3S_PACKED, IQ3XXS_BITS, IQ3XXS_PACKED};
use super::kquants::QK_K;
use super::lattice::level_indices;
use super::search::nearest_int;
use half::f16;
use std::sync::OnceLock;

/// A lattice as the search uses it: each point's 4 level indices (0..8, magnitude `2l + 1`),
/// and for every one of the 8⁴ level combinations either its point or, for the ones off the
/// lattice, the list of its nearest points (all those at the `nearest` smallest distances).
pub(super) struct Lattice {
    points: Box<[[i8; 4]]>,
    /// Point index, or `-(offset + 1)` into `neighbours` (a count, then that many points).
    map: Vec<i32>,
    neighbours: Vec<u16>,
}

fn key(l: &[i8]) -> usize {
    (0..4).map(|i| (l[i] as usize) << (3 * i)).sum()
}

impl Lattice {
    fn new(points: Box<[[i8; 4]]>, nearest: usize) -> Self {
        let mut map = vec![-1i32; 4096];
        for (p, l) in points.iter().enumerate() {
            map[key(l)] = p as i32;
        }
        let mut neighbours = Vec::new();
        let mut dist = Vec::with_capacity(points.len());
        for u in 0..4096 {
            if map[u] >= 0 {
                continue;
            }
            let pos: [i32; 4] = std::array::from_fn(|k| 2 * ((u >> (3 * k)) & 7) as i32 + 1);
            dist.clear();
            dist.extend(points.iter().map(|l| {
                (0..4)
                    .map(|k| (2 * l[k] as i32 + 1 - pos[k]).pow(2))
                    .sum::<i32>()
            }));
            map[u] = -(neighbours.len() as i32 + 1);
            let at = neighbours.len();
            neighbours.push(0);
            // The points at the `nearest` smallest distances, nearest first, in point order
            // within a distance (ggml sorts by distance, then index).
            let mut floor = -1;
            for _ in 0..nearest {
                let Some(d2) = dist.iter().copied().filter(|&d| d > floor).min() else {
                    break;
                };
                neighbours.extend((0..dist.len()).filter(|&j| dist[j] == d2).map(|j| j as u16));
                floor = d2;
            }
            neighbours[at] = (neighbours.len() - at - 1) as u16;
        }
        Self {
            points,
            map,
            neighbours,
        }
    }

    /// The lattice point of levels `l`, if they are one.
    fn point(&self, l: &[i8]) -> Option<usize> {
        usize::try_from(self.map[key(l)]).ok()
    }

    /// Levels `l` (off the lattice) moved to the nearby point with the least weighted error
    /// `Σ w·(scale·(2l+1) - x)²`, the first on ties.
    fn best_neighbour(&self, l: &mut [i8], x: &[f32], w: &[f32], scale: f32) -> usize {
        let at = (-self.map[key(l)] - 1) as usize;
        let n = self.neighbours[at] as usize;
        let (mut best_d2, mut best) = (f32::MAX, 0usize);
        for &p in &self.neighbours[at + 1..at + 1 + n] {
            let pl = &self.points[p as usize];
            let mut d2 = 0f32;
            for i in 0..4 {
                let diff = scale * (2 * pl[i] as i32 + 1) as f32 - x[i];
                d2 += w[i] * diff * diff;
            }
            if d2 < best_d2 {
                (best_d2, best) = (d2, p as usize);
            }
        }
        l[..4].copy_from_slice(&self.points[best]);
        best
    }
}

pub(super) fn iq3xxs_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| Lattice::new(level_indices::<4>(&IQ3XXS_PACKED, IQ3XXS_BITS), 2))
}

pub(super) fn iq3s_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| Lattice::new(level_indices::<4>(&IQ3S_PACKED, IQ3S_BITS), 3))
}

fn fit_sums(w: &[f32; 32], x: &[f32; 32], l: &[i8; 32]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for i in 0..32 {
        let q = (2 * l[i] as i32 + 1) as f32;
        sumqx += w[i] * x[i] * q;
        sumq2 += w[i] * q * q;
    }
    (sumqx, sumq2)
}

fn nearest_levels(id: f32, x: &[f32]) -> [i8; 4] {
    std::array::from_fn(|i| nearest_int(0.5 * (id * x[i] - 1.0)).clamp(0, 7) as i8)
}

/// The scale and lattice levels of one group of 32 magnitudes `x` (largest `max`) under error
/// weights `w`: `steps` scale candidates each side of `max / 15`. XXS starts with every run
/// counted on the lattice and places again only the off-lattice runs; S places them all.
#[inline(never)]
fn fit_group(
    lat: &Lattice,
    x: &[f32; 32],
    w: &[f32; 32],
    max: f32,
    steps: i32,
    xxs: bool,
) -> (f32, [i8; 32]) {
    let waux = w.map(f32::sqrt);
    let mut l = [0i8; 32];
    let mut best = 0f32;
    let mut scale = max / 15.0;
    let mut on_grid = [xxs; 8];
    for is in -steps..=steps {
        let id = (15.0 + is as f32 * 0.2) / max;
        let this_scale = 1.0 / id;
        let mut laux = [0i8; 32];
        let mut on_aux = [true; 8];
        for k in 0..8 {
            let r = 4 * k..4 * k + 4;
            laux[r.clone()].copy_from_slice(&nearest_levels(id, &x[r.clone()]));
            if lat.point(&laux[r.clone()]).is_none() {
                on_aux[k] = false;
                lat.best_neighbour(&mut laux[r.clone()], &x[r.clone()], &waux[r], this_scale);
            }
        }
        let (sumqx, sumq2) = fit_sums(w, x, &laux);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            l = laux;
            on_grid = on_aux;
        }
    }
    if on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..8 {
            if xxs && on_grid[k] {
                continue;
            }
            let r = 4 * k..4 * k + 4;
            l[r.clone()].copy_from_slice(&nearest_levels(id, &x[r.clone()]));
            if lat.point(&l[r.clone()]).is_none() {
                lat.best_neighbour(&mut l[r.clone()], &x[r.clone()], &waux[r], scale);
            }
        }
        let (sumqx, sumq2) = fit_sums(w, x, &l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    (scale, l)
}

/// Error weights of one group: x², or `qw · √(σ² + x²)` under an importance matrix.
fn group_weights(x: &[f32], qw: Option<&[f32]>, sigma2: f32) -> [f32; 32] {
    match qw {
        Some(qw) => super::importance::weights(x, qw, sigma2),
        None => std::array::from_fn(|i| x[i] * x[i]),
    }
}

fn max_of(x: &[f32; 32]) -> f32 {
    x[1..].iter().fold(x[0], |m, &v| if m > v { m } else { v })
}

/// The 4-bit multiplier of each group scale against `d = max_scale / 31`.
fn multipliers(scales: &[f32; 8], d: f32) -> [u32; 8] {
    let id = 1.0 / d;
    scales.map(|s| nearest_int(0.5 * (id * s - 1.0)).clamp(0, 15) as u32)
}

#[inline(never)]
pub(super) fn quantize_iq3xxs(x: &[f32], qw: Option<&[f32]>) -> BlockIQ3XXS {
    let lat = iq3xxs_lattice();
    let sigma2 = 2.0 * super::importance::sum_sq(x) / QK_K as f32;
    let mut b: BlockIQ3XXS = bytemuck::Zeroable::zeroed();
    let mut words = [0u32; 8];
    let mut scales = [0f32; 8];
    let mut max_scale = 0f32;
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        let w = group_weights(xb, qw.map(|q| &q[32 * ib..]), sigma2);
        // Magnitudes and signs; the sign count of each 8 must be even (the 8th sign is
        // implied), so an odd one flips the element that costs least.
        let mut xval = [0f32; 32];
        let mut signs = [0u32; 4];
        for k in 0..4 {
            let (mut s, mut nflip) = (0u32, 0);
            for i in 0..8 {
                let v = xb[8 * k + i];
                xval[8 * k + i] = if v >= 0.0 {
                    v
                } else {
                    nflip += 1;
                    s |= 1 << i;
                    -v
                };
            }
            if nflip % 2 == 1 {
                let cost = |i: usize| w[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                let imin = (1..8).fold(0, |m, i| if cost(i) < cost(m) { i } else { m });
                xval[8 * k + imin] = -xval[8 * k + imin];
                s ^= 1 << imin;
            }
            signs[k] = s & 127;
        }
        let max = max_of(&xval);
        if max < 1e-8 {
            continue;
        }
        let (mut scale, l) = fit_group(lat, &xval, &w, max, 15, true);
        if scale < 0.0 {
            scale = -scale;
            signs = signs.map(|s| !s & 127);
        }
        for k in 0..8 {
            let p = lat
                .point(&l[4 * k..])
                .expect("the search ends on the lattice");
            b.qs[8 * ib + k] = p as u8;
        }
        words[ib] = signs[0] | signs[1] << 7 | signs[2] << 14 | signs[3] << 21;
        scales[ib] = scale;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return bytemuck::Zeroable::zeroed();
    }
    let d = max_scale / 31.0;
    b.d = f16::from_f32(d * 1.0125);
    for (ib, m) in multipliers(&scales, d).iter().enumerate() {
        words[ib] |= m << 28;
        b.qs[QK_K / 4 + 4 * ib..][..4].copy_from_slice(&words[ib].to_le_bytes());
    }
    b
}

#[inline(never)]
pub(super) fn quantize_iq3s(x: &[f32], qw: Option<&[f32]>) -> BlockIQ3S {
    let lat = iq3s_lattice();
    let sigma2 = 2.0 * super::importance::sum_sq(x) / QK_K as f32;
    let mut b: BlockIQ3S = bytemuck::Zeroable::zeroed();
    let mut scales = [0f32; 8];
    let mut max_scale = 0f32;
    // ggml advances its index and sign cursors only past groups that are not all zero, so a
    // zero group shifts the later groups' indices and signs (not their ninth bits) forward;
    // the same bytes are written here.
    let (mut qs_at, mut signs_at) = (0, 0);
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        let w = group_weights(xb, qw.map(|q| &q[32 * ib..]), sigma2);
        let xval: [f32; 32] = std::array::from_fn(|i| xb[i].abs());
        let mut signs: [u8; 4] = std::array::from_fn(|k| {
            (0..8).fold(0u8, |s, i| s | (((xb[8 * k + i] < 0.0) as u8) << i))
        });
        let max = max_of(&xval);
        if max == 0.0 {
            continue;
        }
        let (mut scale, l) = fit_group(lat, &xval, &w, max, 9, false);
        if scale < 0.0 {
            scale = -scale;
            signs = signs.map(|s| !s);
        }
        for k in 0..8 {
            let p = lat
                .point(&l[4 * k..])
                .expect("the search ends on the lattice");
            b.qs[qs_at + k] = p as u8;
            let e = 8 * ib + k;
            b.qh[e / 8] |= ((p >> 8) as u8) << (e % 8);
        }
        qs_at += 8;
        b.signs[signs_at..signs_at + 4].copy_from_slice(&signs);
        signs_at += 4;
        scales[ib] = scale;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return b;
    }
    let d = max_scale / 31.0;
    b.d = f16::from_f32(d * 1.033);
    let m = multipliers(&scales, d);
    for j in 0..4 {
        b.scales[j] = (m[2 * j] | m[2 * j + 1] << 4) as u8;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattices_match_ggmls_point_lists() {
        // The first points of ggml's `kgrid_256` and `kgrid_512` (3 bits per level).
        let keys = |lat: &Lattice| lat.points[..4].iter().map(|l| key(l)).collect::<Vec<_>>();
        assert_eq!(keys(iq3xxs_lattice()), [0, 2, 4, 9]);
        assert_eq!(keys(iq3s_lattice()), [0, 1, 2, 5]);
        // Every off-lattice combination has neighbours, all on the lattice.
        for lat in [iq3xxs_lattice(), iq3s_lattice()] {
            for u in 0..4096 {
                let m = lat.map[u];
                if m < 0 {
                    let at = (-m - 1) as usize;
                    assert!(lat.neighbours[at] > 0);
                }
            }
        }
    }
}

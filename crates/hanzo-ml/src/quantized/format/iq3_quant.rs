//! ggml's IQ3_XXS and IQ3_S quantizers. Each run of 4 weights must land on a lattice point (256
//! points for XXS, 512 for S) of 3-bit magnitude levels, with the signs stored apart; the
//! search (`lattice_search`) tries scales around `max / 15` per group of 32. The group scales
//! become 4-bit multipliers of one f16 scale per 256.

// The block layouts index several arrays by the same element number.
#![allow(clippy::needless_range_loop)]

use super::iq3::{BlockIQ3S, BlockIQ3XXS};
use super::iq_grids::{IQ3S_BITS, IQ3S_PACKED, IQ3XXS_BITS, IQ3XXS_PACKED};
use super::kquants::QK_K;
use super::lattice::level_indices;
use super::lattice_search::{
    even_signs32, fit_group, max_of, multipliers, Candidates, Lattice, Replace,
};
use half::f16;
use std::sync::OnceLock;

/// A 4-weight lattice of 3-bit levels from its packed grid.
fn lattice(packed: &[u8], bits: usize, nearest: usize) -> Lattice {
    let points = level_indices::<4>(packed, bits)
        .iter()
        .flatten()
        .copied()
        .collect();
    Lattice::new(points, 4, 3, 8, nearest)
}

/// Candidate scales `max / (15 ± 0.2·is)`.
fn candidates(max: f32, steps: i32) -> Candidates {
    Candidates {
        base: 15.0,
        step: 0.2,
        steps,
        max_ref: max,
        initial: max / 15.0,
    }
}

pub(super) fn iq3xxs_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| lattice(&IQ3XXS_PACKED, IQ3XXS_BITS, 2))
}

pub(super) fn iq3s_lattice() -> &'static Lattice {
    static L: OnceLock<Lattice> = OnceLock::new();
    L.get_or_init(|| lattice(&IQ3S_PACKED, IQ3S_BITS, 3))
}

/// Error weights of one group: x², or `qw · √(σ² + x²)` under an importance matrix.
fn group_weights(x: &[f32], qw: Option<&[f32]>, sigma2: f32) -> [f32; 32] {
    match qw {
        Some(qw) => super::importance::weights(x, qw, sigma2),
        None => std::array::from_fn(|i| x[i] * x[i]),
    }
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
        let (xval, mut signs) = even_signs32(xb, &w);
        let max = max_of(&xval);
        if max < 1e-8 {
            continue;
        }
        let mut l = [0i8; 32];
        let c = candidates(max, 15);
        let mut scale = fit_group(lat, &xval, &w, &c, Replace::OffLattice, &mut l);
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
        let mut l = [0i8; 32];
        let c = candidates(max, 9);
        let mut scale = fit_group(lat, &xval, &w, &c, Replace::AllIfAnyOff, &mut l);
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
        assert_eq!(iq3xxs_lattice().first_keys(4), [0, 2, 4, 9]);
        assert_eq!(iq3s_lattice().first_keys(4), [0, 1, 2, 5]);
        // Every off-lattice combination has neighbours.
        for lat in [iq3xxs_lattice(), iq3s_lattice()] {
            for u in 0..4096usize {
                let l: [i8; 4] = std::array::from_fn(|k| (u >> (3 * k) & 7) as i8);
                assert!(lat.point(&l).is_some() || !lat.neighbours(&l).is_empty());
            }
        }
    }
}

//! IQ2_XXS, IQ2_XS and IQ2_S (2.06, 2.31 and 2.56 bits per weight): each run of 8 weights is
//! a point of a fixed lattice of magnitudes with its 8 signs stored apart, under a 4-bit scale
//! per 32 (XXS) or 16 (XS, S) weights and one f16 scale per 256. Element `i` is
//! `d · (2s + 1) / 8 · grid[i] · sign[i]`.

use super::iq2_quant::{iq2s_rows, iq2s_rows_weighted, iq2xs_rows, iq2xxs_rows, NEEDS_IMPORTANCE};
use super::kquants::{BlockQ8K, QK_K};
use super::lattice::{iq2s_grid, iq2xs_grid, iq2xxs_grid, ksigns, lattice_block, signed8, Levels};
use super::GgmlDType;
use half::f16;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ2XXS {
    pub d: f16,
    /// Per 32 weights, two words: four grid indices (one byte each), then four 7-bit sign
    /// indices and the 4-bit scale in the top bits.
    pub qs: [u16; QK_K / 8],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ2XS {
    pub d: f16,
    /// Per 8 weights: a 9-bit grid index and a 7-bit sign index.
    pub qs: [u16; QK_K / 8],
    /// Two 4-bit scales per 32 weights.
    pub scales: [u8; QK_K / 32],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ2S {
    pub d: f16,
    /// The low 8 bits of the 32 grid indices, then 32 bytes of explicit signs.
    pub qs: [u8; QK_K / 4],
    /// The top 2 bits of each grid index, four per byte.
    pub qh: [u8; QK_K / 32],
    /// Two 4-bit scales per 32 weights.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2XXS>() == 66);
const _: () = assert!(std::mem::size_of::<BlockIQ2XS>() == 74);
const _: () = assert!(std::mem::size_of::<BlockIQ2S>() == 82);

/// The lattice points are `(2s+1)/8`-scaled: the factor applied after the integer sums.
const FACTOR: f32 = 0.125;

/// Writes the 8 signed magnitudes of one lattice point.
fn put(level: &mut [i8], point: &[i8; 8], signs: u8) {
    level[..8].copy_from_slice(&signed8(*point, signs));
}

fn iq2xxs_levels(b: &BlockIQ2XXS) -> Levels<32> {
    let mut out = Levels::new(b.d.to_f32());
    let grid = iq2xxs_grid();
    for ib in 0..QK_K / 32 {
        let q = &b.qs[4 * ib..4 * ib + 4];
        let idx = [q[0] as u8, (q[0] >> 8) as u8, q[1] as u8, (q[1] >> 8) as u8];
        let aux = q[2] as u32 | (q[3] as u32) << 16;
        out.mult[ib] = 2 * (aux >> 28) as i32 + 1;
        for l in 0..4 {
            let at = 32 * ib + 8 * l;
            put(
                &mut out.level[at..at + 8],
                &grid[idx[l] as usize],
                ksigns(aux >> (7 * l)),
            );
        }
    }
    out
}

fn iq2xs_levels(b: &BlockIQ2XS) -> Levels<16> {
    let mut out = Levels::new(b.d.to_f32());
    let grid = iq2xs_grid();
    for (e, &q) in b.qs.iter().enumerate() {
        put(
            &mut out.level[8 * e..8 * e + 8],
            &grid[(q & 511) as usize],
            ksigns(q as u32 >> 9),
        );
    }
    for (g, m) in out.mult.iter_mut().enumerate() {
        *m = 2 * (b.scales[g / 2] >> (4 * (g % 2)) & 15) as i32 + 1;
    }
    out
}

fn iq2s_levels(b: &BlockIQ2S) -> Levels<16> {
    let mut out = Levels::new(b.d.to_f32());
    let grid = iq2s_grid();
    let (low, signs) = b.qs.split_at(QK_K / 8);
    for e in 0..QK_K / 8 {
        let high = (b.qh[e / 4] >> (2 * (e % 4)) & 3) as usize;
        put(
            &mut out.level[8 * e..8 * e + 8],
            &grid[low[e] as usize | high << 8],
            signs[e],
        );
    }
    for (g, m) in out.mult.iter_mut().enumerate() {
        *m = 2 * (b.scales[g / 2] >> (4 * (g % 2)) & 15) as i32 + 1;
    }
    out
}

lattice_block!(
    BlockIQ2XXS,
    GgmlDType::IQ2XXS,
    iq2xxs_levels,
    FACTOR,
    limit = 43,
    needs_importance = NEEDS_IMPORTANCE,
    weighted = iq2xxs_rows
);
lattice_block!(
    BlockIQ2XS,
    GgmlDType::IQ2XS,
    iq2xs_levels,
    FACTOR,
    limit = 43,
    needs_importance = NEEDS_IMPORTANCE,
    weighted = iq2xs_rows
);
lattice_block!(
    BlockIQ2S,
    GgmlDType::IQ2S,
    iq2s_levels,
    FACTOR,
    limit = 43,
    quantize = iq2s_rows,
    weighted = iq2s_rows_weighted
);

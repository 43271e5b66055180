//! IQ3_XXS and IQ3_S (3.06 and 3.44 bits per weight): each run of 4 weights is a point of a
//! fixed lattice of magnitudes, with signs stored apart, under a 4-bit scale per 32 weights
//! and one f16 scale per 256. Element `i` is `d · (2s + 1) / 4 · grid[i] · sign[i]` (XXS) or
//! `d · (2s + 1) · grid[i] · sign[i]` (S).

use super::iq3_quant::{quantize_iq3s, quantize_iq3xxs};
use super::kquants::{BlockQ8K, QK_K};
use super::lattice::{iq3s_grid, iq3xxs_grid, ksigns, lattice_block, signed8, Levels};
use super::GgmlDType;
use half::f16;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ3XXS {
    pub d: f16,
    /// 64 grid indices, then per 32 weights a little-endian word of four 7-bit sign indices
    /// and the 4-bit scale in its top bits.
    pub qs: [u8; 3 * QK_K / 8],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ3S {
    pub d: f16,
    /// The low 8 bits of the 64 grid indices.
    pub qs: [u8; QK_K / 4],
    /// The ninth bit of each grid index, eight per byte.
    pub qh: [u8; QK_K / 32],
    /// One sign bit per weight.
    pub signs: [u8; QK_K / 8],
    /// Two 4-bit scales per byte, one per 32 weights.
    pub scales: [u8; QK_K / 64],
}

const _: () = assert!(std::mem::size_of::<BlockIQ3XXS>() == 98);
const _: () = assert!(std::mem::size_of::<BlockIQ3S>() == 110);

/// Writes two 4-weight grid points `a` then `c`, the 8 weights one sign byte covers, signed.
fn put_two(level: &mut [i8], a: [i8; 4], c: [i8; 4], signs: u8) {
    let point = std::array::from_fn(|j| if j < 4 { a[j] } else { c[j - 4] });
    level[..8].copy_from_slice(&signed8(point, signs));
}

pub(super) fn iq3xxs_levels(b: &BlockIQ3XXS) -> Levels<32> {
    let mut out = Levels::new(b.d.to_f32());
    let grid = iq3xxs_grid();
    let (idx, words) = b.qs.split_at(QK_K / 4);
    for ib in 0..QK_K / 32 {
        let aux = u32::from_le_bytes(words[4 * ib..4 * ib + 4].try_into().expect("4 bytes"));
        out.mult[ib] = 2 * (aux >> 28) as i32 + 1;
        for l in 0..4 {
            let signs = ksigns(aux >> (7 * l));
            let (a, c) = (
                grid[idx[8 * ib + 2 * l] as usize],
                grid[idx[8 * ib + 2 * l + 1] as usize],
            );
            put_two(&mut out.level[32 * ib + 8 * l..], a, c, signs);
        }
    }
    out
}

pub(super) fn iq3s_levels(b: &BlockIQ3S) -> Levels<32> {
    let mut out = Levels::new(b.d.to_f32());
    let grid = iq3s_grid();
    // Two points (8 weights) per sign byte.
    for (p, &signs) in b.signs.iter().enumerate() {
        let [a, c] = [2 * p, 2 * p + 1].map(|e| {
            let high = (b.qh[e / 8] >> (e % 8) & 1) as usize;
            grid[b.qs[e] as usize | high << 8]
        });
        put_two(&mut out.level[8 * p..], a, c, signs);
    }
    for (g, m) in out.mult.iter_mut().take(QK_K / 32).enumerate() {
        *m = 1 + 2 * (b.scales[g / 2] >> (4 * (g % 2)) & 15) as i32;
    }
    out
}

fn quantize_xxs(xs: &[f32], out: &mut [BlockIQ3XXS]) {
    for (x, b) in xs.chunks_exact(QK_K).zip(out) {
        *b = quantize_iq3xxs(x, None);
    }
}

fn quantize_xxs_weighted(xs: &[f32], qw: &[f32], out: &mut [BlockIQ3XXS]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_iq3xxs(x, Some(qw));
    }
}

fn quantize_s(xs: &[f32], out: &mut [BlockIQ3S]) {
    for (x, b) in xs.chunks_exact(QK_K).zip(out) {
        *b = quantize_iq3s(x, None);
    }
}

fn quantize_s_weighted(xs: &[f32], qw: &[f32], out: &mut [BlockIQ3S]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_iq3s(x, Some(qw));
    }
}

lattice_block!(
    BlockIQ3XXS,
    GgmlDType::IQ3XXS,
    iq3xxs_levels,
    0.25,
    limit = 62,
    quantize = quantize_xxs,
    weighted = quantize_xxs_weighted
);
lattice_block!(
    BlockIQ3S,
    GgmlDType::IQ3S,
    iq3s_levels,
    1.0,
    limit = 15,
    quantize = quantize_s,
    weighted = quantize_s_weighted
);

//! IQ4_XS (4.25 bits per weight): IQ4_NL's non-linear 4-bit levels under a 6-bit signed scale
//! per 32 weights and one f16 scale per 256. Element `i` is `d · (s − 32) · VALUES[q]`.

use super::iq4nl::{group_scale, pack_indices, scale_weights, IQ4NL_VALUES};
use super::kquants::{BlockQ8K, QK_K};
use super::lattice::{lattice_block, Levels};
use super::search::nearest_int;
use super::{signed_absmax, GgmlDType};
use half::f16;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ4XS {
    pub d: f16,
    /// The top 2 bits of the eight scales.
    pub scales_h: u16,
    /// The low 4 bits of the eight scales, two per byte.
    pub scales_l: [u8; QK_K / 64],
    /// Per 32 weights, 16 bytes: the first 16 weights in the low nibbles, the rest high.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4XS>() == 136);

impl BlockIQ4XS {
    /// The multiplier of group `g` (of 32), in [-32, 31]: its 6 bits stored +32, the low four
    /// in `scales_l`, the top two in `scales_h`.
    #[inline(always)]
    pub fn group_mult(&self, g: usize) -> i32 {
        let low = self.scales_l[g / 2] >> (4 * (g % 2)) & 15;
        let high = (self.scales_h >> (2 * g) & 3) as u8;
        (low | high << 4) as i32 - 32
    }
}

fn iq4xs_levels(b: &BlockIQ4XS) -> Levels<32> {
    let mut out = Levels::new(b.d.to_f32());
    for ib in 0..QK_K / 32 {
        out.mult[ib] = b.group_mult(ib);
        let qs = &b.qs[16 * ib..16 * ib + 16];
        for (j, &q) in qs.iter().enumerate() {
            out.level[32 * ib + j] = IQ4NL_VALUES[(q & 15) as usize];
            out.level[32 * ib + 16 + j] = IQ4NL_VALUES[(q >> 4) as usize];
        }
    }
    out
}

/// ggml's IQ4_XS quantizer (what `llama-quantize` runs, with or without an importance
/// matrix `qw`): each group of 32 gets IQ4_NL's scale search; the super-block scale is the
/// largest of those over -32, each group's 6-bit multiplier the nearest integer, and the
/// levels are indexed again against the scale the multiplier gives.
#[inline(never)]
fn quantize_block(x: &[f32], qw: Option<&[f32]>) -> BlockIQ4XS {
    let w = scale_weights(x, qw);
    let scales: [f32; 8] = std::array::from_fn(|g| group_scale(&x[32 * g..32 * g + 32], &w[g]));
    let d = -signed_absmax(&scales) / 32.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockIQ4XS {
        d: f16::from_f32(d),
        scales_h: 0,
        scales_l: [0; QK_K / 64],
        qs: [0; QK_K / 2],
    };
    for (g, &scale) in scales.iter().enumerate() {
        let l = nearest_int(id * scale).clamp(-32, 31);
        let dl = d * l as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        b.qs[16 * g..16 * g + 16].copy_from_slice(&pack_indices(&x[32 * g..32 * g + 32], idl));
        let biased = (l + 32) as u8;
        b.scales_l[g / 2] |= (biased & 15) << (4 * (g % 2));
        b.scales_h |= ((biased >> 4) as u16) << (2 * g);
    }
    b
}

fn quantize(xs: &[f32], out: &mut [BlockIQ4XS]) {
    for (x, b) in xs.chunks_exact(QK_K).zip(out) {
        *b = quantize_block(x, None);
    }
}

fn quantize_weighted(xs: &[f32], qw: &[f32], out: &mut [BlockIQ4XS]) {
    for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
        *b = quantize_block(x, Some(qw));
    }
}

lattice_block!(
    BlockIQ4XS,
    GgmlDType::IQ4XS,
    iq4xs_levels,
    1.0,
    limit = 127,
    quantize = quantize,
    weighted = quantize_weighted
);

//! IQ4_XS (4.25 bits per weight): IQ4_NL's non-linear 4-bit levels under a 6-bit signed scale
//! per 32 weights and one f16 scale per 256. Element `i` is `d · (s − 32) · VALUES[q]`.

use super::iq4nl::IQ4NL_VALUES;
use super::kquants::{BlockQ8K, QK_K};
use super::lattice::{lattice_block, Levels};
use super::GgmlDType;
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

fn iq4xs_levels(b: &BlockIQ4XS) -> Levels<32> {
    let mut out = Levels::new(b.d.to_f32());
    for ib in 0..QK_K / 32 {
        let low = b.scales_l[ib / 2] >> (4 * (ib % 2)) & 15;
        let high = (b.scales_h >> (2 * ib) & 3) as u8;
        out.mult[ib] = (low | high << 4) as i32 - 32;
        let qs = &b.qs[16 * ib..16 * ib + 16];
        for (j, &q) in qs.iter().enumerate() {
            out.level[32 * ib + j] = IQ4NL_VALUES[(q & 15) as usize];
            out.level[32 * ib + 16 + j] = IQ4NL_VALUES[(q >> 4) as usize];
        }
    }
    out
}

const NO_QUANTIZER: &str = "quantizing to IQ4_XS is not supported yet";

lattice_block!(
    BlockIQ4XS,
    GgmlDType::IQ4XS,
    iq4xs_levels,
    1.0,
    NO_QUANTIZER
);

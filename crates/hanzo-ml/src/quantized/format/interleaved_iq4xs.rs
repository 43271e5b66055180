//! IQ4_XS stored eight rows at a time (`BlockIQ4XSx8`): the layout its decode kernels stream,
//! and the portable dot product they are checked against.
//!
//! Row by row, an IQ4_XS dot product ends every 256-element block of every row with a
//! horizontal sum of one vector into a scalar and decodes that row's eight 6-bit multipliers
//! on its own. Eight rows interleaved keep one i32 lane per row, as `interleaved` does for
//! the 32-element types: each group of 32 is IQ4_NL's nibble layout (`BlockIQ4NLx8`), one
//! `vpdpbusd` (or `maddubs`) a step advances all eight rows, the eight rows' multipliers of a
//! group come in one vector, and the block's floats are one multiply per row lane. The
//! activations stay Q8_K and the integer of each block and row is the row kernel's, so the
//! result is `BlockIQ4XS::vec_dot_scalar`'s bit for bit. The repacked weight takes exactly
//! the bytes of the original.

use super::interleaved::{interleave_qs, nibble_steps, Steps, ROWS};
use super::{BlockIQ4XS, BlockQ8K, IQ4NL_VALUES, QK_K};
use half::f16;

/// Groups of 32 per block.
pub const GROUPS: usize = QK_K / 32;

/// Block `i` of eight consecutive rows of IQ4_XS. Group `g`'s indices are
/// `qs[128 g..][..128]` laid out as `BlockIQ4NLx8`'s nibbles; row `r`'s 6-bit multiplier of
/// group `g` (stored +32) has its low four bits in nibble `g % 2` of
/// `scales_l[8 (g / 2) + r]` and its top two at bits `2g..2g + 2` of `scales_h[r]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ4XSx8 {
    pub d: [f16; ROWS],
    pub scales_h: [u16; ROWS],
    pub scales_l: [u8; 4 * ROWS],
    pub qs: [u8; 128 * GROUPS],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4XSx8>() == ROWS * 136);

impl BlockIQ4XSx8 {
    /// Blocks `i` of eight consecutive rows, as one.
    pub fn pack(rows: [&BlockIQ4XS; ROWS]) -> Self {
        let mut qs = [0u8; 128 * GROUPS];
        for (g, out) in qs.chunks_exact_mut(128).enumerate() {
            let group = rows.map(|b| b.qs[16 * g..][..16].try_into().expect("16 bytes"));
            out.copy_from_slice(&interleave_qs(group));
        }
        Self {
            d: rows.map(|b| b.d),
            scales_h: rows.map(|b| b.scales_h),
            scales_l: std::array::from_fn(|p| rows[p % ROWS].scales_l[p / ROWS]),
            qs,
        }
    }

    /// Row `r`'s multiplier of group `g`, in [-32, 31] (`BlockIQ4XS::group_mult`).
    pub fn mult(&self, g: usize, r: usize) -> i32 {
        let low = self.scales_l[ROWS * (g / 2) + r] >> (4 * (g % 2)) & 15;
        let high = (self.scales_h[r] >> (2 * g) & 3) as u8;
        (low | high << 4) as i32 - 32
    }

    /// Group `g`'s indices, in `BlockIQ4NLx8`'s layout.
    pub fn group(&self, g: usize) -> &[u8; 128] {
        self.qs[128 * g..][..128].try_into().expect("128 bytes")
    }

    /// Group `g`'s table levels plus 128 (unsigned), step by step.
    pub fn unsigned_levels(&self, g: usize) -> Steps {
        unsigned_levels(self.group(g))
    }
}

/// The table levels plus 128 (unsigned) of a group's nibble planes, step by step.
pub fn unsigned_levels(qs: &[u8; 128]) -> Steps {
    nibble_steps(qs).map(|s| s.map(|i| IQ4NL_VALUES[i as usize] as u8 ^ 0x80))
}

/// Row `r` of a group of eight interleaved rows (`group`: its `k / 256` blocks) as f32 into
/// `out` (`k` values): the values `BlockIQ4XS::dequantize` gives for that row.
pub fn dequantize_group_row(group: &[BlockIQ4XSx8], r: usize, out: &mut [f32]) {
    for (b, out) in group.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d[r].to_f32();
        for (g, out) in out.chunks_exact_mut(32).enumerate() {
            let dl = d * b.mult(g, r) as f32;
            let u = b.unsigned_levels(g);
            for (j, o) in out.iter_mut().enumerate() {
                *o = dl * (u[j / 4][4 * r + j % 4] as i32 - 128) as f32;
            }
        }
    }
}

/// The portable kernel: `[c][r]` = row `r` times activation row `c`, each block's integer
/// `Σ_g mult · Σ level·x` then `d · x.d · that` summed over blocks, as the row kernel does.
pub fn dot_scalar<const C: usize>(w: &[BlockIQ4XSx8], x: &[&[BlockQ8K]; C]) -> [[f32; ROWS]; C] {
    let mut acc = [[0f32; ROWS]; C];
    for (i, b) in w.iter().enumerate() {
        let levels: [Steps; GROUPS] = std::array::from_fn(|g| b.unsigned_levels(g));
        for (acc, x) in acc.iter_mut().zip(x) {
            let x = &x[i];
            for (r, acc) in acc.iter_mut().enumerate() {
                let mut sum = 0i32;
                for (g, u) in levels.iter().enumerate() {
                    let q = &x.qs[32 * g..][..32];
                    let mut s = 0i32;
                    for (t, step) in u.iter().enumerate() {
                        for k in 0..4 {
                            s += (step[4 * r + k] as i32 - 128) * q[4 * t + k] as i32;
                        }
                    }
                    sum += b.mult(g, r) * s;
                }
                *acc += b.d[r].to_f32() * x.d * sum as f32;
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantized::format::GgmlBlock;

    fn rows(seed: u64) -> Vec<BlockIQ4XS> {
        let mut s = seed | 1;
        let x: Vec<f32> = (0..ROWS * 2 * QK_K)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        let mut w = vec![<BlockIQ4XS as bytemuck::Zeroable>::zeroed(); ROWS * 2];
        BlockIQ4XS::quantize(&x, &mut w);
        w
    }

    /// Every multiplier and value of every row comes back from the repacked blocks, and their
    /// dot product is the row kernel's bit for bit.
    #[test]
    fn repacked_rows_keep_their_values_and_dot_products() {
        let w = rows(7);
        let packed: Vec<BlockIQ4XSx8> = (0..2)
            .map(|i| BlockIQ4XSx8::pack(std::array::from_fn(|r| &w[2 * r + i])))
            .collect();
        let mut x = vec![<BlockQ8K as bytemuck::Zeroable>::zeroed(); 2];
        let xs: Vec<f32> = (0..2 * QK_K)
            .map(|i| ((i * 37) % 255) as f32 - 127.0)
            .collect();
        BlockQ8K::quantize(&xs, &mut x);
        let dots = dot_scalar::<1>(&packed, &[&x]);
        for r in 0..ROWS {
            let row = &w[2 * r..2 * r + 2];
            for (i, b) in row.iter().enumerate() {
                for g in 0..GROUPS {
                    assert_eq!(packed[i].mult(g, r), b.group_mult(g), "row {r} group {g}");
                }
            }
            let (mut want, mut got) = (vec![0f32; 2 * QK_K], vec![0f32; 2 * QK_K]);
            BlockIQ4XS::dequantize(row, &mut want);
            dequantize_group_row(&packed, r, &mut got);
            assert_eq!(got, want, "row {r}");
            let dot = BlockIQ4XS::vec_dot_scalar(row, &x);
            assert_eq!(dots[0][r].to_bits(), dot.to_bits(), "row {r}");
        }
    }
}

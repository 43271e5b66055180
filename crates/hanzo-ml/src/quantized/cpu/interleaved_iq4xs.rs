//! IQ4_XS weights repacked eight rows at a time (`format::interleaved_iq4xs`), behind the
//! same decode, small-batch and prefill drivers as the 32-element types (`interleaved`): a
//! copy made where the CPU has AVX2, against Q8_K activations, with the row kernels' numbers.

use super::gemm;
use super::interleaved::{count_repacked, place_steps, repack, GroupKernels};
use super::Route;
use crate::quantized::format::interleaved::ROWS;
use crate::quantized::format::interleaved_iq4xs::{dequantize_group_row, BlockIQ4XSx8, GROUPS};
use crate::quantized::format::{BlockIQ4XS, BlockQ8K, QK_K};
use crate::quantized::kernels::interleaved::{iq4xs_dot, iq4xs_expand, Ahead};
use crate::quantized::kernels::QuantizeRow;
use crate::{Error, Result};

/// A `[n, k]` IQ4_XS weight repacked: group `g` (rows `8g..8g + 8`) has its blocks at
/// `blocks[g * k / 256..][..k / 256]`.
pub struct InterleavedIQ4XS {
    blocks: Vec<BlockIQ4XSx8>,
    n: usize,
    k: usize,
}

impl std::fmt::Debug for InterleavedIQ4XS {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InterleavedIQ4XS([{}, {}])", self.n, self.k)
    }
}

/// Whether an IQ4_XS weight of `n` rows by `k` can be repacked: whole groups of eight rows
/// (its rows are whole blocks of 256 in any file).
pub(crate) fn fits(n: usize, k: usize) -> bool {
    n.is_multiple_of(ROWS) && k.is_multiple_of(QK_K)
}

impl InterleavedIQ4XS {
    /// Repacks `w` (`[n, k]`, row after row), handing `release` the bytes copied so far (see
    /// `Interleaved::new_releasing`).
    pub(crate) fn new_releasing(
        w: &[BlockIQ4XS],
        n: usize,
        k: usize,
        release: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) -> Result<Self> {
        let per_row = k / QK_K;
        if !fits(n, k) || w.len() != n * per_row {
            return Err(Error::invalid(
                "InterleavedIQ4XS::new",
                format!(
                    "IQ4_XS weight [{n}, {k}] ({} blocks) does not split into groups of {ROWS} rows",
                    w.len()
                ),
            ));
        }
        let blocks = repack(w, per_row, BlockIQ4XSx8::pack, release);
        count_repacked(std::mem::size_of_val(w));
        Ok(Self { blocks, n, k })
    }

    /// Repacks `w` (`[n, k]`, row after row).
    pub fn new(w: &[BlockIQ4XS], n: usize, k: usize) -> Result<Self> {
        Self::new_releasing(w, n, k, &|_| {})
    }

    /// `x [m, k]` times the weight transposed → `[m, n]` (see `interleaved::matmul`).
    pub fn matmul(&self, x: &[f32], m: usize, route: Route) -> Vec<f32> {
        super::interleaved::matmul(self, x, m, route)
    }

    fn group(&self, g: usize) -> &[BlockIQ4XSx8] {
        let per_row = self.k / QK_K;
        &self.blocks[g * per_row..][..per_row]
    }
}

/// Activation rows quantized to Q8_K, `blocks` per row.
pub(crate) struct Q8KRows {
    q: Vec<BlockQ8K>,
    blocks: usize,
}

impl GroupKernels for InterleavedIQ4XS {
    type Acts = Q8KRows;
    type Row<'a> = &'a [BlockQ8K];
    /// The table levels plus 128.
    const MAX_LEVEL: u8 = 255;

    fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }
    fn streamed(&self) -> bool {
        crate::quantized::kernels::prefetch::streamed(std::mem::size_of_val(&self.blocks[..]))
    }
    fn quantize(&self, x: &[f32], m: usize) -> Q8KRows {
        let blocks = self.k / QK_K;
        let mut q = vec![<BlockQ8K as bytemuck::Zeroable>::zeroed(); m * blocks];
        let quantize = BlockQ8K::quantize_row();
        for (q, x) in q
            .chunks_exact_mut(blocks.max(1))
            .zip(x.chunks_exact(self.k.max(1)))
        {
            quantize(x, q);
        }
        Q8KRows { q, blocks }
    }
    fn row<'a>(&self, acts: &'a Q8KRows, j: usize) -> &'a [BlockQ8K] {
        &acts.q[j * acts.blocks..][..acts.blocks]
    }
    fn dot<const C: usize>(
        &self,
        g: usize,
        x: &[&[BlockQ8K]; C],
        ahead: Ahead,
    ) -> [[f32; ROWS]; C] {
        iq4xs_dot::<C>()(self.group(g), x, ahead)
    }
    fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        dequantize_group_row(self.group(r / ROWS), r % ROWS, out)
    }

    /// Each group of 32 as a panel block: the levels plus 128, the scale `d · mult` (as the
    /// stored weight's panels have it) and the min `128 · scale`.
    fn unpack_panel(&self, s: &mut gemm::Scratch, r0: usize, live: usize) {
        let (rows, u, scale, min) = s.panel_for(live);
        let expand = iq4xs_expand();
        let mut levels = [0u8; 256];
        for half in 0..live / ROWS {
            for (i, b) in self.group(r0 / ROWS + half).iter().enumerate() {
                for g in 0..GROUPS {
                    let at = GROUPS * i + g;
                    expand(b.group(g), &mut levels);
                    place_steps(&levels, &mut u[at * 32 * rows..][..32 * rows], half);
                    for r in 0..ROWS {
                        let d = b.d[r].to_f32() * b.mult(g, r) as f32;
                        scale[at * rows + half * ROWS + r] = d;
                        min[at * rows + half * ROWS + r] = 128.0 * d;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantized::format::interleaved_iq4xs::dot_scalar;
    use crate::quantized::format::GgmlBlock;
    use crate::quantized::kernels::interleaved::iq4xs_dot_for;
    use crate::quantized::kernels::Isa;
    use half::f16;
    use rand::{Rng, SeedableRng};

    /// A block whose every index is `index` and every multiplier `mult`, scale 1.
    fn uniform_block(index: u8, mult: i32) -> BlockIQ4XS {
        let biased = (mult + 32) as u8;
        BlockIQ4XS {
            d: f16::ONE,
            scales_h: (0..8).fold(0, |h, g| h | ((biased >> 4) as u16) << (2 * g)),
            scales_l: [(biased & 15) * 0x11; 4],
            qs: [index * 0x11; 128],
        }
    }

    /// The kernels of every level this CPU has against the portable one and the row kernel,
    /// bit for bit, including the extreme levels (-127 and 113) under the extreme
    /// multipliers (-32 and 31) against ±127 activations, the i16 pair sums' worst case.
    #[test]
    fn simd_kernels_equal_the_portable_one_and_the_row_kernel() {
        for isa in [Isa::Avx2, Isa::AvxVnni, Isa::Avx512] {
            crate::cpu::features::test_kernels_at(isa, "interleaved IQ4_XS dot kernels");
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (n, k) = (16, 4 * QK_K);
        let xs: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut w = vec![<BlockIQ4XS as bytemuck::Zeroable>::zeroed(); n * k / QK_K];
        BlockIQ4XS::quantize(&xs, &mut w);
        // Row 0's first blocks: every level the table's top or bottom, multipliers at both ends.
        w[0] = uniform_block(15, 31);
        w[1] = uniform_block(0, -32);
        w[2] = uniform_block(0, 31);
        w[5 * 4] = uniform_block(15, -32);
        let packed = InterleavedIQ4XS::new(&w, n, k).unwrap();
        // The panels' expansion gives every group's levels as the portable code does.
        let mut expanded = [0u8; 256];
        for b in &packed.blocks {
            for g in 0..GROUPS {
                iq4xs_expand()(b.group(g), &mut expanded);
                assert_eq!(
                    &expanded[..],
                    b.unsigned_levels(g).as_flattened(),
                    "group {g}"
                );
            }
        }
        // Activation rows 0 and 1 start with blocks of all +1 and all -1 (levels ±127).
        let x: Vec<f32> = (0..8 * k)
            .map(|i| match (i / k, i % k < 3 * QK_K) {
                (0, true) => 1.0,
                (1, true) => -1.0,
                _ => rng.gen_range(-2.0..2.0),
            })
            .collect();
        let acts = packed.quantize(&x, 8);
        let rows: [&[BlockQ8K]; 8] = std::array::from_fn(|j| packed.row(&acts, j));
        let four: [&[BlockQ8K]; 4] = std::array::from_fn(|j| rows[j]);
        for g in 0..n / ROWS {
            let want = dot_scalar::<8>(packed.group(g), &rows);
            for (c, x) in rows.iter().enumerate() {
                for r in 0..ROWS {
                    let row = &w[(ROWS * g + r) * 4..][..4];
                    let dot = BlockIQ4XS::vec_dot_scalar(row, x);
                    assert_eq!(
                        want[c][r].to_bits(),
                        dot.to_bits(),
                        "group {g} row {r} x {c}"
                    );
                }
            }
            for isa in Isa::available() {
                let at = format!("group {g} at {}", isa.name());
                let group = packed.group(g);
                assert_eq!(
                    iq4xs_dot_for::<8>(isa)(group, &rows, Ahead::Nothing),
                    want,
                    "{at}"
                );
                let got = iq4xs_dot_for::<4>(isa)(group, &four, Ahead::Cached);
                assert_eq!(got[..], want[..4], "{at}");
                let got = iq4xs_dot_for::<1>(isa)(group, &[rows[1]], Ahead::Streamed);
                assert_eq!(got[0], want[1], "{at}");
            }
        }
        // Row 0 against all +1 (one level `q`, ±127): the exact integers 256 · q · level ·
        // mult per block.
        let q = rows[0][0].qs[0] as i32;
        assert_eq!(q.abs(), 127);
        assert!(rows[0][..3]
            .iter()
            .all(|b| b.qs == [q as i8; QK_K] && b.d == rows[0][0].d));
        let top = 113 * 31 + -127 * -32 + -127 * 31;
        let want = rows[0][0].d * (256 * q * top) as f32;
        let got = dot_scalar::<1>(&packed.group(0)[..3], &[&rows[0][..3]])[0][0];
        assert!((got - want).abs() <= want.abs() * 1e-6, "{got} vs {want}");
    }
}

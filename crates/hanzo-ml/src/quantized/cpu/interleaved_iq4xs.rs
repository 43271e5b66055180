//! IQ4_XS weights repacked eight rows at a time (`format::interleaved_iq4xs`), and IQ3_S and
//! IQ3_XXS weights transcoded into that layout, behind the same decode, small-batch and
//! prefill drivers as the 32-element types (`interleaved`): a copy made where the CPU has
//! AVX2, against Q8_K activations, with the row kernels' numbers.

use super::gemm;
use super::interleaved::{count_repacked, place_steps, repack, GroupKernels};
use super::Route;
use crate::quantized::format::interleaved::ROWS;
use crate::quantized::format::interleaved_iq4xs::{
    dequantize_group_row, BlockIQ4XSx8, IQ4XSLayout, LevelTable, GROUPS,
};
use crate::quantized::format::{BlockQ8K, QK_K};
use crate::quantized::kernels::interleaved::{iq4xs_dot, iq4xs_expand, Ahead};
use crate::quantized::kernels::QuantizeRow;
use crate::{Error, Result};

/// A `[n, k]` IQ4_XS, IQ3_S or IQ3_XXS weight repacked: group `g` (rows `8g..8g + 8`) has its
/// blocks at `blocks[g * k / 256..][..k / 256]`, their indices picking from `table`.
pub struct InterleavedIQ4XS {
    blocks: Vec<BlockIQ4XSx8>,
    table: &'static LevelTable,
    n: usize,
    k: usize,
}

impl std::fmt::Debug for InterleavedIQ4XS {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InterleavedIQ4XS([{}, {}])", self.n, self.k)
    }
}

/// Whether an IQ4_XS, IQ3_S or IQ3_XXS weight of `n` rows by `k` can be repacked: whole
/// groups of eight rows (its rows are whole blocks of 256 in any file).
pub(crate) fn fits(n: usize, k: usize) -> bool {
    n.is_multiple_of(ROWS) && k.is_multiple_of(QK_K)
}

impl InterleavedIQ4XS {
    /// Repacks `w` (`[n, k]`, row after row), handing `release` the bytes copied so far (see
    /// `Interleaved::new_releasing`).
    pub(crate) fn new_releasing<B: IQ4XSLayout>(
        w: &[B],
        n: usize,
        k: usize,
        release: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) -> Result<Self> {
        let per_row = k / QK_K;
        if !fits(n, k) || w.len() != n * per_row {
            return Err(Error::invalid(
                "InterleavedIQ4XS::new",
                format!(
                    "{} weight [{n}, {k}] ({} blocks) does not split into groups of {ROWS} rows",
                    B::DTYPE,
                    w.len()
                ),
            ));
        }
        let blocks = repack(w, per_row, B::pack, release);
        count_repacked(std::mem::size_of_val(w));
        Ok(Self {
            blocks,
            table: B::TABLE,
            n,
            k,
        })
    }

    /// Repacks `w` (`[n, k]`, row after row).
    pub fn new<B: IQ4XSLayout>(w: &[B], n: usize, k: usize) -> Result<Self> {
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
    /// The table levels plus the panels' offset.
    fn max_level(&self) -> u8 {
        self.table.panel_max
    }

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
        iq4xs_dot::<C>()(self.group(g), x, self.table, ahead)
    }
    fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        dequantize_group_row(self.group(r / ROWS), r % ROWS, self.table, out)
    }

    /// Each group of 32 as a panel block: the levels plus the table's offset, the scale
    /// `d · mult · factor` and the min `offset · scale`, as the stored weight's panels have
    /// them (so a prompt's numbers do not depend on whether its weights are repacked yet).
    fn unpack_panel(&self, s: &mut gemm::Scratch, r0: usize, live: usize) {
        let (rows, u, scale, min) = s.panel_for(live);
        let expand = iq4xs_expand();
        let mut levels = [0u8; 256];
        for half in 0..live / ROWS {
            for (i, b) in self.group(r0 / ROWS + half).iter().enumerate() {
                for g in 0..GROUPS {
                    let at = GROUPS * i + g;
                    expand(b.group(g), self.table, &mut levels);
                    place_steps(&levels, &mut u[at * 32 * rows..][..32 * rows], half);
                    for r in 0..ROWS {
                        let d = b.d[r].to_f32() * b.mult(g, r) as f32 * self.table.factor;
                        scale[at * rows + half * ROWS + r] = d;
                        min[at * rows + half * ROWS + r] = self.table.offset as f32 * d;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantized::format::interleaved_iq4xs::{dot_scalar, panel_levels, IQ4XS_TABLE};
    use crate::quantized::format::{BlockIQ3S, BlockIQ3XXS, BlockIQ4XS};
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

    /// The kernels of every level this CPU has against the portable one and the row kernel
    /// of `B`, bit for bit, over `w` (`[16, 1024]`), against activation rows 0 and 1 that
    /// start with three blocks of all +1 and all -1 (levels ±127); gives the repacked weight
    /// and those activation rows.
    fn check_kernels<B: IQ4XSLayout>(w: &[B], rng: &mut impl Rng) -> (InterleavedIQ4XS, Q8KRows) {
        for isa in [Isa::Avx2, Isa::AvxVnni, Isa::Avx512] {
            crate::cpu::features::test_kernels_at(isa, "interleaved IQ4_XS dot kernels");
        }
        let (n, k) = (16, 4 * QK_K);
        let packed = InterleavedIQ4XS::new(w, n, k).unwrap();
        // The panels' expansion gives every group's levels as the portable code does.
        let mut expanded = [0u8; 256];
        for b in &packed.blocks {
            for g in 0..GROUPS {
                iq4xs_expand()(b.group(g), B::TABLE, &mut expanded);
                assert_eq!(
                    &expanded[..],
                    panel_levels(b.group(g), B::TABLE).as_flattened(),
                    "group {g}"
                );
            }
        }
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
            let want = dot_scalar::<8>(packed.group(g), &rows, B::TABLE);
            for (c, x) in rows.iter().enumerate() {
                for r in 0..ROWS {
                    let row = &w[(ROWS * g + r) * 4..][..4];
                    let dot = B::vec_dot_scalar(row, x);
                    assert_eq!(
                        want[c][r].to_bits(),
                        dot.to_bits(),
                        "{} group {g} row {r} x {c}",
                        B::DTYPE
                    );
                }
            }
            for isa in Isa::available() {
                let at = format!("{} group {g} at {}", B::DTYPE, isa.name());
                let group = packed.group(g);
                let dot = |c| iq4xs_dot_for::<8>(isa)(group, &rows, B::TABLE, c);
                assert_eq!(dot(Ahead::Nothing), want, "{at}");
                let got = iq4xs_dot_for::<4>(isa)(group, &four, B::TABLE, Ahead::Cached);
                assert_eq!(got[..], want[..4], "{at}");
                let got = iq4xs_dot_for::<1>(isa)(group, &[rows[1]], B::TABLE, Ahead::Streamed);
                assert_eq!(got[0], want[1], "{at}");
            }
        }
        (packed, acts)
    }

    /// `n · k` weights of `B` from `rng`.
    fn random<B: IQ4XSLayout>(rng: &mut impl Rng, n: usize, k: usize) -> Vec<B> {
        let xs: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut w = vec![<B as bytemuck::Zeroable>::zeroed(); n * k / QK_K];
        B::quantize(&xs, &mut w);
        w
    }

    /// IQ4_XS's kernels (`check_kernels`), including the extreme levels (-127 and 113) under
    /// the extreme multipliers (-32 and 31) against ±127 activations, the i16 pair sums'
    /// worst case.
    #[test]
    fn simd_kernels_equal_the_portable_one_and_the_row_kernel() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut w = random::<BlockIQ4XS>(&mut rng, 16, 4 * QK_K);
        // Row 0's first blocks: every level the table's top or bottom, multipliers at both ends.
        w[0] = uniform_block(15, 31);
        w[1] = uniform_block(0, -32);
        w[2] = uniform_block(0, 31);
        w[5 * 4] = uniform_block(15, -32);
        let (packed, acts) = check_kernels(&w, &mut rng);
        let rows: [&[BlockQ8K]; 1] = [packed.row(&acts, 0)];
        // Row 0 against all +1 (one level `q`, ±127): the exact integers 256 · q · level ·
        // mult per block.
        let q = rows[0][0].qs[0] as i32;
        assert_eq!(q.abs(), 127);
        assert!(rows[0][..3]
            .iter()
            .all(|b| b.qs == [q as i8; QK_K] && b.d == rows[0][0].d));
        let top = 113 * 31 + -127 * -32 + -127 * 31;
        let want = rows[0][0].d * (256 * q * top) as f32;
        let got = dot_scalar::<1>(&packed.group(0)[..3], &[&rows[0][..3]], &IQ4XS_TABLE)[0][0];
        assert!((got - want).abs() <= want.abs() * 1e-6, "{got} vs {want}");
    }

    /// IQ3_S and IQ3_XXS transcoded: their kernels (`check_kernels`) give the row kernels'
    /// numbers.
    #[test]
    fn transcoded_iq3_kernels_equal_the_row_kernels() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let w = random::<BlockIQ3S>(&mut rng, 16, 4 * QK_K);
        check_kernels(&w, &mut rng);
        let w = random::<BlockIQ3XXS>(&mut rng, 16, 4 * QK_K);
        check_kernels(&w, &mut rng);
    }
}

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
//!
//! IQ3_S and IQ3_XXS take the same layout (`pack_iq3s`, `pack_iq3xxs`): their blocks are
//! signed lattice magnitudes (eight of them, so sixteen signed levels) under a multiplier in
//! [1, 31] per 32 weights and one f16 scale, which is an IQ4_XS block whose indices pick from
//! another table (`LevelTable`). Looking a level up by a 4-bit index in a register is one
//! shuffle for 32 weights, where their own layouts fetch a 4-byte lattice point from memory
//! for every 4; the copy takes 136 bytes per 256 weights against their 110 and 98, and gives
//! their row kernels' integers, so their dot products bit for bit.

use super::interleaved::{interleave_qs, nibble_steps, Steps, ROWS};
use super::iq3::{iq3s_levels, iq3xxs_levels};
use super::iq_grids::{IQ3S_LEVELS, IQ3XXS_LEVELS};
use super::lattice::{unpack_offset, Levels};
use super::{BlockIQ3S, BlockIQ3XXS, BlockIQ4XS, BlockQ8K, IQ4NL_VALUES, QK_K};
use half::f16;

/// The sixteen signed levels a block's 4-bit indices stand for, and the power of two its dot
/// product ends with (IQ3_XXS's 1/4).
#[derive(Debug, PartialEq)]
pub struct LevelTable {
    pub signed: [i8; 16],
    /// `signed + 128`, for the unsigned operand of `vpdpbusd`.
    pub unsigned: [u8; 16],
    pub factor: f32,
    /// The GEMM panels' unsigned form, `signed + offset`, with the stored type's offset
    /// (`lattice::unpack_offset`: 64 where that keeps every byte within 127), and its largest
    /// byte.
    pub panel: [u8; 16],
    pub offset: u8,
    pub panel_max: u8,
    /// The index of each level (as a byte), 16 where the table lacks it.
    index: [u8; 256],
}

impl LevelTable {
    /// `limit`: the largest magnitude the stored type's panels assume (`lattice_block!`).
    const fn new(signed: [i8; 16], factor: f32, limit: u8) -> Self {
        let (offset, panel_max) = unpack_offset(limit);
        let mut unsigned = [0u8; 16];
        let mut panel = [0u8; 16];
        let mut index = [16u8; 256];
        let mut i = 0;
        while i < 16 {
            unsigned[i] = (signed[i] as i16 + 128) as u8;
            panel[i] = (signed[i] as i16 + offset as i16) as u8;
            index[signed[i] as u8 as usize] = i as u8;
            i += 1;
        }
        Self {
            signed,
            unsigned,
            factor,
            panel,
            offset,
            panel_max,
            index,
        }
    }

    /// A lattice's eight magnitudes, rising, with their negations below: index `8 + j` for
    /// magnitude `j`, `7 - j` for its negation.
    const fn signed_lattice(magnitudes: [i8; 8], factor: f32, limit: u8) -> Self {
        let mut signed = [0i8; 16];
        let mut j = 0;
        while j < 8 {
            signed[8 + j] = magnitudes[j];
            signed[7 - j] = -magnitudes[j];
            j += 1;
        }
        Self::new(signed, factor, limit)
    }
}

/// IQ4_XS's own table: IQ4_NL's levels.
pub const IQ4XS_TABLE: LevelTable = LevelTable::new(IQ4NL_VALUES, 1.0, 127);
/// IQ3_S transcoded: ±1, ±3, …, ±15.
pub const IQ3S_TABLE: LevelTable = LevelTable::signed_lattice(IQ3S_LEVELS, 1.0, 15);
/// IQ3_XXS transcoded: ±4, ±12, …, ±52, ±62, the sum times 1/4.
pub const IQ3XXS_TABLE: LevelTable = LevelTable::signed_lattice(IQ3XXS_LEVELS, 0.25, 62);

/// The block types stored in this layout: IQ4_XS itself and the two it transcodes.
pub trait IQ4XSLayout: super::GgmlBlock<Dot = BlockQ8K> + Sync {
    /// What the layout's indices stand for.
    const TABLE: &'static LevelTable;
    /// Blocks `i` of eight consecutive rows, as one.
    fn pack(rows: [&Self; ROWS]) -> BlockIQ4XSx8;
}

impl IQ4XSLayout for BlockIQ4XS {
    const TABLE: &'static LevelTable = &IQ4XS_TABLE;
    fn pack(rows: [&Self; ROWS]) -> BlockIQ4XSx8 {
        BlockIQ4XSx8::pack(rows)
    }
}

impl IQ4XSLayout for BlockIQ3S {
    const TABLE: &'static LevelTable = &IQ3S_TABLE;
    fn pack(rows: [&Self; ROWS]) -> BlockIQ4XSx8 {
        BlockIQ4XSx8::pack_iq3s(rows)
    }
}

impl IQ4XSLayout for BlockIQ3XXS {
    const TABLE: &'static LevelTable = &IQ3XXS_TABLE;
    fn pack(rows: [&Self; ROWS]) -> BlockIQ4XSx8 {
        BlockIQ4XSx8::pack_iq3xxs(rows)
    }
}

/// A lattice block decoded to `levels` (multipliers in [1, 31], every level in `table`) as
/// the IQ4_XS block of scale `d` whose indices pick those levels from `table`.
fn transcoded(d: f16, levels: &Levels<32>, table: &LevelTable) -> BlockIQ4XS {
    let index = |l: i8| {
        let i = table.index[l as u8 as usize];
        debug_assert!(i < 16, "level {l} is not in the table");
        i & 15
    };
    let mut b = <BlockIQ4XS as bytemuck::Zeroable>::zeroed();
    b.d = d;
    for g in 0..GROUPS {
        let biased = (levels.mult[g] + 32) as u8;
        debug_assert!((33..64).contains(&biased), "multiplier {}", levels.mult[g]);
        b.scales_l[g / 2] |= (biased & 15) << (4 * (g % 2));
        b.scales_h |= ((biased >> 4) as u16) << (2 * g);
        let l = &levels.level[32 * g..][..32];
        for j in 0..16 {
            b.qs[16 * g + j] = index(l[j]) | index(l[16 + j]) << 4;
        }
    }
    b
}

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

    /// Blocks `i` of eight consecutive rows of IQ3_S, transcoded (`IQ3S_TABLE`).
    pub fn pack_iq3s(rows: [&BlockIQ3S; ROWS]) -> Self {
        let rows = rows.map(|b| transcoded(b.d, &iq3s_levels(b), &IQ3S_TABLE));
        Self::pack(rows.each_ref())
    }

    /// Blocks `i` of eight consecutive rows of IQ3_XXS, transcoded (`IQ3XXS_TABLE`).
    pub fn pack_iq3xxs(rows: [&BlockIQ3XXS; ROWS]) -> Self {
        let rows = rows.map(|b| transcoded(b.d, &iq3xxs_levels(b), &IQ3XXS_TABLE));
        Self::pack(rows.each_ref())
    }

    /// Group `g`'s indices, in `BlockIQ4NLx8`'s layout.
    pub fn group(&self, g: usize) -> &[u8; 128] {
        self.qs[128 * g..][..128].try_into().expect("128 bytes")
    }

    /// Group `g`'s table levels plus 128 (unsigned), step by step.
    pub fn unsigned_levels(&self, g: usize, table: &LevelTable) -> Steps {
        unsigned_levels(self.group(g), table)
    }
}

/// The table levels plus 128 (unsigned) of a group's nibble planes, step by step.
pub fn unsigned_levels(qs: &[u8; 128], table: &LevelTable) -> Steps {
    nibble_steps(qs).map(|s| s.map(|i| table.unsigned[i as usize]))
}

/// A group's levels in the GEMM panels' unsigned form (`LevelTable::panel`), step by step.
pub fn panel_levels(qs: &[u8; 128], table: &LevelTable) -> Steps {
    nibble_steps(qs).map(|s| s.map(|i| table.panel[i as usize]))
}

/// Row `r` of a group of eight interleaved rows (`group`: its `k / 256` blocks) as f32 into
/// `out` (`k` values): the values the stored type's `dequantize` gives for that row.
pub fn dequantize_group_row(group: &[BlockIQ4XSx8], r: usize, table: &LevelTable, out: &mut [f32]) {
    for (b, out) in group.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d[r].to_f32();
        for (g, out) in out.chunks_exact_mut(32).enumerate() {
            // The factor is a power of two: one rounding, as `Levels::dequantize`.
            let dl = d * b.mult(g, r) as f32 * table.factor;
            let u = b.unsigned_levels(g, table);
            for (j, o) in out.iter_mut().enumerate() {
                *o = dl * (u[j / 4][4 * r + j % 4] as i32 - 128) as f32;
            }
        }
    }
}

/// The portable kernel: `[c][r]` = row `r` times activation row `c`, each block's integer
/// `Σ_g mult · Σ level·x` then `d · x.d · that` summed over blocks, times the table's factor,
/// as the row kernels do.
pub fn dot_scalar<const C: usize>(
    w: &[BlockIQ4XSx8],
    x: &[&[BlockQ8K]; C],
    table: &LevelTable,
) -> [[f32; ROWS]; C] {
    let mut acc = [[0f32; ROWS]; C];
    for (i, b) in w.iter().enumerate() {
        let levels: [Steps; GROUPS] = std::array::from_fn(|g| b.unsigned_levels(g, table));
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
    acc.map(|row| row.map(|a| table.factor * a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantized::format::GgmlBlock;

    fn values(seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..ROWS * 2 * QK_K)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// `ROWS` rows of two blocks of `B`.
    fn rows<B: GgmlBlock>(seed: u64) -> Vec<B> {
        let mut w = vec![<B as bytemuck::Zeroable>::zeroed(); ROWS * 2];
        B::quantize(&values(seed), &mut w);
        w
    }

    /// Activations for two blocks, every Q8_K level from -127 to 127 among them.
    fn activations() -> Vec<BlockQ8K> {
        let mut x = vec![<BlockQ8K as bytemuck::Zeroable>::zeroed(); 2];
        let xs: Vec<f32> = (0..2 * QK_K)
            .map(|i| ((i * 37) % 255) as f32 - 127.0)
            .collect();
        BlockQ8K::quantize(&xs, &mut x);
        x
    }

    /// Rows of `B` repacked by `pack` dequantize to the stored type's values and give its row
    /// kernel's dot product bit for bit.
    fn check_transcoded<B: GgmlBlock<Dot = BlockQ8K>>(
        pack: fn([&B; ROWS]) -> BlockIQ4XSx8,
        table: &LevelTable,
    ) {
        let w = rows::<B>(11);
        let packed: Vec<BlockIQ4XSx8> = (0..2)
            .map(|i| pack(std::array::from_fn(|r| &w[2 * r + i])))
            .collect();
        let x = activations();
        let dots = dot_scalar::<1>(&packed, &[&x], table);
        for r in 0..ROWS {
            let row = &w[2 * r..2 * r + 2];
            let (mut want, mut got) = (vec![0f32; 2 * QK_K], vec![0f32; 2 * QK_K]);
            B::dequantize(row, &mut want);
            dequantize_group_row(&packed, r, table, &mut got);
            assert_eq!(got, want, "row {r}");
            let dot = B::vec_dot_scalar(row, &x);
            assert_eq!(dots[0][r].to_bits(), dot.to_bits(), "row {r}");
        }
    }

    #[test]
    fn transcoded_iq3s_keeps_its_values_and_dot_products() {
        check_transcoded::<BlockIQ3S>(BlockIQ4XSx8::pack_iq3s, &IQ3S_TABLE);
    }

    #[test]
    fn transcoded_iq3xxs_keeps_its_values_and_dot_products() {
        check_transcoded::<BlockIQ3XXS>(BlockIQ4XSx8::pack_iq3xxs, &IQ3XXS_TABLE);
    }

    /// Every level of the lattice tables has its index, and only those.
    #[test]
    fn lattice_tables_index_their_levels() {
        for table in [&IQ4XS_TABLE, &IQ3S_TABLE, &IQ3XXS_TABLE] {
            for (i, &l) in table.signed.iter().enumerate() {
                assert_eq!(table.index[l as u8 as usize], i as u8);
                assert_eq!(table.unsigned[i] as i32, l as i32 + 128);
            }
            assert_eq!(table.index.iter().filter(|&&i| i < 16).count(), 16);
        }
        assert_eq!(IQ3S_TABLE.signed, std::array::from_fn(|i| 2 * i as i8 - 15));
    }

    /// Every multiplier and value of every row comes back from the repacked blocks, and their
    /// dot product is the row kernel's bit for bit.
    #[test]
    fn repacked_rows_keep_their_values_and_dot_products() {
        let w = rows::<BlockIQ4XS>(7);
        let packed: Vec<BlockIQ4XSx8> = (0..2)
            .map(|i| BlockIQ4XSx8::pack(std::array::from_fn(|r| &w[2 * r + i])))
            .collect();
        let x = activations();
        let dots = dot_scalar::<1>(&packed, &[&x], &IQ4XS_TABLE);
        for r in 0..ROWS {
            let row = &w[2 * r..2 * r + 2];
            for (i, b) in row.iter().enumerate() {
                for g in 0..GROUPS {
                    assert_eq!(packed[i].mult(g, r), b.group_mult(g), "row {r} group {g}");
                }
            }
            let (mut want, mut got) = (vec![0f32; 2 * QK_K], vec![0f32; 2 * QK_K]);
            BlockIQ4XS::dequantize(row, &mut want);
            dequantize_group_row(&packed, r, &IQ4XS_TABLE, &mut got);
            assert_eq!(got, want, "row {r}");
            let dot = BlockIQ4XS::vec_dot_scalar(row, &x);
            assert_eq!(dots[0][r].to_bits(), dot.to_bits(), "row {r}");
        }
    }
}

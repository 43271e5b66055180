//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and MXFP4 blocks of eight consecutive rows stored as
//! one (`BlockQ4_0x8`, ...): the layout decode's 256-bit (and SIMD128) kernels stream, its
//! portable unpacking, and the portable dot product those kernels are checked against.
//!
//! Row by row, a Q5_0 dot product spends most of its work per block on overhead: spreading
//! 32 fifth bits into bytes, moving the weight's sign onto the activation for `maddubs`,
//! converting one scale and, per row, a horizontal sum. Eight rows interleaved put 4 levels of
//! each row in one 256-bit vector, stored unsigned (`u = level + OFFSET`), so one `maddubs`
//! against 4 activation bytes broadcast to every lane advances eight dot products in their own
//! lanes; the eight scales convert in one instruction, the fifth bits come out of one plane
//! with a mask and a shift per step, and `OFFSET · Σ x` is subtracted once per block. The
//! repacked weight takes exactly the bytes of the original (`BlockQ5_0x8` is eight
//! `BlockQ5_0`s).
//!
//! Q8_0 takes the same layout with its levels kept signed (`BlockQ8_0x8`): `level + 128`
//! would overflow `maddubs`' pair sums, so its kernel moves each weight's sign onto the
//! broadcast activation instead. IQ4_NL stores Q4_0's nibble planes (`BlockIQ4NLx8`); its
//! kernel looks the nibbles up in the level table and then proceeds as Q8_0's. Q4_1 stores
//! Q4_0's planes with its eight mins beside the scales (`BlockQ4_1x8`); the min comes in as
//! `m · d_x · Σ x` per block and row, so its activations are Q8_0 too; Q5_1 is Q5_0's layout
//! with the mins the same way (`BlockQ5_1x8`). MXFP4 stores Q4_0's nibble planes beside its
//! eight power-of-two scales (`BlockMXFP4x8`); its doubled E2M1 values offset by 12 fit the
//! unsigned path (`u` ≤ 24), looked up from the nibbles.
//! docs/QUANTIZATION.md has the measurements behind the layout.

use super::{
    e8m0_half, nibbles, nibbles_5, BlockIQ4NL, BlockMXFP4, BlockQ4_0, BlockQ4_1, BlockQ5_0,
    BlockQ5_1, BlockQ8_0, GgmlBlock, IQ4NL_VALUES, MXFP4_VALUES,
};
use half::f16;

/// Rows per interleaved group.
pub const ROWS: usize = 8;

/// Block `i` of eight consecutive rows of Q4_0. Level `j` of row `r`, as `u = level + 8`,
/// belongs to step `t = j / 4`, byte `4r + j % 4` of that step's 32 bytes. Steps `t` and
/// `t + 4` share `qs[32 (t % 4)..][..32]`: step `t`'s in the low nibbles, step `t + 4`'s in the
/// high ones.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_0x8 {
    pub d: [f16; ROWS],
    pub qs: [u8; 128],
}

/// Block `i` of eight consecutive rows of Q5_0: as `BlockQ4_0x8` with `u = level + 16`,
/// whose low four bits sit in `qs` and whose fifth bit is bit `t` of `qh[4r + j % 4]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_0x8 {
    pub d: [f16; ROWS],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}

/// Block `i` of eight consecutive rows of Q5_1: as `BlockQ5_0x8` with `u` the 5-bit value
/// itself, and each row's min `m` (element = `d · u + m`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_1x8 {
    pub d: [f16; ROWS],
    pub m: [f16; ROWS],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}

/// Block `i` of eight consecutive rows of Q8_0: level `j` of row `r` at
/// `qs[32 (j / 4) + 4r + j % 4]`, signed as stored (the unsigned level is `q + 128`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_0x8 {
    pub d: [f16; ROWS],
    pub qs: [i8; 256],
}

/// Block `i` of eight consecutive rows of IQ4_NL: the table indices laid out as
/// `BlockQ4_0x8`'s nibbles; the unsigned level is `IQ4NL_VALUES[index] + 128`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ4NLx8 {
    pub d: [f16; ROWS],
    pub qs: [u8; 128],
}

/// Block `i` of eight consecutive rows of Q4_1: as `BlockQ4_0x8` with `u` the nibble itself,
/// and each row's min `m` (element = `d · u + m`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_1x8 {
    pub d: [f16; ROWS],
    pub m: [f16; ROWS],
    pub qs: [u8; 128],
}

/// Block `i` of eight consecutive rows of MXFP4: each row's scale exponent `e` (element =
/// `e8m0_half(e) · value`), and the table indices laid out as `BlockQ4_0x8`'s nibbles; the
/// unsigned level is `MXFP4_VALUES[index] + 12`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockMXFP4x8 {
    pub e: [u8; ROWS],
    pub qs: [u8; 128],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0x8>() == ROWS * 18);
const _: () = assert!(std::mem::size_of::<BlockMXFP4x8>() == ROWS * 17);
const _: () = assert!(std::mem::size_of::<BlockQ4_1x8>() == ROWS * 20);
const _: () = assert!(std::mem::size_of::<BlockIQ4NLx8>() == ROWS * 18);
const _: () = assert!(std::mem::size_of::<BlockQ5_0x8>() == ROWS * 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1x8>() == ROWS * 24);
const _: () = assert!(std::mem::size_of::<BlockQ8_0x8>() == ROWS * 34);

/// Unsigned levels of a repacked block: `[t][4r + b]` is level `4t + b` of row `r`.
pub type Steps = [[u8; 32]; 8];

/// A 32-element type that can be stored eight rows at a time: element = `d · (u − OFFSET)`,
/// plus the row's min where the type has one. Its interleaved products take Q8_0 activations
/// whatever the type's own row-by-row partner.
pub trait Interleave: GgmlBlock {
    type X8: bytemuck::Pod + Send + Sync + std::fmt::Debug;
    /// `u = level + OFFSET` is unsigned.
    const OFFSET: i32;
    /// The largest `u`.
    const MAX_LEVEL: u8;

    /// This block's 32 unsigned levels, in element order.
    fn levels(&self) -> [u8; 32];
    /// Blocks `i` of eight consecutive rows, as one.
    fn pack(rows: [&Self; ROWS]) -> Self::X8;
    /// The unsigned levels, by the portable code the SIMD expansion is checked against.
    fn unpack(b: &Self::X8) -> Steps;
    /// The eight rows' scales, widened exactly (from f16, or MXFP4's powers of two).
    fn scales(b: &Self::X8) -> [f32; ROWS];
    /// The eight rows' mins, for the types that have them.
    fn mins(_: &Self::X8) -> Option<&[f16; ROWS]> {
        None
    }
}

/// The interleaved nibble planes are the rows' own `qs` bytes, four at a time: byte `j < 16`
/// of a row holds elements `j` and `j + 16`, which are steps `j / 4` and `j / 4 + 4` at the same
/// byte `4r + j % 4`.
pub(super) fn interleave_qs(rows: [&[u8; 16]; ROWS]) -> [u8; 128] {
    bytemuck::cast(interleave_words::<4, 32>(rows.map(|q| bytemuck::cast(*q))))
}

/// Word `t` of row `r` at `8t + r` (`N = 8W`): the 4-byte steps of eight rows interleaved,
/// moved a word at a time rather than byte by byte (fewer moves for the same bytes: the
/// repack of an output head is on the first decode step's critical path).
fn interleave_words<const W: usize, const N: usize>(rows: [[u32; W]; ROWS]) -> [u32; N] {
    std::array::from_fn(|i| rows[i % ROWS][i / ROWS])
}

/// The fifth bits of eight rows: byte `4r + b` gathers those of elements `b, b + 4, ..., b +
/// 28` of row `r`, element `4t + b`'s in bit `t`.
fn interleave_qh(rows: [[u8; 4]; ROWS]) -> [u8; 32] {
    let high = rows.map(u32::from_le_bytes);
    std::array::from_fn(|p| {
        let h = high[p / 4] >> (p % 4);
        (0..8).fold(0u8, |acc, t| acc | (((h >> (4 * t)) & 1) as u8) << t)
    })
}

/// Every step's 5-bit values of interleaved nibble planes and fifth bits (Q5_0, Q5_1).
fn five_bit_steps(qs: &[u8; 128], qh: &[u8; 32]) -> Steps {
    std::array::from_fn(|t| std::array::from_fn(|p| nibble_of(qs, t, p) | ((qh[p] >> t) & 1) << 4))
}

fn nibble_of(qs: &[u8; 128], t: usize, p: usize) -> u8 {
    (qs[32 * (t % 4) + p] >> (4 * (t / 4))) & 15
}

/// Every step's nibbles of interleaved nibble planes (Q4_0, Q4_1, IQ4_NL).
pub(super) fn nibble_steps(qs: &[u8; 128]) -> Steps {
    std::array::from_fn(|t| std::array::from_fn(|p| nibble_of(qs, t, p)))
}

impl Interleave for BlockQ4_0 {
    type X8 = BlockQ4_0x8;
    const OFFSET: i32 = 8;
    const MAX_LEVEL: u8 = 15;

    fn levels(&self) -> [u8; 32] {
        nibbles(&self.qs)
    }
    fn pack(rows: [&Self; ROWS]) -> BlockQ4_0x8 {
        BlockQ4_0x8 {
            d: rows.map(|b| b.d),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
    fn unpack(b: &BlockQ4_0x8) -> Steps {
        nibble_steps(&b.qs)
    }
    fn scales(b: &BlockQ4_0x8) -> [f32; ROWS] {
        b.d.map(f16::to_f32)
    }
}

impl Interleave for BlockQ5_0 {
    type X8 = BlockQ5_0x8;
    const OFFSET: i32 = 16;
    const MAX_LEVEL: u8 = 31;

    fn levels(&self) -> [u8; 32] {
        nibbles_5(&self.qs, self.qh)
    }
    fn pack(rows: [&Self; ROWS]) -> BlockQ5_0x8 {
        BlockQ5_0x8 {
            d: rows.map(|b| b.d),
            qh: interleave_qh(rows.map(|b| b.qh)),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
    fn unpack(b: &BlockQ5_0x8) -> Steps {
        five_bit_steps(&b.qs, &b.qh)
    }
    fn scales(b: &BlockQ5_0x8) -> [f32; ROWS] {
        b.d.map(f16::to_f32)
    }
}

impl Interleave for BlockQ8_0 {
    type X8 = BlockQ8_0x8;
    const OFFSET: i32 = 128;
    const MAX_LEVEL: u8 = 255;

    fn levels(&self) -> [u8; 32] {
        self.qs.map(|q| q as u8 ^ 0x80)
    }
    fn pack(rows: [&Self; ROWS]) -> BlockQ8_0x8 {
        BlockQ8_0x8 {
            d: rows.map(|b| b.d),
            qs: bytemuck::cast(interleave_words::<8, 64>(
                rows.map(|b| bytemuck::cast(b.qs)),
            )),
        }
    }
    fn unpack(b: &BlockQ8_0x8) -> Steps {
        std::array::from_fn(|t| std::array::from_fn(|p| b.qs[32 * t + p] as u8 ^ 0x80))
    }
    fn scales(b: &BlockQ8_0x8) -> [f32; ROWS] {
        b.d.map(f16::to_f32)
    }
}

impl Interleave for BlockQ4_1 {
    type X8 = BlockQ4_1x8;
    const OFFSET: i32 = 0;
    const MAX_LEVEL: u8 = 15;

    fn levels(&self) -> [u8; 32] {
        nibbles(&self.qs)
    }
    fn pack(rows: [&Self; ROWS]) -> BlockQ4_1x8 {
        BlockQ4_1x8 {
            d: rows.map(|b| b.d),
            m: rows.map(|b| b.m),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
    fn unpack(b: &BlockQ4_1x8) -> Steps {
        nibble_steps(&b.qs)
    }
    fn scales(b: &BlockQ4_1x8) -> [f32; ROWS] {
        b.d.map(f16::to_f32)
    }
    fn mins(b: &BlockQ4_1x8) -> Option<&[f16; ROWS]> {
        Some(&b.m)
    }
}

impl Interleave for BlockQ5_1 {
    type X8 = BlockQ5_1x8;
    const OFFSET: i32 = 0;
    const MAX_LEVEL: u8 = 31;

    fn levels(&self) -> [u8; 32] {
        nibbles_5(&self.qs, self.qh)
    }
    fn pack(rows: [&Self; ROWS]) -> BlockQ5_1x8 {
        BlockQ5_1x8 {
            d: rows.map(|b| b.d),
            m: rows.map(|b| b.m),
            qh: interleave_qh(rows.map(|b| b.qh)),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
    fn unpack(b: &BlockQ5_1x8) -> Steps {
        five_bit_steps(&b.qs, &b.qh)
    }
    fn scales(b: &BlockQ5_1x8) -> [f32; ROWS] {
        b.d.map(f16::to_f32)
    }
    fn mins(b: &BlockQ5_1x8) -> Option<&[f16; ROWS]> {
        Some(&b.m)
    }
}

impl Interleave for BlockIQ4NL {
    type X8 = BlockIQ4NLx8;
    const OFFSET: i32 = 128;
    const MAX_LEVEL: u8 = 255;

    fn levels(&self) -> [u8; 32] {
        nibbles(&self.qs).map(|i| IQ4NL_VALUES[i as usize] as u8 ^ 0x80)
    }
    fn pack(rows: [&Self; ROWS]) -> BlockIQ4NLx8 {
        BlockIQ4NLx8 {
            d: rows.map(|b| b.d),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
    fn unpack(b: &BlockIQ4NLx8) -> Steps {
        nibble_steps(&b.qs).map(|step| step.map(|i| IQ4NL_VALUES[i as usize] as u8 ^ 0x80))
    }
    fn scales(b: &BlockIQ4NLx8) -> [f32; ROWS] {
        b.d.map(f16::to_f32)
    }
}

/// What makes MXFP4's doubled E2M1 values (−12..=12) unsigned.
const MXFP4_OFFSET: i8 = 12;

/// MXFP4's doubled E2M1 values made unsigned: `MXFP4_VALUES[i] + 12`, by table index.
pub const MXFP4_LEVELS: [u8; 16] = {
    let mut u = [0; 16];
    let mut i = 0;
    while i < 16 {
        u[i] = (MXFP4_VALUES[i] + MXFP4_OFFSET) as u8;
        i += 1;
    }
    u
};

impl Interleave for BlockMXFP4 {
    type X8 = BlockMXFP4x8;
    const OFFSET: i32 = MXFP4_OFFSET as i32;
    const MAX_LEVEL: u8 = 2 * MXFP4_OFFSET as u8;

    fn levels(&self) -> [u8; 32] {
        nibbles(&self.qs).map(|i| MXFP4_LEVELS[i as usize])
    }
    fn pack(rows: [&Self; ROWS]) -> BlockMXFP4x8 {
        BlockMXFP4x8 {
            e: rows.map(|b| b.e),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
    fn unpack(b: &BlockMXFP4x8) -> Steps {
        nibble_steps(&b.qs).map(|step| step.map(|i| MXFP4_LEVELS[i as usize]))
    }
    fn scales(b: &BlockMXFP4x8) -> [f32; ROWS] {
        b.e.map(e8m0_half)
    }
}

/// `$body` with `$B` the block type of `$dtype` when it is one of the types stored
/// interleaved (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4); `$other` for the rest.
macro_rules! with_interleave_type {
    ($dtype:expr, $B:ident => $body:expr, _ => $other:expr) => {{
        use $crate::quantized::format::*;
        match $dtype {
            GgmlDType::Q4_0 => {
                type $B = BlockQ4_0;
                $body
            }
            GgmlDType::Q4_1 => {
                type $B = BlockQ4_1;
                $body
            }
            GgmlDType::Q5_0 => {
                type $B = BlockQ5_0;
                $body
            }
            GgmlDType::Q5_1 => {
                type $B = BlockQ5_1;
                $body
            }
            GgmlDType::Q8_0 => {
                type $B = BlockQ8_0;
                $body
            }
            GgmlDType::IQ4NL => {
                type $B = BlockIQ4NL;
                $body
            }
            GgmlDType::MXFP4 => {
                type $B = BlockMXFP4;
                $body
            }
            _ => $other,
        }
    }};
}
pub(crate) use with_interleave_type;

/// Rearranges a weight of `n` rows by `k` held row after row in `bytes` (its blocks, as a
/// file stores them) into groups of eight interleaved rows where it lies. Each group takes
/// the bytes its eight rows took, so only one group (a few KiB) is ever held twice: a model
/// in WebAssembly memory, which can never give pages back, gets the interleaved kernels
/// without a second copy of its weights.
pub fn interleave_in_place<B: Interleave>(
    bytes: &mut [u8],
    n: usize,
    k: usize,
) -> crate::Result<()> {
    let per_row = k / 32;
    let group_bytes = std::mem::size_of::<B::X8>() * per_row;
    if !n.is_multiple_of(ROWS) || !k.is_multiple_of(32) || bytes.len() != n / ROWS * group_bytes {
        return Err(crate::Error::invalid(
            "interleave_in_place",
            format!(
                "{} weight [{n}, {k}] in {} bytes does not split into groups of {ROWS} rows",
                B::DTYPE,
                bytes.len()
            ),
        ));
    }
    let mut rows = vec![<B as bytemuck::Zeroable>::zeroed(); ROWS * per_row];
    for group in bytes.chunks_exact_mut(group_bytes.max(1)) {
        // Byte copies both ways: the file's offsets promise no alignment.
        bytemuck::cast_slice_mut::<B, u8>(&mut rows).copy_from_slice(group);
        for (i, out) in group
            .chunks_exact_mut(std::mem::size_of::<B::X8>())
            .enumerate()
        {
            let packed = B::pack(std::array::from_fn(|r| &rows[r * per_row + i]));
            out.copy_from_slice(bytemuck::bytes_of(&packed));
        }
    }
    Ok(())
}

/// Row `r` of a group of eight interleaved rows (`group`: its `k / 32` blocks) as f32 into
/// `out` (`k` values): the values `B::dequantize` gives for that row as stored.
pub fn dequantize_group_row<B: Interleave>(group: &[B::X8], r: usize, out: &mut [f32]) {
    for (b, out) in group.iter().zip(out.chunks_exact_mut(32)) {
        let (u, d) = (B::unpack(b), B::scales(b)[r]);
        let m = B::mins(b).map(|m| m[r].to_f32());
        for (j, o) in out.iter_mut().enumerate() {
            let level = (u[j / 4][4 * r + j % 4] as i32 - B::OFFSET) as f32 * d;
            *o = m.map_or(level, |m| level + m);
        }
    }
}

/// One activation row quantized to Q8_0, with each block's scale in f32 and the sum of its
/// levels (for the `OFFSET · Σ x` term).
#[derive(Clone, Copy)]
pub struct XRow<'a> {
    pub q: &'a [BlockQ8_0],
    pub d: &'a [f32],
    pub sum: &'a [i32],
}

/// The portable kernel; the SIMD ones give the same floats (the same integer block sums,
/// then one multiply-add per block and row, and one more for a min). The multiply-adds are
/// fused where the CPU has the instruction, as the AVX2 kernel's are, and not in WebAssembly,
/// which has none (a software `fmaf` per block would cost more than the block's integer work).
pub fn dot_scalar<B: Interleave, const C: usize>(w: &[B::X8], x: &[XRow; C]) -> [[f32; ROWS]; C] {
    let mut acc = [[0f32; ROWS]; C];
    for (i, b) in w.iter().enumerate() {
        let u = B::unpack(b);
        let d = B::scales(b);
        let m = B::mins(b).map(|m| m.map(f16::to_f32));
        for (acc, x) in acc.iter_mut().zip(x) {
            let q = &x.q[i].qs;
            for (r, acc) in acc.iter_mut().enumerate() {
                let mut s = -B::OFFSET * x.sum[i];
                for (t, step) in u.iter().enumerate() {
                    for b in 0..4 {
                        s += step[4 * r + b] as i32 * q[4 * t + b] as i32;
                    }
                }
                *acc = madd(d[r] * x.d[i], s as f32, *acc);
                if let Some(m) = m {
                    *acc = madd(m[r] * x.d[i], x.sum[i] as f32, *acc);
                }
            }
        }
    }
    acc
}

/// `a · b + c` as `dot_scalar`'s kernels compute it: fused, except in WebAssembly.
#[inline(always)]
fn madd(a: f32, b: f32, c: f32) -> f32 {
    if cfg!(target_arch = "wasm32") {
        a * b + c
    } else {
        a.mul_add(b, c)
    }
}

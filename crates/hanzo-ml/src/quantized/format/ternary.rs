//! TQ1_0 and TQ2_0 (1.69 and 2.06 bits per weight): ternary weights {-1, 0, 1} times one f16
//! scale per 256, for models trained ternary (BitNet b1.58). TQ1_0 packs five trits per byte
//! as a fixed-point fraction of 3⁵ (four in its last 4 bytes); TQ2_0 stores 2 bits per weight.

use super::kquants::{BlockQ8K, QK_K};
use super::lattice::Levels;
use super::{GgmlBlock, GgmlDType, Unpacking};
use half::f16;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockTQ1_0 {
    /// Five trits per byte: weights `32n + j` (n < 5) in byte `j < 32`, then `160 + 16n + j`
    /// in byte `32 + j`.
    pub qs: [u8; (QK_K - 4 * QK_K / 64) / 5],
    /// Four trits per byte: weights `240 + 4n + j` in byte `j`.
    pub qh: [u8; QK_K / 64],
    pub d: f16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockTQ2_0 {
    /// Weight `128h + 32l + j` in bits `2l..2l+2` of byte `32h + j`, biased by 1.
    pub qs: [u8; QK_K / 4],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockTQ1_0>() == 54);
const _: () = assert!(std::mem::size_of::<BlockTQ2_0>() == 66);

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `n` of a TQ1_0 byte: multiplying by 3ⁿ (mod 256) brings it to the top.
fn trit(byte: u8, n: usize) -> i8 {
    ((byte.wrapping_mul(POW3[n]) as u16 * 3) >> 8) as i8 - 1
}

fn tq1_levels(b: &BlockTQ1_0) -> Levels<QK_K> {
    let mut out = Levels::new(b.d.to_f32());
    out.mult[0] = 1;
    let l = &mut out.level;
    for n in 0..5 {
        for j in 0..32 {
            l[32 * n + j] = trit(b.qs[j], n);
        }
        for j in 0..16 {
            l[160 + 16 * n + j] = trit(b.qs[32 + j], n);
        }
    }
    for n in 0..4 {
        for j in 0..4 {
            l[240 + 4 * n + j] = trit(b.qh[j], n);
        }
    }
    out
}

fn tq2_levels(b: &BlockTQ2_0) -> Levels<QK_K> {
    let mut out = Levels::new(b.d.to_f32());
    out.mult[0] = 1;
    out.level = super::by_runs(|r, j| (b.qs[32 * (r / 4) + j] >> (2 * (r % 4)) & 3) as i8 - 1);
    out
}

/// The GEMM form of ternary levels: `level + 1` under the block scale in every group
/// of 32, with min `1 · d`.
fn unpack_ternary(l: Levels<QK_K>, u: &mut [u8; 256], s: &mut [f32; 16], m: &mut [f32; 16]) {
    for (u, &l) in u.iter_mut().zip(&l.level) {
        *u = (l + 1) as u8;
    }
    s[..QK_K / 32].fill(l.d);
    m[..QK_K / 32].fill(l.d);
}

/// The `gguf` package's (and ggml's) ternary quantizer: the block's largest magnitude is the
/// scale, every weight rounds to the nearest of -1, 0, 1 (halves away from zero); returns the
/// trits biased to 0..=2.
fn ternary(x: &[f32]) -> (f16, [u8; QK_K]) {
    let d = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let q = std::array::from_fn(|i| ((x[i] * id).round() as i8 + 1) as u8);
    (f16::from_f32(d), q)
}

impl GgmlBlock for BlockTQ1_0 {
    const DTYPE: GgmlDType = GgmlDType::TQ1_0;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            tq1_levels(b).dequantize(1.0, o);
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        // Trits in base 3, most significant first, as a fraction of 3⁵ rounded up into a byte.
        let pack = |trits: &mut dyn Iterator<Item = u8>| {
            let v = trits.fold(0u16, |v, t| 3 * v + t as u16);
            (v * 256).div_ceil(243) as u8
        };
        for (x, b) in xs.chunks_exact(QK_K).zip(out) {
            let (d, q) = ternary(x);
            b.d = d;
            for j in 0..32 {
                b.qs[j] = pack(&mut (0..5).map(|n| q[32 * n + j]));
            }
            for j in 0..16 {
                b.qs[32 + j] = pack(&mut (0..5).map(|n| q[160 + 16 * n + j]));
            }
            for j in 0..4 {
                // Four trits and a zero fifth.
                b.qh[j] = pack(&mut (0..4).map(|n| q[240 + 4 * n + j]).chain([0]));
            }
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        super::lattice::dot_levels(w, x, 1.0, tq1_levels)
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: 32,
            max_level: 2,
            unpack: |b, u, s, m| unpack_ternary(tq1_levels(b), u, s, m),
        })
    }
}

impl GgmlBlock for BlockTQ2_0 {
    const DTYPE: GgmlDType = GgmlDType::TQ2_0;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            tq2_levels(b).dequantize(1.0, o);
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK_K).zip(out) {
            let (d, q) = ternary(x);
            b.d = d;
            for h in 0..2 {
                for j in 0..32 {
                    b.qs[32 * h + j] =
                        (0..4).fold(0, |acc, l| acc | q[128 * h + 32 * l + j] << (2 * l));
                }
            }
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        super::lattice::dot_levels(w, x, 1.0, tq2_levels)
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: 32,
            // A stored 3 (no quantizer writes it) is level 2.
            max_level: 3,
            unpack: |b, u, s, m| unpack_ternary(tq2_levels(b), u, s, m),
        })
    }
}

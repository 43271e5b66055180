//! IQ1_S and IQ1_M (1.56 and 1.75 bits per weight): each run of 8 weights is a point of a
//! lattice of values in {-1, 0, 1}, shifted by ±1/8, under a 3-bit scale per 32 (S) or 16 (M)
//! weights and one f16 scale per 256 (IQ1_M spreads it over the top bits of its scales).
//! Element `i` of run `e` is `d · (2s + 1) · (grid[i] ± 1/8)`.

use super::iq1_quant::{iq1m_rows, iq1m_rows_weighted, iq1s_rows, NEEDS_IMPORTANCE};
use super::kquants::{BlockQ8K, QK_K};
use super::lattice::iq1s_grid;
use super::{GgmlBlock, GgmlDType, Unpacking};
use half::f16;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ1S {
    pub d: f16,
    /// The low 8 bits of the 32 grid indices.
    pub qs: [u8; QK_K / 8],
    /// Per 32 weights: four 3-bit index tops, the 3-bit scale, and the shift's sign on top.
    pub qh: [u16; QK_K / 32],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ1M {
    /// The low 8 bits of the 32 grid indices.
    pub qs: [u8; QK_K / 8],
    /// Per run of 8 weights, a nibble: the index's 3 top bits and the shift's sign.
    pub qh: [u8; QK_K / 16],
    /// Sixteen 3-bit scales in four little-endian words, whose top nibbles hold the f16 scale.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1S>() == 50);
const _: () = assert!(std::mem::size_of::<BlockIQ1M>() == 56);

/// ggml's `IQ1S_DELTA`/`IQ1M_DELTA`.
pub(crate) const DELTA: f32 = 0.125;
/// The unpacked levels' offset: `8·grid ± 1 + 16` lies in 7..=25.
const IQ1_OFFSET: u8 = 16;

/// A block as 32 runs of 8: the lattice point, the integer scale multiplier and whether the
/// shift is negative.
pub(crate) struct Runs {
    pub d: f32,
    pub point: [u16; 32],
    pub mult: [i32; 32],
    pub minus: [bool; 32],
}

/// IQ1_S and IQ1_M as `Runs`: the form the kernels of an instruction set without a decoder
/// of their own for the types multiply.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) trait DecodesToRuns: GgmlBlock<Dot = BlockQ8K> {
    fn runs(&self) -> Runs;
}

impl Runs {
    fn dequantize(&self, out: &mut [f32]) {
        let grid = iq1s_grid();
        for (e, o) in out.chunks_exact_mut(8).enumerate() {
            let dl = self.d * self.mult[e] as f32;
            let delta = if self.minus[e] { -DELTA } else { DELTA };
            for (o, &g) in o.iter_mut().zip(&grid[self.point[e] as usize]) {
                *o = dl * (g as f32 + delta);
            }
        }
    }

    /// The GEMM form: values in eighths, `8·grid ± 1` (within ±9), offset by 16; per group of
    /// `group` weights (whose runs share a multiplier) the scale `d · mult / 8` and the min
    /// `16 · scale`.
    fn unpack(&self, group: usize, u: &mut [u8; 256], s: &mut [f32; 16], m: &mut [f32; 16]) {
        let grid = iq1s_grid();
        for (e, u) in u.chunks_exact_mut(8).enumerate() {
            let shift = if self.minus[e] { -1 } else { 1 };
            for (u, &g) in u.iter_mut().zip(&grid[self.point[e] as usize]) {
                *u = (8 * g + shift + IQ1_OFFSET as i8) as u8;
            }
        }
        for g in 0..QK_K / group {
            s[g] = self.d * self.mult[g * group / 8] as f32 * DELTA;
            m[g] = IQ1_OFFSET as f32 * s[g];
        }
    }

    /// `d · x.d · (Σ mult·Σ grid·q + 1/8 · Σ ±mult·Σ q)`, the sums in integers as ggml keeps them.
    fn dot(&self, x: &BlockQ8K) -> f32 {
        let grid = iq1s_grid();
        let (mut on_grid, mut shift) = (0i32, 0i32);
        for (e, q) in x.qs.chunks_exact(8).enumerate() {
            let g = super::dot_i8(&grid[self.point[e] as usize], q);
            let s: i32 = q.iter().map(|&v| v as i32).sum();
            on_grid += self.mult[e] * g;
            shift += if self.minus[e] {
                -self.mult[e]
            } else {
                self.mult[e]
            } * s;
        }
        self.d * x.d * (on_grid as f32 + DELTA * shift as f32)
    }
}

fn iq1s_runs(b: &BlockIQ1S) -> Runs {
    let mut r = Runs {
        d: b.d.to_f32(),
        point: [0; 32],
        mult: [0; 32],
        minus: [false; 32],
    };
    for e in 0..32 {
        let h = b.qh[e / 4];
        r.point[e] = b.qs[e] as u16 | (h >> (3 * (e % 4)) & 7) << 8;
        r.mult[e] = 2 * (h >> 12 & 7) as i32 + 1;
        r.minus[e] = h & 0x8000 != 0;
    }
    r
}

fn iq1m_runs(b: &BlockIQ1M) -> Runs {
    let sc: [u16; 4] =
        std::array::from_fn(|k| u16::from_le_bytes([b.scales[2 * k], b.scales[2 * k + 1]]));
    let d = (sc[0] >> 12) | (sc[1] >> 8 & 0xf0) | (sc[2] >> 4 & 0xf00) | (sc[3] & 0xf000);
    let mut r = Runs {
        d: f16::from_bits(d).to_f32(),
        point: [0; 32],
        mult: [0; 32],
        minus: [false; 32],
    };
    for e in 0..32 {
        let nib = b.qh[e / 2] >> (4 * (e % 2)) & 15;
        let s = e / 2;
        r.point[e] = b.qs[e] as u16 | ((nib & 7) as u16) << 8;
        r.mult[e] = 2 * (sc[s / 4] >> (3 * (s % 4)) & 7) as i32 + 1;
        r.minus[e] = nib & 8 != 0;
    }
    r
}

macro_rules! iq1_block {
    ($block:ty, $dtype:expr, $runs:ident, group = $group:expr, unsupported = $why:expr,
     quantize = $quantize:expr, weighted = $weighted:path) => {
        impl GgmlBlock for $block {
            const DTYPE: GgmlDType = $dtype;
            const BLOCK_SIZE: usize = QK_K;
            const QUANTIZE_UNSUPPORTED: Option<&'static str> = $why;
            type Dot = BlockQ8K;

            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
                    $runs(b).dequantize(o);
                }
            }

            fn quantize(xs: &[f32], out: &mut [Self]) {
                ($quantize)(xs, out)
            }

            fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
                $weighted(xs, qw, out)
            }

            fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
                w.iter().zip(x).map(|(w, x)| $runs(w).dot(x)).sum()
            }

            fn unpacking() -> Option<Unpacking<Self>> {
                Some(Unpacking {
                    group: $group,
                    max_level: IQ1_OFFSET + 9,
                    unpack: |b, u, s, m| $runs(b).unpack($group, u, s, m),
                })
            }
        }

        impl DecodesToRuns for $block {
            fn runs(&self) -> Runs {
                $runs(self)
            }
        }
    };
}

// IQ1_S's multiplier is per 32 weights, IQ1_M's per 16.
// IQ1_S is written only under an importance matrix (as in ggml), IQ1_M with or without.
iq1_block!(
    BlockIQ1S,
    GgmlDType::IQ1S,
    iq1s_runs,
    group = 32,
    unsupported = Some(NEEDS_IMPORTANCE),
    quantize = |_: &[f32], _: &mut [BlockIQ1S]| unreachable!("{NEEDS_IMPORTANCE}"),
    weighted = iq1s_rows
);
iq1_block!(
    BlockIQ1M,
    GgmlDType::IQ1M,
    iq1m_runs,
    group = 16,
    unsupported = None,
    quantize = iq1m_rows,
    weighted = iq1m_rows_weighted
);

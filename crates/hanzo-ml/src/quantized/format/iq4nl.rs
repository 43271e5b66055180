//! IQ4_NL: 32 elements, one f16 scale, 4-bit indices into a fixed non-linear table that puts
//! more levels near zero (where weights cluster) than a uniform grid does.

use super::legacy::{BlockQ8_0, QK};
use super::search::GROUP_MAX_EPS;
use super::GgmlDType;
use super::{signed_absmax, GgmlBlock, Unpacking};
use half::f16;

/// ggml's `kvalues_iq4nl`.
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ4NL {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4NL>() == 18);

fn indices(qs: &[u8; 16]) -> [u8; 32] {
    std::array::from_fn(|e| {
        if e < 16 {
            qs[e] & 0x0F
        } else {
            qs[e - 16] >> 4
        }
    })
}

/// Index of the table value nearest to `x` (the lower one on exact ties).
pub(crate) fn best_index(x: f32) -> usize {
    let v = &IQ4NL_VALUES;
    if x <= v[0] as f32 {
        return 0;
    }
    if x >= v[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (v[hi - 1] as f32) < v[hi] as f32 - x {
        hi - 1
    } else {
        hi
    }
}

/// The scale of one group of table levels as ggml searches it (IQ4_NL's blocks, IQ4_XS's
/// groups of 32): 7 refinement steps each way around `-max / VALUES[0]`, least squares under
/// the error weights `w` for each. 0 for an all-zero group.
#[inline(never)]
pub(crate) fn group_scale(x: &[f32], w: &[f32]) -> f32 {
    const NTRY: i32 = 7;
    let max = signed_absmax(x);
    if max.abs() < GROUP_MAX_EPS {
        return 0.0;
    }
    let fit = |id: f32| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (&v, &w) in x.iter().zip(w) {
            let q = IQ4NL_VALUES[best_index(id * v)] as f32;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d0 = -max / IQ4NL_VALUES[0] as f32;
    let (sumqx, sumq2) = fit(1.0 / d0);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry as f32 + IQ4NL_VALUES[0] as f32) / max;
        let (sumqx, sumq2) = fit(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// The 16 bytes of 32 table indices for the inverse scale `id`: element `j` in the low
/// nibble of byte `j`, element `16 + j` in its high nibble.
pub(crate) fn pack_indices(x: &[f32], id: f32) -> [u8; 16] {
    let l: [u8; 32] = std::array::from_fn(|i| best_index(id * x[i]) as u8);
    std::array::from_fn(|j| l[j] | (l[j + 16] << 4))
}

/// ggml's error weights for the IQ4 scale search: x² without an importance matrix, else
/// `qw · √(σ² + x²)` with `σ²` twice the mean square of the super-block `x` (a block of
/// IQ4_NL, 256 elements of IQ4_XS), for each group of 32.
/// (At most 8 groups, IQ4_XS's.)
pub(crate) fn scale_weights(x: &[f32], qw: Option<&[f32]>) -> [[f32; QK]; 8] {
    let mut out = [[0f32; QK]; 8];
    let sigma2 = 2.0 * super::importance::sum_sq(x) / x.len() as f32;
    for ((g, xg), o) in x.chunks_exact(QK).enumerate().zip(&mut out) {
        *o = match qw {
            Some(qw) => super::importance::weights(xg, &qw[QK * g..], sigma2),
            None => std::array::from_fn(|i| xg[i] * xg[i]),
        };
    }
    out
}

/// ggml's IQ4_NL quantizer as `llama-quantize` runs it. An all-zero block gets scale 0 and
/// the index of the level nearest 0 (8) everywhere, as ggml re-indexes with a zero inverse.
#[inline(never)]
fn quantize_block(x: &[f32], qw: Option<&[f32]>) -> BlockIQ4NL {
    let d = group_scale(x, &scale_weights(x, qw)[0]);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    BlockIQ4NL {
        d: f16::from_f32(d),
        qs: pack_indices(x, id),
    }
}

impl GgmlBlock for BlockIQ4NL {
    const DTYPE: GgmlDType = GgmlDType::IQ4NL;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = b.d.to_f32();
            for (o, i) in o.iter_mut().zip(indices(&b.qs)) {
                *o = d * IQ4NL_VALUES[i as usize] as f32;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK).zip(out) {
            *b = quantize_block(x, None);
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        for ((x, qw), b) in xs.chunks_exact(QK).zip(qw.chunks_exact(QK)).zip(out) {
            *b = quantize_block(x, Some(qw));
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_0]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let s: i32 = indices(&w.qs)
                    .iter()
                    .zip(&x.qs)
                    .map(|(&i, &q)| IQ4NL_VALUES[i as usize] as i32 * q as i32)
                    .sum();
                w.d.to_f32() * x.d.to_f32() * s as f32
            })
            .sum()
    }

    /// The table's levels offset by 128 into bytes, min `128 · d` (as Q8_0's).
    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: QK,
            max_level: 255,
            unpack: |b, u, s, m| {
                for (u, i) in u[..QK].iter_mut().zip(indices(&b.qs)) {
                    *u = (IQ4NL_VALUES[i as usize] as u8) ^ 0x80;
                }
                s[0] = b.d.to_f32();
                m[0] = 128.0 * s[0];
            },
        })
    }
}

//! MXFP4 (4.25 bits per weight, the OCP microscaling format gpt-oss ships in): 32 FP4 (E2M1)
//! values under one power-of-two scale (E8M0). ggml keeps the E2M1 values doubled as integers
//! and halves the scale, so the dot product with Q8_0 runs on integers.

use super::legacy::{BlockQ8_0, QK};
use super::{GgmlBlock, GgmlDType, Unpacking};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockMXFP4 {
    /// The scale's exponent, biased by 127.
    pub e: u8,
    /// The first 16 values in the low nibbles, the rest high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMXFP4>() == 17);

/// ggml's `kvalues_mxfp4`: the E2M1 values, doubled.
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of `2^(e − 127)` (ggml's `GGML_E8M0_TO_FP32_HALF`), subnormal for the two lowest `e`.
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

fn values(b: &BlockMXFP4) -> [i8; QK] {
    std::array::from_fn(|i| {
        let q = b.qs[i % 16] >> (4 * (i / 16)) & 15;
        MXFP4_VALUES[q as usize]
    })
}

impl GgmlBlock for BlockMXFP4 {
    const DTYPE: GgmlDType = GgmlDType::MXFP4;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = e8m0_half(b.e);
            for (o, v) in o.iter_mut().zip(values(b)) {
                *o = d * v as f32;
            }
        }
    }

    /// The `gguf` package's quantizer (ggml's reference): the exponent of the largest
    /// magnitude, less 2, is the scale; each value takes the nearest level (the first on ties).
    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK).zip(out) {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            b.e = if amax > 0.0 {
                (amax.log2().floor() - 2.0 + 127.0) as u8
            } else {
                0
            };
            let d = e8m0_half(b.e);
            let best = |v: f32| {
                let mut best = 0;
                for k in 1..16 {
                    let err = |k: usize| (d * MXFP4_VALUES[k] as f32 - v).abs();
                    if err(k) < err(best) {
                        best = k;
                    }
                }
                best as u8
            };
            for j in 0..QK / 2 {
                b.qs[j] = best(x[j]) | best(x[j + QK / 2]) << 4;
            }
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_0]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let s = super::dot_i8(&values(w), &x.qs);
                e8m0_half(w.e) * x.d.to_f32() * s as f32
            })
            .sum()
    }

    /// The doubled values offset by 12 into bytes up to 24 (the prefill panels for unsigned
    /// levels), min `12 · scale`; the power-of-two scale makes both exact.
    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: QK,
            max_level: 24,
            unpack: |b, u, s, m| {
                for (u, v) in u[..QK].iter_mut().zip(values(b)) {
                    *u = (v + 12) as u8;
                }
                s[0] = e8m0_half(b.e);
                m[0] = 12.0 * s[0];
            },
        })
    }
}

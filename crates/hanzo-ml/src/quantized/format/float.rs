//! The float types as one-element "blocks", so every ggml type goes through the same trait.

use super::GgmlBlock;
use super::GgmlDType;
use half::{bf16, f16};

macro_rules! float_block {
    ($t:ty, $dtype:ident, $to:expr, $from:expr) => {
        impl GgmlBlock for $t {
            const DTYPE: GgmlDType = GgmlDType::$dtype;
            const BLOCK_SIZE: usize = 1;
            type Dot = $t;

            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                for (o, &b) in out.iter_mut().zip(blocks) {
                    *o = $to(b);
                }
            }

            fn quantize(xs: &[f32], out: &mut [Self]) {
                for (o, &x) in out.iter_mut().zip(xs) {
                    *o = $from(x);
                }
            }

            fn vec_dot_scalar(w: &[Self], x: &[Self]) -> f32 {
                w.iter().zip(x).map(|(&a, &b)| $to(a) * $to(b)).sum()
            }
        }
    };
}

float_block!(f32, F32, |v: f32| v, |v: f32| v);
float_block!(f16, F16, |v: f16| v.to_f32(), f16::from_f32);
float_block!(bf16, BF16, |v: bf16| v.to_f32(), bf16::from_f32);

//! `QMatMul`: f32 activations times quantized weights, with no dequantization pass.
//!
//! Activation rows are quantized once to the weight type's partner (Q8_0, Q8_1 or Q8_K);
//! then every output is an integer dot product of one weight row with one activation row,
//! done by the SIMD kernel `dot::pick_*` chose. Work is split over weight rows. With several
//! activation rows (prefill), a small tile of weight rows stays in L1 while every activation
//! row passes over it.

use super::blocks::GgmlBlock;
use super::{GgmlDType, QTensor};
use crate::{DType, Error, Result, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// A linear map `y = x Wᵀ` with `W` of shape `[out, in]`.
#[derive(Clone, Debug)]
pub enum QMatMul {
    /// Blocks multiplied as they are stored.
    Quantized(Arc<QTensor>),
    /// Float weights (F32/F16/BF16 files) go through the dense matmul.
    Dense(Tensor),
}

/// Weight rows per task for decode; small enough to balance, large enough to amortise.
const MATVEC_ROWS: usize = 16;
/// Weight rows kept hot while all activation rows pass (prefill).
const TILE_ROWS: usize = 8;

impl QMatMul {
    pub fn from_qtensor(w: QTensor) -> Result<Self> {
        Self::from_arc(Arc::new(w))
    }

    pub fn from_arc(w: Arc<QTensor>) -> Result<Self> {
        if w.shape().rank() != 2 {
            return Err(Error::invalid(
                "QMatMul",
                format!("weights must be 2-D [out, in], got {:?}", w.shape().dims()),
            ));
        }
        Ok(match w.dtype() {
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => QMatMul::Dense(w.dequantize()?),
            _ => QMatMul::Quantized(w),
        })
    }

    /// `[out, in]`.
    pub fn weight_dims(&self) -> (usize, usize) {
        let d = match self {
            QMatMul::Quantized(w) => w.shape().dims(),
            QMatMul::Dense(t) => t.dims(),
        };
        (d[0], d[1])
    }

    /// `x`: `[..., in]` in any float dtype; returns `[..., out]` in x's dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (n, k) = self.weight_dims();
        let dims = x.dims();
        if dims.last() != Some(&k) {
            return Err(Error::invalid(
                "QMatMul::forward",
                format!("input {dims:?} does not end in the weight's in-dim {k}"),
            ));
        }
        let w = match self {
            QMatMul::Dense(w) => return x.matmul(&w.to_dtype(x.dtype())?.t()?),
            QMatMul::Quantized(w) => w,
        };
        let m = x.elem_count() / k.max(1);
        let xs = x.to_dtype(DType::F32)?.to_vec_flat::<f32>()?;
        let out =
            crate::with_block_type!(w.dtype(), B => matmul::<B>(w.blocks::<B>()?, n, k, &xs, m));
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("rank >= 1") = n;
        Tensor::from_vec(out, out_dims, &x.device())?.to_dtype(x.dtype())
    }
}

/// `x [m, k]` (row-major f32) times `w [n, k]` (blocks) transposed → `[m, n]`.
pub fn matmul<B: GgmlBlock>(w: &[B], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    let wpr = k / B::BLOCK_SIZE;
    let xpr = k / <B::Dot as GgmlBlock>::BLOCK_SIZE;
    let mut xq = vec![<B::Dot as bytemuck::Zeroable>::zeroed(); m * xpr];
    xq.par_chunks_mut(xpr.max(1))
        .zip(x.par_chunks(k.max(1)))
        .for_each(|(q, x)| <B::Dot as GgmlBlock>::quantize(x, q));
    let dot = B::vec_dot_fn();
    let wrow = |r: usize| &w[r * wpr..(r + 1) * wpr];
    if m == 1 {
        out.par_chunks_mut(MATVEC_ROWS)
            .enumerate()
            .for_each(|(c, o)| {
                for (i, o) in o.iter_mut().enumerate() {
                    *o = dot(wrow(c * MATVEC_ROWS + i), &xq);
                }
            });
        return out;
    }
    // Each task fills a [TILE_ROWS, m] tile of the transposed output.
    let mut out_t = vec![0f32; n * m];
    out_t
        .par_chunks_mut(TILE_ROWS * m)
        .enumerate()
        .for_each(|(t, tile)| {
            let r0 = t * TILE_ROWS;
            let rows = tile.len() / m;
            for j in 0..m {
                let xj = &xq[j * xpr..(j + 1) * xpr];
                for r in 0..rows {
                    tile[r * m + j] = dot(wrow(r0 + r), xj);
                }
            }
        });
    for (j, o) in out.chunks_exact_mut(n).enumerate() {
        for (r, o) in o.iter_mut().enumerate() {
            *o = out_t[r * m + j];
        }
    }
    out
}

//! Reductions over one or several dims (with and without keepdim), cumsum, argsort, topk.

use super::Tensor;
use crate::backprop::BackpropOp;
use crate::op::ReduceOp;
use crate::{DType, Dim, Dims, Error, Result, Shape};

impl Tensor {
    fn keepdim_shape(&self, dims: &[usize]) -> Shape {
        let mut d = self.dims().to_vec();
        for &i in dims {
            d[i] = 1;
        }
        d.into()
    }

    fn squeeze_dims(&self, dims: &[usize]) -> Result<Tensor> {
        let d: Vec<usize> = self
            .dims()
            .iter()
            .enumerate()
            .filter(|(i, _)| !dims.contains(i))
            .map(|(_, &d)| d)
            .collect();
        self.reshape(d)
    }

    fn reduce_raw(&self, op: ReduceOp, dims: &[usize]) -> Result<Tensor> {
        let s = self.storage().reduce(op, self.layout(), dims)?;
        let shape = self.keepdim_shape(dims);
        let bop = match op {
            ReduceOp::Sum => BackpropOp::new("sum", &[self], |i, _, g| {
                Ok(vec![Some(g.broadcast_as(i[0].shape())?)])
            }),
            ReduceOp::Max | ReduceOp::Min => BackpropOp::new(op.name(), &[self], |i, out, g| {
                // Ties share the gradient evenly.
                let mask = i[0]
                    .eq(&out.broadcast_as(i[0].shape())?.detach())?
                    .to_dtype(g.dtype())?;
                let count = mask.sum_keepdim(reduced_dims(i[0].dims(), out.dims()))?;
                Ok(vec![Some(mask.mul(&g.div(&count)?)?)])
            }),
            ReduceOp::ArgMax | ReduceOp::ArgMin => None,
        };
        Ok(Tensor::from_storage(s, shape, bop))
    }

    fn reduce<D: Dims + ?Sized>(&self, op: ReduceOp, dims: &D, keepdim: bool) -> Result<Tensor> {
        let dims = dims.to_indexes(self.shape(), op.name())?;
        let r = self.reduce_raw(op, &dims)?;
        if keepdim {
            Ok(r)
        } else {
            r.squeeze_dims(&dims)
        }
    }

    pub fn sum_keepdim<D: Dims>(&self, dims: D) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, &dims, true)
    }
    pub fn sum<D: Dims>(&self, dims: D) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, &dims, false)
    }
    pub fn max_keepdim<D: Dims>(&self, dims: D) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, &dims, true)
    }
    pub fn max<D: Dims>(&self, dims: D) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, &dims, false)
    }
    pub fn min_keepdim<D: Dims>(&self, dims: D) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, &dims, true)
    }
    pub fn min<D: Dims>(&self, dims: D) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, &dims, false)
    }
    /// u32 index of the first maximum along `dim` (NaN counts as the maximum).
    pub fn argmax_keepdim<D: Dim>(&self, dim: D) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMax, &dim, true)
    }
    pub fn argmax<D: Dim>(&self, dim: D) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMax, &dim, false)
    }
    pub fn argmin_keepdim<D: Dim>(&self, dim: D) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMin, &dim, true)
    }
    pub fn argmin<D: Dim>(&self, dim: D) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMin, &dim, false)
    }

    pub fn mean_keepdim<D: Dims>(&self, dims: D) -> Result<Tensor> {
        let idx = dims.to_indexes(self.shape(), "mean")?;
        let n: usize = idx.iter().map(|&d| self.dims()[d]).product();
        self.float_for("mean")?
            .sum_keepdim(idx)?
            .affine(1.0 / n as f64, 0.0)
    }
    pub fn mean<D: Dims>(&self, dims: D) -> Result<Tensor> {
        let idx = dims.to_indexes(self.shape(), "mean")?;
        self.mean_keepdim(idx.clone())?.squeeze_dims(&idx)
    }

    /// Variance with `ddof` delta degrees of freedom (NumPy's `var(ddof=...)`; 1 is the
    /// unbiased estimate PyTorch uses by default).
    pub fn var_keepdim_ddof<D: Dims>(&self, dims: D, ddof: usize) -> Result<Tensor> {
        let idx = dims.to_indexes(self.shape(), "var")?;
        let n: usize = idx.iter().map(|&d| self.dims()[d]).product();
        if n <= ddof {
            crate::bail_invalid!("var", "{n} elements with ddof {ddof}");
        }
        let x = self.float_for("var")?;
        let centered = x.sub(&x.mean_keepdim(idx.clone())?)?;
        centered
            .sqr()?
            .sum_keepdim(idx)?
            .affine(1.0 / (n - ddof) as f64, 0.0)
    }
    /// Unbiased variance (ddof = 1), keeping the reduced dims.
    pub fn var_keepdim<D: Dims>(&self, dims: D) -> Result<Tensor> {
        self.var_keepdim_ddof(dims, 1)
    }
    /// Unbiased variance (ddof = 1).
    pub fn var<D: Dims>(&self, dims: D) -> Result<Tensor> {
        let idx = dims.to_indexes(self.shape(), "var")?;
        self.var_keepdim(idx.clone())?.squeeze_dims(&idx)
    }

    /// Sum of every element, as a 0-d tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(crate::All)
    }
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean(crate::All)
    }
    pub fn max_all(&self) -> Result<Tensor> {
        self.max(crate::All)
    }
    pub fn min_all(&self) -> Result<Tensor> {
        self.min(crate::All)
    }

    /// Integer tensors become f32 for ops whose result is fractional.
    fn float_for(&self, _op: &'static str) -> Result<Tensor> {
        if self.dtype().is_float() {
            Ok(self.clone())
        } else {
            self.to_dtype(DType::F32)
        }
    }

    /// Inclusive prefix sum along `dim`.
    pub fn cumsum<D: Dim>(&self, dim: D) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "cumsum")?;
        let last = self.rank() - 1;
        let x = self.transpose(d, last)?;
        let s = x.storage().cumsum_last(x.layout())?;
        let op = BackpropOp::new("cumsum", &[&x], move |_, _, g| {
            // Reverse cumsum: sum_{j >= i} g_j = total - cumsum_i + g_i.
            let total = g.sum_keepdim(g.rank() - 1)?;
            Ok(vec![Some(
                total.broadcast_sub(&g.cumsum(g.rank() - 1)?)?.add(g)?,
            )])
        });
        Tensor::from_storage(s, x.shape().clone(), op).transpose(d, last)
    }

    /// u32 indices that sort each slice along `dim` (stable; NaN sorts last).
    pub fn argsort<D: Dim>(&self, dim: D, ascending: bool) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "argsort")?;
        let last = self.rank() - 1;
        let x = self.transpose(d, last)?;
        let s = x.storage().argsort_last(x.layout(), ascending)?;
        Tensor::from_storage(s, x.shape().clone(), None)
            .transpose(d, last)?
            .contiguous()
    }

    /// The `k` largest values along `dim` (descending) and their u32 indices.
    pub fn topk<D: Dim>(&self, k: usize, dim: D) -> Result<(Tensor, Tensor)> {
        let d = dim.to_index(self.shape(), "topk")?;
        if k > self.dims()[d] {
            return Err(Error::invalid(
                "topk",
                format!("k = {k} exceeds dim size {}", self.dims()[d]),
            ));
        }
        let idx = self.argsort(d, false)?.narrow(d, 0, k)?.contiguous()?;
        Ok((self.gather(&idx, d)?, idx))
    }
}

/// Dims where the keepdim output has size 1 but the input does not.
fn reduced_dims(input: &[usize], out: &[usize]) -> Vec<usize> {
    input
        .iter()
        .zip(out)
        .enumerate()
        .filter(|(_, (&a, &b))| b == 1 && a != 1)
        .map(|(i, _)| i)
        .collect()
}

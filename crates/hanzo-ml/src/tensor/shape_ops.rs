//! Views (transpose, permute, narrow, broadcast, reshape of contiguous data) and copies
//! (contiguous, cat, pad), plus matmul.

use super::Tensor;
use crate::backend::MatMulDims;
use crate::backprop::BackpropOp;
use crate::{Dim, Error, Result, Shape, Storage};

impl Tensor {
    /// Same data, new shape (`reshape_infer` leaves one dim to be inferred). Copies only
    /// when the view is not contiguous.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if shape.elem_count() != self.elem_count() {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                expected: self.shape().clone(),
                got: shape,
            });
        }
        let src = self.shape().clone();
        let op = BackpropOp::new("reshape", &[self], move |_, _, g| {
            Ok(vec![Some(g.reshape(src.clone())?)])
        });
        match self.layout().reshaped(shape.clone()) {
            Some(l) => Ok(self.view(l, op)),
            None => {
                let s = self.storage().copy_strided(self.layout())?;
                Ok(Tensor::from_storage(s, shape, op))
            }
        }
    }

    /// Reshape with one dim left as `None`, inferred from the element count.
    pub fn reshape_infer(&self, dims: &[Option<usize>]) -> Result<Tensor> {
        let known: usize = dims.iter().flatten().product();
        let holes = dims.iter().filter(|d| d.is_none()).count();
        if holes > 1
            || known == 0 && holes == 1
            || holes == 1 && !self.elem_count().is_multiple_of(known)
        {
            crate::bail_invalid!("reshape", "cannot infer {dims:?} from {:?}", self.dims());
        }
        let fill = self.elem_count().checked_div(known).unwrap_or(0);
        self.reshape(dims.iter().map(|d| d.unwrap_or(fill)).collect::<Vec<_>>())
    }

    pub fn squeeze<D: Dim>(&self, dim: D) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "squeeze")?;
        if self.dims()[d] != 1 {
            return Ok(self.clone());
        }
        let mut dims = self.dims().to_vec();
        dims.remove(d);
        self.reshape(dims)
    }

    /// Insert a size-1 dim at `dim` (which may equal the rank: append).
    pub fn unsqueeze(&self, dim: usize) -> Result<Tensor> {
        if dim > self.rank() {
            return Err(Error::DimOutOfRange {
                op: "unsqueeze",
                dim: dim as i64,
                rank: self.rank(),
            });
        }
        let mut dims = self.dims().to_vec();
        dims.insert(dim, 1);
        self.reshape(dims)
    }

    /// Merge dims `start..=end` into one.
    pub fn flatten(&self, start: usize, end: usize) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape(1);
        }
        if start > end || end >= self.rank() {
            crate::bail_invalid!(
                "flatten",
                "invalid range {start}..={end} for rank {}",
                self.rank()
            );
        }
        let d = self.dims();
        let mut dims = d[..start].to_vec();
        dims.push(d[start..=end].iter().product());
        dims.extend_from_slice(&d[end + 1..]);
        self.reshape(dims)
    }

    pub fn flatten_all(&self) -> Result<Tensor> {
        self.reshape(self.elem_count())
    }

    /// `len` elements of `dim` from `start` (a view).
    pub fn narrow<D: Dim>(&self, dim: D, start: usize, len: usize) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "narrow")?;
        let l = self.layout().narrow(d, start, len)?;
        let size = self.dims()[d];
        let op = BackpropOp::new("narrow", &[self], move |_, _, g| {
            Ok(vec![Some(g.pad_with_zeros(
                d,
                start,
                size - start - len,
            )?)])
        });
        Ok(self.view(l, op))
    }

    /// Split into exactly `n` pieces along `dim`; when `n` does not divide the size, the first
    /// `size % n` pieces get one extra element (NumPy's `array_split`).
    pub fn chunk<D: Dim>(&self, n: usize, dim: D) -> Result<Vec<Tensor>> {
        let d = dim.to_index(self.shape(), "chunk")?;
        if n == 0 {
            crate::bail_invalid!("chunk", "n must be positive");
        }
        let size = self.dims()[d];
        let sizes: Vec<usize> = (0..n)
            .map(|i| size / n + usize::from(i < size % n))
            .collect();
        self.split(&sizes, d)
    }

    /// Pieces of the given sizes along `dim` (they must add up to its size).
    pub fn split<D: Dim>(&self, sizes: &[usize], dim: D) -> Result<Vec<Tensor>> {
        let d = dim.to_index(self.shape(), "split")?;
        if sizes.iter().sum::<usize>() != self.dims()[d] {
            crate::bail_invalid!(
                "split",
                "sizes {sizes:?} do not add up to {}",
                self.dims()[d]
            );
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let t = self.narrow(d, start, len);
                start += len;
                t
            })
            .collect()
    }

    pub fn transpose<D1: Dim, D2: Dim>(&self, d1: D1, d2: D2) -> Result<Tensor> {
        let (a, b) = (
            d1.to_index(self.shape(), "transpose")?,
            d2.to_index(self.shape(), "transpose")?,
        );
        if a == b {
            return Ok(self.clone());
        }
        let op = BackpropOp::new("transpose", &[self], move |_, _, g| {
            Ok(vec![Some(g.transpose(a, b)?)])
        });
        Ok(self.view(self.layout().transpose(a, b), op))
    }

    /// Swap the last two dims.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::RankMismatch {
                op: "t",
                expected: 2,
                got: self.rank(),
                shape: self.shape().clone(),
            });
        }
        self.transpose(self.rank() - 2, self.rank() - 1)
    }

    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let mut seen = vec![false; self.rank()];
        if perm.len() != self.rank()
            || perm
                .iter()
                .any(|&p| p >= self.rank() || std::mem::replace(&mut seen[p], true))
        {
            crate::bail_invalid!(
                "permute",
                "{perm:?} is not a permutation of 0..{}",
                self.rank()
            );
        }
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        let op = BackpropOp::new("permute", &[self], move |_, _, g| {
            Ok(vec![Some(g.permute(&inverse)?)])
        });
        Ok(self.view(self.layout().permute(perm), op))
    }

    /// A contiguous copy, or `self` when already contiguous.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let s = self.storage().copy_strided(self.layout())?;
        let op = BackpropOp::new("contiguous", &[self], |_, _, g| Ok(vec![Some(g.clone())]));
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    /// View with NumPy broadcasting to `shape` (no copy; stretched dims get stride 0).
    pub fn broadcast_as(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if &shape == self.shape() {
            return Ok(self.clone());
        }
        let l = self.layout().broadcast_as(&shape)?;
        let op = BackpropOp::new("broadcast", &[self], |i, _, g| {
            Ok(vec![Some(g.sum_to_shape(i[0].shape())?)])
        });
        Ok(self.view(l, op))
    }

    /// PyTorch's name for `broadcast_as`.
    pub fn expand(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        self.broadcast_as(shape)
    }

    /// Prepend `left` dims.
    pub fn broadcast_left(&self, left: impl Into<Shape>) -> Result<Tensor> {
        let mut dims = left.into().into_dims();
        dims.extend_from_slice(self.dims());
        self.broadcast_as(dims)
    }

    /// Concatenate along `dim`; all tensors share dtype, device and every other dim.
    pub fn cat<D: Dim>(tensors: &[&Tensor], dim: D) -> Result<Tensor> {
        let first = *tensors
            .first()
            .ok_or_else(|| Error::invalid("cat", "no tensors"))?;
        let d = dim.to_index(first.shape(), "cat")?;
        let dt = tensors
            .iter()
            .fold(first.dtype(), |a, t| a.promote(t.dtype()));
        let mut out_dims = first.dims().to_vec();
        out_dims[d] = 0;
        for t in tensors {
            first.device().same(&t.device(), "cat")?;
            if t.rank() != first.rank()
                || t.dims()
                    .iter()
                    .enumerate()
                    .any(|(i, &s)| i != d && s != first.dims()[i])
            {
                return Err(Error::ShapeMismatch {
                    op: "cat",
                    expected: first.shape().clone(),
                    got: t.shape().clone(),
                });
            }
            out_dims[d] += t.dims()[d];
        }
        let ts: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.to_dtype(dt)?.contiguous())
            .collect::<Result<_>>()?;
        let outer: usize = out_dims[..d].iter().product();
        let inner: usize = out_dims[d + 1..].iter().product();
        let mut out = Storage::zeros(&first.device(), outer * out_dims[d] * inner, dt)?;
        let mut offset = 0;
        for t in &ts {
            let cols = t.dims()[d] * inner;
            t.storage().copy2d(
                &mut out,
                outer,
                cols,
                cols,
                out_dims[d] * inner,
                t.layout().start_offset(),
                offset,
            )?;
            offset += cols;
        }
        let sizes: Vec<usize> = ts.iter().map(|t| t.dims()[d]).collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        let op = BackpropOp::new("cat", &refs, move |_, _, g| {
            Ok(g.split(&sizes, d)?.into_iter().map(Some).collect())
        });
        Ok(Tensor::from_storage(out, out_dims, op))
    }

    /// Stack along a new dim at `dim`.
    pub fn stack(tensors: &[&Tensor], dim: usize) -> Result<Tensor> {
        let ts: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.unsqueeze(dim))
            .collect::<Result<_>>()?;
        Tensor::cat(&ts.iter().collect::<Vec<_>>(), dim)
    }

    /// Pad `dim` with `before`/`after` copies of `value`.
    pub fn pad_with_value<D: Dim>(
        &self,
        dim: D,
        before: usize,
        after: usize,
        value: f64,
    ) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "pad")?;
        if before == 0 && after == 0 {
            return Ok(self.clone());
        }
        let mut parts = Vec::with_capacity(3);
        let block = |n: usize| {
            let mut dims = self.dims().to_vec();
            dims[d] = n;
            Tensor::full(value, dims, self.dtype(), &self.device())
        };
        if before > 0 {
            parts.push(block(before)?);
        }
        parts.push(self.clone());
        if after > 0 {
            parts.push(block(after)?);
        }
        Tensor::cat(&parts.iter().collect::<Vec<_>>(), d)
    }

    pub fn pad_with_zeros<D: Dim>(&self, dim: D, before: usize, after: usize) -> Result<Tensor> {
        self.pad_with_value(dim, before, after, 0.0)
    }

    /// Constant padding of several dims, given as `(before, after)` per dim from the first.
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Result<Tensor> {
        if pads.len() > self.rank() {
            crate::bail_invalid!("pad", "{} pad pairs for rank {}", pads.len(), self.rank());
        }
        let mut t = self.clone();
        for (d, &(b, a)) in pads.iter().enumerate() {
            t = t.pad_with_value(d, b, a, value)?;
        }
        Ok(t)
    }

    /// Matrix product: 1-D, 2-D, or batched with broadcast batch dims (`[..., m, k] @
    /// [..., k, n]`). A 1-D lhs is a row vector and a 1-D rhs a column vector, as in NumPy.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.rank() == 0 || rhs.rank() == 0 {
            crate::bail_invalid!(
                "matmul",
                "operands must have rank >= 1, got {:?} and {:?}",
                self.dims(),
                rhs.dims()
            );
        }
        if self.rank() == 1 {
            let r = self.unsqueeze(0)?.matmul(rhs)?;
            return r.squeeze(r.rank() - 2);
        }
        if rhs.rank() == 1 {
            return self
                .matmul(&rhs.unsqueeze(1)?)?
                .squeeze(self.rank().max(2) - 1);
        }
        self.device().same(&rhs.device(), "matmul")?;
        let dt = self.dtype().promote(rhs.dtype());
        let (a, b) = (self.to_dtype(dt)?, rhs.to_dtype(dt)?);
        let (ar, br) = (a.rank(), b.rank());
        let (m, k) = (a.dims()[ar - 2], a.dims()[ar - 1]);
        let (k2, n) = (b.dims()[br - 2], b.dims()[br - 1]);
        if k != k2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                expected: vec![k, n].into(),
                got: vec![k2, n].into(),
            });
        }
        let batch_a: Shape = a.dims()[..ar - 2].to_vec().into();
        let batch_b: Shape = b.dims()[..br - 2].to_vec().into();
        let batch = batch_a.broadcast_shape_binary(&batch_b, "matmul")?;
        let with = |bt: &Shape, x, y| {
            let mut d = bt.dims().to_vec();
            d.extend([x, y]);
            Shape::from(d)
        };
        // gemm needs real strides within each matrix: copy views broadcast inside them.
        let fix = |t: &Tensor| -> Result<Tensor> {
            let r = t.rank();
            let s = t.layout().stride();
            let d = t.dims();
            if (s[r - 1] == 0 && d[r - 1] > 1) || (s[r - 2] == 0 && d[r - 2] > 1) {
                t.contiguous()
            } else {
                Ok(t.clone())
            }
        };
        let (a, b) = (fix(&a)?, fix(&b)?);
        let al = a.layout().broadcast_as(&with(&batch, m, k))?;
        let bl = b.layout().broadcast_as(&with(&batch, k, n))?;
        let dims = MatMulDims {
            b: batch.elem_count(),
            m,
            n,
            k,
        };
        let s = a.storage().matmul(b.storage(), dims, &al, &bl)?;
        let op = BackpropOp::new("matmul", &[&a, &b], |i, _, g| {
            let ga = g.matmul(&i[1].t()?)?.sum_to_shape(i[0].shape())?;
            let gb = i[0].t()?.matmul(g)?.sum_to_shape(i[1].shape())?;
            Ok(vec![Some(ga), Some(gb)])
        });
        Ok(Tensor::from_storage(s, with(&batch, m, n), op))
    }
}

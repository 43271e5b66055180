//! Indexing: index_select, gather, scatter, scatter_add, index_add, embedding.

use super::Tensor;
use crate::backprop::BackpropOp;
use crate::{Dim, Error, Result};

impl Tensor {
    /// Slices of `dim` picked by the 1-D integer tensor `ids`.
    pub fn index_select<D: Dim>(&self, ids: &Tensor, dim: D) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "index_select")?;
        if ids.rank() != 1 {
            return Err(Error::RankMismatch {
                op: "index_select",
                expected: 1,
                got: ids.rank(),
                shape: ids.shape().clone(),
            });
        }
        let s = self
            .storage()
            .index_select(self.layout(), ids.storage(), ids.layout(), d)?;
        let mut dims = self.dims().to_vec();
        dims[d] = ids.elem_count();
        let ids_c = ids.detach();
        let op = BackpropOp::new("index_select", &[self], move |i, _, g| {
            Ok(vec![Some(i[0].zeros_like()?.index_add(&ids_c, g, d)?)])
        });
        Ok(Tensor::from_storage(s, dims, op))
    }

    /// `out[..., j, ...] = self[..., ids[..., j, ...], ...]` along `dim` (`ids` has self's rank).
    pub fn gather<D: Dim>(&self, ids: &Tensor, dim: D) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "gather")?;
        let s = self
            .storage()
            .gather(self.layout(), ids.storage(), ids.layout(), d)?;
        let ids_c = ids.detach();
        let op = BackpropOp::new("gather", &[self], move |i, _, g| {
            Ok(vec![Some(i[0].zeros_like()?.scatter_add(&ids_c, g, d)?)])
        });
        Ok(Tensor::from_storage(s, ids.shape().clone(), op))
    }

    fn scatter_impl(&self, ids: &Tensor, src: &Tensor, d: usize, add: bool) -> Result<Tensor> {
        let src = src.to_dtype(self.dtype())?;
        let s = self.storage().scatter(
            self.layout(),
            ids.storage(),
            ids.layout(),
            src.storage(),
            src.layout(),
            d,
            add,
        )?;
        let ids_c = ids.detach();
        let name = if add { "scatter_add" } else { "scatter" };
        let op = BackpropOp::new(name, &[self, &src], move |_, _, g| {
            // Overwritten positions get no gradient from `self`.
            let g_self = if add {
                g.clone()
            } else {
                g.scatter(&ids_c, &ids_c.zeros_like()?.to_dtype(g.dtype())?, d)?
            };
            Ok(vec![Some(g_self), Some(g.gather(&ids_c, d)?)])
        });
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    /// `self` with `src[..., j, ...]` written at `ids[..., j, ...]` along `dim`.
    pub fn scatter<D: Dim>(&self, ids: &Tensor, src: &Tensor, dim: D) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "scatter")?;
        self.scatter_impl(ids, src, d, false)
    }

    /// `self` with `src[..., j, ...]` added at `ids[..., j, ...]` along `dim`.
    pub fn scatter_add<D: Dim>(&self, ids: &Tensor, src: &Tensor, dim: D) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "scatter_add")?;
        self.scatter_impl(ids, src, d, true)
    }

    /// `self` with slice `i` of `src` added to slice `ids[i]` along `dim`.
    pub fn index_add<D: Dim>(&self, ids: &Tensor, src: &Tensor, dim: D) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "index_add")?;
        if ids.rank() != 1 {
            return Err(Error::RankMismatch {
                op: "index_add",
                expected: 1,
                got: ids.rank(),
                shape: ids.shape().clone(),
            });
        }
        let src = src.to_dtype(self.dtype())?;
        let s = self.storage().index_add(
            self.layout(),
            ids.storage(),
            ids.layout(),
            src.storage(),
            src.layout(),
            d,
        )?;
        let ids_c = ids.detach();
        let op = BackpropOp::new("index_add", &[self, &src], move |_, _, g| {
            Ok(vec![Some(g.clone()), Some(g.index_select(&ids_c, d)?)])
        });
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    /// Embedding lookup: rows of the `[vocab, hidden]` table `self` for integer `ids` of any
    /// shape; the result has shape `ids.shape + [hidden]`.
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        let (_, hidden) = self.dims2()?;
        let mut dims = ids.dims().to_vec();
        dims.push(hidden);
        self.index_select(&ids.flatten_all()?, 0)?.reshape(dims)
    }
}

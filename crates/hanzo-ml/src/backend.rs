//! The storage trait every device backend implements. It asks for a small set of primitives;
//! fused kernels (softmax, norms, rope) are optional hooks returning `None`, in which case
//! `Tensor` falls back to a composite of the primitives. A new backend passes the whole test
//! suite once the primitives work, and overrides hot ops later.

use crate::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use crate::{CpuStorage, DType, Device, Layout, Result};

/// Batched matmul geometry: `b` batches of `[m, k] x [k, n]`.
#[derive(Debug, Clone, Copy)]
pub struct MatMulDims {
    pub b: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// Which rotary-embedding pairing: `(2i, 2i+1)` (GPT-J / original) or `(i, i + d/2)` (NeoX).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeKind {
    Interleaved,
    HalfSplit,
}

pub trait BackendStorage: Sized + Send + Sync {
    fn dtype(&self) -> DType;
    fn device(&self) -> Device;
    fn to_cpu(&self) -> Result<CpuStorage>;

    // Movement.
    fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<Self>;
    /// A contiguous copy of the view.
    fn copy_strided(&self, layout: &Layout) -> Result<Self>;
    /// Copy `rows` rows of `cols` elements from `self` (row stride `src_stride`, starting at
    /// `src_offset`) into `dst` (row stride `dst_stride`, from `dst_offset`).
    #[allow(clippy::too_many_arguments)]
    fn copy2d(
        &self,
        dst: &mut Self,
        rows: usize,
        cols: usize,
        src_stride: usize,
        dst_stride: usize,
        src_offset: usize,
        dst_offset: usize,
    ) -> Result<()>;

    // Element-wise; binary operands share one (broadcast) shape.
    fn unary<U: UnaryOpT>(&self, layout: &Layout) -> Result<Self>;
    fn binary<B: BinaryOpT>(&self, lhs_l: &Layout, rhs: &Self, rhs_l: &Layout) -> Result<Self>;
    /// Result is u8 (0 or 1).
    fn cmp(&self, op: CmpOp, lhs_l: &Layout, rhs: &Self, rhs_l: &Layout) -> Result<Self>;
    /// `x * mul + add`.
    fn affine(&self, layout: &Layout, mul: f64, add: f64) -> Result<Self>;
    fn powf(&self, layout: &Layout, exponent: f64) -> Result<Self>;
    fn where_cond(
        &self,
        layout: &Layout,
        t: &Self,
        t_l: &Layout,
        f: &Self,
        f_l: &Layout,
    ) -> Result<Self>;

    // Reductions: output is contiguous with each reduced dim kept as size 1.
    fn reduce(&self, op: ReduceOp, layout: &Layout, dims: &[usize]) -> Result<Self>;
    /// Inclusive prefix sum along the last dim; output contiguous.
    fn cumsum_last(&self, layout: &Layout) -> Result<Self>;
    /// u32 indices sorting each last-dim row.
    fn argsort_last(&self, layout: &Layout, ascending: bool) -> Result<Self>;

    fn matmul(&self, rhs: &Self, dims: MatMulDims, lhs_l: &Layout, rhs_l: &Layout) -> Result<Self>;

    // Indexing; ids are u8/u32/i64 and checked against the indexed size.
    fn index_select(&self, layout: &Layout, ids: &Self, ids_l: &Layout, dim: usize)
        -> Result<Self>;
    fn gather(&self, layout: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self>;
    /// `self` with `src` written (`add == false`) or added at `ids` along `dim`.
    #[allow(clippy::too_many_arguments)]
    fn scatter(
        &self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
        add: bool,
    ) -> Result<Self>;
    /// `self` with row `ids[i]` along `dim` increased by slice `i` of `src`.
    fn index_add(
        &self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<Self>;

    // Optional fused kernels over the last dim. `None`: use the composite.
    fn softmax_last(&self, _layout: &Layout, _log: bool) -> Result<Option<Self>> {
        Ok(None)
    }
    fn layer_norm(
        &self,
        _l: &Layout,
        _w: &Self,
        _w_l: &Layout,
        _b: Option<(&Self, &Layout)>,
        _eps: f64,
    ) -> Result<Option<Self>> {
        Ok(None)
    }
    fn rms_norm(&self, _l: &Layout, _w: &Self, _w_l: &Layout, _eps: f64) -> Result<Option<Self>> {
        Ok(None)
    }
    /// x: [b, h, t, d] contiguous; cos/sin: [t, d/2] contiguous.
    fn rope(&self, _l: &Layout, _cos: &Self, _sin: &Self, _kind: RopeKind) -> Result<Option<Self>> {
        Ok(None)
    }
}

//! `Storage` dispatches to the backend of its device. Adding a device is one variant here and
//! one arm in each `dispatch!`; binary ops check that both sides live on the same device.

use crate::backend::{BackendStorage, MatMulDims, RopeKind};
use crate::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use crate::{CpuStorage, DType, Device, Layout, Result};

#[derive(Debug, Clone)]
pub enum Storage {
    Cpu(CpuStorage),
}

/// One-operand dispatch: `$s` is bound to the backend storage, result re-wrapped.
macro_rules! dispatch {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Storage::Cpu($s) => Storage::Cpu($e),
        }
    };
}

/// Multi-operand dispatch: every operand must be on the same backend.
macro_rules! dispatch2 {
    ($a:expr, $b:expr, $op:expr, ($x:ident, $y:ident) => $e:expr) => {
        match ($a, $b) {
            (Storage::Cpu($x), Storage::Cpu($y)) => Storage::Cpu($e),
        }
    };
}

impl Storage {
    pub fn zeros(device: &Device, len: usize, dtype: DType) -> Result<Self> {
        match device {
            Device::Cpu => Ok(Storage::Cpu(CpuStorage::zeros(len, dtype))),
        }
    }
    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
        }
    }
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
        }
    }
    pub fn to_cpu(&self) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => s.to_cpu(),
        }
    }
    /// The host copy of the data: borrowed when it already lives on the CPU.
    pub fn host(&self) -> Result<std::borrow::Cow<'_, CpuStorage>> {
        match self {
            Storage::Cpu(s) => Ok(std::borrow::Cow::Borrowed(s)),
        }
    }
    pub(crate) fn same_device(&self, other: &Self, op: &'static str) -> Result<()> {
        self.device().same(&other.device(), op)
    }

    pub fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        Ok(dispatch!(self, s => s.to_dtype(l, dtype)?))
    }
    pub fn copy_strided(&self, l: &Layout) -> Result<Self> {
        Ok(dispatch!(self, s => s.copy_strided(l)?))
    }
    #[allow(clippy::too_many_arguments)]
    pub fn copy2d(
        &self,
        dst: &mut Self,
        rows: usize,
        cols: usize,
        ss: usize,
        ds: usize,
        so: usize,
        dof: usize,
    ) -> Result<()> {
        self.same_device(dst, "copy2d")?;
        match (self, dst) {
            (Storage::Cpu(s), Storage::Cpu(d)) => s.copy2d(d, rows, cols, ss, ds, so, dof),
        }
    }
    pub fn unary<U: UnaryOpT>(&self, l: &Layout) -> Result<Self> {
        Ok(dispatch!(self, s => s.unary::<U>(l)?))
    }
    pub fn binary<B: BinaryOpT>(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
        self.same_device(rhs, B::NAME)?;
        Ok(dispatch2!(self, rhs, B::NAME, (a, b) => a.binary::<B>(l, b, rl)?))
    }
    pub fn cmp(&self, op: CmpOp, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
        self.same_device(rhs, "cmp")?;
        Ok(dispatch2!(self, rhs, "cmp", (a, b) => a.cmp(op, l, b, rl)?))
    }
    pub fn affine(&self, l: &Layout, mul: f64, add: f64) -> Result<Self> {
        Ok(dispatch!(self, s => s.affine(l, mul, add)?))
    }
    pub fn powf(&self, l: &Layout, e: f64) -> Result<Self> {
        Ok(dispatch!(self, s => s.powf(l, e)?))
    }
    pub fn where_cond(
        &self,
        l: &Layout,
        t: &Self,
        tl: &Layout,
        f: &Self,
        fl: &Layout,
    ) -> Result<Self> {
        self.same_device(t, "where_cond")?;
        self.same_device(f, "where_cond")?;
        match (self, t, f) {
            (Storage::Cpu(c), Storage::Cpu(t), Storage::Cpu(f)) => {
                Ok(Storage::Cpu(c.where_cond(l, t, tl, f, fl)?))
            }
        }
    }
    pub fn reduce(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<Self> {
        Ok(dispatch!(self, s => s.reduce(op, l, dims)?))
    }
    pub fn cumsum_last(&self, l: &Layout) -> Result<Self> {
        Ok(dispatch!(self, s => s.cumsum_last(l)?))
    }
    pub fn argsort_last(&self, l: &Layout, asc: bool) -> Result<Self> {
        Ok(dispatch!(self, s => s.argsort_last(l, asc)?))
    }
    pub fn matmul(&self, rhs: &Self, d: MatMulDims, l: &Layout, rl: &Layout) -> Result<Self> {
        self.same_device(rhs, "matmul")?;
        Ok(dispatch2!(self, rhs, "matmul", (a, b) => a.matmul(b, d, l, rl)?))
    }
    pub fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        self.same_device(ids, "index_select")?;
        Ok(dispatch2!(self, ids, "index_select", (a, i) => a.index_select(l, i, il, dim)?))
    }
    pub fn gather(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        self.same_device(ids, "gather")?;
        Ok(dispatch2!(self, ids, "gather", (a, i) => a.gather(l, i, il, dim)?))
    }
    #[allow(clippy::too_many_arguments)]
    pub fn scatter(
        &self,
        l: &Layout,
        ids: &Self,
        il: &Layout,
        src: &Self,
        sl: &Layout,
        dim: usize,
        add: bool,
    ) -> Result<Self> {
        self.same_device(ids, "scatter")?;
        self.same_device(src, "scatter")?;
        match (self, ids, src) {
            (Storage::Cpu(a), Storage::Cpu(i), Storage::Cpu(s)) => {
                Ok(Storage::Cpu(a.scatter(l, i, il, s, sl, dim, add)?))
            }
        }
    }
    pub fn index_add(
        &self,
        l: &Layout,
        ids: &Self,
        il: &Layout,
        src: &Self,
        sl: &Layout,
        dim: usize,
    ) -> Result<Self> {
        self.same_device(ids, "index_add")?;
        self.same_device(src, "index_add")?;
        match (self, ids, src) {
            (Storage::Cpu(a), Storage::Cpu(i), Storage::Cpu(s)) => {
                Ok(Storage::Cpu(a.index_add(l, i, il, s, sl, dim)?))
            }
        }
    }
    pub fn softmax_last(&self, l: &Layout, log: bool) -> Result<Option<Self>> {
        match self {
            Storage::Cpu(s) => Ok(s.softmax_last(l, log)?.map(Storage::Cpu)),
        }
    }
    pub fn layer_norm(
        &self,
        l: &Layout,
        w: &Self,
        wl: &Layout,
        b: Option<(&Self, &Layout)>,
        eps: f64,
    ) -> Result<Option<Self>> {
        self.same_device(w, "layer_norm")?;
        match (self, w, b) {
            (Storage::Cpu(s), Storage::Cpu(w), None) => {
                Ok(s.layer_norm(l, w, wl, None, eps)?.map(Storage::Cpu))
            }
            (Storage::Cpu(s), Storage::Cpu(w), Some((Storage::Cpu(b), bl))) => Ok(s
                .layer_norm(l, w, wl, Some((b, bl)), eps)?
                .map(Storage::Cpu)),
        }
    }
    pub fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f64) -> Result<Option<Self>> {
        self.same_device(w, "rms_norm")?;
        match (self, w) {
            (Storage::Cpu(s), Storage::Cpu(w)) => Ok(s.rms_norm(l, w, wl, eps)?.map(Storage::Cpu)),
        }
    }
    pub fn rope(&self, l: &Layout, cos: &Self, sin: &Self, kind: RopeKind) -> Result<Option<Self>> {
        self.same_device(cos, "rope")?;
        self.same_device(sin, "rope")?;
        match (self, cos, sin) {
            (Storage::Cpu(s), Storage::Cpu(c), Storage::Cpu(n)) => {
                Ok(s.rope(l, c, n, kind)?.map(Storage::Cpu))
            }
        }
    }
}

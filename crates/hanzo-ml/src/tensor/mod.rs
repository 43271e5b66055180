//! `Tensor`: a cheap-to-clone handle to immutable storage, a layout (view) over it, and the
//! op that produced it (for backprop). Views share storage; nothing copies implicitly.
//!
//! Storage is never mutated after creation, so reads take no lock. Ops live in the sibling
//! files by family, each with its backward rule beside its forward.

mod conv;
pub(crate) mod creation;
mod display;
mod elementwise;
mod in_place;
mod indexing;
mod nn;
mod reduce;
mod shape_ops;

pub use conv::Conv2dParams;
pub use nn::AttentionMask;

use crate::backprop::BackpropOp;
use crate::{CpuStorage, DType, Device, Error, Layout, Result, Shape, Storage, WithDType};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(usize);

impl TensorId {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        TensorId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

pub(crate) struct TensorInner {
    id: TensorId,
    storage: Arc<Storage>,
    layout: Layout,
    op: Option<BackpropOp>,
    is_variable: bool,
}

#[derive(Clone)]
pub struct Tensor(Arc<TensorInner>);

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor[{:?}; {}; {:?}]",
            self.dims(),
            self.dtype(),
            self.device()
        )
    }
}

impl Tensor {
    /// A fresh tensor over `storage` viewed through `layout`, recording `op` for backprop.
    pub(crate) fn from_parts(
        storage: Arc<Storage>,
        layout: Layout,
        op: Option<BackpropOp>,
    ) -> Self {
        Tensor(Arc::new(TensorInner {
            id: TensorId::new(),
            storage,
            layout,
            op,
            is_variable: false,
        }))
    }

    /// A contiguous tensor owning `storage`.
    pub(crate) fn from_storage(
        storage: Storage,
        shape: impl Into<Shape>,
        op: Option<BackpropOp>,
    ) -> Self {
        Self::from_parts(Arc::new(storage), Layout::contiguous(shape), op)
    }

    /// A view of `self`'s storage (no copy).
    pub(crate) fn view(&self, layout: Layout, op: Option<BackpropOp>) -> Self {
        Self::from_parts(self.0.storage.clone(), layout, op)
    }

    /// Wrap CPU storage (e.g. loaded from a file) as a contiguous tensor.
    pub fn from_cpu_storage(storage: CpuStorage, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        if storage.len() != shape.elem_count() {
            return Err(Error::invalid(
                "from_cpu_storage",
                format!("{} elements cannot have shape {shape:?}", storage.len()),
            ));
        }
        Ok(Self::from_storage(Storage::Cpu(storage), shape, None))
    }

    pub fn id(&self) -> TensorId {
        self.0.id
    }
    pub fn storage(&self) -> &Storage {
        &self.0.storage
    }
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }
    pub fn shape(&self) -> &Shape {
        self.0.layout.shape()
    }
    pub fn dims(&self) -> &[usize] {
        self.shape().dims()
    }
    pub fn rank(&self) -> usize {
        self.shape().rank()
    }
    pub fn dim<D: crate::Dim>(&self, d: D) -> Result<usize> {
        Ok(self.dims()[d.to_index(self.shape(), "dim")?])
    }
    pub fn elem_count(&self) -> usize {
        self.shape().elem_count()
    }
    pub fn dtype(&self) -> DType {
        self.0.storage.dtype()
    }
    pub fn device(&self) -> Device {
        self.0.storage.device()
    }
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }
    pub fn dims1(&self) -> Result<usize> {
        self.shape().dims1()
    }
    pub fn dims2(&self) -> Result<(usize, usize)> {
        self.shape().dims2()
    }
    pub fn dims3(&self) -> Result<(usize, usize, usize)> {
        self.shape().dims3()
    }
    pub fn dims4(&self) -> Result<(usize, usize, usize, usize)> {
        self.shape().dims4()
    }
    /// The recorded op that produced this tensor (its name and inputs), when gradients are
    /// tracked: walk it to inspect a computation graph.
    pub fn op(&self) -> Option<&BackpropOp> {
        self.0.op.as_ref()
    }
    pub fn is_variable(&self) -> bool {
        self.0.is_variable
    }
    /// Whether gradients flow through this tensor (a variable, or computed from one).
    pub fn track_op(&self) -> bool {
        self.0.is_variable || self.0.op.is_some()
    }

    /// A leaf that gradients are computed for (shares storage with `self`).
    pub fn variable(&self) -> Tensor {
        Tensor(Arc::new(TensorInner {
            id: TensorId::new(),
            storage: self.0.storage.clone(),
            layout: self.0.layout.clone(),
            op: None,
            is_variable: true,
        }))
    }

    /// The same values, cut from the graph (no gradient flows through the result).
    pub fn detach(&self) -> Tensor {
        if !self.track_op() {
            return self.clone();
        }
        self.view(self.0.layout.clone(), None)
    }

    /// Whether two tensors view the same storage (e.g. a view and its source).
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        let src = self.dtype();
        let op = BackpropOp::new("to_dtype", &[self], move |_, _, g| {
            Ok(vec![Some(g.to_dtype(src)?)])
        });
        let s = self.storage().to_dtype(self.layout(), dtype)?;
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if &self.device() == device {
            return Ok(self.clone());
        }
        // Only the CPU exists in this build; other devices error when constructed.
        Err(Error::DeviceUnavailable(device.location()))
    }

    /// The storage on the host (borrowed, not copied, for CPU tensors), once `T` is checked
    /// to be the tensor's dtype.
    fn cpu_storage_as<T: WithDType>(
        &self,
        op: &'static str,
    ) -> Result<std::borrow::Cow<'_, CpuStorage>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch {
                op,
                expected: self.dtype(),
                got: T::DTYPE,
            });
        }
        self.storage().host()
    }

    /// Values in row-major order, as `T` (which must be the tensor's dtype).
    pub fn to_vec_flat<T: WithDType>(&self) -> Result<Vec<T>> {
        let cpu = self.cpu_storage_as::<T>("to_vec")?;
        Ok(crate::cpu::copy_view(cpu.as_slice::<T>()?, self.layout()))
    }

    /// Runs `f` on the elements in row-major order, borrowed where the layout is contiguous
    /// (copied only otherwise): for kernels that read a whole tensor once.
    pub fn with_contiguous<T: WithDType, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        let cpu = self.cpu_storage_as::<T>("with_contiguous")?;
        let v = cpu.as_slice::<T>()?;
        Ok(match self.layout().contiguous_offsets() {
            Some((start, end)) => f(&v[start..end]),
            None => f(&crate::cpu::copy_view(v, self.layout())),
        })
    }

    pub fn to_scalar<T: WithDType>(&self) -> Result<T> {
        if self.rank() != 0 {
            return Err(Error::RankMismatch {
                op: "to_scalar",
                expected: 0,
                got: self.rank(),
                shape: self.shape().clone(),
            });
        }
        Ok(self.to_vec_flat::<T>()?[0])
    }
    pub fn to_vec0<T: WithDType>(&self) -> Result<T> {
        self.to_scalar()
    }
    pub fn to_vec1<T: WithDType>(&self) -> Result<Vec<T>> {
        self.dims1()?;
        self.to_vec_flat()
    }
    pub fn to_vec2<T: WithDType>(&self) -> Result<Vec<Vec<T>>> {
        let (_, c) = self.dims2()?;
        let v = self.to_vec_flat()?;
        Ok(if c == 0 {
            vec![vec![]; self.dims()[0]]
        } else {
            v.chunks(c).map(|r| r.to_vec()).collect()
        })
    }
    pub fn to_vec3<T: WithDType>(&self) -> Result<Vec<Vec<Vec<T>>>> {
        let (a, b, c) = self.dims3()?;
        let v = self.to_vec_flat()?;
        Ok((0..a)
            .map(|i| {
                (0..b)
                    .map(|j| v[(i * b + j) * c..(i * b + j + 1) * c].to_vec())
                    .collect()
            })
            .collect())
    }
}

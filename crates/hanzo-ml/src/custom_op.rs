//! User-defined ops: implement a CPU kernel (and optionally a backward rule) and apply it to
//! tensors without touching the core. A device without an implementation returns an error.

use crate::backprop::BackpropOp;
use crate::{CpuStorage, Error, Layout, Result, Shape, Storage, Tensor};
use std::sync::Arc;

fn no_backward(name: &str) -> Error {
    Error::Backward(format!("custom op {name} has no backward rule"))
}

pub trait CustomOp1: Send + Sync {
    fn name(&self) -> &'static str;
    /// Forward on the CPU: the input storage viewed through `layout`; returns a contiguous
    /// result and its shape.
    fn cpu_fwd(&self, s: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)>;
    /// Gradient of the input given input, output and output gradient.
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, _grad: &Tensor) -> Result<Tensor> {
        Err(no_backward(self.name()))
    }
}

pub trait CustomOp2: Send + Sync {
    fn name(&self) -> &'static str;
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)>;
    fn bwd(
        &self,
        _a: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        _grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Err(no_backward(self.name()))
    }
}

pub trait CustomOp3: Send + Sync {
    fn name(&self) -> &'static str;
    #[allow(clippy::too_many_arguments)]
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)>;
    #[allow(clippy::type_complexity)]
    fn bwd(
        &self,
        _a: &Tensor,
        _b: &Tensor,
        _c: &Tensor,
        _res: &Tensor,
        _grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        Err(no_backward(self.name()))
    }
}

fn cpu(t: &Tensor) -> Result<&CpuStorage> {
    match t.storage() {
        Storage::Cpu(s) => Ok(s),
    }
}

fn finish(s: CpuStorage, shape: Shape, op: Option<BackpropOp>, name: &str) -> Result<Tensor> {
    if s.len() != shape.elem_count() {
        return Err(Error::Custom {
            op: name.into(),
            msg: format!("returned {} elements for shape {shape:?}", s.len()),
        });
    }
    Ok(Tensor::from_storage(Storage::Cpu(s), shape, op))
}

impl Tensor {
    pub fn apply_op1(&self, op: impl CustomOp1 + 'static) -> Result<Tensor> {
        let op = Arc::new(op);
        let (s, shape) = op.cpu_fwd(cpu(self)?, self.layout())?;
        let o = op.clone();
        let bop = BackpropOp::new(op.name(), &[self], move |i, y, g| {
            Ok(vec![Some(o.bwd(&i[0], y, g)?)])
        });
        finish(s, shape, bop, op.name())
    }

    pub fn apply_op2(&self, rhs: &Tensor, op: impl CustomOp2 + 'static) -> Result<Tensor> {
        let op = Arc::new(op);
        self.device().same(&rhs.device(), op.name())?;
        let (s, shape) = op.cpu_fwd(cpu(self)?, self.layout(), cpu(rhs)?, rhs.layout())?;
        let o = op.clone();
        let bop = BackpropOp::new(op.name(), &[self, rhs], move |i, y, g| {
            let (a, b) = o.bwd(&i[0], &i[1], y, g)?;
            Ok(vec![a, b])
        });
        finish(s, shape, bop, op.name())
    }

    pub fn apply_op3(
        &self,
        t2: &Tensor,
        t3: &Tensor,
        op: impl CustomOp3 + 'static,
    ) -> Result<Tensor> {
        let op = Arc::new(op);
        self.device().same(&t2.device(), op.name())?;
        self.device().same(&t3.device(), op.name())?;
        let (s, shape) = op.cpu_fwd(
            cpu(self)?,
            self.layout(),
            cpu(t2)?,
            t2.layout(),
            cpu(t3)?,
            t3.layout(),
        )?;
        let o = op.clone();
        let bop = BackpropOp::new(op.name(), &[self, t2, t3], move |i, y, g| {
            let (a, b, c) = o.bwd(&i[0], &i[1], &i[2], y, g)?;
            Ok(vec![a, b, c])
        });
        finish(s, shape, bop, op.name())
    }
}

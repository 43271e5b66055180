//! Reverse-mode autodiff. Each op records a `BackpropOp`: its inputs and a closure mapping
//! the output gradient to input gradients. The closure is written next to the op's forward.

use crate::{Error, Result, Tensor, TensorId};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

type BackwardFn = dyn Fn(&[Tensor], &Tensor, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync;

#[derive(Clone)]
pub struct BackpropOp {
    name: &'static str,
    inputs: Vec<Tensor>,
    backward: Arc<BackwardFn>,
}

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Run `f` without recording any backprop op on this thread (optimizer updates, inference).
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let prev = GRAD_ENABLED.with(|g| g.replace(false));
    let r = f();
    GRAD_ENABLED.with(|g| g.set(prev));
    r
}

impl BackpropOp {
    /// Record an op when any input is tracked. `backward(inputs, output, grad)` returns one
    /// optional gradient per input, each in that input's shape.
    pub fn new(
        name: &'static str,
        inputs: &[&Tensor],
        backward: impl Fn(&[Tensor], &Tensor, &Tensor) -> Result<Vec<Option<Tensor>>>
            + Send
            + Sync
            + 'static,
    ) -> Option<Self> {
        if !GRAD_ENABLED.with(|g| g.get()) || !inputs.iter().any(|t| t.track_op()) {
            return None;
        }
        Some(Self {
            name,
            inputs: inputs.iter().map(|&t| t.clone()).collect(),
            backward: Arc::new(backward),
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn inputs(&self) -> &[Tensor] {
        &self.inputs
    }
}

/// Gradients by tensor id.
#[derive(Default)]
pub struct GradStore(HashMap<TensorId, Tensor>);

impl GradStore {
    pub fn get(&self, t: &Tensor) -> Option<&Tensor> {
        self.0.get(&t.id())
    }
    pub fn get_id(&self, id: TensorId) -> Option<&Tensor> {
        self.0.get(&id)
    }
    pub fn remove(&mut self, t: &Tensor) -> Option<Tensor> {
        self.0.remove(&t.id())
    }
    pub fn insert(&mut self, t: &Tensor, g: Tensor) -> Option<Tensor> {
        self.0.insert(t.id(), g)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Tensor {
    /// Visit every tensor of the recorded graph below `self` (inputs before outputs).
    pub fn walk_graph(&self) -> Vec<Tensor> {
        // Iterative post-order DFS: graphs from long loops (integrators) would overflow a
        // recursive walk.
        let mut order = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![(self.clone(), false)];
        while let Some((t, expanded)) = stack.pop() {
            if expanded {
                order.push(t);
                continue;
            }
            if !seen.insert(t.id()) {
                continue;
            }
            stack.push((t.clone(), true));
            if let Some(op) = t.op() {
                for i in op.inputs().iter().rev() {
                    if i.track_op() && !seen.contains(&i.id()) {
                        stack.push((i.clone(), false));
                    }
                }
            }
        }
        order
    }

    /// Name of the op that produced this tensor (`None` for leaves).
    pub fn op_name(&self) -> Option<&'static str> {
        self.op().map(|o| o.name())
    }

    /// Gradients of `self` (summed to a scalar if it is not one) with respect to every tracked
    /// tensor it depends on.
    pub fn backward(&self) -> Result<GradStore> {
        if !self.track_op() {
            return Err(Error::Backward(
                "tensor does not depend on any variable".into(),
            ));
        }
        // Gradient computations are not themselves recorded (no double backward).
        no_grad(|| self.backward_inner())
    }

    fn backward_inner(&self) -> Result<GradStore> {
        let order = self.walk_graph();
        let mut grads = GradStore::default();
        grads.insert(self, self.ones_like()?);
        for node in order.iter().rev() {
            let Some(grad) = grads.remove(node) else {
                continue;
            };
            let grad = grad.detach();
            if let Some(op) = node.op() {
                let input_grads = (op.backward)(op.inputs(), node, &grad)?;
                for (input, g) in op.inputs().iter().zip(input_grads) {
                    let Some(g) = g else { continue };
                    if !input.track_op() {
                        continue;
                    }
                    if g.dims() != input.dims() {
                        return Err(Error::Backward(format!(
                            "{}: gradient shape {:?} does not match input shape {:?}",
                            op.name(),
                            g.dims(),
                            input.dims()
                        )));
                    }
                    let g = match grads.remove(input) {
                        Some(prev) => prev.add(&g)?,
                        None => g,
                    };
                    grads.insert(input, g);
                }
            }
            if node.is_variable() {
                grads.insert(node, grad);
            }
        }
        Ok(grads)
    }
}

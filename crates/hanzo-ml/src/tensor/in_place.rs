//! The one mutating operation: writing a block into a tensor that nothing else can see.
//!
//! Storage is otherwise immutable, so readers take no lock. A KV cache still needs to append
//! a token's keys into a pre-allocated buffer without copying the whole buffer each step.
//! `write_slice` does that in place when this handle is the only owner of its storage (the
//! views handed out for the previous step have been dropped) and copies first otherwise
//! (copy-on-write), so no other tensor ever observes a change.

use super::{Tensor, TensorInner};
use crate::{Error, Result, Storage};
use std::sync::Arc;

impl Tensor {
    /// Copies `src` into `self` at `start..start + src.dims()[dim]` along `dim`. `self` must be
    /// a whole contiguous buffer (not a view), and neither tensor may be tracking gradients.
    pub fn write_slice(&mut self, src: &Tensor, dim: usize, start: usize) -> Result<()> {
        const OP: &str = "write_slice";
        let dims = self.dims().to_vec();
        if dim >= dims.len() {
            return Err(Error::DimOutOfRange {
                op: OP,
                dim: dim as i64,
                rank: dims.len(),
            });
        }
        let mut want = dims.clone();
        want[dim] = src.dims().get(dim).copied().unwrap_or(0);
        if src.dims() != want.as_slice() {
            return Err(Error::ShapeMismatch {
                op: OP,
                expected: want.into(),
                got: src.shape().clone(),
            });
        }
        if start + want[dim] > dims[dim] {
            return Err(Error::NarrowOutOfRange {
                op: OP,
                dim,
                start,
                len: want[dim],
                size: dims[dim],
            });
        }
        if self.dtype() != src.dtype() {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: self.dtype(),
                got: src.dtype(),
            });
        }
        if self.track_op() || src.track_op() {
            return Err(Error::invalid(
                OP,
                "in-place writes do not record gradients",
            ));
        }
        let Storage::Cpu(own) = self.storage();
        if self.layout().contiguous_offsets() != Some((0, own.len())) {
            return Err(Error::invalid(
                OP,
                "the destination must be a whole contiguous buffer",
            ));
        }
        self.device().same(&src.device(), OP)?;
        let inner = match Arc::get_mut(&mut self.0) {
            Some(inner) => inner,
            None => {
                // Shared handle: give this one its own inner (same storage Arc for now).
                let fresh = TensorInner {
                    id: self.0.id,
                    storage: self.0.storage.clone(),
                    layout: self.0.layout.clone(),
                    op: None,
                    is_variable: self.0.is_variable,
                };
                self.0 = Arc::new(fresh);
                Arc::get_mut(&mut self.0).expect("just created")
            }
        };
        // Copy-on-write: clones the buffer only if a view of it is still alive.
        let storage = Arc::make_mut(&mut inner.storage);
        match (storage, src.storage()) {
            (Storage::Cpu(dst), Storage::Cpu(s)) => {
                dst.write_block(&dims, dim, start, s, src.layout())
            }
        }
    }
}

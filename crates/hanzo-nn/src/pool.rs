//! Pooling and softmax as layers (so a model built from them can be inspected and
//! converted, e.g. to polynomial form).

use crate::Module;
use hanzo_ml::{Result, Tensor};

/// Max over `k x k` windows with stride `k` of `[b, c, h, w]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2d(pub usize);

impl Module for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.max_pool2d((self.0, self.0), (self.0, self.0))
    }
}

/// Mean over `k x k` windows with stride `k` of `[b, c, h, w]` (linear: FHE-friendly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2d(pub usize);

impl Module for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.avg_pool2d((self.0, self.0), (self.0, self.0))
    }
}

/// Softmax over the last dim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Softmax;

impl Module for Softmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.softmax(x.rank().saturating_sub(1))
    }
}

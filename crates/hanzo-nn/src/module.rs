//! The `Module` trait and a sequential container.

use hanzo_ml::{Result, Tensor};

/// A layer: a function of one tensor.
pub trait Module {
    fn forward(&self, xs: &Tensor) -> Result<Tensor>;
}

/// A layer whose forward pass differs between training and inference (dropout, batch norm).
pub trait ModuleT {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Result<Tensor>;
}

impl<M: Module> ModuleT for M {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Result<Tensor> {
        self.forward(xs)
    }
}

impl<F: Fn(&Tensor) -> Result<Tensor>> Module for F {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self(xs)
    }
}

/// Layers applied in order.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn ModuleT + Send + Sync>>,
}

impl Sequential {
    pub fn new() -> Self {
        Self::default()
    }

    #[allow(clippy::should_implement_trait)]
    pub fn add<M: ModuleT + Send + Sync + 'static>(mut self, layer: M) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl ModuleT for Sequential {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Result<Tensor> {
        let mut x = xs.clone();
        for l in &self.layers {
            x = l.forward_t(&x, train)?;
        }
        Ok(x)
    }
}

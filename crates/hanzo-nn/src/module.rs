//! The `Module` trait and a sequential container.

use hanzo_ml::{Result, Tensor};
use std::any::Any;
use std::sync::Arc;

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

/// A layer held by a [`Sequential`]: any `ModuleT`, inspectable by type (converters such as
/// [`crate::poly::to_polynomial`] find activations, norms and pools this way).
pub trait Layer: ModuleT + Send + Sync + Any {
    fn as_any(&self) -> &dyn Any;
}

impl<T: ModuleT + Send + Sync + Any> Layer for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Layers applied in order. Layers are shared (`Arc`), so a converted copy of a model reuses
/// the weights of every layer it does not replace.
#[derive(Clone, Default)]
pub struct Sequential {
    layers: Vec<Arc<dyn Layer>>,
}

impl Sequential {
    pub fn new() -> Self {
        Self::default()
    }

    #[allow(clippy::should_implement_trait)]
    pub fn add<M: Layer>(mut self, layer: M) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    pub fn add_boxed(mut self, layer: Box<dyn Layer>) -> Self {
        self.layers.push(Arc::from(layer));
        self
    }

    pub fn push_shared(&mut self, layer: Arc<dyn Layer>) {
        self.layers.push(layer);
    }

    pub fn layers(&self) -> &[Arc<dyn Layer>] {
        &self.layers
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

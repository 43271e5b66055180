//! Layers and training on top of `hanzo-ml`: modules (linear, embedding, norms, convolutions,
//! activations, rotary embeddings, attention), KV caches, a `VarBuilder` that loads weights
//! from safetensors / GGUF or creates trainable ones, initialisers, losses and optimizers.
//!
//! Tensors are immutable, so a trainable weight is a [`Var`]: a shared slot the optimizer
//! replaces after each step. Layers hold a [`Param`], either a fixed tensor (loaded weights)
//! or a `Var`, and read it once per forward pass.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod activation;
pub mod attention;
pub mod conv;
pub mod embedding;
pub mod init;
pub mod linear;
pub mod loss;
pub mod module;
pub mod norm;
pub mod optim;
pub mod param;
pub mod poly;
pub mod pool;
pub mod rope;
pub mod var_builder;

pub use activation::{Activation, Dropout};
pub use attention::{Attention, AttentionConfig, MaskKind};
pub use conv::{Conv1d, Conv2d};
pub use embedding::Embedding;
pub use init::Init;
pub use linear::{Linear, QLinear};
pub use module::{Layer, Module, ModuleT, Sequential};
pub use norm::{BatchNorm, GroupNorm, LayerNorm, RmsNorm};
pub use optim::{AdamW, Optimizer, Sgd};
pub use param::{Param, Var, VarMap};
pub use pool::{AvgPool2d, MaxPool2d, Softmax};
pub use rope::{RopeScaling, RotaryEmbedding};
pub use var_builder::VarBuilder;

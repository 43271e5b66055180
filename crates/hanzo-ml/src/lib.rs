//! # hanzo-ml
//!
//! Tensors with reverse-mode autodiff and a multi-threaded, SIMD CPU backend.
//!
//! ```
//! use hanzo_ml::{Device, Tensor};
//! let a = Tensor::new(&[[1f32, 2.], [3., 4.]], &Device::Cpu)?;
//! let b = Tensor::new(&[[5f32, 6.], [7., 8.]], &Device::Cpu)?;
//! assert_eq!(a.matmul(&b)?.to_vec2::<f32>()?, vec![vec![19., 22.], vec![43., 50.]]);
//! # Ok::<(), hanzo_ml::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod backprop;
pub mod cpu;
pub mod custom_op;
mod device;
mod dtype;
mod env;
mod error;
pub mod io;
pub mod kv;
pub mod layout;
pub mod memory;
pub mod op;
pub mod quantized;
mod shape;
mod storage;
mod tensor;

pub use backend::RopeKind;
pub use backprop::{no_grad, GradStore};
pub use cpu::CpuStorage;
pub use custom_op::{CustomOp1, CustomOp2, CustomOp3};
pub use device::{Device, DeviceLocation};
pub use dtype::{DType, WithDType, F8E4M3};
pub use error::{Error, Result};
pub use layout::Layout;
pub use shape::{All, Dim, Dims, Shape};
pub use storage::Storage;
pub use tensor::creation::{manual_seed, NdArray};
pub use tensor::{AttentionMask, Conv2dParams, Tensor, TensorId};

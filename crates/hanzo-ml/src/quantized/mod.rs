//! Quantization: ggml's block formats, GGUF files, quantized tensors and the quantized matmul.
//!
//! Layers, each importing only from the ones below it:
//!
//! | layer | modules | job |
//! |---|---|---|
//! | 4 | `qmatmul`, `isq`, `gguf` | `QMatMul` (picks a path per product, owns repacking); load-time quantization; GGUF files |
//! | 3 | `qtensor` | `QTensor`: typed block bytes with a shape, owned or mapped (quantized with the SIMD quantizers where a type has them) |
//! | 2 | `cpu` | the CPU drivers: decode matvec, prefill tiles and panels, repacked weights |
//! | 1 | `kernels` | SIMD kernels per instruction set and the choice among them |
//! | 0 | `format` | block layouts, scalar (de)quantization and dot products; no CPU dispatch |
//!
//! A GPU backend reuses `format` (the layouts and the reference arithmetic) and brings its
//! own kernels; a new block type adds a struct in `format` and its kernels in `kernels`.

pub mod cpu;
pub mod format;
pub mod gguf;
pub mod isq;
pub mod kernels;
mod qmatmul;
mod qtensor;

pub use format::{AfqScale, AfqType, GgmlDType};
pub use qmatmul::QMatMul;
pub use qtensor::QTensor;

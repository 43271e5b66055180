//! Quantization: ggml's block formats, GGUF files, quantized tensors and the quantized matmul.

pub mod blocks;
mod dot;
mod dtype;
mod gemm;
pub mod gguf;
pub mod interleaved;
pub mod isq;
mod qmatmul;
mod qtensor;

pub use dot::{has_avx2, isa, Isa};
pub use dtype::GgmlDType;
pub use qmatmul::{matmul as qmatmul_raw, QMatMul};
pub use qtensor::QTensor;

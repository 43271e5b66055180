//! The third layer of `quantized`: the CPU drivers that split quantized products over rows
//! and threads and call the `kernels`. `matvec` multiplies blocks as they are stored (decode,
//! and the tile path of small batches), `gemm` runs the prefill panels, `float` the prefill
//! of F16/BF16 weights, `interleaved` holds weights repacked eight rows at a time.

pub(crate) mod float;
pub mod gemm;
pub mod interleaved;
pub mod matvec;
mod sink;

//! The third layer of `quantized`: the CPU drivers that split quantized products over rows
//! and threads and call the `kernels`. `matvec` multiplies blocks as they are stored (decode,
//! and the tile path of small batches), `gemm` runs the prefill panels, `float` the prefill
//! of F16/BF16 weights, `interleaved` holds weights repacked eight rows at a time (`interleaved_iq4xs` the IQ4_XS
//! ones), `afq` the products with MLX's affine layouts.

pub(crate) mod afq;
pub(crate) mod float;
pub mod gemm;
pub mod interleaved;
pub mod interleaved_iq4xs;
pub mod matvec;
mod sink;

/// Which kernels a product of several activation rows takes. The GEMM panels quantize the
/// activations to Q8_0 and sum in their own order, so a row's numbers depend on the route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Every row as a product with that row alone computes it (the decode kernels).
    Alone,
    /// The GEMM panels from the weight's row threshold (`gemm::min_rows`), the tiles below.
    ByRows,
    /// The GEMM panels however few rows there are, where they apply to the weight: rows of
    /// a run long enough for the panels that reach the product in several pieces.
    Panels,
}

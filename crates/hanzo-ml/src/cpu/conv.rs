//! Convolutions and pooling (im2col + gemm). Filled in by the conv module work.

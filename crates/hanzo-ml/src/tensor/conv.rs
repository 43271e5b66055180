//! Convolutions, transposed convolutions, pooling and upsampling on `Tensor`.

//! Dot products of AFQ weight rows (`format::afq`) with an activation row quantized to 8-bit
//! integers in blocks of 32 (ggml's Q8_0 arithmetic, scale `d` per block).
//!
//! Per group: `Σ (scale·q + bias)·x = scale · Σ_blocks d·Σ q·x_q + bias · Σ x`, where `Σ x` is
//! the group's activation sum as quantized (`Σ_blocks d·Σ x_q`), so both terms see the same
//! activations. The portable dot takes every width; AVX2, NEON and SIMD128 have 4- and
//! 8-bit forms; the 4-bit ones read the activations in the order `AfqDot::nibble_order`
//! describes.

use crate::quantized::format::afq::{level, scale_bias};
use crate::quantized::format::AfqType;

/// One weight row's dot product: `w` the row's blocks, `q` the activation bytes (`k`), `d`
/// their scales (`k / 32`), `gsum` each group's activation sum (`k / group`).
pub type AfqDotFn = fn(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32;

/// A kernel and the activation byte order it reads.
#[derive(Clone, Copy)]
pub struct AfqDot {
    pub dot: AfqDotFn,
    /// The activations in 64-element chunks, each its 32 even elements then its 32 odd ones
    /// (the low nibbles of the chunk's 32 weight bytes, then the high ones), and `d` per chunk
    /// as eight floats, the first block's `d` four times then the second's (the lanes each
    /// half of a chunk's products lands in).
    pub nibble_order: bool,
}

/// The lengths every SIMD kernel reads through raw pointers, for one row of `t`: `w` whole
/// blocks, `q` one byte per element, `d` per 32 elements (per 64 as eight floats for the
/// 4-bit kernels' `nibble_order`).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
pub(super) fn check_lengths(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) {
    let groups = gsum.len();
    let k = groups * t.group();
    assert!(w.len() == groups * t.block_bytes() && q.len() == k);
    match t.bits() {
        4 => assert!(k.is_multiple_of(64) && d.len() == k / 8),
        _ => assert!(d.len() == k / 32),
    }
}

/// This CPU's kernel for `t` and rows of `k`.
pub fn pick(t: AfqType, k: usize) -> AfqDot {
    #[cfg(target_arch = "x86_64")]
    if let Some(dot) = super::afq_x86::pick(t, k) {
        return dot;
    }
    #[cfg(target_arch = "aarch64")]
    if let Some(dot) = super::afq_neon::pick(t, k) {
        return dot;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if let Some(dot) = super::afq_simd128::pick(t, k) {
        return dot;
    }
    let _ = (t, k);
    AfqDot {
        dot: dot_portable,
        nibble_order: false,
    }
}

/// The portable dot product, every width; the SIMD kernels are checked against it.
pub fn dot_portable(t: AfqType, w: &[u8], q: &[i8], d: &[f32], gsum: &[f32]) -> f32 {
    let (g, bits, bb) = (t.group(), t.bits(), t.block_bytes());
    let mut total = 0f32;
    for (gi, block) in w.chunks_exact(bb).enumerate() {
        let (scale, bias) = scale_bias(t, block);
        let levels = &block[4..];
        let mut acc = 0f32;
        for j in 0..g / 32 {
            let x = &q[gi * g + j * 32..][..32];
            let isum: i32 = (0..32)
                .map(|i| level(levels, bits, j * 32 + i) as i32 * x[i] as i32)
                .sum();
            acc += d[gi * g / 32 + j] * isum as f32;
        }
        total += scale * acc + bias * gsum[gi];
    }
    total
}

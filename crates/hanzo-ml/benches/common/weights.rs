//! Deterministic benchmark weights, shared by `benches/quant.rs` and
//! `examples/decode_kernels.rs` (included by path).

/// `n · k` values in [-0.05, 0.05) from a xorshift generator with a fixed seed.
pub fn weights(n: usize, k: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..n * k)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
        })
        .collect()
}

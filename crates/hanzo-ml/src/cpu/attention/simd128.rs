//! WebAssembly SIMD128 pieces of the attention kernel, in builds with the `simd128` feature.
//! SIMD128 has neither F16C nor fused multiply-adds: f16 widens and rounds by bit operations
//! (`cpu::simd::simd128`, exact), and each `x · y + a` rounds the product before the sum
//! where the AVX2 kernels fuse them. The dot product keeps AVX2's order of additions, so the
//! scores differ from the native ones only by that rounding.
use super::Elem;
use crate::cpu::simd::simd128::{load4, round_to_f16, store4, widen_f16x8};
use half::f16;
use std::arch::wasm32::*;

/// `super::round_f16` for a length that is a multiple of 4.
pub fn round_f16(xs: &mut [f32]) {
    for c in xs.chunks_exact_mut(4) {
        store4(c, round_to_f16(load4(c)));
    }
}

/// `super::mad_f16` for a length that is a multiple of 8.
pub fn mad_f16(acc: &mut [f32], v: &[f16], s: f32) {
    let s = f32x4_splat(s);
    for (a, x) in acc.chunks_exact_mut(8).zip(v.chunks_exact(8)) {
        let (x0, x1) = widen_f16x8(x);
        let (lo, hi) = a.split_at_mut(4);
        store4(lo, round_to_f16(f32x4_add(f32x4_mul(x0, s), load4(lo))));
        store4(hi, round_to_f16(f32x4_add(f32x4_mul(x1, s), load4(hi))));
    }
}

/// `super::dot` for a length that is a multiple of 32, in the AVX2 kernel's order: four
/// 8-lane sums (here each as two 4-lane halves) over 32-element chunks, then `(s0 + s2) + (s1 +
/// s3)`, the two 4-lane halves, and `(t0 + t1) + (t2 + t3)`.
pub fn dot<K: Elem>(a: &[K], b: &[f32]) -> f32 {
    let mut s = [[f32x4_splat(0.0); 2]; 4];
    for (x, y) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
        for (j, acc) in s.iter_mut().enumerate() {
            let (x0, x1) = K::widen8(&x[8 * j..]);
            acc[0] = f32x4_add(acc[0], f32x4_mul(x0, load4(&y[8 * j..])));
            acc[1] = f32x4_add(acc[1], f32x4_mul(x1, load4(&y[8 * j + 4..])));
        }
    }
    let half = |h: usize| f32x4_add(f32x4_add(s[0][h], s[2][h]), f32x4_add(s[1][h], s[3][h]));
    let t = f32x4_add(half(0), half(1));
    let lane = |i| match i {
        0 => f32x4_extract_lane::<0>(t),
        1 => f32x4_extract_lane::<1>(t),
        2 => f32x4_extract_lane::<2>(t),
        _ => f32x4_extract_lane::<3>(t),
    };
    (lane(0) + lane(1)) + (lane(2) + lane(3))
}

/// `super::accumulate` for a length that is a multiple of 16: sixteen columns held in
/// registers while every value row passes.
pub fn accumulate(acc: &mut [f32], vals: &[f32], ms: f32, weights: &[f32]) {
    let d = acc.len();
    assert!(vals.len() == d * weights.len());
    for c in (0..d).step_by(16) {
        let mut r: [v128; 4] = std::array::from_fn(|i| load4(&acc[c + 4 * i..]));
        if ms != 1.0 {
            let m = f32x4_splat(ms);
            r = r.map(|x| f32x4_mul(x, m));
        }
        for (row, &w) in vals.chunks_exact(d).zip(weights) {
            let w = f32x4_splat(w);
            for (i, x) in r.iter_mut().enumerate() {
                *x = f32x4_add(*x, f32x4_mul(load4(&row[c + 4 * i..]), w));
            }
        }
        for (i, x) in r.iter().enumerate() {
            store4(&mut acc[c + 4 * i..], *x);
        }
    }
}

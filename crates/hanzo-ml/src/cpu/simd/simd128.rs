//! WebAssembly SIMD128: `F32Vector` over 4 f32 lanes. Compiled only into a build with the
//! `simd128` target feature (a module either has SIMD or it does not: engines without it
//! refuse the whole module, so there is no run-time choice to make).
//!
//! SIMD128 has no fused multiply-add: `fma` rounds twice here, so the polynomial kernels
//! (exp, silu, softmax) differ from the FMA sets in the last bits, within the tolerance the
//! kernel tests hold every set to.

use super::vector::{row_kernels, F32Vector};
use std::arch::wasm32::*;

/// Proof that this build runs SIMD128.
#[derive(Clone, Copy)]
pub(super) struct Simd128(());

impl Simd128 {
    /// # Safety
    /// The build must have SIMD128 (it is compiled only then, so this is always true).
    pub(super) unsafe fn assume() -> Self {
        Simd128(())
    }
}

row_kernels!(Simd128, "simd128", "simd128");

// SIMD128 intrinsics are safe functions in a build with the feature; only the loads and
// stores through raw pointers need `unsafe`, and they are bounds-checked by a slice index
// first.
unsafe impl F32Vector for Simd128 {
    type V = v128;
    type Mask = v128;
    const LANES: usize = 4;

    #[inline(always)]
    fn splat(self, x: f32) -> v128 {
        f32x4_splat(x)
    }
    #[inline(always)]
    fn load(self, c: &[f32]) -> v128 {
        load4(c)
    }
    #[inline(always)]
    fn store(self, c: &mut [f32], v: v128) {
        store4(c, v)
    }
    #[inline(always)]
    fn load_pairs(self, c: &[f32]) -> v128 {
        f32x4(c[0], c[0], c[1], c[1])
    }
    #[inline(always)]
    fn swap_pairs(self, v: v128) -> v128 {
        i32x4_shuffle::<1, 0, 3, 2>(v, v)
    }
    #[inline(always)]
    fn add(self, a: v128, b: v128) -> v128 {
        f32x4_add(a, b)
    }
    #[inline(always)]
    fn sub(self, a: v128, b: v128) -> v128 {
        f32x4_sub(a, b)
    }
    #[inline(always)]
    fn mul(self, a: v128, b: v128) -> v128 {
        f32x4_mul(a, b)
    }
    #[inline(always)]
    fn div(self, a: v128, b: v128) -> v128 {
        f32x4_div(a, b)
    }
    #[inline(always)]
    fn fma(self, a: v128, b: v128, c: v128) -> v128 {
        f32x4_add(f32x4_mul(a, b), c)
    }
    #[inline(always)]
    fn max(self, a: v128, b: v128) -> v128 {
        // NaN when either operand is.
        f32x4_max(a, b)
    }
    #[inline(always)]
    fn min(self, a: v128, b: v128) -> v128 {
        f32x4_min(a, b)
    }
    #[inline(always)]
    fn round(self, v: v128) -> v128 {
        f32x4_nearest(v)
    }
    #[inline(always)]
    fn floor(self, v: v128) -> v128 {
        f32x4_floor(v)
    }
    #[inline(always)]
    fn pow2i(self, q: v128) -> v128 {
        let biased = i32x4_add(i32x4_trunc_sat_f32x4(q), i32x4_splat(127));
        i32x4_shl(biased, 23)
    }
    #[inline(always)]
    fn ge(self, a: v128, b: v128) -> v128 {
        f32x4_ge(a, b)
    }
    #[inline(always)]
    fn le(self, a: v128, b: v128) -> v128 {
        f32x4_le(a, b)
    }
    #[inline(always)]
    fn is_nan(self, a: v128) -> v128 {
        f32x4_ne(a, a)
    }
    #[inline(always)]
    fn or(self, a: v128, b: v128) -> v128 {
        v128_or(a, b)
    }
    #[inline(always)]
    fn any(self, m: v128) -> bool {
        v128_any_true(m)
    }
    #[inline(always)]
    fn select(self, m: v128, a: v128, b: v128) -> v128 {
        v128_bitselect(a, b, m)
    }
    #[inline(always)]
    fn hsum(self, v: v128) -> f32 {
        (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
            + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v))
    }
    #[inline(always)]
    fn hmax(self, v: v128) -> f32 {
        let m = f32x4_max(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
        let m = f32x4_max(m, i32x4_shuffle::<1, 0, 3, 2>(m, m));
        f32x4_extract_lane::<0>(m)
    }
}

/// The first four floats of `c`.
#[inline(always)]
pub(crate) fn load4(c: &[f32]) -> v128 {
    let c = &c[..4];
    // SAFETY: `c` holds 4 elements; v128_load has no alignment need.
    unsafe { v128_load(c.as_ptr().cast()) }
}

/// `v` into the first four floats of `c`.
#[inline(always)]
pub(crate) fn store4(c: &mut [f32], v: v128) {
    let c = &mut c[..4];
    // SAFETY: `c` holds 4 elements; v128_store has no alignment need.
    unsafe { v128_store(c.as_mut_ptr().cast(), v) }
}

/// Four f16 values (their bits in the low half of each u32 lane, the high half zero) as f32,
/// exactly: the f16's exponent and mantissa bits moved into place and scaled by 2^112 (the
/// difference of the biases), right for normal and subnormal values alike. Infinities and
/// NaNs come out of that at 2^16 or more, and get the all-ones exponent or-ed in. SIMD128 has
/// no conversion instruction, and `half`'s portable one branches. Shifts stand in for masks
/// where they can: engines build each vector constant anew at every use inside a loop (V8:
/// three instructions), and a kernel converts scales every block.
#[inline(always)]
pub(crate) fn widen_f16(h: v128) -> v128 {
    let shifted = u32x4_shr(i32x4_shl(h, 17), 4);
    let finite = f32x4_mul(shifted, f32x4_splat(f32::from_bits(0x7780_0000)));
    let special = i32x4_gt(shifted, u32x4_splat((0x7c00 << 13) - 1));
    let all_ones_exponent = i32x4_shl(u32x4_shr(special, 24), 23);
    let sign = i32x4_shl(u32x4_shr(h, 15), 31);
    v128_or(v128_or(finite, all_ones_exponent), sign)
}

/// Eight f16 values from 16 bytes, as two vectors of four f32 (`widen_f16`).
#[inline(always)]
pub(crate) fn widen_f16x8(h: &[half::f16]) -> (v128, v128) {
    let h = &h[..8];
    // SAFETY: `h` holds 8 halves, 16 bytes; v128_load has no alignment need.
    let v = unsafe { v128_load(h.as_ptr().cast()) };
    (
        widen_f16(u32x4_extend_low_u16x8(v)),
        widen_f16(u32x4_extend_high_u16x8(v)),
    )
}

/// Each lane rounded to the nearest f16 (ties to even) and back to f32: what
/// `f16::from_f32(x).to_f32()` gives, bit for bit for every non-NaN input (NaN stays a NaN).
#[inline(always)]
pub(crate) fn round_to_f16(x: v128) -> v128 {
    let abs = v128_and(x, u32x4_splat(0x7fff_ffff));
    let sign = v128_xor(x, abs);
    // f16's normal range: the mantissa rounded to 10 bits by adding just under half an f16
    // step plus the bit that breaks ties to even, then clearing the 13 bits below it; a carry
    // moves into the exponent, as a round-up should. From 65520 on that gives at least 2^16,
    // which is past f16's largest value (65504): infinity.
    let odd = v128_and(u32x4_shr(abs, 13), u32x4_splat(1));
    let bumped = i32x4_add(i32x4_add(abs, u32x4_splat(0xfff)), odd);
    let normal = v128_and(bumped, u32x4_splat(!0x1fff));
    let inf = u32x4_splat(0x7f80_0000);
    let normal = v128_bitselect(inf, normal, i32x4_ge(normal, u32x4_splat(0x4780_0000)));
    // Below 2^-14, f16's subnormals are the multiples of 2^-24: adding 0.5 leaves a sum whose
    // last bit is 2^-24, so the float addition itself rounds (ties to even), and taking 0.5 off
    // again is exact.
    let half = f32x4_splat(0.5);
    let subnormal = f32x4_sub(f32x4_add(abs, half), half);
    let tiny = i32x4_lt(abs, u32x4_splat(0x3880_0000));
    let rounded = v128_or(v128_bitselect(subnormal, normal, tiny), sign);
    v128_bitselect(x, rounded, i32x4_gt(abs, inf))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 widens to `half`'s f32, bit for bit; NaNs to NaNs with the same payload
    /// (`half` also sets the quiet bit).
    #[test]
    fn every_f16_widens_exactly() {
        for h in (0..=u16::MAX).step_by(4) {
            let bits: [u32; 4] = std::array::from_fn(|i| (h + i as u16) as u32);
            let got = widen_f16(u32x4(bits[0], bits[1], bits[2], bits[3]));
            let got: [u32; 4] = [
                u32x4_extract_lane::<0>(got),
                u32x4_extract_lane::<1>(got),
                u32x4_extract_lane::<2>(got),
                u32x4_extract_lane::<3>(got),
            ];
            for (b, g) in bits.iter().zip(got) {
                let want = half::f16::from_bits(*b as u16).to_f32().to_bits();
                let quiet = if f32::from_bits(want).is_nan() {
                    0x0040_0000
                } else {
                    0
                };
                assert_eq!(g | quiet, want, "f16 {b:#06x}");
            }
        }
    }
}

//! The small vector interface the generic row kernels (`rows`) are written against; each
//! instruction set implements it once (`avx2`, `avx512`, `neon`).

/// One instruction set's f32 vector and lane mask.
///
/// A value of an implementing type is a token: a zero-sized proof that this CPU has the
/// instruction set, made only after `cpu::features` checked it. That is what makes the safe
/// methods sound (each wraps intrinsics the features enable).
///
/// # Safety
/// An implementor must not be constructible on a CPU without its instruction set.
pub(super) unsafe trait F32Vector: Copy {
    type V: Copy;
    type Mask: Copy;
    /// Lanes per vector (at most `MAX_LANES`).
    const LANES: usize;

    fn splat(self, x: f32) -> Self::V;
    /// The first `LANES` elements of `c` (which must hold that many).
    fn load(self, c: &[f32]) -> Self::V;
    /// Into the first `LANES` elements of `c`.
    fn store(self, c: &mut [f32], v: Self::V);
    /// `[c[0], c[0], c[1], c[1], ...]` from the first `LANES / 2` elements of `c`.
    fn load_pairs(self, c: &[f32]) -> Self::V;
    /// Lanes `2i` and `2i + 1` exchanged.
    fn swap_pairs(self, v: Self::V) -> Self::V;

    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, rounded once where the instruction set has a fused multiply-add (SIMD128
    /// has none and rounds twice; the row-kernel tests bound both).
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// The larger lane; NaN where `b` is NaN (so `max(lo, x)` clamps and lets NaN through).
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// The smaller lane; NaN where `b` is NaN.
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    /// To the nearest integer, ties to even.
    fn round(self, v: Self::V) -> Self::V;
    fn floor(self, v: Self::V) -> Self::V;
    /// `2^q` for integer-valued lanes `q` in `-126..=127`, built from its exponent bits.
    fn pow2i(self, q: Self::V) -> Self::V;

    fn ge(self, a: Self::V, b: Self::V) -> Self::Mask;
    fn le(self, a: Self::V, b: Self::V) -> Self::Mask;
    fn is_nan(self, a: Self::V) -> Self::Mask;
    fn or(self, a: Self::Mask, b: Self::Mask) -> Self::Mask;
    fn any(self, m: Self::Mask) -> bool;
    /// `a` where `m` is set, else `b`.
    fn select(self, m: Self::Mask, a: Self::V, b: Self::V) -> Self::V;

    fn hsum(self, v: Self::V) -> f32;
    fn hmax(self, v: Self::V) -> f32;
}

/// The widest vector, in f32 lanes (AVX-512).
pub(super) const MAX_LANES: usize = 16;

/// Declares `Kernels` table entries for one instruction set: each entry runs the generic body
/// of `rows` with the vector type `$v`, compiled with `$features` enabled so that every
/// `#[inline(always)]` method of `$v` inlines into it.
macro_rules! row_kernels {
    ($v:ident, $name:literal, $features:tt) => {
        /// The table for this instruction set; `token` proves the CPU has it.
        pub(super) fn table(token: $v) -> super::Kernels {
            let _ = token;
            super::Kernels {
                name: $name,
                sum: entry::sum,
                max: entry::max,
                dot: entry::dot,
                axpy: entry::axpy,
                add: entry::add,
                sub: entry::sub,
                mul: entry::mul,
                div: entry::div,
                maximum: entry::maximum,
                minimum: entry::minimum,
                exp: entry::exp,
                silu: entry::silu,
                softmax: entry::softmax,
                log_softmax: entry::log_softmax,
                rms_norm: entry::rms_norm,
                layer_norm: entry::layer_norm,
                rope_halfsplit: entry::rope_halfsplit,
                rope_interleaved: entry::rope_interleaved,
            }
        }

        /// Safe entry points, reachable only through `table`, whose token proves the features.
        mod entry {
            use $crate::cpu::simd::vector::row_entry;
            row_entry!(super::$v, $features, sum(v: &[f32]) -> f32);
            row_entry!(super::$v, $features, max(v: &[f32]) -> f32);
            row_entry!(super::$v, $features, dot(a: &[f32], b: &[f32]) -> f32);
            row_entry!(super::$v, $features, axpy(alpha: f32, x: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, add(a: &[f32], b: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, sub(a: &[f32], b: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, mul(a: &[f32], b: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, div(a: &[f32], b: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, maximum(a: &[f32], b: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, minimum(a: &[f32], b: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, exp(x: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, silu(x: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, softmax(x: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, log_softmax(x: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features, rms_norm(x: &[f32], w: &[f32], eps: f32, o: &mut [f32]));
            row_entry!(super::$v, $features,
                layer_norm(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, o: &mut [f32]));
            row_entry!(super::$v, $features, rope_halfsplit(x: &[f32], c: &[f32], s: &[f32], o: &mut [f32]));
            row_entry!(super::$v, $features,
                rope_interleaved(x: &[f32], c: &[f32], s: &[f32], o: &mut [f32]));
        }
    };
}
pub(super) use row_kernels;

/// One safe entry point of a `row_kernels` table: the generic body of `rows::$name` for
/// vector type `$v`, inside a function compiled with `$features`.
macro_rules! row_entry {
    ($v:ty, $features:tt, $name:ident($($a:ident: $t:ty),*) $(-> $r:ty)?) => {
        pub(super) fn $name($($a: $t),*) $(-> $r)? {
            #[target_feature(enable = $features)]
            fn body($($a: $t),*) $(-> $r)? {
                // SAFETY: `body` runs only where its features are enabled (below), which is
                // what the token stands for.
                let token = unsafe { <$v>::assume() };
                $crate::cpu::simd::rows::$name(token, $($a),*)
            }
            // SAFETY: this fn is only handed out by `table`, whose token proves that the CPU
            // has these features. (WebAssembly's feature fns are safe: a module runs only
            // where all of its features are.)
            #[allow(unused_unsafe)]
            unsafe { body($($a),*) }
        }
    };
}
pub(super) use row_entry;

//! The kernels over blocks of eight interleaved rows (`format::interleaved`): AVX2 where the
//! instruction set has it (`interleaved_x86`), the portable ones of `format` otherwise.

use crate::quantized::format::interleaved::{dot_scalar, Interleave, XRow, ROWS};
use crate::quantized::format::{BlockQ4_0, BlockQ5_0, BlockQ8_0};

/// `[c][r]` = row `r` of a group (`w`, one block per 32 elements) times activation row `c`.
pub type DotFn<B, const C: usize> =
    fn(&[<B as Interleave>::X8], &[XRow<'_>; C]) -> [[f32; ROWS]; C];

/// `Interleave::unpack` into bytes (`[t][4r + b]` at `32t + 4r + b`).
pub type ExpandFn<B> = fn(&<B as Interleave>::X8, &mut [u8; 256]);

/// The kernels of one interleaved type at this process's instruction set.
pub trait InterleavedKernels: Interleave {
    /// The dot kernel for `C` activation rows; `streamed` for a weight larger than the
    /// last-level cache (see `prefetch::prefetch_ahead`).
    fn dot<const C: usize>(streamed: bool) -> DotFn<Self, C>;
    /// The expansion of a block into its unsigned levels.
    fn expand() -> ExpandFn<Self>;
}

fn portable_expand<B: Interleave>(b: &B::X8, out: &mut [u8; 256]) {
    out.copy_from_slice(B::unpack(b).as_flattened());
}

macro_rules! interleaved_kernels {
    ($block:ty) => {
        impl InterleavedKernels for $block {
            fn dot<const C: usize>(streamed: bool) -> DotFn<Self, C> {
                #[cfg(target_arch = "x86_64")]
                if super::has_avx2() {
                    fn kernel<const C: usize, const STREAMED: bool>(
                        w: &[<$block as Interleave>::X8],
                        x: &[XRow; C],
                    ) -> [[f32; ROWS]; C] {
                        // SAFETY: `has_avx2()` checked AVX2, FMA and F16C; the kernel asserts
                        // that every activation row has `w.len()` blocks.
                        unsafe { super::interleaved_x86::dot::<_, C, STREAMED>(w, x) }
                    }
                    return if streamed {
                        kernel::<C, true>
                    } else {
                        kernel::<C, false>
                    };
                }
                let _ = streamed;
                dot_scalar::<$block, C>
            }

            fn expand() -> ExpandFn<Self> {
                #[cfg(target_arch = "x86_64")]
                if super::has_avx2() {
                    fn kernel(b: &<$block as Interleave>::X8, out: &mut [u8; 256]) {
                        // SAFETY: `has_avx2()` checked AVX2.
                        unsafe { super::interleaved_x86::expand_into(b, out) }
                    }
                    return kernel;
                }
                portable_expand::<$block>
            }
        }
    };
}
interleaved_kernels!(BlockQ4_0);
interleaved_kernels!(BlockQ5_0);
interleaved_kernels!(BlockQ8_0);

//! The kernels over blocks of eight interleaved rows (`format::interleaved`): on x86
//! (`interleaved_x86`) the `vpdpbusd` form at the AVX-512 and AVX-VNNI levels and the
//! `maddubs` one at AVX2, SIMD128 in a WebAssembly build with it (`interleaved_simd128`, the
//! types but IQ4_NL and MXFP4), the portable ones of `format` otherwise.

use super::{isa, Isa};
use crate::quantized::format::interleaved::{dot_scalar, Interleave, XRow, ROWS};
use crate::quantized::format::interleaved_iq4xs::{self as iq4xs, BlockIQ4XSx8, LevelTable};
use crate::quantized::format::{
    BlockIQ4NL, BlockMXFP4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8K, BlockQ8_0,
};

/// `[c][r]` = row `r` of a group (`w`, one block per 32 elements) times activation row `c`,
/// asking for what lies ahead of the blocks as the `Ahead` says. (A run-time argument rather
/// than a kernel per choice: one copy of each kernel per row count keeps the binary small, and
/// the branch per block is always taken the same way.)
pub type DotFn<B, const C: usize> =
    fn(&[<B as Interleave>::X8], &[XRow<'_>; C], Ahead) -> [[f32; ROWS]; C];

/// `Interleave::unpack` into bytes (`[t][4r + b]` at `32t + 4r + b`).
pub type ExpandFn<B> = fn(&<B as Interleave>::X8, &mut [u8; 256]);

/// What a dot kernel asks of the memory ahead of the weight blocks it reads (see
/// `prefetch::prefetch_ahead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// Nothing: the blocks are cached already (a group's later activation rows).
    Nothing,
    /// The next bytes, into L2 and L1.
    Cached,
    /// The next bytes, non-temporal: a weight larger than the last-level cache.
    Streamed,
}

impl Ahead {
    /// Asks for what lies ahead of `block` (the one a kernel is about to read) as this says.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) fn prefetch<T>(self, block: &T) {
        let (at, bytes) = (block as *const T as *const u8, std::mem::size_of::<T>());
        match self {
            Ahead::Nothing => {}
            Ahead::Cached => super::prefetch::prefetch_ahead::<false>(at, bytes),
            Ahead::Streamed => super::prefetch::prefetch_ahead::<true>(at, bytes),
        }
    }

    /// `Cached`, or `Streamed` for a weight larger than the last-level cache.
    pub fn for_weight(streamed: bool) -> Self {
        if streamed {
            Ahead::Streamed
        } else {
            Ahead::Cached
        }
    }
}

/// The kernels of one interleaved type at this process's instruction set.
pub trait InterleavedKernels: Interleave {
    /// The dot kernel for `C` activation rows. (`isa()` is supported: no check, which a
    /// caller asking once per group of rows would pay every time.)
    fn dot<const C: usize>() -> DotFn<Self, C> {
        // SAFETY: `isa()` is a supported level (`Isa::detect` picks among those).
        unsafe { Self::pick::<C>(isa()) }
    }
    /// The dot kernel for `C` activation rows at the best level up to `isa` (supported).
    fn dot_for<const C: usize>(isa: Isa) -> DotFn<Self, C> {
        assert!(isa.supported(), "{isa:?} kernels on a CPU without them");
        // SAFETY: checked just above.
        unsafe { Self::pick::<C>(isa) }
    }
    /// `dot_for` unchecked.
    ///
    /// # Safety
    /// `isa` must be supported: the kernel handed out runs its instructions.
    unsafe fn pick<const C: usize>(isa: Isa) -> DotFn<Self, C>;
    /// The expansion of a block into its unsigned levels.
    fn expand() -> ExpandFn<Self>;
}

fn portable_expand<B: Interleave>(b: &B::X8, out: &mut [u8; 256]) {
    out.copy_from_slice(B::unpack(b).as_flattened());
}

/// An x86 dot kernel of `interleaved_x86` as a `DotFn`, for a level whose features include
/// the kernel's.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_dot {
    ($block:ty, $kernel:ident) => {{
        fn kernel<const C: usize>(
            w: &[<$block as Interleave>::X8],
            x: &[XRow; C],
            ahead: Ahead,
        ) -> [[f32; ROWS]; C] {
            // SAFETY: handed out only for a supported level whose features include this
            // kernel's (see `Isa`); the kernel asserts that every activation row has
            // `w.len()` blocks.
            unsafe { super::interleaved_x86::$kernel::<_, C>(w, x, ahead) }
        }
        kernel::<C>
    }};
}

macro_rules! interleaved_kernels {
    ($block:ty $(, $simd128:ident)?) => {
        impl InterleavedKernels for $block {
            #[allow(unreachable_code)]
            // (`isa` goes unread where only the portable kernel exists.)
            #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
            unsafe fn pick<const C: usize>(isa: Isa) -> DotFn<Self, C> {
                $(
                    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
                    if isa >= Isa::Simd128 {
                        return |w, x, _| super::$simd128::dot::<$block, C>(w, x);
                    }
                )?
                #[cfg(target_arch = "x86_64")]
                {
                    // Listed best first: a CPU with AVX-512 need not have AVX-VNNI.
                    if isa >= Isa::Avx512 {
                        return x86_dot!($block, dot_avx512vnni);
                    }
                    if isa >= Isa::AvxVnni {
                        return x86_dot!($block, dot_avxvnni);
                    }
                    if isa >= Isa::Avx2 {
                        return x86_dot!($block, dot);
                    }
                }
                |w, x, _| dot_scalar::<$block, C>(w, x)
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
interleaved_kernels!(BlockQ4_0, interleaved_simd128);
interleaved_kernels!(BlockQ4_1, interleaved_simd128);
interleaved_kernels!(BlockQ5_0, interleaved_simd128);
interleaved_kernels!(BlockQ5_1, interleaved_simd128);
interleaved_kernels!(BlockQ8_0, interleaved_simd128);
interleaved_kernels!(BlockIQ4NL);
interleaved_kernels!(BlockMXFP4);

/// IQ4_XS's dot kernel over a group of eight interleaved rows (`format::interleaved_iq4xs`)
/// whose indices pick from a level table: `[c][r]` = row `r` times activation row `c` (Q8_K),
/// bit for bit `dot_scalar`'s.
pub type IQ4XSDotFn<const C: usize> =
    fn(&[BlockIQ4XSx8], &[&[BlockQ8K]; C], &LevelTable, Ahead) -> [[f32; ROWS]; C];

/// The IQ4_XS kernel for `C` activation rows at this process's instruction set (supported:
/// unchecked, as `InterleavedKernels::dot`).
pub fn iq4xs_dot<const C: usize>() -> IQ4XSDotFn<C> {
    // SAFETY: `isa()` is a supported level (`Isa::detect` picks among those).
    unsafe { iq4xs_pick::<C>(isa()) }
}

/// The IQ4_XS kernel for `C` activation rows at the best level up to `isa` (supported).
pub fn iq4xs_dot_for<const C: usize>(isa: Isa) -> IQ4XSDotFn<C> {
    assert!(isa.supported(), "{isa:?} kernels on a CPU without them");
    // SAFETY: checked just above.
    unsafe { iq4xs_pick::<C>(isa) }
}

/// `iq4xs_dot_for` unchecked.
///
/// # Safety
/// `isa` must be supported: the kernel handed out runs its instructions.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
unsafe fn iq4xs_pick<const C: usize>(isa: Isa) -> IQ4XSDotFn<C> {
    #[cfg(target_arch = "x86_64")]
    {
        use super::interleaved_iq4xs_x86 as x86;
        // SAFETY (each): handed out only for a supported level whose features include the
        // kernel's; the kernel asserts that every activation row has `w.len()` blocks.
        if isa >= Isa::Avx512 {
            return |w, x, t, ahead| unsafe { x86::dot_avx512vnni::<C>(w, x, t, ahead) };
        }
        if isa >= Isa::AvxVnni {
            return |w, x, t, ahead| unsafe { x86::dot_avxvnni::<C>(w, x, t, ahead) };
        }
        if isa >= Isa::Avx2 {
            return |w, x, t, ahead| unsafe { x86::dot::<C>(w, x, t, ahead) };
        }
    }
    |w, x, t, _| iq4xs::dot_scalar::<C>(w, x, t)
}

/// One IQ4_XS-layout group's panel levels (`interleaved_iq4xs::panel_levels`) as a GEMM
/// panel block's bytes.
pub fn iq4xs_expand() -> fn(&[u8; 128], &LevelTable, &mut [u8; 256]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: `has_avx2()` checked AVX2.
        return |qs, t, out| unsafe { super::interleaved_iq4xs_x86::expand_group(qs, t, out) };
    }
    |qs, t, out| out.copy_from_slice(iq4xs::panel_levels(qs, t).as_flattened())
}

//! The second layer of `quantized`: the SIMD kernels, per instruction set, and the choice
//! among them.
//!
//! Each block type's kernels (`Kernels`) are the fastest this CPU runs at the instruction set
//! `cpu::features::isa` chose; the portable forms in `format` are the reference every SIMD
//! kernel is tested against. This layer imports `format` only; the drivers that split work
//! over rows and threads (`quantized::cpu`) sit above it.

/// Every block against every activation row of a tile: `R` weight rows by `C` activation rows
/// share each load and each unpacked block. All slices hold the same number of blocks.
#[cfg_attr(
    all(target_arch = "wasm32", not(target_feature = "simd128")),
    allow(unused_macros)
)]
macro_rules! check_tile {
    ($w:expr, $x:expr) => {
        let nb = $x[0].len();
        assert!($w.iter().all(|w| w.len() == nb) && $x.iter().all(|x| x.len() == nb));
    };
}

pub mod afq;
#[cfg(target_arch = "aarch64")]
mod afq_neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod afq_simd128;
#[cfg(target_arch = "x86_64")]
mod afq_x86;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod bf16_panel_avx512;
#[cfg(target_arch = "x86_64")]
mod bf16_tile_avx512;
#[cfg(target_arch = "x86_64")]
mod f16_dot_avx512;
#[cfg(target_arch = "x86_64")]
mod float_panel_avx512;
#[cfg(target_arch = "x86_64")]
mod float_panel_x86;
#[cfg(target_arch = "x86_64")]
mod float_x86;
pub mod interleaved;
#[cfg(target_arch = "x86_64")]
mod interleaved_iq4xs_x86;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod interleaved_simd128;
#[cfg(target_arch = "x86_64")]
mod interleaved_x86;
#[cfg(target_arch = "x86_64")]
mod lattice_x86;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
mod neon_float;
#[cfg(target_arch = "aarch64")]
mod neon_lattice;
#[cfg(target_arch = "aarch64")]
mod neon_levels;
pub mod panel;
#[cfg(target_arch = "x86_64")]
mod panel_x86;
pub mod prefetch;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
#[cfg(target_arch = "x86_64")]
mod vnni;

use super::format::*;
pub use crate::cpu::features::{isa, Isa};
// The `sdot` forms of the NEON kernels, under names the pickers take.
#[cfg(target_arch = "aarch64")]
use {
    neon::dotprod as neon_dot, neon_lattice::dotprod as neon_lattice_dot,
    neon_levels::dotprod as neon_levels_dot,
};

/// A dot product of weight blocks with activation blocks of the same element count.
pub type VecDotFn<B> = fn(&[B], &[<B as GgmlBlock>::Dot]) -> f32;

/// Dot products of `R` weight rows with `C` activation rows, `out[r][c]`, all rows the same
/// number of blocks. One call shares every load and every unpacked block across the tile.
pub type TileFn<B, const R: usize, const C: usize> =
    fn([&[B]; R], [&[<B as GgmlBlock>::Dot]; C]) -> [[f32; C]; R];

/// Prefill with float weights: `w [rows, k]` times `x [m, k]` (f32, not rounded to the
/// weight type) transposed, written as `out [m, rows]`.
pub type FloatPanelFn<B> = fn(w: &[B], k: usize, x: &[f32], m: usize, out: &mut [f32]);

/// Quantization of a row, the fastest this CPU has: the activation types (Q8_0, Q8_K) have
/// SIMD forms, byte-exact with `GgmlBlock::quantize`.
pub trait QuantizeRow: GgmlBlock {
    fn quantize_row() -> QuantizeFn<Self> {
        Self::quantize
    }
}

/// The kernels of one block type at this process's instruction set, where it has SIMD forms;
/// the portable ones of `format` otherwise.
pub trait Kernels: QuantizeRow + GgmlBlock<Dot: QuantizeRow> {
    /// The dot product with one activation row.
    fn vec_dot() -> VecDotFn<Self> {
        Self::vec_dot_scalar
    }
    /// An `R x C` tile kernel, where this CPU has one for this type.
    fn tile<const R: usize, const C: usize>() -> Option<TileFn<Self, R, C>> {
        None
    }
    /// Prefill against f32 activations, for two-byte float weights where this CPU has it.
    fn float_panel() -> Option<FloatPanelFn<Self>> {
        None
    }
    /// Whether decode may take several weight rows per tile call (`cpu::matvec`). The
    /// lattice types say no: their tile decodes each row's grid indices apart anyway, and
    /// one row per call, streamed from memory, made their Gemma 3 and Qwen2.5-0.5B files'
    /// decode 3–17% faster (docs/BENCHMARKS.md).
    const DECODE_ROW_TILES: bool = true;
    /// Decode's dot product against the activation row widened back to f32 once per product
    /// (exactly, from `Self::Dot`), where this CPU has one: F16 on x86, whose tile otherwise
    /// widens the same activations again for every weight row (Qwen2.5-0.5B and Gemma 3 F16
    /// decode 1.13x and 1.18x with the AVX-512 form, docs/BENCHMARKS.md).
    fn widened_dot() -> Option<WidenedDotFn<Self>> {
        None
    }
}

/// `w · x` with `x` the activation row already quantized to `Dot` and widened to f32: equal,
/// bit for bit, to `Kernels::vec_dot` on the unwidened row.
pub type WidenedDotFn<B> = fn(&[B], &[f32]) -> f32;

macro_rules! portable {
    ($($block:ty),*) => {$(
        impl QuantizeRow for $block {}
        impl Kernels for $block {}
    )*};
}
portable!(f32);

impl QuantizeRow for BlockQ8_1 {
    fn quantize_row() -> QuantizeFn<Self> {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return simd128::quantize_q8_1;
        #[allow(unreachable_code)]
        Self::quantize
    }
}
impl Kernels for BlockQ8_1 {}

/// Q4_1 and Q5_1: an AVX2 dot product (their decode on x86 runs from rows repacked eight at
/// a time, `interleaved`), tiles on NEON and SIMD128, whose 1x1 tile is then the dot product.
macro_rules! affine {
    ($block:ty, $avx2_dot:ident, $tile:ident, $tile_one:ident) => {
        impl QuantizeRow for $block {}
        impl Kernels for $block {
            fn vec_dot() -> VecDotFn<Self> {
                if $tile::<1, 1>().is_some() {
                    $tile_one()
                } else {
                    $avx2_dot()
                }
            }
            fn tile<const R: usize, const C: usize>() -> Option<TileFn<Self, R, C>> {
                $tile::<R, C>()
            }
        }
    };
}
affine!(BlockQ4_1, pick_q4_1, tile_q4_1, tile_q4_1_one);
affine!(BlockQ5_1, pick_q5_1, tile_q5_1, tile_q5_1_one);

impl QuantizeRow for BlockQ8K {
    fn quantize_row() -> QuantizeFn<Self> {
        pick_quantize_q8k()
    }
}
impl Kernels for BlockQ8K {}

/// A type with tile kernels: its dot product is the 1x1 tile.
macro_rules! tiled {
    ($block:ty, $one:ident, $tile:ident $(, $panel:ident)? $(; decode_row_tiles = $rows:literal)?) => {
        impl Kernels for $block {
            $(const DECODE_ROW_TILES: bool = $rows;)?
            fn vec_dot() -> VecDotFn<Self> {
                $one()
            }
            fn tile<const R: usize, const C: usize>() -> Option<TileFn<Self, R, C>> {
                $tile::<R, C>()
            }
            $(fn float_panel() -> Option<FloatPanelFn<Self>> {
                $panel()
            })?
        }
    };
}
tiled!(BlockQ4_0, pick_q4_0, tile_q4_0);
tiled!(BlockQ5_0, pick_q5_0, tile_q5_0);
tiled!(BlockQ8_0, pick_q8_0, tile_q8_0);
tiled!(BlockQ4K, pick_q4k, tile_q4k);
tiled!(BlockQ5K, pick_q5k, tile_q5k);
tiled!(BlockQ6K, pick_q6k, tile_q6k);
tiled!(BlockQ2K, pick_q2k, tile_q2k);
tiled!(BlockQ3K, pick_q3k, tile_q3k);
tiled!(BlockIQ4NL, pick_iq4nl, tile_iq4nl);
tiled!(BlockIQ4XS, pick_iq4xs, tile_iq4xs);
tiled!(BlockMXFP4, pick_mxfp4, tile_mxfp4);
tiled!(BlockIQ2XXS, pick_iq2xxs, tile_iq2xxs; decode_row_tiles = false);
tiled!(BlockIQ2XS, pick_iq2xs, tile_iq2xs; decode_row_tiles = false);
tiled!(BlockIQ2S, pick_iq2s, tile_iq2s; decode_row_tiles = false);
tiled!(BlockIQ3XXS, pick_iq3xxs, tile_iq3xxs; decode_row_tiles = false);
tiled!(BlockIQ3S, pick_iq3s, tile_iq3s; decode_row_tiles = false);
tiled!(BlockIQ1S, pick_iq1s, tile_iq1s; decode_row_tiles = false);
tiled!(BlockIQ1M, pick_iq1m, tile_iq1m; decode_row_tiles = false);
tiled!(BlockTQ2_0, pick_tq2_0, tile_tq2_0);
tiled!(BlockTQ1_0, pick_tq1_0, tile_tq1_0);
impl Kernels for HalfF16 {
    fn vec_dot() -> VecDotFn<Self> {
        pick_f16()
    }
    fn tile<const R: usize, const C: usize>() -> Option<TileFn<Self, R, C>> {
        tile_f16::<R, C>()
    }
    fn float_panel() -> Option<FloatPanelFn<Self>> {
        pick_f16_panel()
    }
    fn widened_dot() -> Option<WidenedDotFn<Self>> {
        widened_f16_dot_for(isa())
    }
}

/// F16 decode against widened activations at `isa`: the AVX-512 or AVX2 form, both the AVX2
/// 1x1 tile's bits.
fn widened_f16_dot_for(isa: Isa) -> Option<WidenedDotFn<HalfF16>> {
    assert!(isa.supported(), "{isa:?} kernels on a CPU without them");
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        fn kernel(w: &[HalfF16], x: &[f32]) -> f32 {
            // SAFETY: handed out only at the AVX-512 level (AVX-512 F/BW/VL, AVX2, FMA, F16C).
            unsafe { f16_dot_avx512::f16_dot_widened(w, x) }
        }
        return Some(kernel);
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        fn kernel(w: &[HalfF16], x: &[f32]) -> f32 {
            // SAFETY: handed out only at the AVX2 level or above (AVX2, FMA and F16C).
            unsafe { float_x86::f16_dot_widened(w, x) }
        }
        return Some(kernel);
    }
    None
}
tiled!(HalfBF16, pick_bf16, tile_bf16, pick_bf16_panel);
impl QuantizeRow for HalfF16 {}
impl QuantizeRow for HalfBF16 {}
impl QuantizeRow for BlockIQ4NL {}
impl QuantizeRow for BlockIQ4XS {}
impl QuantizeRow for BlockMXFP4 {}
impl QuantizeRow for BlockIQ2XXS {}
impl QuantizeRow for BlockIQ2XS {}
impl QuantizeRow for BlockIQ2S {}
impl QuantizeRow for BlockIQ3XXS {}
impl QuantizeRow for BlockIQ3S {}
impl QuantizeRow for BlockIQ1S {}
impl QuantizeRow for BlockIQ1M {}
impl QuantizeRow for BlockTQ2_0 {}
impl QuantizeRow for BlockTQ1_0 {}
impl QuantizeRow for BlockQ4_0 {}
impl QuantizeRow for BlockQ5_0 {}
impl QuantizeRow for BlockQ4K {}
impl QuantizeRow for BlockQ5K {}
impl QuantizeRow for BlockQ6K {}
impl QuantizeRow for BlockQ2K {}
impl QuantizeRow for BlockQ3K {}
impl QuantizeRow for BlockQ8_0 {
    fn quantize_row() -> QuantizeFn<Self> {
        pick_quantize_q8_0()
    }
}

/// Whether the AVX2 kernel set (AVX2 + FMA + F16C) is in use.
pub fn has_avx2() -> bool {
    isa() >= Isa::Avx2
}

/// Quantizes a row of activations; the SIMD forms give the reference's exact bytes.
pub type QuantizeFn<B> = fn(&[f32], &mut [B]);

macro_rules! quantize_picker {
    ($name:ident, $block:ty, $avx2:ident, $reference:ident $(, $simd128:ident)?) => {
        pub fn $name() -> QuantizeFn<$block> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                fn kernel(xs: &[f32], out: &mut [$block]) {
                    // SAFETY: handed out only after `has_avx2()` confirmed AVX2 and FMA.
                    unsafe { avx2::$avx2(xs, out) }
                }
                return kernel;
            }
            $(
                #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
                return simd128::$simd128;
            )?
            #[allow(unreachable_code)]
            $reference
        }
    };
}

quantize_picker!(
    pick_quantize_q8_0,
    BlockQ8_0,
    quantize_q8_0,
    quantize_q8_0_ref,
    quantize_q8_0
);
quantize_picker!(pick_quantize_q8k, BlockQ8K, quantize_q8k, quantize_q8k_ref);

/// The AVX2 dot product where this CPU has AVX2, the portable one otherwise.
macro_rules! picker {
    ($name:ident, $block:ty, $avx2:ident) => {
        pub fn $name() -> VecDotFn<$block> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                fn kernel(w: &[$block], x: &[<$block as GgmlBlock>::Dot]) -> f32 {
                    // SAFETY: this function is only handed out after `has_avx2()` confirmed
                    // AVX2, FMA and F16C at run time.
                    unsafe { avx2::$avx2(w, x) }
                }
                return kernel;
            }
            <$block as GgmlBlock>::vec_dot_scalar
        }
    };
}

/// The float prefill panel (`float_panel_x86`): its AVX-512 form at that level, its AVX2
/// form on the other x86 CPUs that have AVX2 (the same bits), none elsewhere (the driver then
/// widens the weights for the `gemm` crate).
macro_rules! float_panel_picker {
    ($pick:ident, $block:ty, $kernel:ident) => {
        fn $pick() -> Option<FloatPanelFn<$block>> {
            #[cfg(target_arch = "x86_64")]
            if isa() >= Isa::Avx512 {
                fn kernel(w: &[$block], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
                    // SAFETY: handed out only at the AVX-512 level (AVX-512 F, AVX2, FMA
                    // and F16C, see `Isa`).
                    unsafe { float_panel_avx512::$kernel(w, k, x, m, out) }
                }
                return Some(kernel);
            }
            #[cfg(target_arch = "x86_64")]
            if isa() >= Isa::Avx2 {
                fn kernel(w: &[$block], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
                    // SAFETY: handed out only where AVX2 (with FMA and F16C, see `Isa`) is.
                    unsafe { float_panel_x86::$kernel(w, k, x, m, out) }
                }
                return Some(kernel);
            }
            None
        }
    };
}

/// `$tile_for(isa)` gives the `R x C` tile kernel of the best level at or below `isa` that
/// has one for this type (the `"arch" $level => $module` list, best first; `if f` also asks
/// `f()`), `$one_for(isa)` the 1x1 tile as a dot product; `$tile` and `$one` use the
/// process-wide `isa()`.
macro_rules! tile_picker {
    ($one:ident, $one_for:ident, $tile:ident, $tile_for:ident, $block:ty, $kernel:ident,
     [$($arch:literal $(+ $feature:literal)? $level:ident $(if $also:ident)? => $module:ident),+]) => {
        pub fn $tile_for<const R: usize, const C: usize>(
            isa: Isa,
        ) -> Option<TileFn<$block, R, C>> {
            assert!(isa.supported(), "{isa:?} kernels on a CPU without them");
            $(
                #[cfg(all(target_arch = $arch $(, target_feature = $feature)?))]
                if isa >= Isa::$level $(&& $also())? {
                    fn kernel<const R: usize, const C: usize>(
                        w: [&[$block]; R],
                        x: [&[<$block as GgmlBlock>::Dot]; C],
                    ) -> [[f32; C]; R] {
                        // SAFETY: handed out only for a supported level at or above this one,
                        // whose features include this kernel's (see `Isa`).
                        unsafe { $module::$kernel::<R, C>(w, x) }
                    }
                    return Some(kernel::<R, C>);
                }
            )+
            None
        }

        pub fn $one_for(isa: Isa) -> VecDotFn<$block> {
            assert!(isa.supported(), "{isa:?} kernels on a CPU without them");
            $(
                #[cfg(all(target_arch = $arch $(, target_feature = $feature)?))]
                if isa >= Isa::$level $(&& $also())? {
                    fn kernel(w: &[$block], x: &[<$block as GgmlBlock>::Dot]) -> f32 {
                        // SAFETY: as in the tile above.
                        unsafe { $module::$kernel::<1, 1>([w], [x])[0][0] }
                    }
                    return kernel;
                }
            )+
            <$block as GgmlBlock>::vec_dot_scalar
        }

        pub fn $tile<const R: usize, const C: usize>() -> Option<TileFn<$block, R, C>> {
            $tile_for::<R, C>(isa())
        }

        pub fn $one() -> VecDotFn<$block> {
            $one_for(isa())
        }
    };
}

tile_picker!(pick_q4_0, pick_q4_0_for, tile_q4_0, tile_q4_0_for, BlockQ4_0, q4_0_tile,
    ["x86_64" Avx512 => avx512, "x86_64" AvxVnni => vnni, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(pick_q5_0, pick_q5_0_for, tile_q5_0, tile_q5_0_for, BlockQ5_0, q5_0_tile,
    ["x86_64" Avx512 => avx512, "x86_64" AvxVnni => vnni, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(pick_q8_0, pick_q8_0_for, tile_q8_0, tile_q8_0_for, BlockQ8_0, q8_0_tile,
    ["x86_64" Avx512 => avx512, "x86_64" AvxVnni => vnni, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(pick_q4k, pick_q4k_for, tile_q4k, tile_q4k_for, BlockQ4K, q4k_tile,
    ["x86_64" Avx512 => avx512, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(pick_q5k, pick_q5k_for, tile_q5k, tile_q5k_for, BlockQ5K, q5k_tile,
    ["x86_64" Avx512 => avx512, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(pick_q6k, pick_q6k_for, tile_q6k, tile_q6k_for, BlockQ6K, q6k_tile,
    ["x86_64" Avx512 => avx512, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(pick_q2k, pick_q2k_for, tile_q2k, tile_q2k_for, BlockQ2K, q2k_tile,
    ["x86_64" Avx512 => avx512, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon]);
tile_picker!(pick_q3k, pick_q3k_for, tile_q3k, tile_q3k_for, BlockQ3K, q3k_tile,
    ["x86_64" Avx512 => avx512, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon]);
// IQ4_NL and MXFP4 run the AVX2 tile at every x86 level (an AVX-512 CPU may lack AVX-VNNI,
// and their decode goes through the interleaved kernels); IQ4_XS has an AVX-512 tile.
tile_picker!(pick_iq4nl, pick_iq4nl_for, tile_iq4nl, tile_iq4nl_for, BlockIQ4NL, iq4nl_tile,
    ["x86_64" Avx2 => avx2, "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(pick_iq4xs, pick_iq4xs_for, tile_iq4xs, tile_iq4xs_for, BlockIQ4XS, iq4xs_tile,
    ["x86_64" Avx512 => avx512, "x86_64" Avx2 => avx2,
     "aarch64" NeonDot => neon_levels_dot, "aarch64" Neon => neon_levels]);
tile_picker!(pick_mxfp4, pick_mxfp4_for, tile_mxfp4, tile_mxfp4_for, BlockMXFP4, mxfp4_tile,
    ["x86_64" Avx2 => avx2, "aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
// The lattice and ternary types: magnitudes gathered by index (or unpacked), the AVX2 tile at
// every x86 level; on AArch64 the IQ2/IQ3 points and signs are read into registers
// (`neon_lattice`), the ternary types unpacked there, IQ1's runs built from their grid
// points (`neon_levels`).
tile_picker!(pick_iq1s, pick_iq1s_for, tile_iq1s, tile_iq1s_for, BlockIQ1S, iq1s_tile,
    ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_levels_dot, "aarch64" Neon => neon_levels]);
tile_picker!(pick_iq1m, pick_iq1m_for, tile_iq1m, tile_iq1m_for, BlockIQ1M, iq1m_tile,
    ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_levels_dot, "aarch64" Neon => neon_levels]);
tile_picker!(pick_tq2_0, pick_tq2_0_for, tile_tq2_0, tile_tq2_0_for, BlockTQ2_0, tq2_0_tile,
    ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_levels_dot, "aarch64" Neon => neon_levels]);
tile_picker!(pick_tq1_0, pick_tq1_0_for, tile_tq1_0, tile_tq1_0_for, BlockTQ1_0, tq1_0_tile,
    ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_levels_dot, "aarch64" Neon => neon_levels]);
tile_picker!(pick_iq2xxs, pick_iq2xxs_for, tile_iq2xxs, tile_iq2xxs_for, BlockIQ2XXS,
    iq2xxs_tile, ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_lattice_dot, "aarch64" Neon => neon_lattice]);
tile_picker!(pick_iq2xs, pick_iq2xs_for, tile_iq2xs, tile_iq2xs_for, BlockIQ2XS, iq2xs_tile,
    ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_lattice_dot, "aarch64" Neon => neon_lattice]);
tile_picker!(pick_iq2s, pick_iq2s_for, tile_iq2s, tile_iq2s_for, BlockIQ2S, iq2s_tile,
    ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_lattice_dot, "aarch64" Neon => neon_lattice]);
tile_picker!(pick_iq3xxs, pick_iq3xxs_for, tile_iq3xxs, tile_iq3xxs_for, BlockIQ3XXS,
    iq3xxs_tile, ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_lattice_dot, "aarch64" Neon => neon_lattice]);
tile_picker!(pick_iq3s, pick_iq3s_for, tile_iq3s, tile_iq3s_for, BlockIQ3S, iq3s_tile,
    ["x86_64" Avx2 => lattice_x86,
     "aarch64" NeonDot => neon_lattice_dot, "aarch64" Neon => neon_lattice]);
// Float weights: the AVX2 tile at every x86 level (an AVX-512 F16 tile, `vcvtph2ps` into
// 512-bit FMAs, decoded Qwen2.5-0.5B F16 at 0.64x its rate on an Emerald Rapids VM; F16
// decode itself takes `widened_f16_dot_for`, whose AVX-512 form keeps this tile's sums), but for
// BF16 on every CPU with AVX512-BF16 at the AVX-512 level (`bf16_pairs_run`): one
// `vdpbf16ps` per 64 bytes of weights instead of a shift, a mask and two FMAs.
tile_picker!(pick_f16, pick_f16_for, tile_f16, tile_f16_for, HalfF16, f16_tile,
    ["x86_64" Avx2 => float_x86, "aarch64" Neon => neon_float]);
tile_picker!(pick_bf16, pick_bf16_for, tile_bf16, tile_bf16_for, HalfBF16, bf16_tile,
    ["x86_64" Avx512 if bf16_pairs_run => bf16_tile_avx512, "x86_64" Avx2 => float_x86,
     "aarch64" Neon => neon_float]);
float_panel_picker!(pick_f16_panel, HalfF16, f16_panel);

/// BF16 prefill: the AVX512-BF16 pair panel where `bf16_pairs` takes it, the f32 panel
/// (AVX-512 or AVX2 form) otherwise.
fn pick_bf16_panel() -> Option<FloatPanelFn<HalfBF16>> {
    #[cfg(target_arch = "x86_64")]
    if bf16_pairs() {
        fn kernel(w: &[HalfBF16], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
            // SAFETY: handed out only where `bf16_pairs` found AVX512-BF16 at the AVX-512
            // level (AVX-512 F/BW/VL, AVX2 and FMA, see `Isa`).
            unsafe { bf16_panel_avx512::bf16_pairs_panel(w, k, x, m, out) }
        }
        return Some(kernel);
    }
    pick_bf16_f32_panel()
}
float_panel_picker!(pick_bf16_f32_panel, HalfBF16, bf16_panel);

/// Whether BF16 prefill multiplies bf16 pairs (`vdpbf16ps`), with activations rounded to
/// bf16: this CPU has AVX512-BF16, the process runs its AVX-512 kernels, and the CPU is not
/// Intel's. An Intel core's two 512-bit FMA units run the AVX-512 f32 panel faster
/// than the pairs (Sapphire Rapids: 1.27x); Zen 4 ran the pairs 1.4x faster than the AVX2 f32
/// panel, and its 512-bit FMAs, which take both of its 256-bit halves, give the AVX-512 form
/// no more multiply-adds a cycle (docs/BENCHMARKS.md). Decode, whose activations are bf16
/// whatever its kernel, takes the pair tile on Intel CPUs too (`bf16_pairs_run`): Qwen2.5-0.5B
/// BF16 tg128 1.12x the AVX2 tile on two threads of Zen 4, 1.16-1.20x on an Emerald Rapids VM.
pub(crate) fn bf16_pairs() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| bf16_pairs_run() && !crate::cpu::features::intel())
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether this process can run the AVX512-BF16 pair kernels: BF16 decode takes the pair tile
/// wherever it can, prefill's pair panel asks `bf16_pairs` (its test asks this too).
#[cfg(target_arch = "x86_64")]
fn bf16_pairs_run() -> bool {
    isa() >= Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512bf16")
}
// Q4_1 and Q5_1: tiles on NEON and SIMD128 (`affine!`), `picker!`'s dot on AVX2.
tile_picker!(tile_q4_1_one, tile_q4_1_one_for, tile_q4_1, tile_q4_1_for, BlockQ4_1, q4_1_tile,
    ["aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
tile_picker!(tile_q5_1_one, tile_q5_1_one_for, tile_q5_1, tile_q5_1_for, BlockQ5_1, q5_1_tile,
    ["aarch64" NeonDot => neon_dot, "aarch64" Neon => neon,
     "wasm32" + "simd128" Simd128 => simd128]);
picker!(pick_q4_1, BlockQ4_1, q4_1_q8_1);
picker!(pick_q5_1, BlockQ5_1, q5_1_q8_1);

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD128 activation quantizers against the references, byte for byte: random rows,
    /// exact halves (which round away from zero), a NaN, an infinity, a zero block and a block
    /// whose scale is subnormal (its reciprocal overflows).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[test]
    fn simd128_activation_quantizers_give_the_reference_bytes() {
        let mut rows: Vec<Vec<f32>> = (0..4).map(|s| random_row(256, 40 + s)).collect();
        let mut halves: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
        halves[0] = 127.0;
        rows.push(halves.repeat(8));
        rows[1][3] = f32::NAN;
        rows[2][200] = f32::NEG_INFINITY;
        rows[3][..32].fill(0.0);
        rows[3][32..64].fill(1e-40);
        for x in &rows {
            let mut want = vec![<BlockQ8_0 as bytemuck::Zeroable>::zeroed(); 8];
            let mut got = want.clone();
            crate::quantized::format::quantize_q8_0_ref(x, &mut want);
            BlockQ8_0::quantize_row()(x, &mut got);
            assert_eq!(
                bytemuck::cast_slice::<_, u8>(&want),
                bytemuck::cast_slice::<_, u8>(&got)
            );
            let mut want = vec![<BlockQ8_1 as bytemuck::Zeroable>::zeroed(); 8];
            let mut got = want.clone();
            BlockQ8_1::quantize(x, &mut want);
            BlockQ8_1::quantize_row()(x, &mut got);
            assert_eq!(
                bytemuck::cast_slice::<_, u8>(&want),
                bytemuck::cast_slice::<_, u8>(&got)
            );
        }
    }

    fn random_row(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    fn quantized<B: GgmlBlock>(n: usize, seed: u64) -> Vec<B> {
        let mut out = vec![<B as bytemuck::Zeroable>::zeroed(); n / B::BLOCK_SIZE];
        B::quantize(&random_row(n, seed), &mut out);
        out
    }

    /// How far a kernel at `isa` may be from the scalar dot of `k` elements, `want`, for a
    /// quantized type (`float`: F16/BF16). SIMD128 and NEON sum exact integers and scale them
    /// by the scalar formula: no distance (NEON's float tiles sum in another order). The x86
    /// sets accumulate in another order: a bound.
    fn tolerance(isa: Isa, k: usize, want: f32, float: bool) -> f32 {
        let exact = isa == Isa::Simd128 || (matches!(isa, Isa::Neon | Isa::NeonDot) && !float);
        if exact {
            0.0
        } else {
            1e-5 * (k as f32).sqrt() * want.abs().max(1.0)
        }
    }

    /// Every tile shape the matmul uses, at every kernel level this CPU has, against the
    /// scalar dot product of each (weight row, activation row) pair; block counts odd and even
    /// (the 512-bit tiles take blocks in pairs).
    fn check_type<B: GgmlBlock>(
        tile_for: fn(Isa) -> Option<TileFn<B, 2, 4>>,
        rows_for: fn(Isa) -> Option<TileFn<B, 4, 1>>,
        one_for: fn(Isa) -> VecDotFn<B>,
    ) {
        for isa in Isa::ALL.into_iter().filter(|isa| isa.supported()) {
            // Float weights are one-element blocks: also widths with a ragged tail of eight.
            let float = B::BLOCK_SIZE == 1;
            let counts: &[usize] = if float {
                &[1, 7, 8, 20, 72, 643]
            } else {
                &[1, 2, 7, 20]
            };
            for &blocks in counts {
                let k = blocks * B::BLOCK_SIZE.max(<B::Dot as GgmlBlock>::BLOCK_SIZE);
                let w: Vec<Vec<B>> = (0..4).map(|r| quantized(k, 11 + r)).collect();
                let x: Vec<Vec<B::Dot>> = (0..4).map(|c| quantized(k, 101 + c)).collect();
                let want = |r: usize, c: usize| B::vec_dot_scalar(&w[r], &x[c]);
                let close = |got: f32, want: f32, what: &str| {
                    let tol = tolerance(isa, k, want, float);
                    assert!(
                        (got - want).abs() <= tol,
                        "{} {isa:?} k={k} {what}: {got} vs {want}",
                        std::any::type_name::<B>()
                    );
                };
                for (r, w) in w.iter().enumerate() {
                    close(one_for(isa)(w, &x[0]), want(r, 0), "dot");
                }
                // Every tile shape gives the dot's bits: a product does not depend on which
                // tile computed it (`forward_rows_alone`).
                let same = |got: f32, r: usize, c: usize, what: &str| {
                    close(got, want(r, c), what);
                    let dot = one_for(isa)(&w[r], &x[c]);
                    assert_eq!(
                        got.to_bits(),
                        dot.to_bits(),
                        "{isa:?} k={k} {what}: {got} vs dot {dot}"
                    );
                };
                if let Some(tile) = tile_for(isa) {
                    let got = tile([&w[0], &w[1]], std::array::from_fn(|c| &x[c][..]));
                    for (r, row) in got.iter().enumerate() {
                        for (c, &g) in row.iter().enumerate() {
                            same(g, r, c, "2x4 tile");
                        }
                    }
                }
                if let Some(rows) = rows_for(isa) {
                    let got = rows(std::array::from_fn(|r| &w[r][..]), [&x[1]]);
                    for (r, row) in got.iter().enumerate() {
                        same(row[0], r, 1, "4x1 tile");
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernel_level_this_cpu_has_matches_the_scalar_dot() {
        eprintln!(
            "kernel levels here: {:?}",
            Isa::ALL
                .iter()
                .filter(|isa| isa.supported())
                .collect::<Vec<_>>()
        );
        check_type::<BlockQ4_0>(tile_q4_0_for, tile_q4_0_for, pick_q4_0_for);
        check_type::<BlockQ5_0>(tile_q5_0_for, tile_q5_0_for, pick_q5_0_for);
        check_type::<BlockQ8_0>(tile_q8_0_for, tile_q8_0_for, pick_q8_0_for);
        check_type::<BlockQ4_1>(tile_q4_1_for, tile_q4_1_for, tile_q4_1_one_for);
        check_type::<BlockQ5_1>(tile_q5_1_for, tile_q5_1_for, tile_q5_1_one_for);
        check_type::<BlockQ4K>(tile_q4k_for, tile_q4k_for, pick_q4k_for);
        check_type::<BlockQ5K>(tile_q5k_for, tile_q5k_for, pick_q5k_for);
        check_type::<BlockQ6K>(tile_q6k_for, tile_q6k_for, pick_q6k_for);
        check_type::<BlockQ2K>(tile_q2k_for, tile_q2k_for, pick_q2k_for);
        check_type::<BlockQ3K>(tile_q3k_for, tile_q3k_for, pick_q3k_for);
        check_type::<BlockIQ4NL>(tile_iq4nl_for, tile_iq4nl_for, pick_iq4nl_for);
        check_type::<BlockIQ4XS>(tile_iq4xs_for, tile_iq4xs_for, pick_iq4xs_for);
        check_type::<BlockMXFP4>(tile_mxfp4_for, tile_mxfp4_for, pick_mxfp4_for);
        check_type::<BlockIQ3XXS>(tile_iq3xxs_for, tile_iq3xxs_for, pick_iq3xxs_for);
        check_type::<BlockIQ3S>(tile_iq3s_for, tile_iq3s_for, pick_iq3s_for);
        check_type::<HalfF16>(tile_f16_for, tile_f16_for, pick_f16_for);
        check_type::<HalfBF16>(tile_bf16_for, tile_bf16_for, pick_bf16_for);
    }

    /// F16 decode against the widened activations gives the dot product's bits at every level
    /// this CPU has: widths with ragged eights and tails, and the format's extremes (the
    /// largest half, subnormals, signed zeros).
    #[test]
    fn widened_f16_dot_is_the_dot_bit_for_bit() {
        for isa in Isa::ALL.into_iter().filter(|isa| isa.supported()) {
            let Some(widened) = widened_f16_dot_for(isa) else {
                continue;
            };
            for k in [1, 7, 8, 31, 32, 33, 64, 72, 100, 640, 643, 896] {
                let mut w: Vec<HalfF16> = quantized(k, 7 + k as u64);
                let mut x: Vec<HalfF16> = quantized(k, 70 + k as u64);
                if k >= 8 {
                    w[0] = HalfF16::from_f32(65504.0);
                    w[1] = HalfF16::from_f32(-6e-8);
                    w[2] = HalfF16::from_f32(-0.0);
                    x[1] = HalfF16::from_f32(-65504.0);
                    x[k - 1] = HalfF16::from_f32(1e-7);
                }
                let mut xf = vec![0f32; k];
                HalfF16::dequantize(&x, &mut xf);
                let got = widened(&w, &xf);
                let dot = pick_f16_for(isa)(&w, &x);
                assert_eq!(
                    got.to_bits(),
                    dot.to_bits(),
                    "{isa:?} k={k}: {got} vs {dot}"
                );
                let want = HalfF16::vec_dot_scalar(&w, &x);
                assert!((got - want).abs() <= tolerance(isa, k, want, true) * 65504.0);
            }
        }
    }

    /// The AVX-512 IQ4_XS tile finishes each block as the scalar dot does (its integer, then
    /// one product and sum): the same float, bit for bit, in every tile shape.
    #[test]
    fn iq4xs_avx512_tile_is_the_scalar_dot_bit_for_bit() {
        if !Isa::Avx512.supported() {
            eprintln!("skipped: this CPU has no AVX-512 VNNI");
            return;
        }
        let k = 5 * 256;
        let w: Vec<Vec<BlockIQ4XS>> = (0..2).map(|r| quantized(k, 30 + r)).collect();
        let x: Vec<Vec<BlockQ8K>> = (0..4).map(|c| quantized(k, 40 + c)).collect();
        let want = |r: usize, c: usize| BlockIQ4XS::vec_dot_scalar(&w[r], &x[c]).to_bits();
        let tile = tile_iq4xs_for::<2, 4>(Isa::Avx512).expect("an AVX-512 tile");
        let got = tile([&w[0], &w[1]], std::array::from_fn(|c| &x[c][..]));
        for (r, row) in got.iter().enumerate() {
            for (c, &g) in row.iter().enumerate() {
                assert_eq!(g.to_bits(), want(r, c), "2x4 tile, row {r}, activation {c}");
            }
        }
        let one = pick_iq4xs_for(Isa::Avx512);
        assert_eq!(one(&w[1], &x[3]).to_bits(), want(1, 3), "the 1x1 dot");
    }

    /// Q4_1 and Q5_1 have a dot product (no tiles) at the process's level.
    #[test]
    fn q4_1_and_q5_1_dots_match_the_scalar_dot() {
        fn check<B: GgmlBlock<Dot = BlockQ8_1>>(dot: VecDotFn<B>) {
            for blocks in [1, 3, 8] {
                let k = blocks * 32;
                let w = quantized::<B>(k, 5);
                let x = quantized::<BlockQ8_1>(k, 6);
                let (got, want) = (dot(&w, &x), B::vec_dot_scalar(&w, &x));
                assert!(
                    (got - want).abs() <= tolerance(isa(), k, want, false),
                    "{} {:?} k={k}: {got} vs {want}",
                    B::DTYPE,
                    isa()
                );
            }
        }
        check::<BlockQ4_1>(BlockQ4_1::vec_dot());
        check::<BlockQ5_1>(BlockQ5_1::vec_dot());
    }

    /// Blocks of random bytes (every scale, min, sign and level pattern the format can hold,
    /// scales then set to ±1 so nothing overflows f16) against Q8_K activations of random
    /// levels in [-128, 127] (in [-127, 127] for the lattice types, whose kernels negate
    /// activations: our Q8_K never holds -128), through every tile shape at every level.
    #[test]
    fn q8k_tiles_match_the_scalar_dot_on_random_bit_patterns() {
        fn check<B: GgmlBlock<Dot = BlockQ8K>>(
            full_range: bool,
            fix: fn(&mut B, f32),
            tile_for: fn(Isa) -> Option<TileFn<B, 2, 4>>,
            rows_for: fn(Isa) -> Option<TileFn<B, 4, 1>>,
            one_for: fn(Isa) -> VecDotFn<B>,
        ) {
            let nb = 3;
            let w: Vec<Vec<B>> = (0..4)
                .map(|r| {
                    let mut w = random_pod::<B>(nb, 7 + r);
                    for (i, b) in w.iter_mut().enumerate() {
                        fix(
                            b,
                            if (i + r as usize).is_multiple_of(2) {
                                1.0
                            } else {
                                -1.0
                            },
                        );
                    }
                    w
                })
                .collect();
            let x: Vec<Vec<BlockQ8K>> = (0..4)
                .map(|c| {
                    let mut x = random_pod::<BlockQ8K>(nb, 91 + c);
                    for b in &mut x {
                        b.d = 0.5;
                        if !full_range {
                            b.qs.iter_mut().for_each(|q| *q = (*q).max(-127));
                        }
                        for g in 0..16 {
                            b.bsums[g] = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
                        }
                    }
                    x
                })
                .collect();
            for isa in Isa::ALL.into_iter().filter(|isa| isa.supported()) {
                let want = |r: usize, c: usize| B::vec_dot_scalar(&w[r], &x[c]);
                let close = |got: f32, want: f32| {
                    let tol = tolerance(isa, nb * 256, want, false);
                    assert!(
                        (got - want).abs() <= tol,
                        "{} {isa:?}: {got} vs {want}",
                        B::DTYPE
                    );
                };
                // Every tile shape gives the dot's bits (`forward_rows_alone`).
                let same = |got: f32, r: usize, c: usize| {
                    close(got, want(r, c));
                    let dot = one_for(isa)(&w[r], &x[c]);
                    assert_eq!(got.to_bits(), dot.to_bits(), "{} {isa:?}", B::DTYPE);
                };
                for (r, w) in w.iter().enumerate() {
                    close(one_for(isa)(w, &x[3]), want(r, 3));
                }
                if let Some(tile) = tile_for(isa) {
                    let got = tile([&w[0], &w[1]], std::array::from_fn(|c| &x[c][..]));
                    for (r, row) in got.iter().enumerate() {
                        for (c, &g) in row.iter().enumerate() {
                            same(g, r, c);
                        }
                    }
                }
                if let Some(rows) = rows_for(isa) {
                    let got = rows(std::array::from_fn(|r| &w[r][..]), [&x[2]]);
                    for (r, row) in got.iter().enumerate() {
                        same(row[0], r, 2);
                    }
                }
            }
        }
        use half::f16;
        check::<BlockQ2K>(
            true,
            |b, d| (b.d, b.dmin) = (f16::from_f32(d), f16::from_f32(-d)),
            tile_q2k_for,
            tile_q2k_for,
            pick_q2k_for,
        );
        check::<BlockQ3K>(
            true,
            |b, d| b.d = f16::from_f32(d),
            tile_q3k_for,
            tile_q3k_for,
            pick_q3k_for,
        );
        check::<BlockQ4K>(
            true,
            |b, d| (b.d, b.dmin) = (f16::from_f32(d), f16::from_f32(d)),
            tile_q4k_for,
            tile_q4k_for,
            pick_q4k_for,
        );
        check::<BlockQ5K>(
            true,
            |b, d| (b.d, b.dmin) = (f16::from_f32(d), f16::from_f32(d)),
            tile_q5k_for,
            tile_q5k_for,
            pick_q5k_for,
        );
        check::<BlockQ6K>(
            true,
            |b, d| b.d = f16::from_f32(d),
            tile_q6k_for,
            tile_q6k_for,
            pick_q6k_for,
        );
        check::<BlockIQ4XS>(
            true,
            |b, d| b.d = f16::from_f32(d),
            tile_iq4xs_for,
            tile_iq4xs_for,
            pick_iq4xs_for,
        );
        check::<BlockIQ2XXS>(
            false,
            |b, d| b.d = f16::from_f32(d),
            tile_iq2xxs_for,
            tile_iq2xxs_for,
            pick_iq2xxs_for,
        );
        check::<BlockIQ2XS>(
            false,
            |b, d| b.d = f16::from_f32(d),
            tile_iq2xs_for,
            tile_iq2xs_for,
            pick_iq2xs_for,
        );
        check::<BlockIQ2S>(
            false,
            |b, d| b.d = f16::from_f32(d),
            tile_iq2s_for,
            tile_iq2s_for,
            pick_iq2s_for,
        );
        check::<BlockIQ3XXS>(
            false,
            |b, d| b.d = f16::from_f32(d),
            tile_iq3xxs_for,
            tile_iq3xxs_for,
            pick_iq3xxs_for,
        );
        check::<BlockIQ3S>(
            false,
            |b, d| b.d = f16::from_f32(d),
            tile_iq3s_for,
            tile_iq3s_for,
            pick_iq3s_for,
        );
        check::<BlockIQ1S>(
            false,
            |b, d| b.d = f16::from_f32(d),
            tile_iq1s_for,
            tile_iq1s_for,
            pick_iq1s_for,
        );
        // IQ1_M's f16 scale lies in the top nibbles of its four scale words.
        check::<BlockIQ1M>(
            false,
            |b, d| {
                let bits = f16::from_f32(d).to_bits();
                for k in 0..4 {
                    b.scales[2 * k + 1] =
                        (b.scales[2 * k + 1] & 0x0f) | ((bits >> (4 * k)) as u8) << 4;
                }
            },
            tile_iq1m_for,
            tile_iq1m_for,
            pick_iq1m_for,
        );
        check::<BlockTQ2_0>(
            false,
            |b, d| b.d = f16::from_f32(d),
            tile_tq2_0_for,
            tile_tq2_0_for,
            pick_tq2_0_for,
        );
        // TQ1_0's trits stay unsigned, so activations of -128 are in range too.
        check::<BlockTQ1_0>(
            true,
            |b, d| b.d = f16::from_f32(d),
            tile_tq1_0_for,
            tile_tq1_0_for,
            pick_tq1_0_for,
        );
    }

    /// Weights at the extremes of their range (Q8_0 at -128, which only foreign files hold)
    /// against activations at ±127: the largest pair sums the integer step sees.
    #[test]
    fn extreme_levels_give_the_same_integers_at_every_level() {
        let mut w = vec![<BlockQ8_0 as bytemuck::Zeroable>::zeroed(); 3];
        let mut x = w.clone();
        for (i, (w, x)) in w.iter_mut().zip(&mut x).enumerate() {
            w.d = half::f16::from_f32(1.0);
            x.d = half::f16::from_f32(1.0);
            for j in 0..32 {
                w.qs[j] = if (i + j) % 3 == 0 { -128 } else { 127 };
                x.qs[j] = if j % 2 == 0 { -127 } else { 127 };
            }
        }
        let want = BlockQ8_0::vec_dot_scalar(&w, &x);
        for isa in Isa::ALL.into_iter().filter(|isa| isa.supported()) {
            assert_eq!(pick_q8_0_for(isa)(&w, &x), want, "{isa:?}");
        }
    }
}

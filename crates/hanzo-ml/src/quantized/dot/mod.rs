//! Quantized dot-product kernels, picked at run time. Each `pick_*` / `tile_*` returns the
//! fastest kernel this CPU runs for one weight type (see `Isa`); the scalar form in `blocks`
//! is the reference the SIMD kernels are tested against.

/// Every block against every activation row of a tile: `R` weight rows by `C` activation rows
/// share each load and each unpacked block. All slices hold the same number of blocks.
macro_rules! check_tile {
    ($w:expr, $x:expr) => {
        let nb = $x[0].len();
        assert!($w.iter().all(|w| w.len() == nb) && $x.iter().all(|x| x.len() == nb));
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod interleaved;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod panel;
#[cfg(target_arch = "x86_64")]
mod vnni;

use super::blocks::*;

/// How far ahead of the kernel decode asks for weight bytes. Each weight byte is used once
/// per token, and the hardware prefetcher alone keeps too few lines in flight to overlap
/// memory with arithmetic (it also stops at 4 KiB page boundaries).
///
/// Measured on Gemma 3 decode, 2 threads, builds alternated in one session (`tg64` medians):
/// - AMD EPYC Zen 3 VM (32 MiB L3, so the weights stream from DRAM): no prefetch 0.80x; the
///   former L2 prefetch 32 KiB ahead plus an L1 prefetch 2 KiB ahead 1.00x; one prefetch per
///   line 3 KiB ahead 1.05x; two 3 KiB ahead 1.15x (in 10 of 10 rounds); 1.5 KiB 0.97x and
///   4.5 KiB 0.94x of that. Far prefetches run past the small per-task row ranges of a layer's
///   matrices into other threads' rows, and a 32 KiB lead is the whole of Zen 3's L1.
/// - Intel Xeon VM (260 MiB L3, which holds most of the model): far distances of 4–64 KiB
///   measured alike; a 712 MB Q8_0 matvec went from 13–17 to 21–23 GiB/s with prefetching.
const PREFETCH_DISTANCE: usize = 3 * 1024;

/// Asks for the cache lines of `bytes` bytes starting `PREFETCH_DISTANCE` past `start`. Every
/// line is asked for twice (into L2, then into L1): a single request per line measured 7%
/// slower on Zen 3, where a prefetch that finds the miss buffers full is dropped; a third
/// request measured within noise. Prefetches never fault, so the range may run past the end
/// of the matrix.
///
/// `STREAMED` is for a matrix larger than the last-level cache (an output head): the same two
/// requests, as non-temporal, so that streaming it once per token does not evict the rest of
/// the model's weights and activations from L2 and L3. Gemma 3 270M's 178 MB Q8_0 head on the
/// AMD EPYC Zen 3 VM: tg128 +2.2% against the temporal requests (median of 6 alternating
/// rounds, 0.99–1.03x in each).
#[inline(always)]
pub(crate) fn prefetch_ahead<const STREAMED: bool>(start: *const u8, bytes: usize) {
    for line in (0..bytes).step_by(64) {
        let at = start.wrapping_add(PREFETCH_DISTANCE + line);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch has no architectural effect and never faults.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_NTA, _MM_HINT_T0, _MM_HINT_T1};
            if STREAMED {
                _mm_prefetch::<_MM_HINT_NTA>(at as *const i8);
                _mm_prefetch::<_MM_HINT_NTA>(at as *const i8);
            } else {
                _mm_prefetch::<_MM_HINT_T1>(at as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(at as *const i8);
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `prfm` has no architectural effect and never faults.
        unsafe {
            use std::arch::asm;
            if STREAMED {
                asm!("prfm pldl2strm, [{0}]", in(reg) at, options(nostack, readonly, preserves_flags));
                asm!("prfm pldl1strm, [{0}]", in(reg) at, options(nostack, readonly, preserves_flags));
            } else {
                asm!("prfm pldl2keep, [{0}]", in(reg) at, options(nostack, readonly, preserves_flags));
                asm!("prfm pldl1keep, [{0}]", in(reg) at, options(nostack, readonly, preserves_flags));
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let _ = at;
    }
}

/// Whether decode streams a weight of `bytes` past the caches (`prefetch_ahead::<true>`): it
/// is larger than the last-level cache, so it cannot stay cached between tokens anyway.
pub(crate) fn streamed(bytes: usize) -> bool {
    bytes > last_level_cache_bytes()
}

/// Bytes of the last-level cache (Linux sysfs; 32 MiB where unknown).
fn last_level_cache_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let read = |i: usize| -> Option<usize> {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let size = std::fs::read_to_string(format!("{dir}/size")).ok()?;
            let size = size.trim();
            let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
            let scale = match unit {
                "K" => 1 << 10,
                "M" => 1 << 20,
                _ => return None,
            };
            Some(digits.parse::<usize>().ok()? * scale)
        };
        (0..8).filter_map(read).max().unwrap_or(32 << 20)
    })
}

/// The kernel sets, in order of preference. A type without a kernel at one level takes the
/// next one down, so each level's CPU features must cover the levels below it. The one gap:
/// an AVX-512 CPU may lack AVX-VNNI, so every type with an `AvxVnni` kernel also has an
/// `Avx512Vnni` one (and never falls to the `AvxVnni` kernel from above).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// AArch64 NEON (only ever supported there, so below every x86 level).
    Neon,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 plus AVX-VNNI's 256-bit `vpdpbusd`.
    AvxVnni,
    /// AVX2 plus AVX-512 F/BW/VL and AVX512-VNNI: 512-bit tiles.
    Avx512Vnni,
}

impl Isa {
    pub const ALL: [Isa; 5] = [
        Isa::Scalar,
        Isa::Neon,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512Vnni,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }

    /// Whether this CPU has every feature this level's kernels use.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            let avx512 = has!("avx512f") && has!("avx512bw") && has!("avx512vl");
            match self {
                Isa::Scalar => true,
                Isa::Neon => false,
                Isa::Avx2 => avx2,
                Isa::AvxVnni => avx2 && has!("avxvnni"),
                Isa::Avx512Vnni => avx2 && avx512 && has!("avx512vnni"),
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            matches!(self, Isa::Scalar | Isa::Neon)
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            self == Isa::Scalar
        }
    }

    /// The best supported level, or the one `HANZO_QUANT_ISA` names (`scalar`, `neon`,
    /// `avx2`, `avxvnni`, `avx512vnni`) where this CPU supports it — for comparisons and debugging.
    pub fn detect() -> Isa {
        let best = Isa::ALL.into_iter().rev().find(|isa| isa.supported());
        let best = best.unwrap_or(Isa::Scalar);
        match std::env::var("HANZO_QUANT_ISA") {
            Ok(name) => match Isa::ALL.into_iter().find(|isa| isa.name() == name) {
                Some(isa) if isa.supported() => isa,
                _ => {
                    eprintln!(
                        "HANZO_QUANT_ISA={name}: not a kernel set this CPU runs; using {}",
                        best.name()
                    );
                    best
                }
            },
            Err(_) => best,
        }
    }
}

/// The prefill panel kernel for weights of this scale group and largest level, with the rows
/// per panel it takes, where this CPU has one (see `quantized::gemm`).
pub(crate) fn pick_panel(group: usize, max_level: u8) -> Option<(usize, super::gemm::PanelFn)> {
    #[cfg(target_arch = "x86_64")]
    {
        panel::pick(group, max_level)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (group, max_level);
        None
    }
}

/// The kernel over eight interleaved rows and `C` activation rows (see
/// `quantized::interleaved`): AVX2 (with the prefetch hint chosen by `streamed`)
/// where the kernel set has it, the portable one otherwise.
macro_rules! x8_picker {
    ($name:ident, $block:ty) => {
        pub(crate) fn $name<const C: usize>(
            streamed: bool,
        ) -> crate::quantized::interleaved::DotFn<$block, C> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                use crate::quantized::interleaved::{Interleave, XRow, ROWS};
                fn kernel<const C: usize, const STREAMED: bool>(
                    w: &[<$block as Interleave>::X8],
                    x: [XRow; C],
                ) -> [[f32; ROWS]; C] {
                    // SAFETY: `has_avx2()` checked AVX2, FMA and F16C; the kernel asserts
                    // that every activation row has `w.len()` blocks.
                    unsafe { interleaved::dot::<_, C, STREAMED>(w, x) }
                }
                return if streamed {
                    kernel::<C, true>
                } else {
                    kernel::<C, false>
                };
            }
            let _ = streamed;
            crate::quantized::interleaved::dot_scalar::<$block, C>
        }
    };
}
x8_picker!(pick_x8_q4_0, BlockQ4_0);
x8_picker!(pick_x8_q5_0, BlockQ5_0);
x8_picker!(pick_x8_q8_0, BlockQ8_0);

/// The SIMD expansion of an interleaved block into its unsigned levels, where there is one.
macro_rules! x8_expand_picker {
    ($name:ident, $block:ty) => {
        pub(crate) fn $name() -> Option<crate::quantized::interleaved::ExpandFn<$block>> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                fn kernel(
                    b: &<$block as crate::quantized::interleaved::Interleave>::X8,
                    out: &mut [u8; 256],
                ) {
                    // SAFETY: `has_avx2()` checked AVX2.
                    unsafe { interleaved::expand_into(b, out) }
                }
                return Some(kernel);
            }
            None
        }
    };
}
x8_expand_picker!(pick_x8_expand_q4_0, BlockQ4_0);
x8_expand_picker!(pick_x8_expand_q5_0, BlockQ5_0);
x8_expand_picker!(pick_x8_expand_q8_0, BlockQ8_0);

/// The kernel set every `pick_*` and `tile_*` uses, decided once per process.
pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(Isa::detect)
}

/// Whether the AVX2 kernel set (AVX2 + FMA + F16C) is in use.
pub fn has_avx2() -> bool {
    isa() >= Isa::Avx2
}

/// Quantizes a row of activations; the SIMD forms give the reference's exact bytes.
pub type QuantizeFn<B> = fn(&[f32], &mut [B]);

macro_rules! quantize_picker {
    ($name:ident, $block:ty, $avx2:ident, $reference:ident) => {
        pub fn $name() -> QuantizeFn<$block> {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                fn kernel(xs: &[f32], out: &mut [$block]) {
                    // SAFETY: handed out only after `has_avx2()` confirmed AVX2 and FMA.
                    unsafe { avx2::$avx2(xs, out) }
                }
                return kernel;
            }
            $reference
        }
    };
}

quantize_picker!(
    pick_quantize_q8_0,
    BlockQ8_0,
    quantize_q8_0,
    quantize_q8_0_ref
);
quantize_picker!(pick_quantize_q8k, BlockQ8K, quantize_q8k, quantize_q8k_ref);

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

/// `$tile_for(isa)` gives the `R x C` tile kernel of the best level at or below `isa` that
/// has one for this type (the `"arch" $level => $module` list, best first), `$one_for(isa)` the
/// 1x1 tile as a dot product; `$tile` and `$one` use the process-wide `isa()`.
macro_rules! tile_picker {
    ($one:ident, $one_for:ident, $tile:ident, $tile_for:ident, $block:ty, $kernel:ident,
     [$($arch:literal $level:ident => $module:ident),+]) => {
        pub fn $tile_for<const R: usize, const C: usize>(
            isa: Isa,
        ) -> Option<TileFn<$block, R, C>> {
            assert!(isa.supported(), "{isa:?} kernels on a CPU without them");
            $(
                #[cfg(target_arch = $arch)]
                if isa >= Isa::$level {
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
                #[cfg(target_arch = $arch)]
                if isa >= Isa::$level {
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
    ["x86_64" Avx512Vnni => avx512, "x86_64" AvxVnni => vnni, "x86_64" Avx2 => avx2,
     "aarch64" Neon => neon]);
tile_picker!(pick_q5_0, pick_q5_0_for, tile_q5_0, tile_q5_0_for, BlockQ5_0, q5_0_tile,
    ["x86_64" Avx512Vnni => avx512, "x86_64" AvxVnni => vnni, "x86_64" Avx2 => avx2,
     "aarch64" Neon => neon]);
tile_picker!(pick_q8_0, pick_q8_0_for, tile_q8_0, tile_q8_0_for, BlockQ8_0, q8_0_tile,
    ["x86_64" Avx512Vnni => avx512, "x86_64" AvxVnni => vnni, "x86_64" Avx2 => avx2,
     "aarch64" Neon => neon]);
tile_picker!(pick_q4k, pick_q4k_for, tile_q4k, tile_q4k_for, BlockQ4K, q4k_tile,
    ["x86_64" Avx512Vnni => avx512, "x86_64" Avx2 => avx2, "aarch64" Neon => neon]);
tile_picker!(pick_q5k, pick_q5k_for, tile_q5k, tile_q5k_for, BlockQ5K, q5k_tile,
    ["x86_64" Avx512Vnni => avx512, "x86_64" Avx2 => avx2, "aarch64" Neon => neon]);
tile_picker!(pick_q6k, pick_q6k_for, tile_q6k, tile_q6k_for, BlockQ6K, q6k_tile,
    ["x86_64" Avx512Vnni => avx512, "x86_64" Avx2 => avx2, "aarch64" Neon => neon]);
picker!(pick_q4_1, BlockQ4_1, q4_1_q8_1);

pub fn pick_q2k() -> VecDotFn<BlockQ2K> {
    BlockQ2K::vec_dot_scalar
}

pub fn pick_q3k() -> VecDotFn<BlockQ3K> {
    BlockQ3K::vec_dot_scalar
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Every tile shape the matmul uses, at every kernel level this CPU has, against the
    /// scalar dot product of each (weight row, activation row) pair; block counts odd and even
    /// (the 512-bit tiles take blocks in pairs).
    fn check_type<B: GgmlBlock>(
        tile_for: fn(Isa) -> Option<TileFn<B, 2, 4>>,
        rows_for: fn(Isa) -> Option<TileFn<B, 4, 1>>,
        one_for: fn(Isa) -> VecDotFn<B>,
    ) {
        for isa in Isa::ALL.into_iter().filter(|isa| isa.supported()) {
            for blocks in [1, 2, 7, 20] {
                let k = blocks * B::BLOCK_SIZE.max(<B::Dot as GgmlBlock>::BLOCK_SIZE);
                let w: Vec<Vec<B>> = (0..4).map(|r| quantized(k, 11 + r)).collect();
                let x: Vec<Vec<B::Dot>> = (0..4).map(|c| quantized(k, 101 + c)).collect();
                let want = |r: usize, c: usize| B::vec_dot_scalar(&w[r], &x[c]);
                let close = |got: f32, want: f32, what: &str| {
                    let tol = 1e-5 * (k as f32).sqrt() * want.abs().max(1.0);
                    assert!(
                        (got - want).abs() <= tol,
                        "{} {isa:?} k={k} {what}: {got} vs {want}",
                        std::any::type_name::<B>()
                    );
                };
                for (r, w) in w.iter().enumerate() {
                    close(one_for(isa)(w, &x[0]), want(r, 0), "dot");
                }
                if let Some(tile) = tile_for(isa) {
                    let got = tile([&w[0], &w[1]], std::array::from_fn(|c| &x[c][..]));
                    for (r, row) in got.iter().enumerate() {
                        for (c, &g) in row.iter().enumerate() {
                            close(g, want(r, c), "2x4 tile");
                        }
                    }
                }
                if let Some(rows) = rows_for(isa) {
                    let got = rows(std::array::from_fn(|r| &w[r][..]), [&x[1]]);
                    for (r, row) in got.iter().enumerate() {
                        close(row[0], want(r, 1), "4x1 tile");
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
        check_type::<BlockQ4K>(tile_q4k_for, tile_q4k_for, pick_q4k_for);
        check_type::<BlockQ5K>(tile_q5k_for, tile_q5k_for, pick_q5k_for);
        check_type::<BlockQ6K>(tile_q6k_for, tile_q6k_for, pick_q6k_for);
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

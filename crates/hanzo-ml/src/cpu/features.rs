//! The one CPU feature detection of the workspace: which instruction set the kernels use.
//!
//! Every SIMD kernel (the f32 row kernels in `cpu::simd`, the quantized dot products in
//! `quantized::kernels`, the attention kernels of `hanzo-transformers`) asks [`isa`] rather
//! than probing the CPU itself, so `HANZO_ISA` (see `crate::env`) moves all of them at once.

use std::sync::OnceLock;

/// The instruction-set levels the kernels are written for, in order of preference. A kernel
/// written for one level runs at every level above it, so each level's features cover the
/// levels below it. The one gap: an AVX-512 CPU may lack AVX-VNNI, so every kernel written
/// for `AvxVnni` also has an `Avx512` version, and `Avx512` never falls to an `AvxVnni` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// AArch64 NEON (only ever supported there, so below every x86 level).
    Neon,
    /// NEON plus ARMv8.2's 8-bit dot product (`sdot`, the `dotprod` feature): Apple's M
    /// cores, Neoverse N1 and later (Graviton 2+), Cortex-A55/A76 and later.
    NeonDot,
    /// WebAssembly SIMD128, in a build compiled with it (a WebAssembly module cannot probe
    /// for it at run time: an engine without it refuses the whole module).
    Simd128,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 plus AVX-VNNI's 256-bit `vpdpbusd`.
    AvxVnni,
    /// AVX2 plus AVX-512 F/BW/VL and AVX512-VNNI.
    Avx512,
}

impl Isa {
    pub const ALL: [Isa; 7] = [
        Isa::Scalar,
        Isa::Neon,
        Isa::NeonDot,
        Isa::Simd128,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
    ];

    /// The name `HANZO_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::NeonDot => "neondot",
            Isa::Simd128 => "simd128",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 => "avx512",
        }
    }

    /// Whether this CPU has every feature this level's kernels use.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            match self {
                Isa::Scalar => true,
                Isa::Neon | Isa::NeonDot | Isa::Simd128 => false,
                Isa::Avx2 => avx2,
                Isa::AvxVnni => avx2 && has!("avxvnni"),
                Isa::Avx512 => {
                    avx2 && has!("avx512f")
                        && has!("avx512bw")
                        && has!("avx512vl")
                        && has!("avx512vnni")
                }
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            match self {
                Isa::Scalar => true,
                Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
                Isa::NeonDot => {
                    std::arch::is_aarch64_feature_detected!("neon")
                        && std::arch::is_aarch64_feature_detected!("dotprod")
                }
                _ => false,
            }
        }
        #[cfg(target_arch = "wasm32")]
        {
            self == Isa::Scalar || (self == Isa::Simd128 && cfg!(target_feature = "simd128"))
        }
        #[cfg(not(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "wasm32"
        )))]
        {
            self == Isa::Scalar
        }
    }

    /// Every level this CPU supports, lowest first (what the SIMD-vs-scalar tests compare).
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.supported()).collect()
    }

    /// The best supported level, or the one `HANZO_ISA` names where this CPU supports it.
    fn detect() -> Isa {
        let best = Isa::available().pop().unwrap_or(Isa::Scalar);
        let Some(name) = crate::env::isa_cap() else {
            return best;
        };
        match Isa::ALL.into_iter().find(|isa| isa.name() == name) {
            Some(isa) if isa.supported() => isa,
            _ => {
                eprintln!(
                    "HANZO_ISA={name}: not an instruction set this CPU runs (one of {}); using {}",
                    Isa::available()
                        .iter()
                        .map(|i| i.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    best.name()
                );
                best
            }
        }
    }
}

/// Whether the CPU is Intel's (CPUID's vendor string). Where a kernel has both a 512-bit f32
/// FMA form and a denser instruction (AVX512-BF16's pair products), the better one depends on
/// the core: Intel's AVX-512 cores run two full-width FMA units, AMD's Zen 4 splits each
/// 512-bit FMA into two halves (docs/QUANTIZATION.md, "Float weights").
#[cfg(target_arch = "x86_64")]
pub fn intel() -> bool {
    static INTEL: OnceLock<bool> = OnceLock::new();
    *INTEL.get_or_init(|| {
        let id = std::arch::x86_64::__cpuid(0);
        let mut vendor = [0u8; 12];
        vendor[..4].copy_from_slice(&id.ebx.to_le_bytes());
        vendor[4..8].copy_from_slice(&id.edx.to_le_bytes());
        vendor[8..].copy_from_slice(&id.ecx.to_le_bytes());
        &vendor == b"GenuineIntel"
    })
}

/// The instruction set every kernel of this process uses, decided once.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(Isa::detect)
}

/// For a test of kernels written for `level`: whether this process runs them, with a line on
/// stderr saying so either way, so that a test never passes silently over an instruction set
/// the CPU lacks (or one `HANZO_ISA` turned off).
pub fn test_kernels_at(level: Isa, test: &str) -> bool {
    let runs = isa() >= level;
    if runs {
        eprintln!("{test}: checking the {} kernels", level.name());
    } else {
        eprintln!(
            "{test}: NOT checking the {} kernels: this process runs {}",
            level.name(),
            isa().name()
        );
    }
    runs
}

//! Software prefetch for decode: weight bytes are asked for a fixed distance ahead of the
//! kernel that reads them, and a weight larger than the last-level cache is streamed past it.

/// How far ahead of the kernel decode asks for weight bytes. Each weight byte is used once
/// per token, and the hardware prefetcher alone keeps too few lines in flight to overlap
/// memory with arithmetic (it also stops at 4 KiB page boundaries). Nearer leads leave
/// memory latency exposed; farther ones run past the small per-task row ranges of a layer's
/// matrices into other threads' rows and, at 32 KiB, fill all of a Zen 3 core's L1. The
/// distance was chosen with `hanzo-engine bench -n 64` on Gemma 3 (docs/QUANTIZATION.md has
/// the sweep).
pub(crate) const PREFETCH_DISTANCE: usize = 3 * 1024;

/// Asks for the cache lines of `bytes` bytes starting `PREFETCH_DISTANCE` past `start`. Every
/// line is asked for twice (into L2, then into L1): on Zen 3 a prefetch that finds the miss
/// buffers full is dropped, and the second request catches most of those; a third gains
/// nothing. Prefetches never fault, so the range may run past the end of the matrix.
///
/// `STREAMED` is for a matrix larger than the last-level cache (an output head): the same two
/// requests, as non-temporal, so that streaming it once per token does not evict the rest of
/// the model's weights and activations from L2 and L3.
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
///
/// Measured on AMD's Zen 3, where it pays. Not on Intel: on an Emerald Rapids Xeon, decode
/// without it was 1.37x (Gemma 3 F16) and 1.48x (BF16) as fast, Qwen2.5-0.5B's F16/BF16
/// unchanged, and with a 32 MiB cache assumed (so that the heads of the Q4_K_M fixtures were
/// streamed) Gemma 3 decoded at 0.57x and Qwen2.5-Coder at 0.78x (docs/BENCHMARKS.md).
pub(crate) fn streamed(bytes: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::features::intel() {
        return false;
    }
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

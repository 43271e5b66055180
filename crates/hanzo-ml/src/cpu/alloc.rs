//! Output buffers. A fresh multi-megabyte buffer costs one page fault per 4 KiB page on first
//! write, which halves the speed of memory-bound ops; asking Linux for transparent huge pages
//! on such buffers cuts the faults 512-fold.

/// Buffers at least this large are advised to use huge pages.
const HUGE_MIN_BYTES: usize = 4 << 20;

/// A zero-filled Vec of `n` elements (calloc: large ones come straight from fresh, untouched
/// pages, so zeroing is free until the first write). `vec![T::zeroed(); n]` would take calloc
/// only for primitive `T`; for others (f16, repacked weight blocks) it writes every byte up
/// front, which faults in the whole buffer at once.
pub(crate) fn zeroed_vec<T: bytemuck::Zeroable>(n: usize) -> Vec<T> {
    let v = bytemuck::zeroed_vec::<T>(n);
    advise_huge(v.as_ptr(), n);
    v
}

/// Advises huge pages for the `n` elements at `v` (a live allocation) if they are many.
#[cfg(target_os = "linux")]
pub(crate) fn advise_huge<T>(v: *const T, n: usize) {
    const HUGE: usize = 1 << 21;
    let bytes = n * std::mem::size_of::<T>();
    if bytes < HUGE_MIN_BYTES {
        return;
    }
    let p = v as usize;
    let start = (p + HUGE - 1) & !(HUGE - 1);
    let end = (p + bytes) & !(HUGE - 1);
    if end > start {
        // SAFETY: [start, end) lies inside the live allocation at `v`; MADV_HUGEPAGE only
        // changes how the kernel backs those pages, never their contents or validity. A failure
        // (e.g. THP disabled) is harmless and ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn advise_huge<T>(_: *const T, _: usize) {
    let _ = HUGE_MIN_BYTES;
}

/// Process-wide: asks glibc's malloc to serve buffers up to 32 MiB from its heap and to keep
/// freed ones, instead of mapping each large buffer afresh and unmapping it on free. A forward
/// pass allocates and frees the same few megabyte-sized activations layer after layer; mapped
/// afresh, every one of their pages faults again (a visible share of a 512-token prefill in
/// `perf`; `hanzo-engine bench -p 512` measures it).
/// Reused heap memory costs a memset at most. Call once at start-up, before threads allocate.
/// Does nothing on other C libraries.
pub fn reuse_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MIB: libc::c_int = 1 << 20;
        // SAFETY: mallopt only changes allocator tuning parameters; both values are in the
        // documented ranges (the mmap threshold's maximum is 32 MiB on 64-bit glibc).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 * MIB);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 256 * MIB);
        }
    }
}

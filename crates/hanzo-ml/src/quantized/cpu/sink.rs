//! An output matrix that parallel tasks write straight into, each its own elements: the
//! products' results land where they belong, with no zeroing pass and no transposed copy (for
//! Gemma 3's 262,144-row head at 16 decode rows, those were three extra passes over 16 MB a
//! step).

/// The uninitialised elements of the vector `filled` is making, written through `write`.
pub(super) struct Sink {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `Sink` only hands out writes through `write`, whose callers guarantee that no two
// threads write the same element; the vector behind it outlives the `filled` call.
unsafe impl Sync for Sink {}

/// A vector of `len` elements, every one written by `fill` through the sink (from as many
/// threads as it likes).
///
/// # Safety
/// `fill` writes every element of `0..len` before returning.
pub(super) unsafe fn filled(len: usize, fill: impl FnOnce(&Sink)) -> Vec<f32> {
    let mut out = Vec::with_capacity(len);
    crate::cpu::alloc::advise_huge(out.as_ptr(), len);
    fill(&Sink {
        ptr: out.as_mut_ptr(),
        len,
    });
    // SAFETY: all `len` elements are initialised, by the caller's guarantee (a panicking
    // `fill` never gets here, and `out` is then dropped empty).
    unsafe { out.set_len(len) };
    out
}

impl Sink {
    /// Writes `v` at `at..at + v.len()`.
    ///
    /// # Safety
    /// No other thread may write `at..at + v.len()` concurrently.
    #[inline(always)]
    pub(super) unsafe fn write(&self, at: usize, v: &[f32]) {
        assert!(at + v.len() <= self.len, "write past the output");
        // SAFETY: in bounds of the vector's capacity (checked), and exclusive by the caller's
        // guarantee. The common lengths are copied as one fixed-size value: a runtime-length
        // copy is a memcpy call.
        unsafe {
            let dst = self.ptr.add(at);
            match v.len() {
                64 => (dst as *mut [f32; 64]).write_unaligned(*(v.as_ptr() as *const [f32; 64])),
                32 => (dst as *mut [f32; 32]).write_unaligned(*(v.as_ptr() as *const [f32; 32])),
                16 => (dst as *mut [f32; 16]).write_unaligned(*(v.as_ptr() as *const [f32; 16])),
                8 => (dst as *mut [f32; 8]).write_unaligned(*(v.as_ptr() as *const [f32; 8])),
                _ => std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len()),
            }
        }
    }
}

//! Read-only bytes shared by the tensors that view them: a file's memory map, or a buffer
//! filled once in memory (a model handed over as bytes, as in the browser, where there are no
//! files to map), or memory another runtime owns (a NumPy array seen from Python). Tensors
//! keep an `Arc<Blob>` and borrow their data from it without a copy.

use std::ops::Deref;

pub struct Blob(Repr);

enum Repr {
    Mapped(memmap2::Mmap),
    /// `u64` words: every tensor type's data is aligned in the buffer as it is in the file.
    Owned {
        words: Vec<u64>,
        len: usize,
    },
    /// Memory owned by `owner` (dropped with the blob, which releases it).
    External {
        ptr: *const u8,
        len: usize,
        _owner: Box<dyn std::any::Any + Send + Sync>,
    },
}

// SAFETY: an external blob's bytes are only read through `&self` (like the other kinds), and
// `from_external`'s caller promises they stay valid while `owner` lives; the owner itself is
// Send + Sync.
unsafe impl Send for Repr {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for Repr {}

impl Blob {
    /// A file's memory map (made by the caller, who answers for the file staying unchanged).
    pub fn from_map(map: memmap2::Mmap) -> Self {
        Blob(Repr::Mapped(map))
    }

    /// `len` zero bytes in memory, to be filled through [`Blob::as_mut_slice`] before sharing
    /// (a model streamed in piece by piece never needs a second full copy).
    pub fn zeroed(len: usize) -> Self {
        Blob(Repr::Owned {
            words: vec![0; len.div_ceil(8)],
            len,
        })
    }

    /// A copy of `bytes` in memory.
    pub fn copy_of(bytes: &[u8]) -> Self {
        let mut blob = Self::zeroed(bytes.len());
        if let Some(dst) = blob.as_mut_slice() {
            dst.copy_from_slice(bytes);
        }
        blob
    }

    /// `len` bytes at `ptr`, kept alive by `owner` (dropped when the blob is), without a copy.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be readable for as long as `owner` lives (for `len == 0`, `ptr`
    /// may be anything). Writes to that memory by its owner are seen by the tensors viewing
    /// the blob; the caller answers for none happening while an operation reads it.
    pub unsafe fn from_external(
        ptr: *const u8,
        len: usize,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        Blob(Repr::External {
            ptr: if len == 0 {
                std::ptr::NonNull::<u64>::dangling().as_ptr() as *const u8
            } else {
                ptr
            },
            len,
            _owner: owner,
        })
    }

    /// The bytes, writable: only for a blob in memory.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match &mut self.0 {
            Repr::Mapped(_) | Repr::External { .. } => None,
            Repr::Owned { words, len } => Some(&mut bytemuck::cast_slice_mut(words)[..*len]),
        }
    }

    /// Lets the pages that hold bytes `range` of a file's map leave the resident set (Linux;
    /// `MADV_DONTNEED`): they stay valid, and a later read maps the same bytes again from the
    /// page cache, so the pages shared with neighbouring bytes go too (a loader releasing
    /// tensor after tensor leaves none behind). Bytes in memory, and other systems, are left
    /// alone.
    pub fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(not(target_os = "linux"))]
        let _ = range;
        #[cfg(target_os = "linux")]
        if let Repr::Mapped(map) = &self.0 {
            const PAGE: usize = 4096;
            let (from, to) = (range.start.min(map.len()), range.end.min(map.len()));
            // The map starts on a page and its last page is mapped whole.
            let start = (map.as_ptr() as usize + from) & !(PAGE - 1);
            let end = (map.as_ptr() as usize + to).next_multiple_of(PAGE);
            if to > from {
                // SAFETY: [start, end) are pages of this live read-only file map, whose pages
                // are file pages: MADV_DONTNEED unmaps them and a later read maps the same
                // bytes again from the file. Failure is harmless (they stay resident).
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
                }
            }
        }
    }

    /// The memory map, where the bytes are a file's.
    pub fn mmap(&self) -> Option<&memmap2::Mmap> {
        match &self.0 {
            Repr::Mapped(map) => Some(map),
            Repr::Owned { .. } | Repr::External { .. } => None,
        }
    }
}

impl Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Mapped(map) => map,
            Repr::Owned { words, len } => &bytemuck::cast_slice(words)[..*len],
            // SAFETY: `from_external`'s contract: readable for `len` bytes while the blob
            // (and so its owner) lives; a zero length uses an aligned dangling pointer.
            Repr::External { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_bytes_are_aligned_and_exact() {
        for len in [0, 1, 7, 8, 9, 1000] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let blob = Blob::copy_of(&bytes);
            assert_eq!(&blob[..], &bytes[..]);
            assert!((blob.as_ptr() as usize).is_multiple_of(8));
            assert!(blob.mmap().is_none());
        }
    }
}

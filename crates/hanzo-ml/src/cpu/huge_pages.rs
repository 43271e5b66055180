//! Moving a mapped model file onto 2 MiB pages in place, while it is in use.
//!
//! Why: decoding streams every weight once per token. Through the 4 KiB pages of a file
//! mapping that costs a TLB miss every 4 KiB, and the hardware prefetcher stops at each page
//! boundary (docs/QUANTIZATION.md has the decode speed with and without; `HANZO_HUGE_PAGES=0` turns it off).
//! The kernel only gives a file mapping 2 MiB pages when its page cache holds
//! 2 MiB folios, which depends on how the file was first read (a cold read through a
//! `MADV_HUGEPAGE` map gets them; a freshly written file does not); anonymous memory gets
//! them on request.
//!
//! How: for each 2 MiB-aligned piece of the map, the same file bytes are read into a fresh
//! anonymous huge page, which is made read-only and `mremap`ped over the piece. The address
//! holds the same bytes throughout (a reader touching the piece mid-move waits in the page
//! fault handler until the kernel has finished), so nothing that borrows the map can tell,
//! no pointer has to switch, and the file pages leave the process as the copy arrives: RSS
//! does not double. Copying a few hundred megabytes takes a large fraction of a second (first
//! touches of fresh memory are slow in a VM), so it runs in the background. Where the page cache already maps the file
//! with 2 MiB pages, nothing is copied.

use super::Blob;
use std::fs::File;
use std::sync::Weak;

const HUGE: usize = 2 << 20;

/// True once any map has started moving onto huge pages; held for the whole move. A moved
/// piece is anonymous memory, which `MADV_DONTNEED` would zero rather than give back to the
/// file, so `QTensor::release_bytes` checks this (under the lock) before choosing its advice.
pub(crate) static MOVED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Moves every whole 2 MiB piece of `map` onto anonymous huge pages holding the same bytes of
/// `file`, front to back; stops early (returning what it moved) once `map` is dropped.
/// Returns the bytes moved: 0 where transparent huge pages are off, `HANZO_HUGE_PAGES=0`,
/// or not on Linux.
pub(crate) fn promote(map: &Weak<Blob>, file: &File) -> std::io::Result<usize> {
    if !available() {
        return Ok(0);
    }
    let Some((first, count)) = map.upgrade().map(|m| whole_pieces(&m)) else {
        return Ok(0);
    };
    if map.upgrade().is_some_and(|m| mostly_huge_already(&m)) {
        return Ok(0);
    }
    let mut started = MOVED.lock().unwrap_or_else(|e| e.into_inner());
    *started = true;
    let pagemap = Pagemap::open();
    let mut moved = 0;
    for piece in 0..count {
        // Held across the move: the target range must stay this map's until the move is done.
        let Some(map) = map.upgrade() else {
            break;
        };
        let offset = first + piece * HUGE;
        if !pagemap.mostly_resident(map.as_ptr().wrapping_add(offset)) {
            continue;
        }
        move_piece(&map, file, offset)?;
        moved += HUGE;
    }
    Ok(moved)
}

/// Which pages of this process are resident, from `/proc/self/pagemap`.
///
/// A piece is copied only where the process uses it: pages the model never read, or gave back
/// (`QTensor::release_pages`, after a weight was repacked into memory of its own), would
/// otherwise come back resident as part of a huge page.
struct Pagemap(#[cfg_attr(not(target_os = "linux"), allow(dead_code))] Option<File>);

impl Pagemap {
    fn open() -> Self {
        Self(File::open("/proc/self/pagemap").ok())
    }

    /// Whether at least 7/8 of the 4 KiB pages of the 2 MiB piece at `at` are resident
    /// (true where that cannot be read: the move is still correct, only maybe wasteful).
    #[cfg(target_os = "linux")]
    fn mostly_resident(&self, at: *const u8) -> bool {
        use std::os::unix::fs::FileExt;
        const PAGES: usize = HUGE / 4096;
        let Some(f) = &self.0 else {
            return true;
        };
        // One little-endian u64 per virtual page; bit 63: present in memory.
        let mut entries = [0u8; 8 * PAGES];
        let index = (at as usize / 4096) as u64;
        if f.read_exact_at(&mut entries, index * 8).is_err() {
            return true;
        }
        let present = entries.chunks_exact(8).filter(|e| e[7] & 0x80 != 0).count();
        present * 8 >= PAGES * 7
    }

    #[cfg(not(target_os = "linux"))]
    fn mostly_resident(&self, _: *const u8) -> bool {
        true
    }
}

/// The offset of the map's first 2 MiB-aligned byte and how many whole aligned pieces follow.
fn whole_pieces(map: &Blob) -> (usize, usize) {
    let base = map.as_ptr() as usize;
    let first = base.next_multiple_of(HUGE) - base;
    (first, map.len().saturating_sub(first) / HUGE)
}

/// Whether the kernel already maps at least 90% of `map` with 2 MiB pages of the page cache
/// (a file first read on a recent kernel may sit in the cache as 2 MiB folios, which every
/// mapping of it gets: then there is nothing to gain from a copy). Meaningful once the map
/// has been read through (a first forward pass): untouched pages count as not huge.
#[cfg(target_os = "linux")]
fn mostly_huge_already(map: &Blob) -> bool {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return false;
    };
    let (start, end) = (map.as_ptr() as usize, map.as_ptr() as usize + map.len());
    let mut inside = false;
    let mut pmd_kb = 0usize;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if let Some((a, b)) = first.split_once('-') {
            // A mapping's header line: "start-end perms offset dev inode [path]".
            let range = usize::from_str_radix(a, 16)
                .ok()
                .zip(usize::from_str_radix(b, 16).ok());
            inside = range.is_some_and(|(a, b)| a < end && b > start);
        } else if inside && first == "FilePmdMapped:" {
            pmd_kb += words
                .next()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
        }
    }
    pmd_kb * 1024 >= map.len() / 10 * 9
}

#[cfg(not(target_os = "linux"))]
fn mostly_huge_already(_: &Blob) -> bool {
    false
}

#[cfg(target_os = "linux")]
fn move_piece(map: &Blob, file: &File, offset: usize) -> std::io::Result<()> {
    use std::io::Error;
    use std::os::unix::fs::FileExt;
    let target = map.as_ptr().wrapping_add(offset) as *mut libc::c_void;
    // Twice the size, to find an aligned piece inside.
    let span = 2 * HUGE;
    // SAFETY: a fresh private anonymous mapping, touching no existing memory.
    let stage = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if stage == libc::MAP_FAILED {
        return Err(Error::last_os_error());
    }
    let start = stage as usize;
    let aligned = start.next_multiple_of(HUGE);
    let result = (|| {
        // SAFETY: `aligned..aligned + HUGE` lies inside the staging mapping made above.
        unsafe {
            // Without huge pages the move still works, it only gains nothing.
            libc::madvise(aligned as *mut libc::c_void, HUGE, libc::MADV_HUGEPAGE);
        }
        // SAFETY: the staging piece is ours alone: mapped above, writable, HUGE bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(aligned as *mut u8, HUGE) };
        file.read_exact_at(buf, offset as u64)?;
        // SAFETY: as above; read-only like the map it replaces.
        if unsafe { libc::mprotect(aligned as *mut libc::c_void, HUGE, libc::PROT_READ) } != 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: `target` is a 2 MiB-aligned piece of `map`, which the caller keeps mapped
        // until this returns, and the staging piece holds the file's bytes for it: the move
        // atomically (under the address-space lock) swaps pages whose contents are identical,
        // so no reference into the map observes a change. The two ranges do not overlap.
        let to = unsafe {
            libc::mremap(
                aligned as *mut libc::c_void,
                HUGE,
                HUGE,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                target,
            )
        };
        if to == libc::MAP_FAILED {
            return Err(Error::last_os_error());
        }
        Ok(())
    })();
    // What is left of the staging mapping: the slack before and after the piece, and the
    // piece itself if the move failed.
    let (before, after) = (aligned - start, start + span - (aligned + HUGE));
    // SAFETY: these ranges are the staging mapping's own, which nothing else refers to.
    unsafe {
        if result.is_err() {
            libc::munmap(aligned as *mut libc::c_void, HUGE);
        }
        if before > 0 {
            libc::munmap(stage, before);
        }
        if after > 0 {
            libc::munmap((aligned + HUGE) as *mut libc::c_void, after);
        }
    }
    result
}

#[cfg(not(target_os = "linux"))]
fn move_piece(_: &Blob, _: &File, _: usize) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Linux with transparent huge pages on (`always` or `madvise`), unless `HANZO_HUGE_PAGES=0`.
fn available() -> bool {
    if !crate::env::huge_pages() {
        return false;
    }
    cfg!(target_os = "linux")
        && std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|mode| !mode.contains("[never]"))
}

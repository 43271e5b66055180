//! GGUF files (versions 2 and 3): little-endian header, typed key/value metadata, a tensor
//! directory, then the aligned data section. Reading memory-maps the file (or takes its bytes
//! whole, where there are no files) and hands out zero-copy `QTensor`s; writing streams tensors so a large model never has to sit in memory.

mod read;
mod value;
mod write;

pub use read::GgufContent;
pub use value::{Array, Value, ValueType};
pub use write::{write_gguf, TensorSpec};

use super::{GgmlDType, QTensor};
use crate::cpu::Blob;
use crate::{Error, Result, Shape};
use std::path::Path;
use std::sync::Arc;

pub const MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// One tensor's directory entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: GgmlDType,
    /// Row-major (outermost first): the reverse of ggml's `ne` order in the file.
    pub shape: Shape,
    /// Absolute offset of the data in the file.
    pub offset: u64,
    /// Bytes of data.
    pub size: usize,
}

/// Moves a GGUF file's memory map onto 2 MiB pages in place: decoding reads every weight
/// once per token and runs faster from huge pages (see `cpu::huge_pages`). Every tensor,
/// borrowed already or not, reads the same bytes throughout, so the model can run while it
/// moves. Copying a few hundred megabytes takes a large fraction of a second, hence `spawn`.
/// Nothing happens where transparent
/// huge pages are off (or `HANZO_HUGE_PAGES=0`); if the move fails part-way, the rest of the
/// map stays on 4 KiB pages, which is still correct.
pub struct HugePages {
    map: std::sync::Weak<Blob>,
    file: Arc<std::fs::File>,
}

impl HugePages {
    /// Moves the map now; returns the bytes moved. Stops early once the map is dropped.
    pub fn run(self) -> Result<usize> {
        Ok(crate::cpu::huge_pages::promote(&self.map, &self.file)?)
    }

    /// Moves the map in a background thread; `None` if no thread could start.
    pub fn spawn(self) -> Option<std::thread::JoinHandle<Result<usize>>> {
        std::thread::Builder::new()
            .name("hanzo-huge-pages".into())
            .spawn(move || self.run())
            .ok()
    }
}

/// An open GGUF file: its parsed header and its bytes, shared with the tensors (a memory map
/// of the file, or the whole file in memory).
pub struct GgufFile {
    content: GgufContent,
    map: Arc<Blob>,
    /// The mapped file (none for bytes in memory).
    file: Option<Arc<std::fs::File>>,
    /// Set by the first request to move the map onto huge pages; later ones do nothing.
    promoting: std::sync::atomic::AtomicBool,
    /// Names of the tensors whose bytes were interleaved in place (`from_blob_interleaved`).
    interleaved: std::collections::HashSet<String>,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path)
            .map_err(|e| Error::format(path.display().to_string(), format!("cannot open: {e}")))?;
        // SAFETY: the map is read-only; as with every mmap-based loader, the file must not be
        // truncated or rewritten by another process while it is open.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        // Where the file is not cached yet, lets the kernel read it into 2 MiB page-cache
        // folios and map those whole (see `cpu::huge_pages`); a hint, so failure is harmless.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        let content = GgufContent::parse(&map)
            .map_err(|e| Error::format(path.display().to_string(), e.to_string()))?;
        Ok(Self {
            content,
            map: Arc::new(Blob::from_map(map)),
            file: Some(Arc::new(file)),
            promoting: Default::default(),
            interleaved: Default::default(),
        })
    }

    /// A GGUF file's bytes, held in memory (as in the browser); the tensors view them.
    pub fn from_blob(blob: Blob) -> Result<Self> {
        let content =
            GgufContent::parse(&blob).map_err(|e| Error::format("gguf", e.to_string()))?;
        Ok(Self {
            content,
            map: Arc::new(blob),
            file: None,
            promoting: Default::default(),
            interleaved: Default::default(),
        })
    }

    /// The header and tensor directory of a file of `file_len` bytes from its first bytes,
    /// with no tensor data: what a caller reads to decide whether to load the file at all
    /// (the edge runtime's budget, before a browser downloads the rest). An error when the
    /// header runs past `prefix`, and reading a tensor of it is an error.
    pub fn header_only(prefix: &[u8], file_len: u64) -> Result<Self> {
        let content = GgufContent::parse_prefix(prefix, file_len)
            .map_err(|e| Error::format("gguf", e.to_string()))?;
        Ok(Self {
            content,
            map: Arc::new(Blob::zeroed(0)),
            file: None,
            promoting: Default::default(),
            interleaved: Default::default(),
        })
    }

    /// Whether the file is mapped (its pages read on demand) rather than held in memory.
    pub fn is_mapped(&self) -> bool {
        self.file.is_some()
    }

    /// `from_blob`, with every 2-D tensor of a type the interleaved kernels read (Q4_0, Q4_1,
    /// Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, in whole groups of eight rows) rearranged into
    /// `format::interleaved`'s layout where it lies. Those tensors come out `is_interleaved`:
    /// `QMatMul` runs the interleaved kernels over them, and embedding lookups and
    /// dequantization read the layout. This is how WebAssembly gets those kernels: its
    /// memory never shrinks, so a repacked copy would hold the weights twice. An error for a
    /// memory-mapped `blob`, which is read-only.
    pub fn from_blob_interleaved(mut blob: Blob) -> Result<Self> {
        let content =
            GgufContent::parse(&blob).map_err(|e| Error::format("gguf", e.to_string()))?;
        let bytes = blob.as_mut_slice().ok_or_else(|| {
            Error::invalid(
                "GgufFile::from_blob_interleaved",
                "a memory-mapped file cannot be rearranged",
            )
        })?;
        let mut interleaved = std::collections::HashSet::new();
        for t in &content.tensors {
            let &[n, k] = t.shape.dims() else { continue };
            // Data at an offset that is a multiple of 4 is viewed in place, never copied
            // (`QTensor::from_mmap`), so every interleaved tensor shares the one buffer.
            if !super::cpu::interleaved::fits(t.dtype, n, k) || t.offset % 4 != 0 {
                continue;
            }
            // In bounds: the parser checked every tensor's span against the file length.
            let start = t.offset as usize;
            let data = &mut bytes[start..start + t.size];
            super::format::interleaved::with_interleave_type!(t.dtype, B => {
                super::format::interleaved::interleave_in_place::<B>(data, n, k)
            }, _ => continue)
            .map_err(|e| Error::format(t.name.clone(), e.to_string()))?;
            super::cpu::interleaved::count_repacked(t.size);
            interleaved.insert(t.name.clone());
        }
        Ok(Self {
            content,
            map: Arc::new(blob),
            file: None,
            promoting: Default::default(),
            interleaved,
        })
    }

    /// The request to move this file's map onto 2 MiB pages (see `HugePages`); `None` after
    /// the first call, so the move happens once, and for bytes in memory.
    pub fn huge_pages(&self) -> Option<HugePages> {
        let file = self.file.clone()?;
        if self
            .promoting
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return None;
        }
        Some(HugePages {
            map: Arc::downgrade(&self.map),
            file,
        })
    }

    /// Maps this file's pages 4 KiB at a time from now on (`MADV_NOHUGEPAGE`), however the
    /// page cache holds them: a process that counts its memory (the edge runtime) then holds
    /// only the pages it reads, and giving back a repacked weight's stored pages is not undone
    /// by a neighbour's read mapping their whole 2 MiB folio again. Decoding from weights
    /// read this way is a little slower. Nothing happens for bytes in memory or off Linux.
    pub fn prefer_small_pages(&self) {
        #[cfg(target_os = "linux")]
        if let Some(map) = self.map.mmap() {
            let _ = map.advise(memmap2::Advice::NoHugePage);
        }
    }

    pub fn content(&self) -> &GgufContent {
        &self.content
    }

    pub fn metadata(&self) -> &[(String, Value)] {
        &self.content.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.content.get(key)
    }

    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.content.tensors
    }

    /// The named tensor's entry, its bytes in the map: always for a whole file (the parser
    /// checked every span against its length), never for a header-only one.
    fn held_tensor(&self, name: &str) -> Result<&TensorInfo> {
        let info = self
            .content
            .tensor_info(name)
            .ok_or_else(|| Error::format("gguf", format!("no tensor named {name:?}")))?;
        if info.offset as usize + info.size > self.map.len() {
            return Err(Error::format(
                "gguf",
                format!("tensor {name:?}: only the file's header was read"),
            ));
        }
        Ok(info)
    }

    /// The stored bytes of the named tensor, straight from the map (interleaved for the
    /// tensors `from_blob_interleaved` rearranged).
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.held_tensor(name)?;
        let start = info.offset as usize;
        Ok(&self.map[start..start + info.size])
    }

    /// The named tensor, borrowing the file's memory (no copy when aligned).
    pub fn tensor(&self, name: &str) -> Result<QTensor> {
        let info = self.held_tensor(name)?;
        let t = QTensor::from_mmap(
            info.dtype,
            info.shape.clone(),
            self.map.clone(),
            info.offset as usize,
            info.size,
        )?;
        Ok(match self.interleaved.contains(name) {
            true => t.into_interleaved(),
            false => t,
        })
    }
}

//! GGUF files (versions 2 and 3): little-endian header, typed key/value metadata, a tensor
//! directory, then the aligned data section. Reading memory-maps the file and hands out
//! zero-copy `QTensor`s; writing streams tensors so a large model never has to sit in memory.

mod read;
mod value;
mod write;

pub use read::GgufContent;
pub use value::{Array, Value, ValueType};
pub use write::{write_gguf, TensorSpec};

use super::{GgmlDType, QTensor};
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

/// An open GGUF file: its parsed header and a shared memory map of the whole file.
pub struct GgufFile {
    content: GgufContent,
    map: Arc<memmap2::Mmap>,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path)
            .map_err(|e| Error::format(path.display().to_string(), format!("cannot open: {e}")))?;
        // SAFETY: the map is read-only; as with every mmap-based loader, the file must not be
        // truncated or rewritten by another process while it is open.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        let content = GgufContent::parse(&map)
            .map_err(|e| Error::format(path.display().to_string(), e.to_string()))?;
        Ok(Self {
            content,
            map: Arc::new(map),
        })
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

    /// The stored bytes of the named tensor, straight from the map.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self
            .content
            .tensor_info(name)
            .ok_or_else(|| Error::format("gguf", format!("no tensor named {name:?}")))?;
        let start = info.offset as usize;
        // In bounds: the parser checked every tensor's span against the file length.
        Ok(&self.map[start..start + info.size])
    }

    /// The named tensor, borrowing the file's memory (no copy when aligned).
    pub fn tensor(&self, name: &str) -> Result<QTensor> {
        let info = self
            .content
            .tensor_info(name)
            .ok_or_else(|| Error::format("gguf", format!("no tensor named {name:?}")))?;
        QTensor::from_mmap(
            info.dtype,
            info.shape.clone(),
            self.map.clone(),
            info.offset as usize,
            info.size,
        )
    }
}

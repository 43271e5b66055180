//! safetensors files: memory-mapped, with tensors viewing the map directly (zero-copy) when
//! their data is aligned for the element type, and copied otherwise.
//!
//! ```no_run
//! use hanzo_ml::io::safetensors::{load, save, MmapedSafetensors};
//! let weights = load("model.safetensors")?; // HashMap<String, Tensor>
//! save(&weights, "copy.safetensors")?;
//! let lazy = MmapedSafetensors::new("model.safetensors")?;
//! let w = lazy.get(lazy.names()[0])?;
//! # Ok::<(), hanzo_ml::Error>(())
//! ```

use super::{contiguous_bytes, ensure_little_endian, storage_from_bytes};
use crate::cpu::{Blob, Buf};
use crate::{CpuStorage, DType, Error, Result, Tensor, WithDType, F8E4M3};
use ::safetensors::tensor::{Metadata, TensorInfo};
use ::safetensors::{Dtype, SafeTensors, View};
use half::{bf16, f16};
use memmap2::Mmap;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A safetensors file opened once: mapped and its header parsed and validated. Tensors are
/// built by name on demand and keep the map alive, so this can be dropped early.
pub struct MmapedSafetensors {
    map: Arc<Blob>,
    /// Byte offset of the data section (8 + header length).
    data_start: usize,
    metadata: Metadata,
    names: Vec<String>,
    context: String,
}

/// A tensor as stored: its type, shape and bytes (little-endian, any alignment).
pub struct RawTensor<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

impl MmapedSafetensors {
    pub fn new(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let context = format!("safetensors file {}", path.display());
        let file = std::fs::File::open(path)?;
        // Checked before mapping: mapping an empty file fails with an I/O error, but a file
        // too short for the length prefix is a format problem.
        if file.metadata()?.len() < 8 {
            return Err(Error::format(
                context,
                "file shorter than the 8-byte header length",
            ));
        }
        // SAFETY: the mapping is only sound if nobody modifies or truncates the file while it
        // is mapped (tensors may keep it alive). As with every mmap-based loader, we assume
        // model files are not written to while they are being used.
        let map = unsafe { Mmap::map(&file)? };
        Self::from_blob(Blob::from_map(map), context)
    }

    /// A safetensors file's bytes, held in memory (as in the browser); `context` names it in
    /// errors.
    pub fn from_blob(blob: Blob, context: impl Into<String>) -> Result<Self> {
        let context = context.into();
        ensure_little_endian(&context)?;
        if blob.len() < 8 {
            return Err(Error::format(
                context,
                "file shorter than the 8-byte header length",
            ));
        }
        check_header_numbers(&blob, &context)?;
        let (header_len, metadata) = SafeTensors::read_metadata(&blob)
            .map_err(|e| Error::format(context.as_str(), e.to_string()))?;
        let mut names: Vec<String> = metadata.tensors().into_keys().collect();
        names.sort_unstable();
        Ok(Self {
            map: Arc::new(blob),
            data_start: header_len + 8,
            metadata,
            names,
            context,
        })
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// The free-form `__metadata__` string map of the header, if any.
    pub fn metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.metadata().as_ref()
    }

    /// The tensor `name`: a view of the map when aligned, else an owned copy.
    pub fn get(&self, name: &str) -> Result<Tensor> {
        let info = self.metadata.info(name).ok_or_else(|| {
            Error::format(self.context.as_str(), format!("no tensor named '{name}'"))
        })?;
        self.build(name, info)
    }

    /// Every tensor of the file, by name.
    pub fn load_all(&self) -> Result<HashMap<String, Tensor>> {
        self.names
            .iter()
            .map(|n| Ok((n.clone(), self.get(n)?)))
            .collect()
    }

    /// The tensor `name`'s type, shape and stored bytes (little-endian), a slice of the map:
    /// nothing is read until the bytes are.
    pub fn raw(&self, name: &str) -> Result<RawTensor<'_>> {
        let info = self.metadata.info(name).ok_or_else(|| {
            Error::format(self.context.as_str(), format!("no tensor named '{name}'"))
        })?;
        let (dtype, begin, end) = self.locate(name, info)?;
        Ok(RawTensor {
            dtype,
            shape: &info.shape,
            bytes: &self.map[begin..end],
        })
    }

    /// Lets the pages wholly inside tensor `name`'s bytes leave the resident set (Linux,
    /// mapped files): for a loader that has copied the tensor and will not read it again
    /// soon. A later read brings the same bytes back from the file. Unknown names and data
    /// in memory are left alone.
    pub fn release(&self, name: &str) {
        let Some(info) = self.metadata.info(name) else {
            return;
        };
        if let Ok((_, begin, end)) = self.locate(name, info) {
            self.map.release(begin..end);
        }
    }

    /// The tensor's type and its data's byte range in the map, every number checked.
    fn locate(&self, name: &str, info: &TensorInfo) -> Result<(DType, usize, usize)> {
        let dtype = from_st_dtype(info.dtype).ok_or_else(|| {
            Error::format(
                self.context.as_str(),
                format!("tensor '{name}' has unsupported dtype {:?}", info.dtype),
            )
        })?;
        // The crate validated offsets against the shape and the file length; re-check with
        // checked arithmetic anyway so a bug there cannot turn into an out-of-bounds index.
        let bad =
            |msg: &str| Error::format(self.context.as_str(), format!("tensor '{name}': {msg}"));
        let count = info
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad("element count overflows"))?;
        let (s, e) = info.data_offsets;
        let (begin, end) = match (
            self.data_start.checked_add(s),
            self.data_start.checked_add(e),
        ) {
            (Some(b), Some(e)) if b <= e => (b, e),
            _ => return Err(bad("invalid data offsets")),
        };
        if count.checked_mul(dtype.size_in_bytes()) != Some(end - begin) {
            return Err(bad("data length does not match shape and dtype"));
        }
        if end > self.map.len() {
            return Err(bad("data offsets past the end of the file"));
        }
        Ok((dtype, begin, end))
    }

    fn build(&self, name: &str, info: &TensorInfo) -> Result<Tensor> {
        let (dtype, begin, end) = self.locate(name, info)?;
        let count = (end - begin) / dtype.size_in_bytes();
        let bytes = &self.map[begin..end];
        fn view<T: WithDType>(map: &Arc<Blob>, off: usize, n: usize) -> Option<CpuStorage> {
            Buf::<T>::mapped(map.clone(), off, n).map(T::to_cpu_storage)
        }
        let m = &self.map;
        let mapped = match dtype {
            DType::U8 => view::<u8>(m, begin, count),
            DType::U32 => view::<u32>(m, begin, count),
            DType::I64 => view::<i64>(m, begin, count),
            DType::BF16 => view::<bf16>(m, begin, count),
            DType::F16 => view::<f16>(m, begin, count),
            DType::F32 => view::<f32>(m, begin, count),
            DType::F64 => view::<f64>(m, begin, count),
            DType::F8E4M3 => view::<F8E4M3>(m, begin, count),
        };
        let storage = mapped.unwrap_or_else(|| storage_from_bytes(dtype, bytes));
        Tensor::from_cpu_storage(storage, info.shape.clone())
    }
}

/// The `*.safetensors` files of a directory (a checkpoint's shards), in name order; an error
/// when there is none.
pub fn files_in_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(Error::format(
            dir.display().to_string(),
            "holds no .safetensors files",
        ));
    }
    Ok(paths)
}

/// Several safetensors files read as one (a sharded checkpoint), with a name → file index.
pub struct ShardedSafetensors {
    files: Vec<MmapedSafetensors>,
    index: HashMap<String, usize>,
}

impl ShardedSafetensors {
    pub fn open<P: AsRef<Path>>(paths: &[P]) -> Result<Self> {
        let files = paths
            .iter()
            .map(MmapedSafetensors::new)
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::from_files(files))
    }

    /// Files opened already (from memory, say), read as one.
    pub fn from_files(files: Vec<MmapedSafetensors>) -> Self {
        let mut index = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            for n in f.names() {
                index.insert(n.to_string(), i);
            }
        }
        Self { files, index }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The tensor `name`, from whichever shard holds it; `None` when none does.
    pub fn get(&self, name: &str) -> Option<Result<Tensor>> {
        let &i = self.index.get(name)?;
        Some(self.files[i].get(name))
    }

    /// [`MmapedSafetensors::raw`] from whichever shard holds `name`.
    pub fn raw(&self, name: &str) -> Option<Result<RawTensor<'_>>> {
        let &i = self.index.get(name)?;
        Some(self.files[i].raw(name))
    }

    /// [`MmapedSafetensors::release`] in whichever shard holds `name`.
    pub fn release(&self, name: &str) {
        if let Some(&i) = self.index.get(name) {
            self.files[i].release(name);
        }
    }

    /// Lets every page of every shard's map leave the resident set (see
    /// [`MmapedSafetensors::release`]): after a loader has copied all it needs, the pages the
    /// system mapped around its reads go too.
    pub fn release_all(&self) {
        for f in &self.files {
            f.map.release(0..f.map.len());
        }
    }

    /// Every tensor name of every shard.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }
}

/// Load every tensor of a safetensors file (see [`MmapedSafetensors`] for lazy loading).
pub fn load(path: impl AsRef<Path>) -> Result<HashMap<String, Tensor>> {
    MmapedSafetensors::new(path)?.load_all()
}

/// Write `tensors` (any device layout; non-contiguous ones are copied) to a safetensors file.
/// Accepts `&HashMap<String, Tensor>` or any iterator of `(name, &Tensor)`.
pub fn save<'a, K: AsRef<str>>(
    tensors: impl IntoIterator<Item = (K, &'a Tensor)>,
    path: impl AsRef<Path>,
) -> Result<()> {
    let path = path.as_ref();
    let context = format!("safetensors file {}", path.display());
    ensure_little_endian(&context)?;
    let mut seen = HashSet::new();
    let mut views = Vec::new();
    for (name, t) in tensors {
        let name = name.as_ref().to_string();
        if !seen.insert(name.clone()) {
            return Err(Error::invalid(
                "save_safetensors",
                format!("duplicate tensor name '{name}'"),
            ));
        }
        let t = t.contiguous()?;
        contiguous_bytes(&t)?; // so that `View::data` below cannot fail
        views.push((name, StView(t)));
    }
    ::safetensors::serialize_to_file(views, &None, path).map_err(|e| match e {
        ::safetensors::SafeTensorError::IoError(e) => Error::Io(e),
        e => Error::format(context, e.to_string()),
    })
}

impl Tensor {
    /// Save this tensor alone under `name` in a safetensors file.
    pub fn save_safetensors(&self, name: &str, path: impl AsRef<Path>) -> Result<()> {
        save([(name, self)], path)
    }
}

/// A contiguous tensor as the safetensors crate's serialisation input.
struct StView(Tensor);

impl View for StView {
    fn dtype(&self) -> Dtype {
        to_st_dtype(self.0.dtype())
    }
    fn shape(&self) -> &[usize] {
        self.0.dims()
    }
    fn data(&self) -> Cow<'_, [u8]> {
        // Checked when the view was built; an error here is impossible.
        Cow::Borrowed(contiguous_bytes(&self.0).unwrap_or_default())
    }
    fn data_len(&self) -> usize {
        self.0.elem_count() * self.0.dtype().size_in_bytes()
    }
}

fn from_st_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::U8 => DType::U8,
        Dtype::U32 => DType::U32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F8_E4M3 => DType::F8E4M3,
        _ => return None,
    })
}

fn to_st_dtype(d: DType) -> Dtype {
    match d {
        DType::U8 => Dtype::U8,
        DType::U32 => Dtype::U32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F8E4M3 => Dtype::F8_E4M3,
    }
}

/// safetensors 0.4 computes `last_offset + 8 + header_len` unchecked after validating the
/// offsets, so an offset near `usize::MAX` panics (debug) instead of erroring. Reject any
/// integer literal in the header above `isize::MAX` (no real offset or dimension is that
/// large) before handing the header to the crate.
fn check_header_numbers(file: &[u8], context: &str) -> Result<()> {
    let Some(len_bytes) = file.get(..8) else {
        return Ok(()); // the crate reports the short file
    };
    let n = u64::from_le_bytes(len_bytes.try_into().unwrap_or_default());
    let header = usize::try_from(n)
        .ok()
        .and_then(|n| file.get(8..n.checked_add(8)?));
    let Some(header) = header else {
        return Ok(()); // length past the end: the crate reports it
    };
    let (mut in_str, mut escaped, mut value) = (false, false, None::<u64>);
    for &b in header {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
        } else if b.is_ascii_digit() {
            let v = value
                .unwrap_or(0)
                .checked_mul(10)
                .and_then(|v| v.checked_add((b - b'0') as u64));
            match v {
                Some(v) if v <= isize::MAX as u64 => value = Some(v),
                _ => {
                    return Err(Error::format(
                        context,
                        "header contains a number too large for an offset or dimension",
                    ))
                }
            }
        } else {
            value = None;
            in_str = b == b'"';
        }
    }
    Ok(())
}

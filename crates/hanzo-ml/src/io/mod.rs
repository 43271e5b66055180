//! File formats: safetensors (mmap, zero-copy where aligned) and NumPy `.npy` / `.npz`.
//!
//! Both formats store little-endian data; the helpers here move raw bytes between files and
//! CPU storage without going through f64.

pub mod npy;
pub mod safetensors;

pub use npy::{read_npy, read_npz, write_npy, write_npz, write_npz_compressed};

use crate::{CpuStorage, DType, Error, Result, Storage, Tensor, F8E4M3};
use half::{bf16, f16};

/// The raw bytes of a CPU storage, in memory (little-endian) order.
pub(crate) fn storage_bytes(s: &CpuStorage) -> &[u8] {
    match s {
        CpuStorage::U8(b) => b,
        CpuStorage::U32(b) => bytemuck::cast_slice(b),
        CpuStorage::I64(b) => bytemuck::cast_slice(b),
        CpuStorage::BF16(b) => bytemuck::cast_slice(b),
        CpuStorage::F16(b) => bytemuck::cast_slice(b),
        CpuStorage::F32(b) => bytemuck::cast_slice(b),
        CpuStorage::F64(b) => bytemuck::cast_slice(b),
        CpuStorage::F8E4M3(b) => bytemuck::cast_slice(b),
    }
}

/// The bytes of a contiguous tensor's elements (callers make it contiguous first).
pub(crate) fn contiguous_bytes(t: &Tensor) -> Result<&[u8]> {
    let (start, end) = t
        .layout()
        .contiguous_offsets()
        .ok_or_else(|| Error::invalid("io", "tensor must be contiguous to be written"))?;
    let Storage::Cpu(s) = t.storage();
    let es = t.dtype().size_in_bytes();
    storage_bytes(s)
        .get(start * es..end * es)
        .ok_or_else(|| Error::invalid("io", "layout exceeds storage"))
}

/// Copy little-endian `bytes` (any alignment) into an owned storage of `dtype`. `bytes.len()`
/// must be a multiple of the element size (callers validate it against the shape).
pub(crate) fn storage_from_bytes(dtype: DType, bytes: &[u8]) -> CpuStorage {
    fn owned<T: crate::WithDType>(bytes: &[u8]) -> CpuStorage {
        CpuStorage::from_vec(bytemuck::pod_collect_to_vec::<u8, T>(bytes))
    }
    match dtype {
        DType::U8 => owned::<u8>(bytes),
        DType::U32 => owned::<u32>(bytes),
        DType::I64 => owned::<i64>(bytes),
        DType::BF16 => owned::<bf16>(bytes),
        DType::F16 => owned::<f16>(bytes),
        DType::F32 => owned::<f32>(bytes),
        DType::F64 => owned::<f64>(bytes),
        DType::F8E4M3 => owned::<F8E4M3>(bytes),
    }
}

/// Both formats are little-endian and we reinterpret bytes in place, so a big-endian host
/// would silently read garbage; refuse instead.
pub(crate) fn ensure_little_endian(context: &str) -> Result<()> {
    if cfg!(target_endian = "big") {
        return Err(Error::format(
            context,
            "big-endian hosts are not supported by the file readers/writers",
        ));
    }
    Ok(())
}

//! The GGUF reader. Everything read from the file is untrusted: every count, length, offset
//! and dimension is checked with overflow-safe arithmetic against the bytes actually present
//! before it is used, and no allocation is sized by a count the file could not back.

use super::value::{Array, Value, ValueType};
use super::{TensorInfo, DEFAULT_ALIGNMENT, MAGIC};
use crate::quantized::GgmlDType;
use crate::{Error, Result, Shape};
use std::collections::HashMap;

/// ggml's limit on tensor rank.
const MAX_DIMS: usize = 4;
/// Nested arrays deeper than this are rejected (real files use at most 2).
const MAX_ARRAY_DEPTH: usize = 8;

fn err(msg: impl Into<String>) -> Error {
    Error::format("gguf", msg)
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(err(format!(
                "file truncated: {what} needs {n} bytes at offset {}, {} left",
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self
            .take(N, what)?
            .try_into()
            .expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items each at least `min_size` bytes: rejected unless the rest of the file
    /// could hold them.
    fn count(&mut self, min_size: usize, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        let fits = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_size).map(|b| (n, b)))
            .filter(|&(_, b)| b <= self.remaining());
        match fits {
            Some((n, _)) => Ok(n),
            None => Err(err(format!(
                "{what} {n} at offset {} cannot fit in the {} bytes left",
                self.pos - 8,
                self.remaining()
            ))),
        }
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.count(1, what)?;
        let at = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| err(format!("{what} at offset {at} is not valid UTF-8")))
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
        let what = key;
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => Value::Bool(self.bool(what)?),
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => Value::Array(self.array_value(key, depth)?),
        })
    }

    fn bool(&mut self, what: &str) -> Result<bool> {
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(err(format!(
                "{what}: bool byte {b} at offset {} is neither 0 nor 1",
                self.pos - 1
            ))),
        }
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(err(format!(
                "{key}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
            )));
        }
        let raw = self.u32(key)?;
        let ty = ValueType::from_u32(raw)
            .ok_or_else(|| err(format!("{key}: unknown array element type {raw}")))?;
        let n = self.count(ty.min_size(), &format!("{key}: array length"))?;
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let bytes = self.take(n * W, key)?;
                Array::$variant(
                    bytes
                        .chunks_exact(W)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk of W bytes")))
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(n, key)?.to_vec()),
            ValueType::I8 => fixed!(I8, i8),
            ValueType::U16 => fixed!(U16, u16),
            ValueType::I16 => fixed!(I16, i16),
            ValueType::U32 => fixed!(U32, u32),
            ValueType::I32 => fixed!(I32, i32),
            ValueType::U64 => fixed!(U64, u64),
            ValueType::I64 => fixed!(I64, i64),
            ValueType::F32 => fixed!(F32, f32),
            ValueType::F64 => fixed!(F64, f64),
            ValueType::Bool => Array::Bool((0..n).map(|_| self.bool(key)).collect::<Result<_>>()?),
            ValueType::String => {
                Array::String((0..n).map(|_| self.string(key)).collect::<Result<_>>()?)
            }
            ValueType::Array => Array::Array(
                (0..n)
                    .map(|_| self.array_value(key, depth + 1))
                    .collect::<Result<_>>()?,
            ),
        })
    }
}

/// Header, metadata and tensor directory of a GGUF file; tensor offsets are absolute file
/// offsets, already checked to lie inside the file.
#[derive(Debug, Clone)]
pub struct GgufContent {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

impl GgufContent {
    /// Parses and validates a whole GGUF file held in `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        Self::parse_prefix(buf, buf.len() as u64)
    }

    /// Parses the header and tensor directory from the first bytes of a file of `file_len`
    /// bytes (`buf` holds at least the header; the tensors' spans are checked against
    /// `file_len`).
    pub fn parse_prefix(buf: &[u8], file_len: u64) -> Result<Self> {
        let mut c = Cursor { buf, pos: 0 };
        let magic = c.array::<4>("magic")?;
        if magic != MAGIC {
            return Err(err(format!("not a GGUF file (magic {magic:02x?})")));
        }
        let version = c.u32("version")?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(err(
                    "GGUF version 1 (32-bit counts) is not supported; re-convert the model",
                ))
            }
            v if v.swap_bytes() <= 3 => return Err(err("big-endian GGUF files are not supported")),
            v => return Err(err(format!("unsupported GGUF version {v}"))),
        }
        // A tensor info takes at least 24 bytes, a key/value pair at least 13.
        let n_tensors = c.count(24, "tensor count")?;
        let n_kv = c.count(13, "metadata count")?;

        let mut metadata = Vec::with_capacity(n_kv);
        let mut index = HashMap::with_capacity(n_kv);
        for _ in 0..n_kv {
            let key = c.string("metadata key")?;
            let raw = c.u32(&key)?;
            let ty = ValueType::from_u32(raw)
                .ok_or_else(|| err(format!("{key}: unknown value type {raw}")))?;
            let value = c.value(ty, &key, 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(err(format!("duplicate metadata key {key:?}")));
            }
            metadata.push((key, value));
        }

        let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => *a as u64,
            Some(v) => {
                return Err(err(format!(
                    "general.alignment must be a power-of-two u32, got {v:?}"
                )))
            }
        };

        let mut raw_infos = Vec::with_capacity(n_tensors);
        let mut tensor_index = HashMap::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let name = c.string("tensor name")?;
            let n_dims = c.u32(&name)? as usize;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(err(format!(
                    "tensor {name:?}: {n_dims} dims (1 to {MAX_DIMS} allowed)"
                )));
            }
            let mut ggml_dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                ggml_dims.push(c.u64(&name)?);
            }
            let dtype = GgmlDType::from_u32(c.u32(&name)?)
                .map_err(|e| err(format!("tensor {name:?}: {e}")))?;
            let offset = c.u64(&name)?;
            if tensor_index.insert(name.clone(), i).is_some() {
                return Err(err(format!("duplicate tensor name {name:?}")));
            }
            raw_infos.push((name, ggml_dims, dtype, offset));
        }

        let data_offset = (c.pos as u64)
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| err("data offset overflows"))?;
        let mut tensors = Vec::with_capacity(raw_infos.len());
        for (name, ggml_dims, dtype, offset) in raw_infos {
            let info = tensor_info(
                name,
                &ggml_dims,
                dtype,
                offset,
                alignment,
                data_offset,
                file_len,
            )?;
            tensors.push(info);
        }
        check_no_overlap(&tensors)?;
        Ok(Self {
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// A metadata value that must be present.
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| err(format!("missing metadata key {key:?}")))
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }
}

fn tensor_info(
    name: String,
    ggml_dims: &[u64],
    dtype: GgmlDType,
    offset: u64,
    alignment: u64,
    data_offset: u64,
    file_len: u64,
) -> Result<TensorInfo> {
    let bad = |msg: String| err(format!("tensor {name:?}: {msg}"));
    let mut count: u64 = 1;
    // The product of the non-zero dims must fit too: with a zero dim the element count is 0,
    // but every partial product a consumer might form (in any dim order) must not overflow.
    let mut nonzero: u64 = 1;
    for &d in ggml_dims {
        if d > i64::MAX as u64 {
            return Err(bad(format!("dimension {d} out of range")));
        }
        let overflow = || bad(format!("element count of {ggml_dims:?} overflows"));
        nonzero = nonzero
            .checked_mul(d.max(1))
            .filter(|&c| c <= i64::MAX as u64)
            .ok_or_else(overflow)?;
        count = count.checked_mul(d).ok_or_else(overflow)?;
    }
    let bs = dtype.block_size() as u64;
    if !ggml_dims[0].is_multiple_of(bs) {
        return Err(bad(format!(
            "row length {} is not a multiple of the {dtype} block size {bs}",
            ggml_dims[0]
        )));
    }
    let size = (count / bs)
        .checked_mul(dtype.type_size() as u64)
        .ok_or_else(|| bad("byte size overflows".into()))?;
    if !offset.is_multiple_of(alignment) {
        return Err(bad(format!(
            "offset {offset} is not a multiple of the alignment {alignment}"
        )));
    }
    let start = data_offset
        .checked_add(offset)
        .ok_or_else(|| bad("offset overflows".into()))?;
    let end = start
        .checked_add(size)
        .ok_or_else(|| bad("end overflows".into()))?;
    if end > file_len {
        return Err(bad(format!(
            "data [{start}, {end}) lies beyond the end of the file ({file_len} bytes)"
        )));
    }
    let dims: Vec<usize> = ggml_dims.iter().rev().map(|&d| d as usize).collect();
    Ok(TensorInfo {
        name,
        dtype,
        shape: Shape::from(dims),
        offset: start,
        size: size as usize,
    })
}

fn check_no_overlap(tensors: &[TensorInfo]) -> Result<()> {
    let mut spans: Vec<(u64, u64, &str)> = tensors
        .iter()
        .filter(|t| t.size > 0)
        .map(|t| (t.offset, t.offset + t.size as u64, t.name.as_str()))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(err(format!(
                "tensors {:?} and {:?} overlap",
                w[0].2, w[1].2
            )));
        }
    }
    Ok(())
}

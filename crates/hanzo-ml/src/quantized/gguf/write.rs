//! The GGUF writer (version 3). Tensor data is asked for one tensor at a time, in directory
//! order, so a converter can quantize and write without holding the whole model.

use super::value::{Array, Value};
use super::{DEFAULT_ALIGNMENT, MAGIC};
use crate::quantized::GgmlDType;
use crate::{Error, Result, Shape};
use std::borrow::Cow;
use std::io::Write;

/// What the directory says about a tensor before its data is produced.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: GgmlDType,
    /// Row-major shape (written reversed, as ggml's `ne`).
    pub shape: Shape,
}

fn put_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn put_array(w: &mut impl Write, a: &Array) -> std::io::Result<()> {
    w.write_all(&(a.elem_type() as u32).to_le_bytes())?;
    w.write_all(&(a.len() as u64).to_le_bytes())?;
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                w.write_all(&x.to_le_bytes())?;
            }
        };
    }
    match a {
        Array::U8(v) => w.write_all(v)?,
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => each!(v.iter().map(|&b| b as u8)),
        Array::String(v) => {
            for s in v {
                put_str(w, s)?;
            }
        }
        Array::Array(v) => {
            for a in v {
                put_array(w, a)?;
            }
        }
    }
    Ok(())
}

fn put_value(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&[*x]),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[*x as u8]),
        Value::String(s) => put_str(w, s),
        Value::Array(a) => put_array(w, a),
    }
}

/// Writes a GGUF v3 file: `metadata` in order, the `tensors` directory, then each tensor's
/// bytes from `data(i)` (which must return exactly the size the directory promised).
/// The alignment is `general.alignment` when the metadata sets it, else 32.
pub fn write_gguf<'a>(
    w: &mut impl Write,
    metadata: &[(String, Value)],
    tensors: &[TensorSpec],
    mut data: impl FnMut(usize) -> Result<Cow<'a, [u8]>>,
) -> Result<()> {
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if a.is_power_of_two() => *a as u64,
        Some((_, v)) => {
            return Err(Error::invalid(
                "write_gguf",
                format!("general.alignment must be a power-of-two u32, got {v:?}"),
            ))
        }
    };
    if let Some(t) = tensors.iter().find(|t| t.dtype.afq().is_some()) {
        return Err(Error::invalid(
            "write_gguf",
            format!(
                "{}: {} is MLX's layout, which GGUF cannot hold (write it with `quantize --type AFQ4` to an MLX directory)",
                t.name, t.dtype
            ),
        ));
    }
    let mut pos = 0u64;
    let mut w = CountingWriter {
        inner: w,
        pos: &mut pos,
    };
    w.write_all(&MAGIC)?;
    w.write_all(&3u32.to_le_bytes())?;
    w.write_all(&(tensors.len() as u64).to_le_bytes())?;
    w.write_all(&(metadata.len() as u64).to_le_bytes())?;
    for (k, v) in metadata {
        put_str(&mut w, k)?;
        w.write_all(&(v.value_type() as u32).to_le_bytes())?;
        put_value(&mut w, v)?;
    }
    let mut sizes = Vec::with_capacity(tensors.len());
    let mut offset = 0u64;
    for t in tensors {
        let size = t.dtype.bytes_for(t.shape.elem_count())? as u64;
        let dims = t.shape.dims();
        if dims.last().copied().unwrap_or(1) % t.dtype.block_size() != 0 {
            return Err(Error::invalid(
                "write_gguf",
                format!(
                    "tensor {:?} {dims:?}: rows are not whole {} blocks",
                    t.name, t.dtype
                ),
            ));
        }
        put_str(&mut w, &t.name)?;
        w.write_all(&(dims.len().max(1) as u32).to_le_bytes())?;
        if dims.is_empty() {
            w.write_all(&1u64.to_le_bytes())?;
        }
        for &d in dims.iter().rev() {
            w.write_all(&(d as u64).to_le_bytes())?;
        }
        w.write_all(&t.dtype.id().to_le_bytes())?;
        w.write_all(&offset.to_le_bytes())?;
        sizes.push(size);
        offset = (offset + size).next_multiple_of(alignment);
    }
    w.pad_to(alignment)?;
    for (i, (t, &size)) in tensors.iter().zip(&sizes).enumerate() {
        let bytes = data(i)?;
        if bytes.len() as u64 != size {
            return Err(Error::invalid(
                "write_gguf",
                format!(
                    "tensor {:?}: expected {size} bytes of data, got {}",
                    t.name,
                    bytes.len()
                ),
            ));
        }
        w.write_all(&bytes)?;
        w.pad_to(alignment)?;
    }
    w.flush()?;
    Ok(())
}

struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    pos: &'a mut u64,
}

impl<W: Write> CountingWriter<'_, W> {
    fn pad_to(&mut self, alignment: u64) -> std::io::Result<()> {
        let pad = self.pos.next_multiple_of(alignment) - *self.pos;
        self.write_all(&vec![0u8; pad as usize])
    }
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        *self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

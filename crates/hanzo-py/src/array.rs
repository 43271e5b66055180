//! NumPy arrays and tensors, both ways without a copy, through NumPy's array interface
//! (`__array_interface__`): plain Python attributes, so this works under the stable ABI and
//! needs no NumPy headers at build time.
//!
//! - NumPy → tensor: a C-contiguous, aligned, little-endian array of a supported dtype is
//!   viewed in place; the tensor keeps the array alive, and writes to the array are seen by
//!   the tensor. Anything else is copied first (`numpy.ascontiguousarray` / `astype`).
//! - Tensor → NumPy: the array views the tensor's memory with the tensor's strides, read-only
//!   (tensors are immutable); bfloat16 and float8 tensors, which NumPy has no type for, come
//!   back as float32 copies.

use crate::errors;
use hanzo_ml::cpu::{Blob, Buf};
use hanzo_ml::{CpuStorage, DType, Storage, Tensor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::Arc;

/// The dtypes a tensor shares with NumPy, by NumPy's name.
pub const NUMPY_DTYPES: [(DType, &str); 6] = [
    (DType::F32, "float32"),
    (DType::F16, "float16"),
    (DType::F64, "float64"),
    (DType::I64, "int64"),
    (DType::U32, "uint32"),
    (DType::U8, "uint8"),
];

/// A dtype's name in Python (NumPy's, and "bfloat16" / "float8_e4m3fn" for the others).
pub fn dtype_name(dt: DType) -> &'static str {
    match dt {
        DType::BF16 => "bfloat16",
        DType::F8E4M3 => "float8_e4m3fn",
        _ => NUMPY_DTYPES
            .iter()
            .find(|(d, _)| *d == dt)
            .map(|(_, n)| *n)
            .unwrap_or("unknown"),
    }
}

/// The dtype named `name` (NumPy's names, "bfloat16", "float8_e4m3fn").
pub fn dtype_from_name(name: &str) -> PyResult<DType> {
    match name {
        "bfloat16" => return Ok(DType::BF16),
        "float8_e4m3fn" => return Ok(DType::F8E4M3),
        _ => {}
    }
    NUMPY_DTYPES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(d, _)| *d)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "dtype {name} is not supported: use float32, float16, bfloat16, float64, int64, \
                 uint32 or uint8"
            ))
        })
}

/// The array interface's type string of a dtype NumPy has (little-endian).
fn typestr(dt: DType) -> Option<&'static str> {
    Some(match dt {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::U32 => "<u4",
        DType::U8 => "|u1",
        _ => return None,
    })
}

/// A tensor viewing `array` (any object NumPy turns into an array) without a copy where the
/// array allows it.
pub fn tensor_from_numpy(array: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let py = array.py();
    let np = py.import("numpy")?;
    let mut arr = np.call_method1("asarray", (array,))?;
    let name: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
    let dtype = dtype_from_name(&name).map_err(|_| {
        PyValueError::new_err(format!(
            "NumPy dtype {name} is not supported: use float32, float16, float64, int64, uint32 \
             or uint8 (convert with .astype)"
        ))
    })?;
    let flags = arr.getattr("flags")?;
    let in_place = flags.getattr("c_contiguous")?.extract::<bool>()?
        && flags.getattr("aligned")?.extract::<bool>()?
        && arr
            .getattr("dtype")?
            .getattr("isnative")?
            .extract::<bool>()?;
    if !in_place {
        // Copies into native byte order, C order, aligned.
        arr = np.call_method1("ascontiguousarray", (arr, name.as_str()))?;
    }
    let iface = arr.getattr("__array_interface__")?;
    let (ptr, _readonly): (usize, bool) = iface.get_item("data")?.extract()?;
    let shape: Vec<usize> = iface.get_item("shape")?.extract()?;
    let nbytes: usize = arr.getattr("nbytes")?.extract()?;
    let n: usize = shape.iter().product();
    let owner: Py<PyAny> = arr.unbind();
    // SAFETY: NumPy owns `nbytes` readable bytes at `ptr` (the array is C-contiguous, so they
    // are exactly its elements) for as long as the array lives, and the blob keeps the array.
    let blob = Arc::new(unsafe { Blob::from_external(ptr as *const u8, nbytes, Box::new(owner)) });
    let misaligned = || PyValueError::new_err("the array's data is not aligned for its dtype");
    let storage = match dtype {
        DType::F32 => CpuStorage::F32(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
        DType::F16 => CpuStorage::F16(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
        DType::F64 => CpuStorage::F64(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
        DType::I64 => CpuStorage::I64(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
        DType::U32 => CpuStorage::U32(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
        DType::U8 => CpuStorage::U8(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
        // ml_dtypes' bfloat16 and float8_e4m3fn arrays, where that package is installed.
        DType::BF16 => CpuStorage::BF16(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
        DType::F8E4M3 => CpuStorage::F8E4M3(Buf::mapped(blob, 0, n).ok_or_else(misaligned)?),
    };
    Tensor::from_cpu_storage(storage, shape).map_err(errors::ml)
}

/// The address of a tensor's first element.
fn data_ptr(t: &Tensor) -> usize {
    let Storage::Cpu(s) = t.storage();
    let base = match s {
        CpuStorage::U8(b) => b.as_ptr() as usize,
        CpuStorage::U32(b) => b.as_ptr() as usize,
        CpuStorage::I64(b) => b.as_ptr() as usize,
        CpuStorage::BF16(b) => b.as_ptr() as usize,
        CpuStorage::F16(b) => b.as_ptr() as usize,
        CpuStorage::F32(b) => b.as_ptr() as usize,
        CpuStorage::F64(b) => b.as_ptr() as usize,
        CpuStorage::F8E4M3(b) => b.as_ptr() as usize,
    };
    base + t.layout().start_offset() * t.dtype().size_in_bytes()
}

/// A tensor as NumPy sees it: the object a NumPy array made from a tensor keeps as its base,
/// holding the tensor's memory alive.
#[pyclass(module = "hanzo", frozen)]
pub struct ArrayView {
    tensor: Tensor,
}

#[pymethods]
impl ArrayView {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = &self.tensor;
        let size = t.dtype().size_in_bytes();
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item(
            "typestr",
            typestr(t.dtype()).expect("checked in `to_numpy`"),
        )?;
        d.set_item("shape", PyTuple::new(py, t.dims())?)?;
        let strides: Vec<usize> = t.layout().stride().iter().map(|s| s * size).collect();
        d.set_item("strides", PyTuple::new(py, strides)?)?;
        d.set_item("data", (data_ptr(t), true))?;
        Ok(d)
    }
}

/// A read-only NumPy array viewing `t` (a float32 copy for the dtypes NumPy lacks).
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let t = if typestr(t.dtype()).is_none() {
        t.to_dtype(DType::F32).map_err(errors::ml)?
    } else {
        t.clone()
    };
    let view = Py::new(py, ArrayView { tensor: t.detach() })?;
    py.import("numpy")?.call_method1("asarray", (view,))
}

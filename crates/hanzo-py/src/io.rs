//! Files: safetensors in and out, GGUF in (tensors and metadata).

use crate::errors;
use crate::tensor::PyTensor;
use hanzo_ml::quantized::gguf::{Array, GgufFile, Value};
use hanzo_ml::Tensor;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;
use std::path::PathBuf;

/// `load_safetensors(path) -> dict[str, Tensor]`: the tensors view the file's memory map.
#[pyfunction]
pub fn load_safetensors<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    errors::must_exist(&path)?;
    let tensors = py
        .detach(|| hanzo_ml::io::safetensors::load(&path))
        .map_err(errors::ml)?;
    let mut names: Vec<_> = tensors.into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let d = PyDict::new(py);
    for (name, t) in names {
        d.set_item(name, PyTensor::new(t))?;
    }
    Ok(d)
}

/// `save_safetensors(tensors: dict[str, Tensor | ndarray], path)`.
#[pyfunction]
pub fn save_safetensors(
    py: Python<'_>,
    tensors: &Bound<'_, PyDict>,
    path: PathBuf,
) -> PyResult<()> {
    let mut all: Vec<(String, Tensor)> = Vec::with_capacity(tensors.len());
    for (k, v) in tensors.iter() {
        let name: String = k
            .extract()
            .map_err(|_| PyValueError::new_err("tensor names must be strings"))?;
        all.push((name, crate::tensor::tensor_from_any(&v, None)?));
    }
    py.detach(|| hanzo_ml::io::safetensors::save(all.iter().map(|(n, t)| (n, t)), &path))
        .map_err(errors::ml)
}

/// `load_gguf(path) -> (dict[str, Tensor], dict[str, value])`: every tensor as float32
/// (quantized ones dequantized), and the metadata as Python values.
#[pyfunction]
pub fn load_gguf<'py>(
    py: Python<'py>,
    path: PathBuf,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    errors::must_exist(&path)?;
    let file = py.detach(|| GgufFile::open(&path)).map_err(errors::ml)?;
    let tensors = PyDict::new(py);
    for info in file.tensor_infos() {
        let t = py
            .detach(|| file.tensor(&info.name).and_then(|q| q.dequantize()))
            .map_err(errors::ml)?;
        tensors.set_item(&info.name, PyTensor::new(t))?;
    }
    let meta = PyDict::new(py);
    for (k, v) in file.metadata() {
        meta.set_item(k, value(py, v)?)?;
    }
    Ok((tensors, meta))
}

fn value<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::U8(x) => x.into_bound_py_any(py),
        Value::I8(x) => x.into_bound_py_any(py),
        Value::U16(x) => x.into_bound_py_any(py),
        Value::I16(x) => x.into_bound_py_any(py),
        Value::U32(x) => x.into_bound_py_any(py),
        Value::I32(x) => x.into_bound_py_any(py),
        Value::U64(x) => x.into_bound_py_any(py),
        Value::I64(x) => x.into_bound_py_any(py),
        Value::F32(x) => x.into_bound_py_any(py),
        Value::F64(x) => x.into_bound_py_any(py),
        Value::Bool(x) => x.into_bound_py_any(py),
        Value::String(x) => x.into_bound_py_any(py),
        Value::Array(a) => array(py, a),
    }
}

fn array<'py>(py: Python<'py>, a: &Array) -> PyResult<Bound<'py, PyAny>> {
    Ok(match a {
        Array::U8(x) => PyList::new(py, x)?.into_any(),
        Array::I8(x) => PyList::new(py, x)?.into_any(),
        Array::U16(x) => PyList::new(py, x)?.into_any(),
        Array::I16(x) => PyList::new(py, x)?.into_any(),
        Array::U32(x) => PyList::new(py, x)?.into_any(),
        Array::I32(x) => PyList::new(py, x)?.into_any(),
        Array::U64(x) => PyList::new(py, x)?.into_any(),
        Array::I64(x) => PyList::new(py, x)?.into_any(),
        Array::F32(x) => PyList::new(py, x)?.into_any(),
        Array::F64(x) => PyList::new(py, x)?.into_any(),
        Array::Bool(x) => PyList::new(py, x)?.into_any(),
        Array::String(x) => PyList::new(py, x)?.into_any(),
        Array::Array(x) => {
            let items = x
                .iter()
                .map(|a| array(py, a))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
    })
}

//! `hanzo.Tensor`: n-dimensional arrays on the CPU with NumPy-style broadcasting and
//! operators, sharing memory with NumPy (see `array.rs`), and reverse-mode autograd
//! (`requires_grad`, `backward()`, `.grad`, gradients accumulating as in PyTorch).

use crate::array::{self, dtype_from_name, dtype_name};
use crate::errors;
use hanzo_ml::{Device, Tensor, TensorId};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// The gradients of the leaf tensors Python holds (`requires_grad=True`), by tensor id: how
/// many Python objects wrap the leaf, and its accumulated gradient.
static LEAVES: LazyLock<Mutex<Leaves>> = LazyLock::new(Default::default);

type Leaves = HashMap<TensorId, (usize, Option<Tensor>)>;

fn leaves() -> std::sync::MutexGuard<'static, Leaves> {
    LEAVES.lock().unwrap_or_else(|e| e.into_inner())
}

#[pyclass(name = "Tensor", module = "hanzo")]
pub struct PyTensor {
    pub t: Tensor,
}

impl PyTensor {
    /// Wraps `t`, counting it among the leaves when it is one.
    pub fn new(t: Tensor) -> Self {
        if t.is_variable() {
            leaves().entry(t.id()).or_insert((0, None)).0 += 1;
        }
        PyTensor { t }
    }
}

impl Drop for PyTensor {
    fn drop(&mut self) {
        if self.t.is_variable() {
            let mut l = leaves();
            if let Some(e) = l.get_mut(&self.t.id()) {
                e.0 -= 1;
                if e.0 == 0 {
                    l.remove(&self.t.id());
                }
            }
        }
    }
}

fn wrap(r: hanzo_ml::Result<Tensor>) -> PyResult<PyTensor> {
    r.map(PyTensor::new).map_err(errors::ml)
}

/// A tensor from Python data: a `Tensor`, a NumPy array (viewed in place when it can be), or
/// anything `numpy.asarray` takes (Python floats become float32, as in PyTorch).
pub fn tensor_from_any(data: &Bound<'_, PyAny>, dtype: Option<&str>) -> PyResult<Tensor> {
    let py = data.py();
    let t = if let Ok(t) = data.cast::<PyTensor>() {
        t.borrow().t.clone()
    } else {
        let np = py.import("numpy")?;
        let is_array = data.is_instance(&np.getattr("ndarray")?)?;
        let mut arr = np.call_method1("asarray", (data,))?;
        let kind: String = arr.getattr("dtype")?.getattr("kind")?.extract()?;
        if dtype.is_none() && !is_array && kind == "f" {
            arr = arr.call_method1("astype", ("float32",))?;
        }
        if dtype.is_none() && !is_array && kind == "b" {
            arr = arr.call_method1("astype", ("uint8",))?;
        }
        array::tensor_from_numpy(&arr)?
    };
    match dtype {
        Some(name) => {
            let dt = dtype_from_name(name)?;
            if dt == t.dtype() {
                Ok(t)
            } else {
                t.to_dtype(dt).map_err(errors::ml)
            }
        }
        None => Ok(t),
    }
}

/// The right operand of an arithmetic operator: a tensor, or a Python number.
enum Operand {
    Tensor(Tensor),
    Scalar(f64),
}

fn operand(other: &Bound<'_, PyAny>, like: &Tensor) -> PyResult<Operand> {
    if let Ok(t) = other.cast::<PyTensor>() {
        return Ok(Operand::Tensor(t.borrow().t.clone()));
    }
    if let Ok(x) = other.extract::<f64>() {
        return Ok(Operand::Scalar(x));
    }
    Ok(Operand::Tensor(tensor_from_any(
        other,
        Some(dtype_name(like.dtype())),
    )?))
}

/// `dim` of a tensor of `rank` dims (negative counts from the end).
fn dim_index(dim: isize, rank: usize) -> PyResult<usize> {
    let d = if dim < 0 { dim + rank as isize } else { dim };
    if d < 0 || d as usize >= rank {
        return Err(PyIndexError::new_err(format!(
            "dimension {dim} is out of range for a tensor of {rank} dimensions"
        )));
    }
    Ok(d as usize)
}

/// The shape given as `reshape(2, 3)` or `reshape((2, 3))`; -1 once for the inferred size.
fn shape_arg(args: &Bound<'_, PyTuple>, count: usize) -> PyResult<Vec<usize>> {
    let dims: Vec<isize> = if args.len() == 1 && args.get_item(0)?.extract::<isize>().is_err() {
        args.get_item(0)?.extract()?
    } else {
        args.extract()?
    };
    let known: usize = dims
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    let inferred = dims.iter().filter(|&&d| d < 0).count();
    if inferred > 1 || dims.iter().any(|&d| d < -1) {
        return Err(PyValueError::new_err(format!("invalid shape {dims:?}")));
    }
    Ok(dims
        .iter()
        .map(|&d| {
            if d < 0 {
                count.checked_div(known).unwrap_or(0)
            } else {
                d as usize
            }
        })
        .collect())
}

#[pymethods]
impl PyTensor {
    /// `Tensor(data, dtype=None, requires_grad=False)`: `data` is a NumPy array (viewed in
    /// place when C-contiguous and of a supported dtype), a nested list, a number, or a tensor.
    #[new]
    #[pyo3(signature = (data, dtype=None, requires_grad=false))]
    fn py_new(data: &Bound<'_, PyAny>, dtype: Option<&str>, requires_grad: bool) -> PyResult<Self> {
        let t = tensor_from_any(data, dtype)?;
        Ok(PyTensor::new(if requires_grad { t.variable() } else { t }))
    }

    /// The tensor viewing a NumPy array in place (a copy where the array is not C-contiguous,
    /// aligned and native-endian): writes to the array are seen by the tensor.
    #[staticmethod]
    fn from_numpy(array: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyTensor::new(array::tensor_from_numpy(array)?))
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.dims())
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.t.rank()
    }
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.t.dtype())
    }
    #[getter]
    fn device(&self) -> &'static str {
        "cpu"
    }
    fn is_contiguous(&self) -> bool {
        self.t.is_contiguous()
    }
    fn __len__(&self) -> PyResult<usize> {
        self.t
            .dims()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d tensor"))
    }
    fn __repr__(&self) -> String {
        format!("{}", self.t)
    }

    /// A read-only NumPy array viewing this tensor (bfloat16 / float8: a float32 copy).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        array::to_numpy(py, &self.t)
    }
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut a = array::to_numpy(py, &self.t)?;
        if let Some(dt) = dtype {
            a = a.call_method1("astype", (dt,))?;
        } else if copy == Some(true) {
            a = a.call_method0("copy")?;
        }
        Ok(a)
    }
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.numpy(py)?.call_method0("tolist")
    }
    /// The value of a one-element tensor as a Python number.
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.t.elem_count() != 1 {
            return Err(PyValueError::new_err(format!(
                "item() needs a tensor of one element, this one has shape {:?}",
                self.t.dims()
            )));
        }
        self.numpy(py)?.call_method0("item")
    }

    // Autograd.
    #[getter]
    fn requires_grad(&self) -> bool {
        self.t.track_op()
    }
    #[setter]
    fn set_requires_grad(&mut self, on: bool) -> PyResult<()> {
        if on == self.t.is_variable() {
            return Ok(());
        }
        if on && self.t.track_op() {
            return Err(PyValueError::new_err(
                "only a leaf tensor can be made to require gradients (use .detach() first)",
            ));
        }
        let next = if on {
            self.t.variable()
        } else {
            self.t.detach()
        };
        *self = PyTensor::new(next);
        Ok(())
    }
    /// The gradient accumulated by `backward()` calls (None before the first).
    #[getter]
    fn grad(&self) -> Option<PyTensor> {
        leaves()
            .get(&self.t.id())
            .and_then(|e| e.1.clone())
            .map(PyTensor::new)
    }
    #[setter]
    fn set_grad(&self, g: Option<PyRef<'_, PyTensor>>) {
        if let Some(e) = leaves().get_mut(&self.t.id()) {
            e.1 = g.map(|g| g.t.clone());
        }
    }
    /// Computes the gradients of this tensor (usually a scalar loss) with respect to every
    /// leaf with `requires_grad`, adding them to the leaves' `.grad`.
    fn backward(&self, py: Python<'_>) -> PyResult<()> {
        let t = self.t.clone();
        let grads = py.detach(move || t.backward()).map_err(errors::ml)?;
        let mut l = leaves();
        for (id, (_, slot)) in l.iter_mut() {
            if let Some(g) = grads.get_id(*id) {
                let g = g.detach();
                *slot = Some(match slot.take() {
                    Some(old) => (&old + &g).map_err(errors::ml)?,
                    None => g,
                });
            }
        }
        Ok(())
    }
    /// The same values, without a gradient history.
    fn detach(&self) -> PyTensor {
        PyTensor::new(self.t.detach())
    }

    // Shapes and types.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let dims = shape_arg(shape, self.t.elem_count())?;
        wrap(self.t.reshape(dims))
    }
    #[pyo3(signature = (dim0=-2, dim1=-1))]
    fn transpose(&self, dim0: isize, dim1: isize) -> PyResult<PyTensor> {
        let r = self.t.rank();
        if r < 2 {
            return Ok(PyTensor::new(self.t.clone()));
        }
        wrap(self.t.transpose(dim_index(dim0, r)?, dim_index(dim1, r)?))
    }
    #[getter(T)]
    fn t_(&self) -> PyResult<PyTensor> {
        let dims: Vec<usize> = (0..self.t.rank()).rev().collect();
        wrap(self.t.permute(&dims))
    }
    #[pyo3(signature = (*dims))]
    fn permute(&self, dims: Vec<isize>) -> PyResult<PyTensor> {
        let r = self.t.rank();
        let dims = dims
            .into_iter()
            .map(|d| dim_index(d, r))
            .collect::<PyResult<Vec<_>>>()?;
        wrap(self.t.permute(&dims))
    }
    fn unsqueeze(&self, dim: isize) -> PyResult<PyTensor> {
        wrap(self.t.unsqueeze(dim_index(dim, self.t.rank() + 1)?))
    }
    fn squeeze(&self, dim: isize) -> PyResult<PyTensor> {
        wrap(self.t.squeeze(dim_index(dim, self.t.rank())?))
    }
    fn flatten(&self) -> PyResult<PyTensor> {
        wrap(self.t.flatten_all())
    }
    fn contiguous(&self) -> PyResult<PyTensor> {
        wrap(self.t.contiguous())
    }
    /// A copy in another dtype (`"float32"`, `"bfloat16"`, ...).
    fn to(&self, dtype: &str) -> PyResult<PyTensor> {
        wrap(self.t.to_dtype(dtype_from_name(dtype)?))
    }
    fn astype(&self, dtype: &str) -> PyResult<PyTensor> {
        self.to(dtype)
    }

    // Reductions: over every element when `dim` is None.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn sum(&self, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.reduce(dim, keepdim, |t, d| t.sum_keepdim(d))
    }
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn mean(&self, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.reduce(dim, keepdim, |t, d| t.mean_keepdim(d))
    }
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn max(&self, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.reduce(dim, keepdim, |t, d| t.max_keepdim(d))
    }
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn min(&self, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.reduce(dim, keepdim, |t, d| t.min_keepdim(d))
    }
    #[pyo3(signature = (dim=-1))]
    fn softmax(&self, dim: isize) -> PyResult<PyTensor> {
        wrap(self.t.softmax(dim_index(dim, self.t.rank())?))
    }

    // Elementwise functions.
    fn exp(&self) -> PyResult<PyTensor> {
        wrap(self.t.exp())
    }
    fn log(&self) -> PyResult<PyTensor> {
        wrap(self.t.log())
    }
    fn sqrt(&self) -> PyResult<PyTensor> {
        wrap(self.t.sqrt())
    }
    fn tanh(&self) -> PyResult<PyTensor> {
        wrap(self.t.tanh())
    }
    fn sin(&self) -> PyResult<PyTensor> {
        wrap(self.t.sin())
    }
    fn cos(&self) -> PyResult<PyTensor> {
        wrap(self.t.cos())
    }
    fn abs(&self) -> PyResult<PyTensor> {
        wrap(self.t.abs())
    }
    fn sigmoid(&self) -> PyResult<PyTensor> {
        wrap(self.t.sigmoid())
    }
    fn relu(&self) -> PyResult<PyTensor> {
        wrap(self.t.relu())
    }
    fn silu(&self) -> PyResult<PyTensor> {
        wrap(self.t.silu())
    }
    /// GELU, tanh approximation (`approximate="none"`: the exact erf form).
    #[pyo3(signature = (approximate="tanh"))]
    fn gelu(&self, approximate: &str) -> PyResult<PyTensor> {
        match approximate {
            "tanh" => wrap(self.t.gelu()),
            "none" => wrap(self.t.gelu_erf()),
            a => Err(PyValueError::new_err(format!(
                "approximate must be \"tanh\" or \"none\", not {a:?}"
            ))),
        }
    }

    // Operators, NumPy-style broadcasting.
    fn __add__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(o, Tensor::broadcast_add, |t, s| t.affine(1.0, s))
    }
    fn __radd__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__add__(o)
    }
    fn __sub__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(o, Tensor::broadcast_sub, |t, s| t.affine(1.0, -s))
    }
    fn __rsub__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(o, |a, b| b.broadcast_sub(a), |t, s| t.affine(-1.0, s))
    }
    fn __mul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(o, Tensor::broadcast_mul, |t, s| t.affine(s, 0.0))
    }
    fn __rmul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__mul__(o)
    }
    fn __truediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(o, Tensor::broadcast_div, |t, s| t.affine(1.0 / s, 0.0))
    }
    fn __rtruediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.binary(
            o,
            |a, b| b.broadcast_div(a),
            |t, s| t.recip()?.affine(s, 0.0),
        )
    }
    fn __pow__(
        &self,
        o: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.binary(o, Tensor::broadcast_pow, |t, s| t.powf(s))
    }
    fn __neg__(&self) -> PyResult<PyTensor> {
        wrap(self.t.neg())
    }
    /// Matrix product with NumPy's rules (1-d operands, broadcast batch dims); the GIL is
    /// released while it runs.
    fn __matmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let b = tensor_from_any(o, None)?;
        let a = self.t.clone();
        wrap(py.detach(move || a.matmul(&b)))
    }
    fn __rmatmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = tensor_from_any(o, None)?;
        let b = self.t.clone();
        wrap(py.detach(move || a.matmul(&b)))
    }
    fn matmul(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__matmul__(py, o)
    }

    /// Integers, slices (any step) and `None`/`...`-free tuples of them, as NumPy.
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let keys: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        if keys.len() > self.t.rank() {
            return Err(PyIndexError::new_err(format!(
                "too many indices ({}) for a tensor of {} dimensions",
                keys.len(),
                self.t.rank()
            )));
        }
        let mut t = self.t.clone();
        let mut dim = 0;
        for k in keys {
            let n = t.dims()[dim];
            if let Ok(i) = k.extract::<isize>() {
                let j = if i < 0 { i + n as isize } else { i };
                if j < 0 || j as usize >= n {
                    return Err(PyIndexError::new_err(format!(
                        "index {i} is out of bounds for dimension {dim} of size {n}"
                    )));
                }
                t = t
                    .narrow(dim, j as usize, 1)
                    .and_then(|t| t.squeeze(dim))
                    .map_err(errors::ml)?;
            } else if let Ok(s) = k.cast::<PySlice>() {
                let ind = s.indices(n as isize)?;
                if ind.step == 1 {
                    let len = ind.slicelength;
                    t = t
                        .narrow(dim, ind.start.max(0) as usize, len)
                        .map_err(errors::ml)?;
                } else {
                    let ids: Vec<u32> = (0..ind.slicelength)
                        .map(|i| (ind.start + i as isize * ind.step) as u32)
                        .collect();
                    let ids =
                        Tensor::from_vec(ids, ind.slicelength, &Device::Cpu).map_err(errors::ml)?;
                    t = t.index_select(&ids, dim).map_err(errors::ml)?;
                }
                dim += 1;
            } else {
                return Err(PyTypeError::new_err(
                    "tensor indices must be integers, slices or tuples of them",
                ));
            }
        }
        Ok(PyTensor::new(t))
    }
}

impl PyTensor {
    fn reduce(
        &self,
        dim: Option<isize>,
        keepdim: bool,
        f: fn(&Tensor, usize) -> hanzo_ml::Result<Tensor>,
    ) -> PyResult<PyTensor> {
        match dim {
            None => {
                let flat = self.t.flatten_all().map_err(errors::ml)?;
                let r = if flat.elem_count() == 0 {
                    return Err(PyValueError::new_err("reduction of an empty tensor"));
                } else {
                    f(&flat, 0).and_then(|r| r.squeeze(0))
                };
                let r = r.map_err(errors::ml)?;
                if keepdim {
                    let ones = vec![1usize; self.t.rank()];
                    wrap(r.reshape(ones))
                } else {
                    Ok(PyTensor::new(r))
                }
            }
            Some(d) => {
                let d = dim_index(d, self.t.rank())?;
                let r = f(&self.t, d).map_err(errors::ml)?;
                if keepdim {
                    Ok(PyTensor::new(r))
                } else {
                    wrap(r.squeeze(d))
                }
            }
        }
    }

    fn binary(
        &self,
        o: &Bound<'_, PyAny>,
        tensor_op: impl FnOnce(&Tensor, &Tensor) -> hanzo_ml::Result<Tensor>,
        scalar_op: impl FnOnce(&Tensor, f64) -> hanzo_ml::Result<Tensor>,
    ) -> PyResult<PyTensor> {
        match operand(o, &self.t)? {
            Operand::Tensor(b) => wrap(tensor_op(&self.t, &b)),
            Operand::Scalar(s) => wrap(scalar_op(&self.t, s)),
        }
    }
}

/// `zeros(shape, dtype="float32")`.
#[pyfunction]
#[pyo3(signature = (*shape, dtype="float32"))]
pub fn zeros(shape: &Bound<'_, PyTuple>, dtype: &str) -> PyResult<PyTensor> {
    let dims = shape_arg(shape, 0)?;
    wrap(Tensor::zeros(dims, dtype_from_name(dtype)?, &Device::Cpu))
}

/// `ones(shape, dtype="float32")`.
#[pyfunction]
#[pyo3(signature = (*shape, dtype="float32"))]
pub fn ones(shape: &Bound<'_, PyTuple>, dtype: &str) -> PyResult<PyTensor> {
    let dims = shape_arg(shape, 0)?;
    wrap(Tensor::ones(dims, dtype_from_name(dtype)?, &Device::Cpu))
}

/// `tensor(data, dtype=None, requires_grad=False)`, as the `Tensor` constructor.
#[pyfunction]
#[pyo3(signature = (data, dtype=None, requires_grad=false))]
pub fn tensor(
    data: &Bound<'_, PyAny>,
    dtype: Option<&str>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    PyTensor::py_new(data, dtype, requires_grad)
}

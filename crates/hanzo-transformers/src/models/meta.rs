//! Typed access to a GGUF model's `{arch}.*` hyper-parameters and its tensors, with errors
//! that name the missing key or tensor.

use crate::{Error, Result};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use hanzo_ml::quantized::{QMatMul, QTensor};
use hanzo_ml::Tensor;
use std::sync::Arc;

pub struct Gguf<'a> {
    pub file: &'a GgufFile,
    pub arch: String,
}

impl<'a> Gguf<'a> {
    pub fn new(file: &'a GgufFile) -> Result<Self> {
        let arch = file
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::model("gguf", "no general.architecture"))?
            .to_string();
        Ok(Self { file, arch })
    }

    fn value(&self, key: &str) -> Option<&Value> {
        self.file.get(&format!("{}.{key}", self.arch))
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?
            .ok_or_else(|| Error::model("gguf", format!("missing {}.{key}", self.arch)))
    }

    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.value(key) {
            None => Ok(None),
            // Some files store per-layer arrays (e.g. head counts); all equal here.
            Some(Value::Array(a)) => {
                let v = a.to_i64s().unwrap_or_default();
                match v.first() {
                    Some(&x) if v.iter().all(|&y| y == x) && x >= 0 => Ok(Some(x as usize)),
                    _ => Err(Error::model(
                        "gguf",
                        format!("{}.{key}: per-layer values are not supported", self.arch),
                    )),
                }
            }
            Some(v) => v
                .to_usize()
                .map(Some)
                .ok_or_else(|| Error::model("gguf", format!("{}.{key} is not a count", self.arch))),
        }
    }

    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.value(key) {
            None => Ok(default),
            Some(v) => v.to_f64().ok_or_else(|| {
                Error::model("gguf", format!("{}.{key} is not a number", self.arch))
            }),
        }
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.file.content().tensor_info(name).is_some()
    }

    pub fn qtensor(&self, name: &str) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(Error::model("gguf", format!("missing tensor {name}")));
        }
        Ok(self.file.tensor(name)?)
    }

    /// A weight `[out, in]`, checked against the expected shape.
    pub fn matmul(&self, name: &str, out_dim: usize, in_dim: usize) -> Result<QMatMul> {
        let q = self.qtensor(name)?;
        if q.shape().dims() != [out_dim, in_dim] {
            return Err(Error::model(
                "gguf",
                format!(
                    "tensor {name} has shape {:?}, expected [{out_dim}, {in_dim}]",
                    q.shape().dims()
                ),
            ));
        }
        Ok(QMatMul::from_arc(Arc::new(q))?)
    }

    /// A small dense tensor (norm weights, biases) as f32, checked against `len`.
    pub fn vector(&self, name: &str, len: usize) -> Result<Tensor> {
        let q = self.qtensor(name)?;
        if q.elem_count() != len {
            return Err(Error::model(
                "gguf",
                format!(
                    "tensor {name} has shape {:?}, expected [{len}]",
                    q.shape().dims()
                ),
            ));
        }
        Ok(q.dequantize()?.reshape(len)?)
    }

    pub fn opt_vector(&self, name: &str, len: usize) -> Result<Option<Tensor>> {
        if self.has_tensor(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }
}

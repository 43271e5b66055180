//! Fully connected layers: dense (`y = x W^T + b`) and quantized (`QMatMul`).

use crate::{Init, Module, Param, VarBuilder};
use hanzo_ml::quantized::{GgmlDType, QMatMul, QTensor};
use hanzo_ml::{Result, Tensor};

/// `y = x W^T + b` with `W: [out, in]` (PyTorch's layout), `x: [..., in]`.
#[derive(Clone, Debug)]
pub struct Linear {
    weight: Param,
    bias: Option<Param>,
}

impl Linear {
    pub fn new(weight: impl Into<Param>, bias: Option<Param>) -> Self {
        Self {
            weight: weight.into(),
            bias,
        }
    }

    /// Weights `weight` and, when `bias`, `bias` under `vb`; trainable ones start like
    /// PyTorch's (Kaiming-uniform weight, bias uniform in ±1/sqrt(in)).
    pub fn load(in_dim: usize, out_dim: usize, bias: bool, vb: &VarBuilder) -> Result<Self> {
        let weight = vb.get((out_dim, in_dim), "weight")?;
        let bias = if bias {
            let b = 1.0 / (in_dim.max(1) as f64).sqrt();
            Some(vb.get_with_init(out_dim, "bias", Init::Uniform { lo: -b, hi: b })?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    pub fn weight(&self) -> Tensor {
        self.weight.get()
    }

    pub fn bias(&self) -> Option<Tensor> {
        self.bias.as_ref().map(Param::get)
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.get();
        let y = match x.rank() {
            // [b, t, in] x [in, out]: fold the batch into rows so gemm sees one big matrix.
            3 => {
                let (b, t, i) = x.dims3()?;
                x.reshape((b * t, i))?
                    .matmul(&w.t()?)?
                    .reshape((b, t, w.dims()[0]))?
            }
            _ => x.matmul(&w.t()?)?,
        };
        match &self.bias {
            Some(b) => y.add(&b.get()),
            None => Ok(y),
        }
    }
}

/// A linear layer over quantized weights: f32 activations times raw ggml blocks.
#[derive(Clone)]
pub struct QLinear {
    weight: QMatMul,
    bias: Option<Tensor>,
}

impl QLinear {
    pub fn new(weight: QMatMul, bias: Option<Tensor>) -> Self {
        Self { weight, bias }
    }

    /// From a GGUF-backed builder: `weight` as stored (any block type), `bias` if present.
    /// From other stores the dense weight is quantized to `isq` at load (ISQ).
    pub fn load(in_dim: usize, out_dim: usize, isq: GgmlDType, vb: &VarBuilder) -> Result<Self> {
        let q = match vb.qtensor("weight")? {
            Some(q) => q,
            None => {
                let w = vb.get((out_dim, in_dim), "weight")?.get();
                hanzo_ml::quantized::isq::quantize_weight(&w, isq)?
            }
        };
        if q.shape().dims() != [out_dim, in_dim] {
            return Err(hanzo_ml::Error::Custom {
                op: "QLinear".into(),
                msg: format!(
                    "{}: expected shape [{out_dim}, {in_dim}], stored shape {:?}",
                    vb.full_name("weight"),
                    q.shape().dims()
                ),
            });
        }
        let bias = if vb.contains("bias") {
            Some(vb.get_any("bias")?)
        } else {
            None
        };
        Ok(Self {
            weight: QMatMul::from_qtensor(q)?,
            bias,
        })
    }

    pub fn from_qtensor(q: QTensor, bias: Option<Tensor>) -> Result<Self> {
        Ok(Self::new(QMatMul::from_qtensor(q)?, bias))
    }

    /// (out, in).
    pub fn dims(&self) -> (usize, usize) {
        self.weight.weight_dims()
    }
}

impl Module for QLinear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.weight.forward(x)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}

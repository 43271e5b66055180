//! Activation functions as a module (so model configs can name them) and dropout.

use crate::{Module, ModuleT};
use hanzo_ml::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Relu,
    /// GELU with the exact erf (`gelu` in PyTorch, BERT's `gelu`).
    GeluErf,
    /// GELU with the tanh approximation (`gelu_pytorch_tanh`, GPT-2, Gemma).
    GeluTanh,
    Silu,
    Sigmoid,
    Tanh,
    /// `log(1 + e^x)`, computed without overflow.
    Softplus,
    LeakyRelu(f64),
    Elu(f64),
    Identity,
}

impl Activation {
    /// The Hugging Face `hidden_act` / `hidden_activation` names.
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name {
            "relu" => Activation::Relu,
            "gelu" | "gelu_new_erf" => Activation::GeluErf,
            "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" | "gelu_tanh" => Activation::GeluTanh,
            "silu" | "swish" => Activation::Silu,
            "sigmoid" => Activation::Sigmoid,
            "tanh" => Activation::Tanh,
            "softplus" => Activation::Softplus,
            "identity" | "linear" => Activation::Identity,
            _ => {
                return Err(Error::invalid(
                    "Activation",
                    format!("unknown activation {name:?}"),
                ))
            }
        })
    }
}

impl Module for Activation {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match *self {
            Activation::Relu => x.relu(),
            Activation::GeluErf => x.gelu_erf(),
            Activation::GeluTanh => x.gelu(),
            Activation::Silu => x.silu(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Tanh => x.tanh(),
            // max(x, 0) + log(1 + e^-|x|)
            Activation::Softplus => x
                .relu()?
                .add(&x.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?),
            // max(x, 0) + a * min(x, 0)
            Activation::LeakyRelu(a) => x.relu()?.add(&x.neg()?.relu()?.affine(-a, 0.0)?),
            // x > 0 ? x : a (e^x - 1)
            Activation::Elu(a) => {
                let neg = x.neg()?.relu()?.neg()?; // min(x, 0)
                x.relu()?.add(&neg.exp()?.add_scalar(-1.0)?.affine(a, 0.0)?)
            }
            Activation::Identity => Ok(x.clone()),
        }
    }
}

/// Zeroes each element with probability `p` during training and scales the rest by
/// `1 / (1 - p)`; the identity at inference.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    p: f64,
}

impl Dropout {
    pub fn new(p: f64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::invalid(
                "Dropout",
                format!("p must be in [0, 1), got {p}"),
            ));
        }
        Ok(Self { p })
    }
}

impl ModuleT for Dropout {
    fn forward_t(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        if !train || self.p == 0.0 {
            return Ok(x.clone());
        }
        let u = Tensor::rand(0.0, 1.0, x.shape().clone(), x.dtype(), &x.device())?;
        let keep = u.ge(&u.scalar_like(self.p)?)?.to_dtype(x.dtype())?;
        x.mul(&keep)?.affine(1.0 / (1.0 - self.p), 0.0)
    }
}

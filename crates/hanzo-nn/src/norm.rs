//! Normalisation layers. LayerNorm and RmsNorm use the core's fused kernels (with their
//! backward rules); GroupNorm and BatchNorm are composites.

use crate::{Init, Module, Param, VarBuilder};
use hanzo_ml::{Error, Result, Tensor};

/// `(x - mean) / sqrt(var + eps) * w + b` over the last dim.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    weight: Param,
    bias: Option<Param>,
    eps: f64,
}

impl LayerNorm {
    pub fn new(weight: impl Into<Param>, bias: Option<Param>, eps: f64) -> Self {
        Self {
            weight: weight.into(),
            bias,
            eps,
        }
    }

    /// `weight` (ones) and `bias` (zeros) of size `dim`.
    pub fn load(dim: usize, eps: f64, vb: &VarBuilder) -> Result<Self> {
        let weight = vb.get_with_init(dim, "weight", Init::Const(1.0))?;
        let bias = vb.get_with_init(dim, "bias", Init::Const(0.0))?;
        Ok(Self::new(weight, Some(bias), eps))
    }

    pub fn eps(&self) -> f64 {
        self.eps
    }

    pub fn weight(&self) -> Tensor {
        self.weight.get()
    }

    pub fn bias(&self) -> Option<Tensor> {
        self.bias.as_ref().map(Param::get)
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let b = self.bias.as_ref().map(Param::get);
        x.layer_norm(&self.weight.get(), b.as_ref(), self.eps)
    }
}

/// `x / sqrt(mean(x^2) + eps) * w` over the last dim.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    weight: Param,
    eps: f64,
}

impl RmsNorm {
    pub fn new(weight: impl Into<Param>, eps: f64) -> Self {
        Self {
            weight: weight.into(),
            eps,
        }
    }

    pub fn load(dim: usize, eps: f64, vb: &VarBuilder) -> Result<Self> {
        Ok(Self::new(
            vb.get_with_init(dim, "weight", Init::Const(1.0))?,
            eps,
        ))
    }

    pub fn weight(&self) -> Tensor {
        self.weight.get()
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.rms_norm(&self.weight.get(), self.eps)
    }
}

/// Normalises `[n, c, ...]` over groups of `c / groups` channels (and all spatial positions),
/// then scales and shifts per channel.
#[derive(Clone, Debug)]
pub struct GroupNorm {
    weight: Param,
    bias: Param,
    groups: usize,
    channels: usize,
    eps: f64,
}

impl GroupNorm {
    pub fn new(
        weight: impl Into<Param>,
        bias: impl Into<Param>,
        groups: usize,
        eps: f64,
    ) -> Result<Self> {
        let weight = weight.into();
        let channels = weight.get().dims1()?;
        if groups == 0 || channels % groups != 0 {
            return Err(Error::invalid(
                "GroupNorm",
                format!("{channels} channels cannot be split into {groups} groups"),
            ));
        }
        Ok(Self {
            weight,
            bias: bias.into(),
            groups,
            channels,
            eps,
        })
    }

    pub fn load(groups: usize, channels: usize, eps: f64, vb: &VarBuilder) -> Result<Self> {
        let w = vb.get_with_init(channels, "weight", Init::Const(1.0))?;
        let b = vb.get_with_init(channels, "bias", Init::Const(0.0))?;
        Self::new(w, b, groups, eps)
    }
}

/// Shape `[1, c, 1, ...]` for a per-channel vector against an `[n, c, ...]` input.
fn per_channel(v: &Tensor, rank: usize) -> Result<Tensor> {
    let mut dims = vec![1; rank];
    dims[1] = v.elem_count();
    v.reshape(dims)
}

impl Module for GroupNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        if dims.len() < 2 || dims[1] != self.channels {
            return Err(Error::invalid(
                "GroupNorm",
                format!("expected [n, {}, ...], got {dims:?}", self.channels),
            ));
        }
        let n = dims[0];
        let xg = x.reshape((n, self.groups, x.elem_count() / (n * self.groups).max(1)))?;
        let mean = xg.mean_keepdim(2)?;
        let centered = xg.sub(&mean)?;
        let var = centered.sqr()?.mean_keepdim(2)?;
        let normed = centered
            .div(&var.add_scalar(self.eps)?.sqrt()?)?
            .reshape(dims.clone())?;
        let w = per_channel(&self.weight.get(), dims.len())?;
        let b = per_channel(&self.bias.get(), dims.len())?;
        normed.mul(&w)?.add(&b)
    }
}

/// Batch normalisation with fixed running statistics (inference): per channel of `[n, c, ...]`,
/// `(x - running_mean) / sqrt(running_var + eps) * w + b`.
#[derive(Clone, Debug)]
pub struct BatchNorm {
    scale: Tensor,
    shift: Tensor,
}

impl BatchNorm {
    pub fn new(
        mean: &Tensor,
        var: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        eps: f64,
    ) -> Result<Self> {
        // Folded once: y = x * scale + shift.
        let scale = weight.div(&var.add_scalar(eps)?.sqrt()?)?;
        let shift = bias.sub(&mean.mul(&scale)?)?;
        Ok(Self { scale, shift })
    }

    /// PyTorch's names: `weight`, `bias`, `running_mean`, `running_var`.
    pub fn load(channels: usize, eps: f64, vb: &VarBuilder) -> Result<Self> {
        let get = |n: &str, v: f64| -> Result<Tensor> {
            Ok(vb
                .get_with_init(channels, n, Init::Const(v))?
                .get()
                .detach())
        };
        Self::new(
            &get("running_mean", 0.0)?,
            &get("running_var", 1.0)?,
            &get("weight", 1.0)?,
            &get("bias", 0.0)?,
            eps,
        )
    }
}

impl Module for BatchNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() < 2 || x.dims()[1] != self.scale.elem_count() {
            return Err(Error::invalid(
                "BatchNorm",
                format!(
                    "expected [n, {}, ...], got {:?}",
                    self.scale.elem_count(),
                    x.dims()
                ),
            ));
        }
        let s = per_channel(&self.scale.to_dtype(x.dtype())?, x.rank())?;
        let b = per_channel(&self.shift.to_dtype(x.dtype())?, x.rank())?;
        x.mul(&s)?.add(&b)
    }
}

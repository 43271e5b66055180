//! Convolution layers over the core's conv kernels (PyTorch weight layout and defaults).

use crate::{Init, Module, Param, VarBuilder};
use hanzo_ml::{Conv2dParams, Result, Tensor};

/// Padding, stride, dilation and groups, the same on every spatial dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvConfig {
    pub padding: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
}

impl Default for ConvConfig {
    fn default() -> Self {
        Self {
            padding: 0,
            stride: 1,
            dilation: 1,
            groups: 1,
        }
    }
}

fn load_conv(
    c_in: usize,
    c_out: usize,
    kernel: &[usize],
    cfg: ConvConfig,
    bias: bool,
    vb: &VarBuilder,
) -> Result<(Param, Option<Param>)> {
    let mut dims = vec![c_out, c_in / cfg.groups.max(1)];
    dims.extend_from_slice(kernel);
    let w = vb.get(dims, "weight")?;
    let b = if bias {
        let fan_in = (c_in / cfg.groups.max(1)) * kernel.iter().product::<usize>();
        let k = 1.0 / (fan_in.max(1) as f64).sqrt();
        Some(vb.get_with_init(c_out, "bias", Init::Uniform { lo: -k, hi: k })?)
    } else {
        None
    };
    Ok((w, b))
}

/// `[b, c_in, l]` -> `[b, c_out, l_out]`, weight `[c_out, c_in / groups, k]`.
#[derive(Clone, Debug)]
pub struct Conv1d {
    weight: Param,
    bias: Option<Param>,
    cfg: ConvConfig,
}

impl Conv1d {
    pub fn new(weight: impl Into<Param>, bias: Option<Param>, cfg: ConvConfig) -> Self {
        Self {
            weight: weight.into(),
            bias,
            cfg,
        }
    }

    pub fn load(
        c_in: usize,
        c_out: usize,
        k: usize,
        cfg: ConvConfig,
        bias: bool,
        vb: &VarBuilder,
    ) -> Result<Self> {
        let (weight, bias) = load_conv(c_in, c_out, &[k], cfg, bias, vb)?;
        Ok(Self { weight, bias, cfg })
    }
}

impl Module for Conv1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let c = self.cfg;
        let y = x.conv1d(
            &self.weight.get(),
            c.padding,
            c.stride,
            c.dilation,
            c.groups,
        )?;
        match &self.bias {
            Some(b) => {
                let n = b.get().elem_count();
                y.add(&b.get().reshape((1, n, 1))?)
            }
            None => Ok(y),
        }
    }
}

/// `[b, c_in, h, w]` -> `[b, c_out, h_out, w_out]`, weight `[c_out, c_in / groups, kh, kw]`.
#[derive(Clone, Debug)]
pub struct Conv2d {
    weight: Param,
    bias: Option<Param>,
    cfg: ConvConfig,
}

impl Conv2d {
    pub fn new(weight: impl Into<Param>, bias: Option<Param>, cfg: ConvConfig) -> Self {
        Self {
            weight: weight.into(),
            bias,
            cfg,
        }
    }

    pub fn load(
        c_in: usize,
        c_out: usize,
        k: usize,
        cfg: ConvConfig,
        bias: bool,
        vb: &VarBuilder,
    ) -> Result<Self> {
        let (weight, bias) = load_conv(c_in, c_out, &[k, k], cfg, bias, vb)?;
        Ok(Self { weight, bias, cfg })
    }
}

impl Module for Conv2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let c = self.cfg;
        let p = Conv2dParams::square(c.padding, c.stride, c.dilation, c.groups);
        let y = x.conv2d_with(&self.weight.get(), &p)?;
        match &self.bias {
            Some(b) => {
                let n = b.get().elem_count();
                y.add(&b.get().reshape((1, n, 1, 1))?)
            }
            None => Ok(y),
        }
    }
}

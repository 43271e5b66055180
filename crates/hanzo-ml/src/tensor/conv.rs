//! Convolutions, transposed convolutions, pooling and nearest upsampling, PyTorch semantics.
//!
//! Everything is built from differentiable primitives: padding (`pad_with_zeros`), unfolding
//! patches with one `index_select` over the flattened spatial dims (im2col), and a broadcast
//! batched matmul per group. Backward therefore needs no rules of its own: the gradient of
//! the unfold is `index_add` (col2im), of the pad a `narrow`, of the matmul two matmuls.
//! Transposed convolution is a convolution of the stride-dilated input with the spatially
//! flipped kernel, in/out channels swapped per group.

use super::Tensor;
use crate::{Error, Result};

/// Parameters of a 2-D convolution; pairs are (height, width).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dParams {
    pub padding: (usize, usize),
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
}

impl Conv2dParams {
    /// The same padding, stride and dilation on both spatial dims.
    pub fn square(padding: usize, stride: usize, dilation: usize, groups: usize) -> Self {
        Self {
            padding: (padding, padding),
            stride: (stride, stride),
            dilation: (dilation, dilation),
            groups,
        }
    }

    /// A 1-D convolution as a 2-D one over a height-1 image.
    fn along_width(padding: usize, stride: usize, dilation: usize, groups: usize) -> Self {
        Self {
            padding: (0, padding),
            stride: (1, stride),
            dilation: (1, dilation),
            groups,
        }
    }
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Self {
            padding: (0, 0),
            stride: (1, 1),
            dilation: (1, 1),
            groups: 1,
        }
    }
}

fn out_size(
    op: &'static str,
    input: usize,
    k: usize,
    pad: usize,
    stride: usize,
    dil: usize,
) -> Result<usize> {
    if stride == 0 || dil == 0 || k == 0 {
        crate::bail_invalid!(op, "stride, dilation and kernel size must be positive");
    }
    let span = dil * (k - 1) + 1;
    let padded = input + 2 * pad;
    if span > padded {
        crate::bail_invalid!(op, "kernel span {span} exceeds padded input {padded}");
    }
    Ok((padded - span) / stride + 1)
}

impl Tensor {
    /// Patches of `self` `[b, c, h, w]` (already padded): `[b, c, kh*kw, oh*ow]`.
    fn unfold2d(
        &self,
        k: (usize, usize),
        stride: (usize, usize),
        dil: (usize, usize),
        o: (usize, usize),
    ) -> Result<Tensor> {
        let (b, c, _, w) = self.dims4()?;
        let mut idx = Vec::with_capacity(k.0 * k.1 * o.0 * o.1);
        for ki in 0..k.0 {
            for kj in 0..k.1 {
                for oy in 0..o.0 {
                    for ox in 0..o.1 {
                        idx.push(
                            ((oy * stride.0 + ki * dil.0) * w + ox * stride.1 + kj * dil.1) as u32,
                        );
                    }
                }
            }
        }
        let n = idx.len();
        let ids = Tensor::from_vec(idx, n, &self.device())?;
        self.flatten(2, 3)?
            .index_select(&ids, 2)?
            .reshape((b, c, k.0 * k.1, o.0 * o.1))
    }

    /// 2-D convolution: `self` `[b, c_in, h, w]`, `kernel` `[c_out, c_in / groups, kh, kw]`.
    pub fn conv2d_with(&self, kernel: &Tensor, p: &Conv2dParams) -> Result<Tensor> {
        const OP: &str = "conv2d";
        let (b, c_in, h, w) = self.dims4()?;
        let (c_out, c_per_group, kh, kw) = kernel.dims4()?;
        let g = p.groups;
        if g == 0 || c_in % g != 0 || c_out % g != 0 || c_per_group * g != c_in {
            crate::bail_invalid!(
                OP,
                "{c_in} input and {c_out} output channels with kernel {:?} do not fit {g} groups",
                kernel.dims()
            );
        }
        let oh = out_size(OP, h, kh, p.padding.0, p.stride.0, p.dilation.0)?;
        let ow = out_size(OP, w, kw, p.padding.1, p.stride.1, p.dilation.1)?;
        let x = self
            .pad_with_zeros(2, p.padding.0, p.padding.0)?
            .pad_with_zeros(3, p.padding.1, p.padding.1)?;
        let cols = x
            .unfold2d((kh, kw), p.stride, p.dilation, (oh, ow))?
            .reshape((b, g, c_per_group * kh * kw, oh * ow))?;
        let k = kernel.reshape((g, c_out / g, c_per_group * kh * kw))?;
        k.matmul(&cols)?.reshape((b, c_out, oh, ow))
    }

    /// 2-D convolution with the same padding, stride and dilation on both spatial dims.
    pub fn conv2d(
        &self,
        kernel: &Tensor,
        padding: usize,
        stride: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor> {
        let p = Conv2dParams::square(padding, stride, dilation, groups);
        self.conv2d_with(kernel, &p)
    }

    /// 1-D convolution: `self` `[b, c_in, l]`, `kernel` `[c_out, c_in / groups, k]`.
    pub fn conv1d(
        &self,
        kernel: &Tensor,
        padding: usize,
        stride: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor> {
        self.dims3()?;
        kernel.dims3()?;
        let p = Conv2dParams::along_width(padding, stride, dilation, groups);
        self.unsqueeze(2)?
            .conv2d_with(&kernel.unsqueeze(2)?, &p)?
            .squeeze(2)
    }

    /// Transposed 2-D convolution (the gradient of `conv2d` w.r.t. its input): `self`
    /// `[b, c_in, h, w]`, `kernel` `[c_in, c_out / groups, kh, kw]`; output size per dim
    /// `(in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1`.
    pub fn conv_transpose2d_with(
        &self,
        kernel: &Tensor,
        p: &Conv2dParams,
        output_padding: (usize, usize),
    ) -> Result<Tensor> {
        const OP: &str = "conv_transpose2d";
        let (b, c_in, h, w) = self.dims4()?;
        let (kc_in, c_out_per_group, kh, kw) = kernel.dims4()?;
        let g = p.groups;
        if g == 0 || kc_in != c_in || c_in % g != 0 {
            crate::bail_invalid!(
                OP,
                "input has {c_in} channels, kernel {:?}, groups {g}",
                kernel.dims()
            );
        }
        for (s, d, op) in [
            (p.stride.0, p.dilation.0, output_padding.0),
            (p.stride.1, p.dilation.1, output_padding.1),
        ] {
            if s == 0 || d == 0 {
                crate::bail_invalid!(OP, "stride and dilation must be positive");
            }
            if op >= s && op >= d {
                crate::bail_invalid!(
                    OP,
                    "output_padding {op} must be smaller than stride {s} or dilation {d}"
                );
            }
        }
        // Insert stride - 1 zeros between input elements.
        let (hd, wd) = ((h - 1) * p.stride.0 + 1, (w - 1) * p.stride.1 + 1);
        let x = if p.stride == (1, 1) {
            self.clone()
        } else {
            let mut idx = Vec::with_capacity(h * w);
            for i in 0..h {
                for j in 0..w {
                    idx.push((i * p.stride.0 * wd + j * p.stride.1) as u32);
                }
            }
            let ids = Tensor::from_vec(idx, h * w, &self.device())?;
            Tensor::zeros((b, c_in, hd * wd), self.dtype(), &self.device())?
                .index_add(&ids, &self.flatten(2, 3)?, 2)?
                .reshape((b, c_in, hd, wd))?
        };
        // Full padding minus the forward padding; negative amounts crop instead.
        let edge = |x: Tensor,
                    dim: usize,
                    k: usize,
                    d: usize,
                    pad: usize,
                    extra: usize|
         -> Result<Tensor> {
            let full = d * (k - 1);
            let (before, after) = (
                full as i64 - pad as i64,
                full as i64 - pad as i64 + extra as i64,
            );
            let size = x.dims()[dim] as i64;
            let x = if before < 0 || after < 0 {
                let (cb, ca) = ((-before).max(0), (-after).max(0));
                if cb + ca >= size {
                    crate::bail_invalid!(OP, "padding {pad} leaves no output");
                }
                x.narrow(dim, cb as usize, (size - cb - ca) as usize)?
            } else {
                x
            };
            x.pad_with_zeros(dim, before.max(0) as usize, after.max(0) as usize)
        };
        let x = edge(x, 2, kh, p.dilation.0, p.padding.0, output_padding.0)?;
        let x = edge(x, 3, kw, p.dilation.1, p.padding.1, output_padding.1)?;
        // Flip spatially and swap in/out channels within each group.
        let flip = |t: &Tensor, dim: usize, n: usize| -> Result<Tensor> {
            let ids = Tensor::from_vec((0..n as u32).rev().collect::<Vec<_>>(), n, &t.device())?;
            t.index_select(&ids, dim)
        };
        let k = flip(&flip(kernel, 2, kh)?, 3, kw)?
            .reshape((g, c_in / g, c_out_per_group, kh, kw))?
            .transpose(1, 2)?
            .reshape((g * c_out_per_group, c_in / g, kh, kw))?;
        let q = Conv2dParams {
            padding: (0, 0),
            stride: (1, 1),
            dilation: p.dilation,
            groups: g,
        };
        x.conv2d_with(&k, &q)
    }

    /// Transposed 2-D convolution with the same parameters on both spatial dims.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose2d(
        &self,
        kernel: &Tensor,
        padding: usize,
        output_padding: usize,
        stride: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor> {
        let p = Conv2dParams::square(padding, stride, dilation, groups);
        self.conv_transpose2d_with(kernel, &p, (output_padding, output_padding))
    }

    /// Transposed 1-D convolution: `self` `[b, c_in, l]`, `kernel` `[c_in, c_out / groups, k]`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose1d(
        &self,
        kernel: &Tensor,
        padding: usize,
        output_padding: usize,
        stride: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor> {
        self.dims3()?;
        kernel.dims3()?;
        let p = Conv2dParams::along_width(padding, stride, dilation, groups);
        self.unsqueeze(2)?
            .conv_transpose2d_with(&kernel.unsqueeze(2)?, &p, (0, output_padding))?
            .squeeze(2)
    }

    /// Windows of `self` `[b, c, h, w]` as `[b, c, kh*kw, oh, ow]` (no padding, floor size).
    fn pool_windows(
        &self,
        op: &'static str,
        k: (usize, usize),
        stride: (usize, usize),
    ) -> Result<Tensor> {
        let (b, c, h, w) = self.dims4()?;
        let oh = out_size(op, h, k.0, 0, stride.0, 1)?;
        let ow = out_size(op, w, k.1, 0, stride.1, 1)?;
        self.unfold2d(k, stride, (1, 1), (oh, ow))?
            .reshape((b, c, k.0 * k.1, oh, ow))
    }

    /// Average over `k` windows moved by `stride` (PyTorch's `avg_pool2d` without padding).
    pub fn avg_pool2d(&self, k: (usize, usize), stride: (usize, usize)) -> Result<Tensor> {
        if self.dtype().is_int() {
            return Err(Error::UnsupportedDType {
                op: "avg_pool2d",
                dtype: self.dtype(),
            });
        }
        self.pool_windows("avg_pool2d", k, stride)?.mean(2usize)
    }

    /// Maximum over `k` windows moved by `stride`.
    pub fn max_pool2d(&self, k: (usize, usize), stride: (usize, usize)) -> Result<Tensor> {
        self.pool_windows("max_pool2d", k, stride)?.max(2usize)
    }

    /// Nearest-neighbour resize of `[b, c, h, w]` to `[b, c, oh, ow]` (PyTorch's `nearest`:
    /// source index `floor(dst * in / out)`).
    pub fn upsample_nearest2d(&self, oh: usize, ow: usize) -> Result<Tensor> {
        let (_, _, h, w) = self.dims4()?;
        if oh == 0 || ow == 0 || h == 0 || w == 0 {
            crate::bail_invalid!(
                "upsample_nearest2d",
                "sizes must be positive, got {h}x{w} -> {oh}x{ow}"
            );
        }
        let pick = |n_out: usize, n_in: usize| -> Result<Tensor> {
            let idx: Vec<u32> = (0..n_out).map(|i| ((i * n_in) / n_out) as u32).collect();
            Tensor::from_vec(idx, n_out, &self.device())
        };
        self.index_select(&pick(oh, h)?, 2)?
            .index_select(&pick(ow, w)?, 3)
    }

    /// Nearest-neighbour resize of `[b, c, l]` to `[b, c, ol]`.
    pub fn upsample_nearest1d(&self, ol: usize) -> Result<Tensor> {
        self.dims3()?;
        self.unsqueeze(2)?.upsample_nearest2d(1, ol)?.squeeze(2)
    }
}

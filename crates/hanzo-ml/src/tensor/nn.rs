//! Neural primitives: softmax / log-softmax, layer and RMS norm, rotary embeddings and
//! scaled dot-product attention. Each uses the backend's fused kernel when it has one and
//! otherwise a composite of primitive ops (`*_composite`, also public so backends can be
//! checked against it).

use super::Tensor;
use crate::backend::RopeKind;
use crate::backprop::BackpropOp;
use crate::{DType, Dim, Error, Result};

/// Which keys each query may attend to in `scaled_dot_product_attention`.
#[derive(Clone, Copy)]
pub enum AttentionMask<'a> {
    None,
    /// Query `i` sees keys `j <= i + (t_k - t_q)` (aligned to the end, as with a KV cache).
    Causal,
    /// Integer tensor broadcastable to `[b, h, t_q, t_k]`: non-zero = may attend.
    Keep(&'a Tensor),
    /// Float tensor added to the scores (use `-inf` to forbid).
    Additive(&'a Tensor),
}

impl Tensor {
    fn last_dim_op(&self, dim: impl Dim, op: &'static str) -> Result<(Tensor, usize, usize)> {
        let d = dim.to_index(self.shape(), op)?;
        let last = self.rank() - 1;
        Ok((self.transpose(d, last)?, d, last))
    }

    fn softmax_impl(&self, dim: impl Dim, log: bool) -> Result<Tensor> {
        let name = if log { "log_softmax" } else { "softmax" };
        let (x, d, last) = self.last_dim_op(dim, name)?;
        let Some(s) = x.storage().softmax_last(x.layout(), log)? else {
            return self.softmax_composite(d, log);
        };
        let op = BackpropOp::new(name, &[&x], move |_, y, g| {
            let l = y.rank() - 1;
            let gx = if log {
                g.sub(&y.exp()?.broadcast_mul(&g.sum_keepdim(l)?)?)?
            } else {
                y.mul(&g.broadcast_sub(&g.mul(y)?.sum_keepdim(l)?)?)?
            };
            Ok(vec![Some(gx)])
        });
        Tensor::from_storage(s, x.shape().clone(), op).transpose(d, last)
    }

    /// Numerically stable softmax along `dim`.
    pub fn softmax<D: Dim>(&self, dim: D) -> Result<Tensor> {
        self.softmax_impl(dim, false)
    }

    /// Numerically stable log-softmax along `dim`.
    pub fn log_softmax<D: Dim>(&self, dim: D) -> Result<Tensor> {
        self.softmax_impl(dim, true)
    }

    /// Softmax from primitive ops (max-shifted exp, sum, divide).
    pub fn softmax_composite<D: Dim>(&self, dim: D, log: bool) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "softmax")?;
        let shifted = self.broadcast_sub(&self.max_keepdim(d)?.detach())?;
        let e = shifted.exp()?;
        let s = e.sum_keepdim(d)?;
        if log {
            shifted.broadcast_sub(&s.log()?)
        } else {
            e.broadcast_div(&s)
        }
    }

    fn same_dtype_vec(&self, w: &Tensor, op: &'static str) -> Result<Tensor> {
        let d = *self
            .dims()
            .last()
            .ok_or_else(|| Error::invalid(op, "needs rank >= 1"))?;
        if w.dims() != [d] {
            return Err(Error::ShapeMismatch {
                op,
                expected: vec![d].into(),
                got: w.shape().clone(),
            });
        }
        w.to_dtype(self.dtype())
    }

    /// Layer norm over the last dim: `(x - mean) / sqrt(var + eps) * w + b`.
    pub fn layer_norm(&self, w: &Tensor, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        let w = self.same_dtype_vec(w, "layer_norm")?;
        let b = b
            .map(|b| self.same_dtype_vec(b, "layer_norm"))
            .transpose()?;
        let bs = b.as_ref().map(|b| (b.storage(), b.layout()));
        let Some(s) = self
            .storage()
            .layer_norm(self.layout(), w.storage(), w.layout(), bs, eps)?
        else {
            return self.layer_norm_composite(&w, b.as_ref(), eps);
        };
        let mut inputs = vec![self, &w];
        inputs.extend(b.as_ref());
        let op = BackpropOp::new("layer_norm", &inputs, move |i, _, g| {
            let (x, w) = (&i[0], &i[1]);
            let l = x.rank() - 1;
            let xc = x.broadcast_sub(&x.mean_keepdim(l)?)?;
            let rstd = xc.sqr()?.mean_keepdim(l)?.affine(1.0, eps)?.powf(-0.5)?;
            let xhat = xc.broadcast_mul(&rstd)?;
            let gh = g.broadcast_mul(w)?;
            let inner = gh
                .broadcast_sub(&gh.mean_keepdim(l)?)?
                .sub(&xhat.broadcast_mul(&gh.mul(&xhat)?.mean_keepdim(l)?)?)?;
            let mut out = vec![
                Some(inner.broadcast_mul(&rstd)?),
                Some(g.mul(&xhat)?.sum_to_shape(w.shape())?),
            ];
            if i.len() == 3 {
                out.push(Some(g.sum_to_shape(i[2].shape())?));
            }
            Ok(out)
        });
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    pub fn layer_norm_composite(&self, w: &Tensor, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        let l = self.rank() - 1;
        let xc = self.broadcast_sub(&self.mean_keepdim(l)?)?;
        let rstd = xc.sqr()?.mean_keepdim(l)?.affine(1.0, eps)?.powf(-0.5)?;
        let y = xc.broadcast_mul(&rstd)?.broadcast_mul(w)?;
        match b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }

    /// RMS norm over the last dim: `x / sqrt(mean(x^2) + eps) * w`.
    pub fn rms_norm(&self, w: &Tensor, eps: f64) -> Result<Tensor> {
        let w = self.same_dtype_vec(w, "rms_norm")?;
        let Some(s) = self
            .storage()
            .rms_norm(self.layout(), w.storage(), w.layout(), eps)?
        else {
            return self.rms_norm_composite(&w, eps);
        };
        let op = BackpropOp::new("rms_norm", &[self, &w], move |i, _, g| {
            let (x, w) = (&i[0], &i[1]);
            let l = x.rank() - 1;
            let r = x.sqr()?.mean_keepdim(l)?.affine(1.0, eps)?.powf(-0.5)?;
            let gh = g.broadcast_mul(w)?;
            // dx = r gh - x r^3 mean(gh x)
            let dx = gh
                .broadcast_mul(&r)?
                .sub(&x.broadcast_mul(&r.powf(3.0)?.mul(&gh.mul(x)?.mean_keepdim(l)?)?)?)?;
            let dw = g.mul(&x.broadcast_mul(&r)?)?.sum_to_shape(w.shape())?;
            Ok(vec![Some(dx), Some(dw)])
        });
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    pub fn rms_norm_composite(&self, w: &Tensor, eps: f64) -> Result<Tensor> {
        let l = self.rank() - 1;
        let r = self.sqr()?.mean_keepdim(l)?.affine(1.0, eps)?.powf(-0.5)?;
        self.broadcast_mul(&r)?.broadcast_mul(w)
    }

    /// The two rotated halves `(x_a, x_b)` of the last dim for `kind`.
    fn rope_pairs(&self, kind: RopeKind) -> Result<(Tensor, Tensor)> {
        let d = *self.dims().last().unwrap_or(&0);
        let l = self.rank() - 1;
        match kind {
            RopeKind::HalfSplit => Ok((self.narrow(l, 0, d / 2)?, self.narrow(l, d / 2, d / 2)?)),
            RopeKind::Interleaved => {
                let mut dims = self.dims().to_vec();
                dims[l] = d / 2;
                dims.push(2);
                let p = self.reshape(dims)?;
                Ok((
                    p.narrow(l + 1, 0, 1)?.squeeze(l + 1)?,
                    p.narrow(l + 1, 1, 1)?.squeeze(l + 1)?,
                ))
            }
        }
    }

    fn rope_join(a: &Tensor, b: &Tensor, kind: RopeKind) -> Result<Tensor> {
        let l = a.rank() - 1;
        match kind {
            RopeKind::HalfSplit => Tensor::cat(&[a, b], l),
            RopeKind::Interleaved => Tensor::stack(&[a, b], l + 1)?.flatten(l, l + 1),
        }
    }

    fn rope_check(&self, cos: &Tensor, sin: &Tensor) -> Result<(Tensor, Tensor)> {
        let (_, _, t, d) = self.dims4()?;
        if d % 2 != 0 {
            crate::bail_invalid!("rope", "head dim {d} is odd");
        }
        for c in [cos, sin] {
            if c.dims() != [t, d / 2] {
                return Err(Error::ShapeMismatch {
                    op: "rope",
                    expected: vec![t, d / 2].into(),
                    got: c.shape().clone(),
                });
            }
        }
        Ok((cos.to_dtype(self.dtype())?, sin.to_dtype(self.dtype())?))
    }

    /// Rotary embedding of `self` `[batch, heads, seq, head_dim]` with `cos`/`sin` of shape
    /// `[seq, head_dim / 2]`.
    pub fn rotary_emb(&self, cos: &Tensor, sin: &Tensor, kind: RopeKind) -> Result<Tensor> {
        let (cos, sin) = self.rope_check(cos, sin)?;
        let x = self.contiguous()?;
        let (c, s) = (cos.contiguous()?, sin.contiguous()?);
        let Some(out) = x
            .storage()
            .rope(x.layout(), c.storage(), s.storage(), kind)?
        else {
            return self.rotary_emb_composite(&cos, &sin, kind);
        };
        let op = BackpropOp::new("rope", &[&x, &c, &s], move |i, _, g| {
            let (x, c, s) = (&i[0], &i[1], &i[2]);
            let dx = g.rotary_emb(c, &s.neg()?, kind)?;
            let (dc, ds) = if c.track_op() || s.track_op() {
                let ((xa, xb), (ga, gb)) = (x.rope_pairs(kind)?, g.rope_pairs(kind)?);
                let dc = ga.mul(&xa)?.add(&gb.mul(&xb)?)?.sum_to_shape(c.shape())?;
                let ds = gb.mul(&xa)?.sub(&ga.mul(&xb)?)?.sum_to_shape(s.shape())?;
                (Some(dc), Some(ds))
            } else {
                (None, None)
            };
            Ok(vec![Some(dx), dc, ds])
        });
        Ok(Tensor::from_storage(out, x.shape().clone(), op))
    }

    /// Interleaved pairs `(2i, 2i+1)`.
    pub fn rope_i(&self, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        self.rotary_emb(cos, sin, RopeKind::Interleaved)
    }

    /// Half-split pairs `(i, i + d/2)` (GPT-NeoX / Llama layout).
    pub fn rope(&self, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        self.rotary_emb(cos, sin, RopeKind::HalfSplit)
    }

    pub fn rotary_emb_composite(
        &self,
        cos: &Tensor,
        sin: &Tensor,
        kind: RopeKind,
    ) -> Result<Tensor> {
        let (cos, sin) = self.rope_check(cos, sin)?;
        let (xa, xb) = self.rope_pairs(kind)?;
        let a = xa.broadcast_mul(&cos)?.sub(&xb.broadcast_mul(&sin)?)?;
        let b = xa.broadcast_mul(&sin)?.add(&xb.broadcast_mul(&cos)?)?;
        Tensor::rope_join(&a, &b, kind)
    }

    /// `softmax(q k^T * scale + mask) v` with q `[b, h_q, t_q, d]`, k `[b, h_kv, t_k, d]`,
    /// v `[b, h_kv, t_k, d_v]`. `h_q` must be a multiple of `h_kv` (grouped-query attention).
    /// `scale` defaults to `1 / sqrt(d)`.
    pub fn scaled_dot_product_attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: AttentionMask,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        let (b, hq, tq, d) = q.dims4()?;
        let (bk, hk, tk, dk) = k.dims4()?;
        let (bv, hv, tv, _) = v.dims4()?;
        if bk != b || bv != b || dk != d || hv != hk || tv != tk || hk == 0 || hq % hk != 0 {
            crate::bail_invalid!(
                "scaled_dot_product_attention",
                "incompatible q {:?}, k {:?}, v {:?}",
                q.dims(),
                k.dims(),
                v.dims()
            );
        }
        let repeat = |t: &Tensor| -> Result<Tensor> {
            if hq == hk {
                return Ok(t.clone());
            }
            let (b, h, s, e) = t.dims4()?;
            t.unsqueeze(2)?
                .broadcast_as((b, h, hq / h, s, e))?
                .reshape((b, hq, s, e))
        };
        let (k, v) = (repeat(k)?, repeat(v)?);
        let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
        let scores = q.matmul(&k.t()?)?.affine(scale, 0.0)?;
        let scores = match mask {
            AttentionMask::None => scores,
            AttentionMask::Causal => {
                if tq > tk {
                    crate::bail_invalid!(
                        "scaled_dot_product_attention",
                        "causal mask needs t_q <= t_k, got {tq} > {tk}"
                    );
                }
                let i = Tensor::arange(0u32, tq as u32, &q.device())?
                    .reshape((tq, 1))?
                    .affine(1.0, (tk - tq) as f64)?;
                let j = Tensor::arange(0u32, tk as u32, &q.device())?.reshape((1, tk))?;
                let keep = j.le(&i)?;
                keep.where_cond(&scores, &scores.scalar_like(f64::NEG_INFINITY)?)?
            }
            AttentionMask::Keep(m) => {
                if m.dtype().is_float() {
                    return Err(Error::DTypeMismatch {
                        op: "scaled_dot_product_attention",
                        expected: DType::U8,
                        got: m.dtype(),
                    });
                }
                m.where_cond(&scores, &scores.scalar_like(f64::NEG_INFINITY)?)?
            }
            AttentionMask::Additive(m) => scores.broadcast_add(&m.to_dtype(scores.dtype())?)?,
        };
        scores.softmax(scores.rank() - 1)?.matmul(&v)
    }
}

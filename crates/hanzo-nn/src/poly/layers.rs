//! Polynomial replacements for activations, softmax and layer norm.

use super::{Chebyshev, InvSqrt, Reciprocal};
use crate::{Activation, LayerNorm, Module};
use hanzo_ml::{Error, Result, Tensor};

fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

fn gelu_tanh(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + u.tanh())
}

/// The exact function an activation computes (f64), for fitting and for error reports.
pub fn target_fn(a: Activation) -> Result<Box<dyn Fn(f64) -> f64 + Send + Sync>> {
    Ok(match a {
        Activation::Relu => Box::new(|x: f64| x.max(0.0)),
        Activation::GeluErf => Box::new(gelu_erf),
        Activation::GeluTanh => Box::new(gelu_tanh),
        Activation::Silu => Box::new(|x: f64| x / (1.0 + (-x).exp())),
        Activation::Sigmoid => Box::new(|x: f64| 1.0 / (1.0 + (-x).exp())),
        Activation::Tanh => Box::new(f64::tanh),
        Activation::Softplus => Box::new(|x: f64| x.max(0.0) + (-x.abs()).exp().ln_1p()),
        Activation::LeakyRelu(s) => Box::new(move |x: f64| if x > 0.0 { x } else { s * x }),
        Activation::Elu(s) => Box::new(move |x: f64| if x > 0.0 { x } else { s * x.exp_m1() }),
        Activation::Identity => Box::new(|x| x),
    })
}

/// An activation replaced by its Chebyshev approximation on `[a, b]`.
#[derive(Clone, Debug)]
pub struct PolyActivation {
    pub activation: Activation,
    pub poly: Chebyshev,
}

impl PolyActivation {
    pub fn new(activation: Activation, a: f64, b: f64, degree: usize) -> Result<Self> {
        let f = target_fn(activation)?;
        Ok(Self {
            activation,
            poly: Chebyshev::fit(f, a, b, degree)?,
        })
    }

    /// `exp` on `[a, b]` (for softmax-like uses and the error table).
    pub fn exp(a: f64, b: f64, degree: usize) -> Result<Chebyshev> {
        Chebyshev::fit(f64::exp, a, b, degree)
    }

    /// Max absolute error against the exact activation on its interval.
    pub fn max_error(&self) -> f64 {
        let f = target_fn(self.activation).expect("fitted before");
        self.poly.max_error(f, 10_001)
    }
}

impl Module for PolyActivation {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.poly.eval(x)
    }
}

/// GELU's tanh formula `0.5 x (1 + tanh(u))`, `u = sqrt(2/pi) (x + 0.044715 x^3)`, with tanh
/// replaced by its degree-7 Taylor expansion `u - u^3/3 + 2u^5/15 - 17u^7/315`. Accurate only
/// while |u| stays small (about |x| < 1.5); the Chebyshev fit is the better choice.
#[derive(Clone, Copy, Debug, Default)]
pub struct PolyGeluTaylor;

impl PolyGeluTaylor {
    pub fn eval_f64(x: f64) -> f64 {
        let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        let u2 = u * u;
        let tanh = u * (1.0 + u2 * (-1.0 / 3.0 + u2 * (2.0 / 15.0 - u2 * 17.0 / 315.0)));
        0.5 * x * (1.0 + tanh)
    }
}

impl Module for PolyGeluTaylor {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        let x2 = x.mul(x)?;
        let u = x.mul(&x2.affine(0.044715 * c, c)?)?;
        let u2 = u.mul(&u)?;
        // Horner in u^2: u (1 + u2 (-1/3 + u2 (2/15 - 17/315 u2)))
        let inner = u2.affine(-17.0 / 315.0, 2.0 / 15.0)?;
        let inner = u2.mul(&inner)?.affine(1.0, -1.0 / 3.0)?;
        let inner = u2.mul(&inner)?.affine(1.0, 1.0)?;
        let tanh = u.mul(&inner)?;
        x.mul(&tanh.affine(0.5, 0.5)?)
    }
}

/// `exp` on `[lo, hi]` with good *relative* accuracy over wide ranges: a Chebyshev fit of
/// `exp(x / 2^r)` on an interval of width <= 1, squared `r` times.
#[derive(Clone, Debug)]
pub struct PolyExp {
    poly: Chebyshev,
    squarings: u32,
}

impl PolyExp {
    pub fn new(lo: f64, hi: f64, degree: usize) -> Result<Self> {
        let width = (hi - lo).max(1e-9);
        let squarings = width.log2().ceil().max(0.0) as u32;
        let s = 2f64.powi(squarings as i32);
        Ok(Self {
            poly: Chebyshev::fit(f64::exp, lo / s, hi / s, degree)?,
            squarings,
        })
    }

    pub fn eval(&self, x: &Tensor) -> Result<Tensor> {
        let s = 2f64.powi(self.squarings as i32);
        let mut y = self.poly.eval(&x.affine(1.0 / s, 0.0)?)?;
        for _ in 0..self.squarings {
            y = y.mul(&y)?;
        }
        Ok(y)
    }

    pub fn eval_f64(&self, x: f64) -> f64 {
        let s = 2f64.powi(self.squarings as i32);
        let mut y = self.poly.eval_f64(x / s);
        for _ in 0..self.squarings {
            y *= y;
        }
        y
    }
}

/// Softmax over the last dim of `n` entries without max or division:
/// `softmax(x) = softmax(x - mean(x))`; the centred inputs, assumed in `[lo, hi]`, go through
/// [`PolyExp`]; the row sum `S` lies in `[n, n e^hi]` (Jensen gives `S >= n`), so its
/// reciprocal comes from [`Reciprocal::wide`] on that range.
#[derive(Clone, Debug)]
pub struct PolySoftmax {
    exp: PolyExp,
    recip: Reciprocal,
    n: usize,
}

impl PolySoftmax {
    pub fn new(lo: f64, hi: f64, n: usize, degree: usize) -> Result<Self> {
        if !(lo < 0.0 && hi > 0.0) || n == 0 {
            return Err(Error::invalid(
                "PolySoftmax",
                format!("centred inputs must straddle 0 (got [{lo}, {hi}]) and n > 0"),
            ));
        }
        let n_f = n as f64;
        Ok(Self {
            exp: PolyExp::new(lo, hi, degree)?,
            recip: Reciprocal::wide(n_f, n_f * hi.exp(), 1e-7)?,
            n,
        })
    }
}

impl Module for PolySoftmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let last = x.rank() - 1;
        if x.dims()[last] != self.n {
            return Err(Error::invalid(
                "PolySoftmax",
                format!("fitted for rows of {}, got {:?}", self.n, x.dims()),
            ));
        }
        let mean = x.sum_keepdim(last)?.affine(1.0 / self.n as f64, 0.0)?;
        let e = self.exp.eval(&x.sub(&mean)?)?;
        let s = e.sum_keepdim(last)?;
        e.mul(&self.recip.eval(&s)?)
    }
}

/// Layer norm with `1 / sqrt(var + eps)` by Newton on the calibrated variance range.
#[derive(Clone, Debug)]
pub struct PolyLayerNorm {
    weight: Tensor,
    bias: Option<Tensor>,
    eps: f64,
    inv_sqrt: InvSqrt,
}

impl PolyLayerNorm {
    pub fn new(
        norm: &LayerNorm,
        var_lo: f64,
        var_hi: f64,
        degree: usize,
        newton: usize,
    ) -> Result<Self> {
        Ok(Self {
            weight: norm.weight(),
            bias: norm.bias(),
            eps: norm.eps(),
            inv_sqrt: InvSqrt::new(var_lo + norm.eps(), var_hi + norm.eps(), degree, newton)?,
        })
    }
}

impl Module for PolyLayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let last = x.rank() - 1;
        let n = x.dims()[last] as f64;
        let mean = x.sum_keepdim(last)?.affine(1.0 / n, 0.0)?;
        let c = x.sub(&mean)?;
        let var = c.mul(&c)?.sum_keepdim(last)?.affine(1.0 / n, self.eps)?;
        let y = c.mul(&self.inv_sqrt.eval(&var)?)?.mul(&self.weight)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}

//! Chebyshev approximation: fit `f` on `[a, b]` to degree `n`, evaluate with the Clenshaw
//! recurrence using only additions, subtractions and multiplications.

use hanzo_ml::{Error, Result, Tensor};
use std::f64::consts::PI;

/// `f(x) ~ c_0 / 2 + sum_k c_k T_k(t)`, `t = (2x - a - b) / (b - a)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Chebyshev {
    pub a: f64,
    pub b: f64,
    pub coeffs: Vec<f64>,
}

impl Chebyshev {
    /// Interpolates `f` at the `degree + 1` Chebyshev nodes of `[a, b]` (near-minimax: within
    /// a small factor of the best polynomial of that degree in max norm).
    pub fn fit(f: impl Fn(f64) -> f64, a: f64, b: f64, degree: usize) -> Result<Self> {
        if !(a < b && a.is_finite() && b.is_finite()) {
            return Err(Error::invalid(
                "Chebyshev::fit",
                format!("invalid interval [{a}, {b}]"),
            ));
        }
        let n = degree + 1;
        let nodes: Vec<f64> = (0..n)
            .map(|j| (PI * (j as f64 + 0.5) / n as f64).cos())
            .collect();
        let values: Vec<f64> = nodes
            .iter()
            .map(|&t| f(0.5 * (b - a) * t + 0.5 * (b + a)))
            .collect();
        if values.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid(
                "Chebyshev::fit",
                "f is not finite on the interval",
            ));
        }
        let coeffs = (0..n)
            .map(|k| {
                let s: f64 = (0..n)
                    .map(|j| values[j] * (PI * k as f64 * (j as f64 + 0.5) / n as f64).cos())
                    .sum();
                2.0 * s / n as f64
            })
            .collect();
        Ok(Self { a, b, coeffs })
    }

    pub fn degree(&self) -> usize {
        self.coeffs.len().saturating_sub(1)
    }

    /// Scalar Clenshaw evaluation (f64).
    pub fn eval_f64(&self, x: f64) -> f64 {
        let t = (2.0 * x - self.a - self.b) / (self.b - self.a);
        let (mut b1, mut b2) = (0.0, 0.0);
        for &c in self.coeffs.iter().skip(1).rev() {
            (b1, b2) = (c + 2.0 * t * b1 - b2, b1);
        }
        self.coeffs.first().copied().unwrap_or(0.0) / 2.0 + t * b1 - b2
    }

    /// Element-wise Clenshaw on a tensor: `degree` multiplications by `t`, the rest affine
    /// maps and subtractions (no division, no transcendental).
    pub fn eval(&self, x: &Tensor) -> Result<Tensor> {
        let scale = 2.0 / (self.b - self.a);
        let t = x.affine(scale, -(self.a + self.b) / (self.b - self.a))?;
        let c0 = self.coeffs.first().copied().unwrap_or(0.0);
        if self.coeffs.len() <= 1 {
            return t.affine(0.0, c0 / 2.0);
        }
        // b_k = c_k + 2 t b_{k+1} - b_{k+2}, from k = n down to 1, starting with b = 0.
        let mut b1: Option<Tensor> = None;
        let mut b2: Option<Tensor> = None;
        for &c in self.coeffs.iter().skip(1).rev() {
            let next = match (&b1, &b2) {
                (None, _) => t.affine(0.0, c)?,
                (Some(p1), None) => t.mul(p1)?.affine(2.0, c)?,
                (Some(p1), Some(p2)) => t.mul(p1)?.affine(2.0, c)?.sub(p2)?,
            };
            b2 = b1.take();
            b1 = Some(next);
        }
        let b1 = b1.expect("degree >= 1");
        let y = t.mul(&b1)?.affine(1.0, c0 / 2.0)?;
        match b2 {
            Some(b2) => y.sub(&b2),
            None => Ok(y),
        }
    }

    /// Max |f - p| over `samples` evenly spaced points of `[a, b]`.
    pub fn max_error(&self, f: impl Fn(f64) -> f64, samples: usize) -> f64 {
        (0..samples)
            .map(|i| {
                let x = self.a + (self.b - self.a) * i as f64 / (samples - 1).max(1) as f64;
                (self.eval_f64(x) - f(x)).abs()
            })
            .fold(0.0, f64::max)
    }
}

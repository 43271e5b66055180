//! Reciprocal and inverse square root by Newton–Raphson from a polynomial first guess, using
//! only additions and multiplications (FHE has no division).

use super::Chebyshev;
use hanzo_ml::{Result, Tensor};

/// `1 / a` for `a` in `[lo, hi]` (lo > 0): a first guess refined by `iters` steps of
/// `y <- y (2 - a y)`. The error `e = 1 - a y` squares each step, so any guess with
/// `0 < y0 < 2 / a` converges.
#[derive(Clone, Debug)]
pub struct Reciprocal {
    guess: Chebyshev,
    iters: usize,
}

impl Reciprocal {
    /// A Chebyshev guess of `degree` (good for narrow ranges, hi / lo up to ~10).
    pub fn new(lo: f64, hi: f64, degree: usize, iters: usize) -> Result<Self> {
        Ok(Self {
            guess: Chebyshev::fit(|x| 1.0 / x, lo, hi, degree)?,
            iters,
        })
    }

    /// For any range: the constant guess `1 / hi` (so `e0 = 1 - a / hi` is in `[0, 1)`) and as
    /// many Newton steps as reach relative error `tol` at `a = lo`.
    pub fn wide(lo: f64, hi: f64, tol: f64) -> Result<Self> {
        if !(lo > 0.0 && lo < hi && hi.is_finite() && tol > 0.0 && tol < 1.0) {
            return Err(hanzo_ml::Error::invalid(
                "Reciprocal::wide",
                format!("need 0 < lo < hi and 0 < tol < 1, got [{lo}, {hi}], {tol}"),
            ));
        }
        let e0 = 1.0 - lo / hi;
        // e0^(2^k) <= tol  <=>  k >= log2(ln tol / ln e0)
        let iters = if e0 <= 0.0 {
            0
        } else {
            (tol.ln() / e0.ln()).log2().ceil().max(0.0) as usize
        };
        Ok(Self {
            guess: Chebyshev {
                a: lo,
                b: hi,
                coeffs: vec![2.0 / hi],
            },
            iters,
        })
    }

    pub fn iterations(&self) -> usize {
        self.iters
    }

    pub fn eval(&self, a: &Tensor) -> Result<Tensor> {
        let mut y = self.guess.eval(a)?;
        for _ in 0..self.iters {
            // y (2 - a y)
            y = y.mul(&a.mul(&y)?.affine(-1.0, 2.0)?)?;
        }
        Ok(y)
    }

    pub fn eval_f64(&self, a: f64) -> f64 {
        let mut y = self.guess.eval_f64(a);
        for _ in 0..self.iters {
            y *= 2.0 - a * y;
        }
        y
    }
}

/// `1 / sqrt(a)` for `a` in `[lo, hi]`: Chebyshev guess, then `y <- y (3 - a y^2) / 2`.
#[derive(Clone, Debug)]
pub struct InvSqrt {
    guess: Chebyshev,
    iters: usize,
}

impl InvSqrt {
    pub fn new(lo: f64, hi: f64, degree: usize, iters: usize) -> Result<Self> {
        Ok(Self {
            guess: Chebyshev::fit(|x| 1.0 / x.sqrt(), lo, hi, degree)?,
            iters,
        })
    }

    pub fn eval(&self, a: &Tensor) -> Result<Tensor> {
        let mut y = self.guess.eval(a)?;
        for _ in 0..self.iters {
            let ay2 = a.mul(&y)?.mul(&y)?;
            y = y.mul(&ay2.affine(-0.5, 1.5)?)?;
        }
        Ok(y)
    }

    pub fn eval_f64(&self, a: f64) -> f64 {
        let mut y = self.guess.eval_f64(a);
        for _ in 0..self.iters {
            y *= 1.5 - 0.5 * a * y * y;
        }
        y
    }
}

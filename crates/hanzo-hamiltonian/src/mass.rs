//! The mass matrix M of the kinetic energy `p^T M^-1 p / 2`.

use hanzo_ml::{DType, Error, Result, Tensor};
use rand::Rng;
use rand_distr::StandardNormal;

#[derive(Clone, Debug)]
pub enum Mass {
    Identity,
    /// Diagonal entries `[dim]`.
    Diagonal(Tensor),
    /// A symmetric positive-definite `[dim, dim]` matrix with its inverse and Cholesky factor
    /// (computed once in f64 by [`Mass::dense`]).
    Dense {
        m: Tensor,
        inv: Tensor,
        chol: Tensor,
    },
}

impl Mass {
    pub fn diagonal(d: &Tensor) -> Result<Self> {
        d.dims1()?;
        let min = d.to_dtype(DType::F64)?.min_all()?.to_scalar::<f64>()?;
        if min.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return Err(Error::invalid("Mass::diagonal", "masses must be positive"));
        }
        Ok(Mass::Diagonal(d.clone()))
    }

    /// A dense mass matrix; not symmetric positive-definite is an error.
    pub fn dense(m: &Tensor) -> Result<Self> {
        let (n, n2) = m.dims2()?;
        if n != n2 {
            return Err(Error::invalid(
                "Mass::dense",
                format!("{n}x{n2} is not square"),
            ));
        }
        let a = m.to_dtype(DType::F64)?.to_vec_flat::<f64>()?;
        for i in 0..n {
            for j in 0..i {
                if (a[i * n + j] - a[j * n + i]).abs() > 1e-12 * (1.0 + a[i * n + j].abs()) {
                    return Err(Error::invalid("Mass::dense", "the matrix is not symmetric"));
                }
            }
        }
        let l = cholesky(&a, n)
            .ok_or_else(|| Error::invalid("Mass::dense", "the matrix is not positive definite"))?;
        let inv = spd_inverse(&l, n);
        let to = |v: Vec<f64>| Tensor::from_vec(v, (n, n), &m.device())?.to_dtype(m.dtype());
        Ok(Mass::Dense {
            m: m.clone(),
            inv: to(inv)?,
            chol: to(l)?,
        })
    }

    /// `M^-1 p` for rows `p` `[batch, dim]` (dq/dt).
    pub fn velocity(&self, p: &Tensor) -> Result<Tensor> {
        match self {
            Mass::Identity => Ok(p.clone()),
            Mass::Diagonal(d) => p.div(&d.to_dtype(p.dtype())?),
            Mass::Dense { inv, .. } => p.matmul(&inv.to_dtype(p.dtype())?),
        }
    }

    /// `p^T M^-1 p / 2` per row: `[batch]`.
    pub fn kinetic(&self, p: &Tensor) -> Result<Tensor> {
        p.mul(&self.velocity(p)?)?.sum(1)?.affine(0.5, 0.0)
    }

    /// Momenta drawn from N(0, M), shaped like `like`.
    pub fn sample_momentum(&self, like: &Tensor, rng: &mut impl Rng) -> Result<Tensor> {
        let n = like.elem_count();
        let z: Vec<f64> = (0..n).map(|_| rng.sample(StandardNormal)).collect();
        let z =
            Tensor::from_vec(z, like.shape().clone(), &like.device())?.to_dtype(like.dtype())?;
        match self {
            Mass::Identity => Ok(z),
            Mass::Diagonal(d) => z.mul(&d.to_dtype(like.dtype())?.sqrt()?),
            // z L^T has covariance L L^T = M.
            Mass::Dense { chol, .. } => z.matmul(&chol.to_dtype(like.dtype())?.t()?),
        }
    }

    pub fn matrix(&self) -> Option<&Tensor> {
        match self {
            Mass::Dense { m, .. } => Some(m),
            _ => None,
        }
    }
}

/// Lower-triangular L with L L^T = A, or None when A is not positive definite.
pub(crate) fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum();
            if i == j {
                let d = a[i * n + i] - s;
                if d <= 0.0 || !d.is_finite() {
                    return None;
                }
                l[i * n + i] = d.sqrt();
            } else {
                l[i * n + j] = (a[i * n + j] - s) / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// A^-1 from the Cholesky factor L of A, column by column (two triangular solves).
pub(crate) fn spd_inverse(l: &[f64], n: usize) -> Vec<f64> {
    let mut inv = vec![0.0; n * n];
    for c in 0..n {
        // L y = e_c
        let mut y = vec![0.0; n];
        for i in 0..n {
            let s: f64 = (0..i).map(|k| l[i * n + k] * y[k]).sum();
            y[i] = ((i == c) as u8 as f64 - s) / l[i * n + i];
        }
        // L^T x = y
        let mut x = vec![0.0; n];
        for i in (0..n).rev() {
            let s: f64 = (i + 1..n).map(|k| l[k * n + i] * x[k]).sum();
            x[i] = (y[i] - s) / l[i * n + i];
        }
        for i in 0..n {
            inv[i * n + c] = x[i];
        }
    }
    inv
}

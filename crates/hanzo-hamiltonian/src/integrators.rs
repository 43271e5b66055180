//! Symplectic integrators for `H(q, p)`, each row of `[batch, dim]` one system.
//!
//! All of them preserve phase-space volume and (for the symmetric ones) are time-reversible,
//! so energy errors stay bounded instead of drifting, which is what HMC relies on.

use crate::Mass;
use hanzo_ml::Result;
use hanzo_ml::Tensor;

/// A gradient field: `(q) -> dU/dq` or `(q, p) -> dH/d·`, shaped like its input.
pub type Gradient<'a> = &'a dyn Fn(&Tensor) -> Result<Tensor>;

/// One step of symplectic Euler for a general `H(q, p)`:
/// `p' = p - dt dH/dq(q, p)`, then `q' = q + dt dH/dp(q, p')`.
pub fn symplectic_euler_step(
    q: &Tensor,
    p: &Tensor,
    grad_h_q: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
    grad_h_p: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
    dt: f64,
) -> Result<(Tensor, Tensor)> {
    let p = p.sub(&grad_h_q(q, p)?.affine(dt, 0.0)?)?;
    let q = q.add(&grad_h_p(q, &p)?.affine(dt, 0.0)?)?;
    Ok((q, p))
}

/// `n_steps` of leapfrog (kick–drift–kick velocity Verlet) for the separable
/// `H = U(q) + p^T M^-1 p / 2`; `grad_fn` is dU/dq. Consecutive half kicks are merged, so n
/// steps cost n + 1 gradient evaluations.
pub fn leapfrog_step(
    q: &Tensor,
    p: &Tensor,
    grad_fn: Gradient,
    dt: f64,
    n_steps: usize,
) -> Result<(Tensor, Tensor)> {
    leapfrog_with_mass(q, p, grad_fn, &Mass::Identity, dt, n_steps)
}

/// [`leapfrog_step`] with a mass matrix.
pub fn leapfrog_with_mass(
    q: &Tensor,
    p: &Tensor,
    grad_fn: Gradient,
    mass: &Mass,
    dt: f64,
    n_steps: usize,
) -> Result<(Tensor, Tensor)> {
    if n_steps == 0 {
        return Ok((q.clone(), p.clone()));
    }
    let mut q = q.clone();
    let mut p = p.sub(&grad_fn(&q)?.affine(dt / 2.0, 0.0)?)?;
    for i in 0..n_steps {
        q = q.add(&mass.velocity(&p)?.affine(dt, 0.0)?)?;
        let kick = if i + 1 == n_steps { dt / 2.0 } else { dt };
        p = p.sub(&grad_fn(&q)?.affine(kick, 0.0)?)?;
    }
    Ok((q, p))
}

/// Yoshida's 4th-order integrator: leapfrog steps of `w1 dt, w0 dt, w1 dt` with
/// `w1 = 1 / (2 - 2^(1/3))`, `w0 = 1 - 2 w1`. Global error O(dt^4).
pub fn yoshida4_step(
    q: &Tensor,
    p: &Tensor,
    grad_fn: Gradient,
    mass: &Mass,
    dt: f64,
    n_steps: usize,
) -> Result<(Tensor, Tensor)> {
    let cbrt2 = 2f64.powf(1.0 / 3.0);
    let w1 = 1.0 / (2.0 - cbrt2);
    let w0 = -cbrt2 / (2.0 - cbrt2);
    let (mut q, mut p) = (q.clone(), p.clone());
    for _ in 0..n_steps {
        for w in [w1, w0, w1] {
            (q, p) = leapfrog_with_mass(&q, &p, grad_fn, mass, w * dt, 1)?;
        }
    }
    Ok((q, p))
}

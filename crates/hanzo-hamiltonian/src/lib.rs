//! Hamiltonian dynamics on batched `[batch, dim]` tensors (f32 or f64): symplectic
//! integrators (symplectic Euler, leapfrog, Yoshida's 4th order), the Hamiltonian energy, and
//! Hamiltonian Monte Carlo whose gradients come from autograd of a user-written potential.
//!
//! Every row of the batch is an independent system (or chain); potentials return one energy
//! per row, `[batch]`.
#![deny(unsafe_op_in_unsafe_fn)]

mod hmc;
mod integrators;
mod mass;

pub use hmc::{Hmc, HmcSamples};
pub use integrators::{
    leapfrog_step, leapfrog_with_mass, symplectic_euler_step, yoshida4_step, Gradient,
};
pub use mass::Mass;

use hanzo_ml::{Result, Tensor};

/// `H(q, p) = U(q) + p^T M^-1 p / 2` per row: `[batch]`.
pub fn hamiltonian_energy(
    q: &Tensor,
    p: &Tensor,
    potential: impl Fn(&Tensor) -> Result<Tensor>,
    mass: &Mass,
) -> Result<Tensor> {
    potential(q)?.add(&mass.kinetic(p)?)
}

/// The gradient of a potential by autograd: `dU/dq` for `U: [batch, dim] -> [batch]`.
pub fn grad_potential(potential: &dyn Fn(&Tensor) -> Result<Tensor>, q: &Tensor) -> Result<Tensor> {
    let q = q.detach().variable();
    let u = potential(&q)?;
    let grads = u.sum_all()?.backward()?;
    match grads.get(&q) {
        Some(g) => Ok(g.detach()),
        // The potential does not depend on q: zero force.
        None => q.detach().zeros_like(),
    }
}

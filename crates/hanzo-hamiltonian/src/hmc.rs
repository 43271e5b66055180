//! Hamiltonian Monte Carlo (Duane et al. 1987; Neal 2011) over a batch of independent chains.
//!
//! Each iteration draws momenta p ~ N(0, M), integrates the Hamiltonian with leapfrog, and
//! accepts the proposal with probability `min(1, exp(H_old - H_new))` (the Metropolis
//! correction that makes the integration error harmless). Forces come from autograd of the
//! user's potential `U(q) = -log density(q)`, so only the potential has to be written.

use crate::integrators::leapfrog_with_mass;
use crate::{grad_potential, Mass};
use hanzo_ml::{Device, Error, Result, Tensor};
use rand::{Rng, SeedableRng};

/// A potential `U: [chains, dim] -> [chains]`.
type Potential<'a> = Box<dyn Fn(&Tensor) -> Result<Tensor> + 'a>;

pub struct Hmc<'a> {
    potential: Potential<'a>,
    pub step_size: f64,
    pub n_leapfrog: usize,
    pub mass: Mass,
}

pub struct HmcSamples {
    /// `[n_samples, chains, dim]`.
    pub samples: Tensor,
    /// Accepted proposals / all proposals after burn-in, over every chain.
    pub acceptance_rate: f64,
}

impl<'a> Hmc<'a> {
    /// `potential` maps `[chains, dim]` to `[chains]`.
    pub fn new(
        potential: impl Fn(&Tensor) -> Result<Tensor> + 'a,
        step_size: f64,
        n_leapfrog: usize,
    ) -> Result<Self> {
        if !(step_size > 0.0 && step_size.is_finite()) || n_leapfrog == 0 {
            return Err(Error::invalid(
                "Hmc",
                format!("need step_size > 0 and n_leapfrog > 0, got {step_size}, {n_leapfrog}"),
            ));
        }
        Ok(Self {
            potential: Box::new(potential),
            step_size,
            n_leapfrog,
            mass: Mass::Identity,
        })
    }

    pub fn with_mass(mut self, mass: Mass) -> Self {
        self.mass = mass;
        self
    }

    fn energy(&self, q: &Tensor, p: &Tensor) -> Result<Vec<f64>> {
        let u = hanzo_ml::no_grad(|| (self.potential)(q))?;
        let h = u.add(&self.mass.kinetic(p)?)?;
        h.to_dtype(hanzo_ml::DType::F64)?.to_vec1::<f64>()
    }

    /// One HMC transition for every chain; returns the new state and how many accepted.
    pub fn step(&self, q: &Tensor, rng: &mut impl Rng) -> Result<(Tensor, usize)> {
        let (chains, dim) = q.dims2()?;
        let p = self.mass.sample_momentum(q, rng)?;
        let h0 = self.energy(q, &p)?;
        let grad = |x: &Tensor| grad_potential(&*self.potential, x);
        let (q1, p1) =
            leapfrog_with_mass(q, &p, &grad, &self.mass, self.step_size, self.n_leapfrog)?;
        let h1 = self.energy(&q1, &p1)?;
        let mut keep = Vec::with_capacity(chains * dim);
        let mut accepted = 0;
        for (a, b) in h0.iter().zip(&h1) {
            // A diverged trajectory (NaN/inf energy) is always rejected.
            let ok = b.is_finite() && rng.gen::<f64>().ln() < a - b;
            accepted += ok as usize;
            keep.extend(std::iter::repeat_n(ok as u8, dim));
        }
        let mask = Tensor::from_vec(keep, (chains, dim), &q.device())?;
        Ok((mask.where_cond(&q1, q)?.detach(), accepted))
    }

    /// Runs `burn_in` discarded transitions then `n_samples` kept ones from `q0`
    /// `[chains, dim]`, seeded for reproducibility.
    pub fn sample(
        &self,
        q0: &Tensor,
        n_samples: usize,
        burn_in: usize,
        seed: u64,
    ) -> Result<HmcSamples> {
        let (chains, _) = q0.dims2()?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut q = q0.detach();
        for _ in 0..burn_in {
            q = self.step(&q, &mut rng)?.0;
        }
        let mut kept = Vec::with_capacity(n_samples);
        let mut accepted = 0;
        for _ in 0..n_samples {
            let (next, a) = self.step(&q, &mut rng)?;
            accepted += a;
            q = next;
            kept.push(q.clone());
        }
        let refs: Vec<&Tensor> = kept.iter().collect();
        let samples = if refs.is_empty() {
            Tensor::zeros((0, chains, q0.dims()[1]), q0.dtype(), &Device::Cpu)?
        } else {
            Tensor::stack(&refs, 0)?
        };
        Ok(HmcSamples {
            samples,
            acceptance_rate: accepted as f64 / (n_samples * chains).max(1) as f64,
        })
    }
}

//! Optimizers with PyTorch's update rules. Each `step` reads the gradient of every variable's
//! current value from a `GradStore` and replaces the value; variables without a gradient
//! (unused in this loss) are left alone.

use crate::Var;
use hanzo_ml::{GradStore, Result, Tensor};

pub trait Optimizer {
    fn step(&mut self, grads: &GradStore) -> Result<()>;
    fn learning_rate(&self) -> f64;
    fn set_learning_rate(&mut self, lr: f64);

    /// `loss.backward()` then `step`.
    fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        let grads = loss.backward()?;
        self.step(&grads)
    }
}

/// Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay
/// (`torch.optim.SGD`).
pub struct Sgd {
    vars: Vec<(Var, Option<Tensor>)>,
    pub lr: f64,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
}

impl Sgd {
    pub fn new(vars: Vec<Var>, lr: f64) -> Self {
        Self {
            vars: vars.into_iter().map(|v| (v, None)).collect(),
            lr,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        }
    }

    pub fn with_momentum(mut self, momentum: f64, nesterov: bool) -> Self {
        self.momentum = momentum;
        self.nesterov = nesterov;
        self
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        for (var, buf) in &mut self.vars {
            let w = var.get();
            let Some(g) = grads.get(&w) else { continue };
            let w = w.detach();
            let mut g = g.detach();
            if self.weight_decay != 0.0 {
                g = g.add(&w.affine(self.weight_decay, 0.0)?)?;
            }
            if self.momentum != 0.0 {
                let b = match buf.take() {
                    Some(b) => b.affine(self.momentum, 0.0)?.add(&g)?,
                    None => g.clone(),
                };
                g = if self.nesterov {
                    g.add(&b.affine(self.momentum, 0.0)?)?
                } else {
                    b.clone()
                };
                *buf = Some(b);
            }
            var.set(&w.sub(&g.affine(self.lr, 0.0)?)?)?;
        }
        Ok(())
    }

    fn learning_rate(&self) -> f64 {
        self.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }
}

#[derive(Clone, Copy, Debug)]
pub struct AdamWConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    /// `torch.optim.AdamW`'s defaults.
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-2,
        }
    }
}

struct Moments {
    var: Var,
    m: Option<Tensor>,
    v: Option<Tensor>,
}

/// Adam with decoupled weight decay (Loshchilov & Hutter), as `torch.optim.AdamW`:
/// `w -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * w)`.
pub struct AdamW {
    vars: Vec<Moments>,
    cfg: AdamWConfig,
    t: i32,
}

impl AdamW {
    pub fn new(vars: Vec<Var>, cfg: AdamWConfig) -> Self {
        let vars = vars
            .into_iter()
            .map(|var| Moments {
                var,
                m: None,
                v: None,
            })
            .collect();
        Self { vars, cfg, t: 0 }
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.t += 1;
        let c = self.cfg;
        let bc1 = 1.0 - c.beta1.powi(self.t);
        let bc2 = 1.0 - c.beta2.powi(self.t);
        for mv in &mut self.vars {
            let w = mv.var.get();
            let Some(g) = grads.get(&w) else { continue };
            let (w, g) = (w.detach(), g.detach());
            let m = match mv.m.take() {
                Some(m) => m
                    .affine(c.beta1, 0.0)?
                    .add(&g.affine(1.0 - c.beta1, 0.0)?)?,
                None => g.affine(1.0 - c.beta1, 0.0)?,
            };
            let v = match mv.v.take() {
                Some(v) => v
                    .affine(c.beta2, 0.0)?
                    .add(&g.sqr()?.affine(1.0 - c.beta2, 0.0)?)?,
                None => g.sqr()?.affine(1.0 - c.beta2, 0.0)?,
            };
            let update = m
                .affine(1.0 / bc1, 0.0)?
                .div(&v.affine(1.0 / bc2, 0.0)?.sqrt()?.add_scalar(c.eps)?)?;
            let decayed = w.affine(1.0 - c.lr * c.weight_decay, 0.0)?;
            mv.var.set(&decayed.sub(&update.affine(c.lr, 0.0)?)?)?;
            mv.m = Some(m);
            mv.v = Some(v);
        }
        Ok(())
    }

    fn learning_rate(&self) -> f64 {
        self.cfg.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
}

//! Weights: fixed tensors and trainable variables.
//!
//! `hanzo-ml` tensors never change after creation, so training cannot update a weight in
//! place. A [`Var`] is instead a shared slot holding the current value; layers read it at
//! the start of each forward pass (one uncontended lock read) and the optimizer swaps in the
//! updated value after `backward`. Gradients are keyed by tensor id, so the value read in the
//! forward pass is exactly the one whose gradient the optimizer looks up.

use hanzo_ml::{DType, Device, Error, Result, Shape, Tensor};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

/// A trainable weight: a shared, replaceable tensor marked as a variable for autograd.
#[derive(Clone)]
pub struct Var(Arc<RwLock<Tensor>>);

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Var({:?})", self.get())
    }
}

impl Var {
    pub fn new(t: &Tensor) -> Self {
        Var(Arc::new(RwLock::new(t.detach().variable())))
    }

    /// The current value (a cheap handle; gradients of ops on it are recorded).
    pub fn get(&self) -> Tensor {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value; the new one must have the same shape and dtype.
    pub fn set(&self, t: &Tensor) -> Result<()> {
        let mut slot = self.0.write().unwrap_or_else(|e| e.into_inner());
        if t.shape() != slot.shape() {
            return Err(Error::ShapeMismatch {
                op: "Var::set",
                expected: slot.shape().clone(),
                got: t.shape().clone(),
            });
        }
        if t.dtype() != slot.dtype() {
            return Err(Error::DTypeMismatch {
                op: "Var::set",
                expected: slot.dtype(),
                got: t.dtype(),
            });
        }
        *slot = t.detach().variable();
        Ok(())
    }

    pub fn shape(&self) -> Shape {
        self.get().shape().clone()
    }
}

/// What a layer holds for each weight.
#[derive(Clone, Debug)]
pub enum Param {
    /// A loaded weight that training does not touch.
    Fixed(Tensor),
    Var(Var),
}

impl Param {
    pub fn get(&self) -> Tensor {
        match self {
            Param::Fixed(t) => t.clone(),
            Param::Var(v) => v.get(),
        }
    }

    pub fn as_var(&self) -> Option<&Var> {
        match self {
            Param::Var(v) => Some(v),
            Param::Fixed(_) => None,
        }
    }
}

impl From<Tensor> for Param {
    fn from(t: Tensor) -> Self {
        Param::Fixed(t)
    }
}

/// Named trainable variables, created on first request (through a `VarBuilder`) and shared
/// by every clone. Saves to and loads from safetensors.
#[derive(Clone, Default)]
pub struct VarMap(Arc<Mutex<BTreeMap<String, Var>>>);

impl VarMap {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Var>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The variable `name`, created with `init` if absent; an existing one must match `shape`.
    pub fn get_or_init(
        &self,
        name: &str,
        shape: &Shape,
        init: crate::Init,
        dtype: DType,
        device: &Device,
    ) -> Result<Var> {
        let mut vars = self.lock();
        if let Some(v) = vars.get(name) {
            if &v.shape() != shape {
                return Err(Error::Custom {
                    op: "VarMap".into(),
                    msg: format!(
                        "variable {name} exists with shape {:?}, requested {:?}",
                        v.shape().dims(),
                        shape.dims()
                    ),
                });
            }
            return Ok(v.clone());
        }
        let v = Var::new(&init.tensor(shape, dtype, device)?);
        vars.insert(name.to_string(), v.clone());
        Ok(v)
    }

    /// All variables, sorted by name.
    pub fn vars(&self) -> Vec<(String, Var)> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn all_vars(&self) -> Vec<Var> {
        self.lock().values().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Option<Var> {
        self.lock().get(name).cloned()
    }

    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let vars = self.vars();
        let tensors: Vec<(String, Tensor)> =
            vars.iter().map(|(k, v)| (k.clone(), v.get())).collect();
        hanzo_ml::io::safetensors::save(tensors.iter().map(|(k, t)| (k, t)), path)
    }

    /// Overwrites every variable from a safetensors file; a missing name or a shape change
    /// is an error, and on error no variable has been changed.
    pub fn load(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let file = hanzo_ml::io::safetensors::load(path)?;
        let vars = self.vars();
        let mut updates = Vec::with_capacity(vars.len());
        for (name, var) in &vars {
            let t = file.get(name).ok_or_else(|| Error::Custom {
                op: "VarMap::load".into(),
                msg: format!("no tensor named {name} in the file"),
            })?;
            if t.shape() != &var.shape() {
                return Err(Error::ShapeMismatch {
                    op: "VarMap::load",
                    expected: var.shape(),
                    got: t.shape().clone(),
                });
            }
            updates.push((var, t.to_dtype(var.get().dtype())?));
        }
        for (var, t) in updates {
            var.set(&t)?;
        }
        Ok(())
    }
}

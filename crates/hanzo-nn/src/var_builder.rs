//! `VarBuilder`: where layers get their weights, by dotted name under a prefix.
//!
//! The same layer constructor loads from safetensors (memory-mapped), from a GGUF file
//! (quantized weights stay quantized for `QLinear`), from an in-memory map, or creates
//! trainable variables in a [`VarMap`]. A missing name or a shape that differs from what the
//! layer expects is an error naming the tensor.

use crate::{Init, Param, VarMap};
use hanzo_ml::io::safetensors::ShardedSafetensors;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_ml::quantized::QTensor;
use hanzo_ml::{DType, Device, Error, Result, Shape, Tensor};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A store of named weights.
pub trait VarSource: Send + Sync {
    /// The tensor `name` with `shape` (`init` is used only by stores that create weights).
    fn get(
        &self,
        name: &str,
        shape: &Shape,
        init: Init,
        dtype: DType,
        dev: &Device,
    ) -> Result<Param>;
    /// The tensor `name` with whatever shape it is stored with.
    fn get_any(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor>;
    fn contains(&self, name: &str) -> bool;
    /// The raw quantized tensor, for stores that hold one.
    fn qtensor(&self, _name: &str) -> Result<Option<QTensor>> {
        Ok(None)
    }
}

fn missing(name: &str) -> Error {
    Error::Custom {
        op: "VarBuilder".into(),
        msg: format!("no tensor named {name}"),
    }
}

fn check_shape(name: &str, t: Tensor, shape: &Shape) -> Result<Tensor> {
    if t.shape() != shape {
        return Err(Error::Custom {
            op: "VarBuilder".into(),
            msg: format!(
                "{name}: expected shape {:?}, stored shape {:?}",
                shape.dims(),
                t.dims()
            ),
        });
    }
    Ok(t)
}

impl VarSource for VarMap {
    fn get(
        &self,
        name: &str,
        shape: &Shape,
        init: Init,
        dtype: DType,
        dev: &Device,
    ) -> Result<Param> {
        Ok(Param::Var(self.get_or_init(name, shape, init, dtype, dev)?))
    }
    fn get_any(&self, name: &str, _: DType, _: &Device) -> Result<Tensor> {
        VarMap::get(self, name)
            .map(|v| v.get())
            .ok_or_else(|| missing(name))
    }
    fn contains(&self, name: &str) -> bool {
        VarMap::get(self, name).is_some()
    }
}

impl VarSource for HashMap<String, Tensor> {
    fn get(&self, name: &str, shape: &Shape, _: Init, dtype: DType, dev: &Device) -> Result<Param> {
        let t = self.get_any(name, dtype, dev)?;
        Ok(Param::Fixed(check_shape(name, t, shape)?))
    }
    fn get_any(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        let t = HashMap::get(self, name).ok_or_else(|| missing(name))?;
        t.to_dtype(dtype)?.to_device(dev)
    }
    fn contains(&self, name: &str) -> bool {
        self.contains_key(name)
    }
}

/// One or more memory-mapped safetensors files (sharded checkpoints).
pub type SafetensorsSource = ShardedSafetensors;

impl VarSource for SafetensorsSource {
    fn get(&self, name: &str, shape: &Shape, _: Init, dtype: DType, dev: &Device) -> Result<Param> {
        let t = self.get_any(name, dtype, dev)?;
        Ok(Param::Fixed(check_shape(name, t, shape)?))
    }
    fn get_any(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        let t = ShardedSafetensors::get(self, name).ok_or_else(|| missing(name))??;
        t.to_dtype(dtype)?.to_device(dev)
    }
    fn contains(&self, name: &str) -> bool {
        ShardedSafetensors::contains(self, name)
    }
}

impl VarSource for GgufFile {
    fn get(&self, name: &str, shape: &Shape, _: Init, dtype: DType, dev: &Device) -> Result<Param> {
        let t = self.get_any(name, dtype, dev)?;
        Ok(Param::Fixed(check_shape(name, t, shape)?))
    }
    fn get_any(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        if !self.contains(name) {
            return Err(missing(name));
        }
        self.tensor(name)?
            .dequantize()?
            .to_dtype(dtype)?
            .to_device(dev)
    }
    fn contains(&self, name: &str) -> bool {
        self.tensor_infos().iter().any(|t| t.name == name)
    }
    fn qtensor(&self, name: &str) -> Result<Option<QTensor>> {
        if !self.contains(name) {
            return Err(missing(name));
        }
        self.tensor(name).map(Some)
    }
}

/// A view of a [`VarSource`] under a name prefix, with the dtype and device new tensors get.
#[derive(Clone)]
pub struct VarBuilder {
    source: Arc<dyn VarSource>,
    path: Vec<String>,
    dtype: DType,
    device: Device,
}

impl VarBuilder {
    pub fn from_source(source: Arc<dyn VarSource>, dtype: DType, device: &Device) -> Self {
        Self {
            source,
            path: Vec::new(),
            dtype,
            device: device.clone(),
        }
    }

    /// Trainable variables, created in `map` with each layer's initialiser.
    pub fn from_varmap(map: &VarMap, dtype: DType, device: &Device) -> Self {
        Self::from_source(Arc::new(map.clone()), dtype, device)
    }

    pub fn from_tensors(tensors: HashMap<String, Tensor>, dtype: DType, device: &Device) -> Self {
        Self::from_source(Arc::new(tensors), dtype, device)
    }

    /// Memory-mapped safetensors files (all shards of one checkpoint).
    pub fn from_safetensors<P: AsRef<Path>>(
        paths: &[P],
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        Ok(Self::from_source(
            Arc::new(SafetensorsSource::open(paths)?),
            dtype,
            device,
        ))
    }

    /// A GGUF file: `get` dequantizes, `qtensor` hands out the quantized blocks.
    pub fn from_gguf(file: GgufFile, dtype: DType, device: &Device) -> Self {
        Self::from_source(Arc::new(file), dtype, device)
    }

    /// The builder one level down: `vb.pp("layers").pp(3)` names `layers.3.*`.
    pub fn pp(&self, name: impl ToString) -> Self {
        let mut b = self.clone();
        b.path.push(name.to_string());
        b
    }

    pub fn with_dtype(&self, dtype: DType) -> Self {
        Self {
            dtype,
            ..self.clone()
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The full dotted name of `name` under this prefix.
    pub fn full_name(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path.join("."))
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.source.contains(&self.full_name(name))
    }

    pub fn get(&self, shape: impl Into<Shape>, name: &str) -> Result<Param> {
        self.get_with_init(shape, name, Init::DEFAULT_WEIGHT)
    }

    pub fn get_with_init(&self, shape: impl Into<Shape>, name: &str, init: Init) -> Result<Param> {
        let shape = shape.into();
        self.source.get(
            &self.full_name(name),
            &shape,
            init,
            self.dtype,
            &self.device,
        )
    }

    /// A stored tensor whatever its shape (for loaders that read shapes from the file).
    pub fn get_any(&self, name: &str) -> Result<Tensor> {
        self.source
            .get_any(&self.full_name(name), self.dtype, &self.device)
    }

    pub fn qtensor(&self, name: &str) -> Result<Option<QTensor>> {
        self.source.qtensor(&self.full_name(name))
    }
}

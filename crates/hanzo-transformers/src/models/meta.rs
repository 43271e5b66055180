//! What a model loader reads, whatever file it came from: `{arch}.*` hyper-parameters and
//! tensors under GGUF's names, with errors that name the missing key or tensor, and the
//! [`WeightMode`] that decides how matmul weights are held in memory.

use super::ModelInfo;
use crate::{Error, Result};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use hanzo_ml::quantized::isq::quantize_weight;
use hanzo_ml::quantized::{GgmlDType, QMatMul, QTensor};
use hanzo_ml::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// How matmul weights are held once loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightMode {
    /// As the file stores them: quantized blocks run through `QMatMul`, float weights through
    /// the f32 matmul.
    #[default]
    AsStored,
    /// Everything dequantized to f32 (slow, large; the reference path for checking numerics).
    F32,
    /// Float weights quantized to this type at load (ISQ); already-quantized ones kept.
    Quantize(GgmlDType),
}

/// Named tensors in some file format, under GGUF's names.
pub trait TensorSource {
    fn has(&self, name: &str) -> bool;
    fn get(&self, name: &str) -> Result<QTensor>;
}

impl TensorSource for GgufFile {
    fn has(&self, name: &str) -> bool {
        self.content().tensor_info(name).is_some()
    }

    fn get(&self, name: &str) -> Result<QTensor> {
        Ok(self.tensor(name)?)
    }
}

/// Hyper-parameters: a GGUF file's metadata, or keys derived from a `config.json`.
pub enum Params<'a> {
    File(&'a GgufFile),
    Map(HashMap<String, Value>),
}

impl Params<'_> {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Params::File(f) => f.get(key),
            Params::Map(m) => m.get(key),
        }
    }
}

/// The sizes every decoder architecture reads the same way, checked once.
pub struct DecoderShape {
    pub hidden: usize,
    pub layers: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl DecoderShape {
    pub fn info(&self, architecture: &str, vocab_size: usize, context_length: usize) -> ModelInfo {
        ModelInfo {
            architecture: architecture.to_string(),
            vocab_size,
            context_length,
            hidden_size: self.hidden,
            layers: self.layers,
            kv_row: self.kv_heads * self.head_dim,
            q_row: self.heads * self.head_dim,
            ffn_size: self.ffn,
        }
    }
}

pub struct Gguf<'a> {
    pub arch: String,
    params: Params<'a>,
    tensors: &'a dyn TensorSource,
    pub mode: WeightMode,
}

impl<'a> Gguf<'a> {
    pub fn new(file: &'a GgufFile) -> Result<Self> {
        let arch = file
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::model("gguf", "no general.architecture"))?
            .to_string();
        Ok(Self {
            arch,
            params: Params::File(file),
            tensors: file,
            mode: WeightMode::AsStored,
        })
    }

    /// A model description from derived parameters and another tensor source.
    pub fn from_parts(
        arch: String,
        params: Params<'a>,
        tensors: &'a dyn TensorSource,
        mode: WeightMode,
    ) -> Self {
        Self {
            arch,
            params,
            tensors,
            mode,
        }
    }

    pub fn with_mode(mut self, mode: WeightMode) -> Self {
        self.mode = mode;
        self
    }

    /// Hidden size, layer count, FFN width and the (grouped) attention heads.
    pub fn decoder_shape(&self) -> Result<DecoderShape> {
        let hidden = self.usize("embedding_length")?;
        let heads = self.usize("attention.head_count")?;
        let kv_heads = self.opt_usize("attention.head_count_kv")?.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(Error::model(
                &self.arch,
                format!("{heads} heads do not group over {kv_heads} KV heads"),
            ));
        }
        Ok(DecoderShape {
            hidden,
            layers: self.usize("block_count")?,
            ffn: self.usize("feed_forward_length")?,
            heads,
            kv_heads,
            head_dim: self
                .opt_usize("attention.key_length")?
                .unwrap_or(hidden / heads),
        })
    }

    /// The token embedding `[vocab, hidden]` and the output projection, tied to the embedding
    /// when the file has no `output.weight`.
    pub fn embedding_and_output(&self, hidden: usize) -> Result<(Embedding, QMatMul)> {
        let embed = Arc::new(self.weight("token_embd.weight")?);
        let vocab = embed.shape().dims()[0];
        if embed.shape().dims() != [vocab, hidden] {
            return Err(Error::model(
                &self.arch,
                format!("token_embd.weight has shape {:?}", embed.shape().dims()),
            ));
        }
        Ok(if self.has_tensor("output.weight") {
            let output = self.matmul("output.weight", vocab, hidden)?;
            (Embedding::Own(embed), output)
        } else {
            let output = self.matmul_of(embed)?;
            (Embedding::Tied(output.clone()), output)
        })
    }

    /// `{arch}.{key}` as a string.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.value(key).and_then(Value::as_str)
    }

    fn value(&self, key: &str) -> Option<&Value> {
        self.params.get(&format!("{}.{key}", self.arch))
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?
            .ok_or_else(|| Error::model(&self.arch, format!("missing {}.{key}", self.arch)))
    }

    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.value(key) {
            None => Ok(None),
            // Some files store per-layer arrays (e.g. head counts); all equal here.
            Some(Value::Array(a)) => {
                let v = a.to_i64s().unwrap_or_default();
                match v.first() {
                    Some(&x) if v.iter().all(|&y| y == x) && x >= 0 => Ok(Some(x as usize)),
                    _ => Err(Error::model(
                        &self.arch,
                        format!("{}.{key}: per-layer values are not supported", self.arch),
                    )),
                }
            }
            Some(v) => v.to_usize().map(Some).ok_or_else(|| {
                Error::model(&self.arch, format!("{}.{key} is not a count", self.arch))
            }),
        }
    }

    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.value(key) {
            None => Ok(default),
            Some(v) => v.to_f64().ok_or_else(|| {
                Error::model(&self.arch, format!("{}.{key} is not a number", self.arch))
            }),
        }
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensors.has(name)
    }

    /// A tensor as stored.
    pub fn qtensor(&self, name: &str) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(Error::model(&self.arch, format!("missing tensor {name}")));
        }
        self.tensors.get(name)
    }

    /// A weight matrix as the mode wants it stored (the token embedding, which is both
    /// gathered from and, when tied, multiplied by).
    pub fn weight(&self, name: &str) -> Result<QTensor> {
        let q = self.qtensor(name)?;
        Ok(match self.mode {
            WeightMode::Quantize(t) if !q.dtype().is_quantized() => {
                quantize_weight(&q.dequantize()?, t)?
            }
            _ => q,
        })
    }

    /// The matmul over an already loaded weight.
    pub fn matmul_of(&self, w: Arc<QTensor>) -> Result<QMatMul> {
        Ok(match self.mode {
            WeightMode::F32 => QMatMul::Dense(w.dequantize()?),
            _ => QMatMul::from_arc(w)?,
        })
    }

    /// A weight `[out, in]`, checked against the expected shape.
    pub fn matmul(&self, name: &str, out_dim: usize, in_dim: usize) -> Result<QMatMul> {
        let q = self.weight(name)?;
        if q.shape().dims() != [out_dim, in_dim] {
            return Err(Error::model(
                &self.arch,
                format!(
                    "tensor {name} has shape {:?}, expected [{out_dim}, {in_dim}]",
                    q.shape().dims()
                ),
            ));
        }
        self.matmul_of(Arc::new(q))
    }

    /// A small dense tensor (norm weights, biases) as f32, checked against `len`.
    pub fn vector(&self, name: &str, len: usize) -> Result<Tensor> {
        let q = self.qtensor(name)?;
        if q.elem_count() != len {
            return Err(Error::model(
                &self.arch,
                format!(
                    "tensor {name} has shape {:?}, expected [{len}]",
                    q.shape().dims()
                ),
            ));
        }
        Ok(q.dequantize()?.reshape(len)?)
    }

    pub fn opt_vector(&self, name: &str, len: usize) -> Result<Option<Tensor>> {
        if self.has_tensor(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// The token embedding table `[vocab, hidden]`. A tied one is read through the output head,
/// which may have repacked the weight and let its stored pages go.
pub enum Embedding {
    Own(Arc<QTensor>),
    Tied(QMatMul),
}

impl Embedding {
    pub fn vocab(&self) -> usize {
        match self {
            Embedding::Own(t) => t.shape().dims()[0],
            Embedding::Tied(w) => w.weight_dims().0,
        }
    }

    /// Rows `ids` as an f32 `[ids.len(), hidden]` tensor.
    pub fn rows(&self, ids: &[u32]) -> Result<Tensor> {
        Ok(match self {
            Embedding::Own(t) => t.dequantize_rows(ids)?,
            Embedding::Tied(w) => w.dequantize_rows(ids)?,
        })
    }
}

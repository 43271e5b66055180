//! BERT-family encoders (BERT, MiniLM, BGE, E5) from safetensors + config.json: embeddings
//! (word + position + token type) → post-norm transformer layers with bidirectional
//! attention over the non-padding tokens.

use crate::{Error, Result};
use hanzo_ml::{AttentionMask, DType, Device, Tensor};
use hanzo_nn::{Activation, Embedding, LayerNorm, Linear, Module, VarBuilder};
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    #[serde(default = "default_types")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_types() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    inter: Linear,
    out: Linear,
    out_norm: LayerNorm,
}

pub struct Bert {
    pub config: BertConfig,
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    act: Activation,
}

impl Bert {
    pub fn load(vb: &VarBuilder, config: BertConfig) -> Result<Self> {
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(Error::model(
                "bert",
                format!(
                    "hidden size {} does not split into {} heads",
                    config.hidden_size, config.num_attention_heads
                ),
            ));
        }
        // Checkpoints saved from BertForX carry a `bert.` prefix; sentence-transformers' do not.
        let vb = if vb.contains("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb.clone()
        };
        let (h, c) = (config.hidden_size, &config);
        let e = vb.pp("embeddings");
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let l = vb.pp("encoder.layer").pp(i);
            let a = l.pp("attention");
            layers.push(Layer {
                q: Linear::load(h, h, true, &a.pp("self.query"))?,
                k: Linear::load(h, h, true, &a.pp("self.key"))?,
                v: Linear::load(h, h, true, &a.pp("self.value"))?,
                attn_out: Linear::load(h, h, true, &a.pp("output.dense"))?,
                attn_norm: LayerNorm::load(h, c.layer_norm_eps, &a.pp("output.LayerNorm"))?,
                inter: Linear::load(h, c.intermediate_size, true, &l.pp("intermediate.dense"))?,
                out: Linear::load(c.intermediate_size, h, true, &l.pp("output.dense"))?,
                out_norm: LayerNorm::load(h, c.layer_norm_eps, &l.pp("output.LayerNorm"))?,
            });
        }
        Ok(Self {
            word: Embedding::load(c.vocab_size, h, &e.pp("word_embeddings"))?,
            position: Embedding::load(c.max_position_embeddings, h, &e.pp("position_embeddings"))?,
            token_type: Embedding::load(c.type_vocab_size, h, &e.pp("token_type_embeddings"))?,
            emb_norm: LayerNorm::load(h, c.layer_norm_eps, &e.pp("LayerNorm"))?,
            act: Activation::from_name(&c.hidden_act)?,
            layers,
            config,
        })
    }

    /// Hidden states `[b, t, hidden]` for `ids` `[b, t]` (u32) with `mask` `[b, t]`
    /// (1 = token, 0 = padding).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let c = &self.config;
        if t > c.max_position_embeddings {
            return Err(Error::ContextFull {
                needed: t,
                limit: c.max_position_embeddings,
            });
        }
        let dev = Device::Cpu;
        let pos = Tensor::arange(0u32, t as u32, &dev)?
            .unsqueeze(0)?
            .broadcast_as((b, t))?;
        let types = Tensor::zeros((b, t), DType::U32, &dev)?;
        let mut x = self
            .word
            .forward(ids)?
            .add(&self.position.forward(&pos.contiguous()?)?)?
            .add(&self.token_type.forward(&types)?)?;
        x = self.emb_norm.forward(&x)?;
        let heads = c.num_attention_heads;
        let hd = c.hidden_size / heads;
        // Padding keys get -inf: [b, 1, 1, t].
        let additive = mask
            .to_dtype(DType::F32)?
            .affine(1.0, -1.0)?
            .affine(1e30, 0.0)?
            .reshape((b, 1, 1, t))?;
        let split = |y: Tensor| -> Result<Tensor> {
            Ok(y.reshape((b, t, heads, hd))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        for l in &self.layers {
            let q = split(l.q.forward(&x)?)?;
            let k = split(l.k.forward(&x)?)?;
            let v = split(l.v.forward(&x)?)?;
            let a = Tensor::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                AttentionMask::Additive(&additive),
                None,
            )?;
            let a = a
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b, t, c.hidden_size))?;
            x = l.attn_norm.forward(&l.attn_out.forward(&a)?.add(&x)?)?;
            let m = self.act.forward(&l.inter.forward(&x)?)?;
            x = l.out_norm.forward(&l.out.forward(&m)?.add(&x)?)?;
        }
        Ok(x)
    }
}

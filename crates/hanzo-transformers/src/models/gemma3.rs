//! Gemma 3 (text): interleaved sliding-window and global attention layers with their own
//! RoPE bases, RMS-normed queries and keys, norms both before and after attention and MLP,
//! embeddings scaled by sqrt(hidden), GELU-tanh gated MLP, tied output embedding.
//!
//! GGUF norm weights already include Gemma's `1 + w` offset (the converter adds it).

use super::attention::{attention, Dims, Window};
use super::meta::{Embedding, Gguf};
use super::numerics::{geglu, rope_tables};
use super::{check_tokens, output_logits, rope_heads, Cache, LanguageModel, Logits, ModelInfo};
use crate::Result;
use hanzo_ml::quantized::QMatMul;
use hanzo_ml::{RopeKind, Tensor};

struct Layer {
    attn_norm: Tensor,
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    o: QMatMul,
    q_norm: Tensor,
    k_norm: Tensor,
    post_attn_norm: Tensor,
    ffn_norm: Tensor,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    post_ffn_norm: Tensor,
    window: Window,
}

pub struct Gemma3 {
    info: ModelInfo,
    embed: Embedding,
    output: QMatMul,
    final_norm: Tensor,
    layers: Vec<Layer>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f64,
    attn_scale: f64,
    rope_base: f32,
    /// Position multiplier of the global layers (1 / linear scaling factor).
    rope_scale: f32,
}

/// Every `SWA_PATTERN`-th layer is global; the others use the sliding window.
const SWA_PATTERN: usize = 6;
/// RoPE base of the sliding-window layers (fixed by the architecture, not in the file).
const LOCAL_ROPE_BASE: f64 = 10_000.0;

impl Gemma3 {
    pub(crate) fn from_gguf(g: &Gguf) -> Result<Self> {
        let shape = g.decoder_shape()?;
        let super::meta::DecoderShape {
            hidden,
            layers: n_layers,
            ffn,
            heads,
            kv_heads,
            head_dim,
        } = shape;
        let eps = g.f64_or("attention.layer_norm_rms_epsilon", 1e-6)?;
        let window = g.opt_usize("attention.sliding_window")?;
        let ctx = g.opt_usize("context_length")?.unwrap_or(32_768);
        let base = g.f64_or("rope.freq_base", 1_000_000.0)?;
        let factor = g.f64_or("rope.scaling.factor", 1.0)?.max(1.0);
        let (embed, output) = g.embedding_and_output(hidden)?;
        let vocab = embed.vocab();
        let mut layers = Vec::with_capacity(n_layers);
        for i in 0..n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let sliding = !(i + 1).is_multiple_of(SWA_PATTERN);
            layers.push(Layer {
                attn_norm: g.vector(&n("attn_norm"), hidden)?,
                q: g.matmul(&n("attn_q"), heads * head_dim, hidden)?,
                k: g.matmul(&n("attn_k"), kv_heads * head_dim, hidden)?,
                v: g.matmul(&n("attn_v"), kv_heads * head_dim, hidden)?,
                o: g.matmul(&n("attn_output"), hidden, heads * head_dim)?,
                q_norm: g.vector(&n("attn_q_norm"), head_dim)?,
                k_norm: g.vector(&n("attn_k_norm"), head_dim)?,
                post_attn_norm: g.vector(&n("post_attention_norm"), hidden)?,
                ffn_norm: g.vector(&n("ffn_norm"), hidden)?,
                gate: g.matmul(&n("ffn_gate"), ffn, hidden)?,
                up: g.matmul(&n("ffn_up"), ffn, hidden)?,
                down: g.matmul(&n("ffn_down"), hidden, ffn)?,
                post_ffn_norm: g.vector(&n("post_ffw_norm"), hidden)?,
                window: match (sliding, window) {
                    (true, Some(w)) => Window::Sliding(w),
                    _ => Window::Full,
                },
            });
        }
        // Gemma 3 scales queries by query_pre_attn_scalar^-1/2, which equals head_dim for
        // the released text models.
        let attn_scale = 1.0 / (head_dim as f64).sqrt();
        Ok(Self {
            info: shape.info("gemma3", vocab, ctx),
            embed,
            output,
            final_norm: g.vector("output_norm.weight", hidden)?,
            layers,
            heads,
            kv_heads,
            head_dim,
            eps,
            attn_scale,
            rope_base: base as f32,
            rope_scale: (1.0 / factor) as f32,
        })
    }
}

impl LanguageModel for Gemma3 {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn forward(&self, tokens: &[u32], cache: &mut Cache, logits: Logits) -> Result<Tensor> {
        check_tokens(tokens, self.info.vocab_size)?;
        let t = tokens.len();
        cache.check_room(t)?;
        let start = cache.len;
        let pos = start..start + t;
        let hd = self.head_dim;
        let global = rope_tables(self.rope_base, hd, self.rope_scale, None, pos.clone())?;
        let local = rope_tables(LOCAL_ROPE_BASE as f32, hd, 1.0, None, pos)?;
        let eps = self.eps;
        let dims = Dims {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: hd,
        };
        let mut x = self
            .embed
            .rows(tokens)?
            .affine((self.info.hidden_size as f64).sqrt(), 0.0)?;
        for (layer, kv) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let (cos, sin) = match layer.window {
                Window::Full => (&global.0, &global.1),
                Window::Sliding(_) => (&local.0, &local.1),
            };
            let h = x.rms_norm(&layer.attn_norm, eps)?;
            let [q, k, v] = QMatMul::forward_many(&[&layer.q, &layer.k, &layer.v], &h)?
                .try_into()
                .expect("three products");
            // Per-head RMS norm, then rotary embedding: [t, heads, head_dim].
            let heads = |y: Tensor, n: usize, norm: &Tensor| -> Result<Tensor> {
                let y = y.reshape((t, n, hd))?.rms_norm(norm, eps)?;
                rope_heads(&y, cos, sin, RopeKind::HalfSplit)
            };
            let q = heads(q, self.heads, &layer.q_norm)?.affine(self.attn_scale, 0.0)?;
            let k = heads(k, self.kv_heads, &layer.k_norm)?;
            kv.append(&k.to_vec_flat()?, &v.to_vec_flat()?, t);
            let a = attention(&q.to_vec_flat()?, kv, start, layer.window, dims);
            let a = Tensor::from_vec(a, (t, self.heads * hd), &hanzo_ml::Device::Cpu)?;
            let a = layer.o.forward(&a)?.rms_norm(&layer.post_attn_norm, eps)?;
            x = x.add(&a)?;
            let h = x.rms_norm(&layer.ffn_norm, eps)?;
            let [gate, up] = QMatMul::forward_many(&[&layer.gate, &layer.up], &h)?
                .try_into()
                .expect("two products");
            let m = geglu(&gate, &up)?;
            let y = layer
                .down
                .forward(&m)?
                .rms_norm(&layer.post_ffn_norm, eps)?;
            x = x.add(&y)?;
        }
        cache.len += t;
        let x = match logits {
            Logits::Last => x.narrow(0, t - 1, 1)?,
            Logits::All => x,
        };
        let x = x.rms_norm(&self.final_norm, eps)?;
        output_logits(&self.output, &x, t)
    }
}

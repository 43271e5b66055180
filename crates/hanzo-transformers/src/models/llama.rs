//! The Llama family from GGUF (or a safetensors directory presented as GGUF, see `hf`): Llama 2/3/3.x, Mistral, SmolLM (`llama`), Qwen2/2.5 (`qwen2`,
//! biased Q/K/V), Qwen3 (`qwen3`, RMS-normed Q/K). Pre-norm blocks, RoPE, grouped-query
//! attention, SiLU-gated MLP; output tied to the embedding when the file has no
//! `output.weight`. Phi-3 (`phi3`) is the same block with fused QKV and gate/up matmuls.

use super::attention::{attention, Dims, Window};
use super::meta::{Embedding, Gguf};
use super::{check_tokens, output_logits, rope_heads, Cache, LanguageModel, Logits, ModelInfo};
use crate::{Error, Result};
use hanzo_ml::quantized::QMatMul;
use hanzo_ml::{Device, RopeKind, Tensor};
use hanzo_nn::{RopeScaling, RotaryEmbedding};

struct Proj {
    w: QMatMul,
    bias: Option<Tensor>,
}

impl Proj {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.bias(&self.w.forward(x)?)
    }

    /// `y` (this projection's product) plus the bias, if any.
    fn bias(&self, y: &Tensor) -> Result<Tensor> {
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y.clone(),
        })
    }
}

/// Q, K and V projections: separate, or one fused `[q | k | v]` matmul (Phi-3).
enum Qkv {
    Split { q: Proj, k: Proj, v: Proj },
    Fused(Proj),
}

/// The gated MLP's input projections: separate, or one fused `[gate | up]` matmul (Phi-3).
enum GateUp {
    Split { gate: QMatMul, up: QMatMul },
    Fused(QMatMul),
}

struct Layer {
    attn_norm: Tensor,
    qkv: Qkv,
    o: QMatMul,
    qk_norm: Option<(Tensor, Tensor)>,
    ffn_norm: Tensor,
    gate_up: GateUp,
    down: QMatMul,
}

pub struct Llama {
    info: ModelInfo,
    embed: Embedding,
    output: QMatMul,
    final_norm: Tensor,
    layers: Vec<Layer>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f64,
    rope: RotaryEmbedding,
    rope_kind: RopeKind,
    window: Window,
}

impl Llama {
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
        let rot_dim = g.opt_usize("rope.dimension_count")?.unwrap_or(head_dim);
        let eps = g.f64_or("attention.layer_norm_rms_epsilon", 1e-5)?;
        let ctx = g.opt_usize("context_length")?.unwrap_or(4096);
        let base = g.f64_or("rope.freq_base", 10_000.0)?;
        let scaling = match g.str("rope.scaling.type") {
            None | Some("none") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear {
                factor: g.f64_or("rope.scaling.factor", 1.0)?,
            },
            // GGUF files carry Llama 3.1 scaling as a rope_freqs tensor; config.json as keys.
            Some("llama3") => RopeScaling::Llama3 {
                factor: g.f64_or("rope.scaling.factor", 8.0)?,
                low_freq_factor: g.f64_or("rope.scaling.low_freq_factor", 1.0)?,
                high_freq_factor: g.f64_or("rope.scaling.high_freq_factor", 4.0)?,
                original_max_position: g
                    .opt_usize("rope.scaling.original_context_length")?
                    .unwrap_or(8192),
            },
            Some("yarn") => RopeScaling::Yarn {
                factor: g.f64_or("rope.scaling.factor", 1.0)?,
                original_max_position: g
                    .opt_usize("rope.scaling.original_context_length")?
                    .unwrap_or(ctx),
                beta_fast: 32.0,
                beta_slow: 1.0,
                attention_factor: None,
            },
            Some(other) => {
                return Err(Error::model(
                    &g.arch,
                    format!("rope scaling {other:?} is not supported"),
                ))
            }
        };
        // ggml's "norm" rope rotates adjacent pairs; the converter permutes Llama's Q/K rows
        // for it. Qwen files keep Hugging Face's half-split layout ("neox").
        let rope_kind = match g.arch.as_str() {
            "llama" | "mistral" => RopeKind::Interleaved,
            _ => RopeKind::HalfSplit,
        };
        // Phi-3 128k ("LongRoPE"): per-frequency factors, the short ones within the original
        // context. The long ones would need a rope table per context size; we cap the
        // context at the original length instead.
        let long_rope = g.has_tensor("rope_factors_short.weight");
        let ctx = match g.opt_usize("rope.scaling.original_context_length")? {
            Some(orig) if long_rope => ctx.min(orig),
            _ => ctx,
        };
        let mut rope = RotaryEmbedding::new(base, rot_dim, &scaling, rope_kind)?;
        for factors in ["rope_freqs.weight", "rope_factors_short.weight"] {
            if g.has_tensor(factors) {
                let f = g.qtensor(factors)?.dequantize_f32()?;
                rope = rope.with_freq_factors(&f)?;
            }
        }
        let (embed, output) = g.embedding_and_output(hidden)?;
        let vocab = embed.vocab();
        let mut layers = Vec::with_capacity(n_layers);
        for i in 0..n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let proj = |s: &str, out: usize| -> Result<Proj> {
                Ok(Proj {
                    w: g.matmul(&n(s), out, hidden)?,
                    bias: g.opt_vector(&format!("blk.{i}.{s}.bias"), out)?,
                })
            };
            let qk_norm = match g.opt_vector(&n("attn_q_norm"), head_dim)? {
                Some(qn) => Some((qn, g.vector(&n("attn_k_norm"), head_dim)?)),
                None => None,
            };
            let (q_rows, kv_rows) = (heads * head_dim, kv_heads * head_dim);
            let qkv = if g.has_tensor(&n("attn_qkv")) {
                Qkv::Fused(proj("attn_qkv", q_rows + 2 * kv_rows)?)
            } else {
                Qkv::Split {
                    q: proj("attn_q", q_rows)?,
                    k: proj("attn_k", kv_rows)?,
                    v: proj("attn_v", kv_rows)?,
                }
            };
            // Phi-3 stores gate and up as one [2 * ffn, hidden] `ffn_up` with no `ffn_gate`.
            let gate_up = if g.has_tensor(&n("ffn_gate")) {
                GateUp::Split {
                    gate: g.matmul(&n("ffn_gate"), ffn, hidden)?,
                    up: g.matmul(&n("ffn_up"), ffn, hidden)?,
                }
            } else {
                GateUp::Fused(g.matmul(&n("ffn_up"), 2 * ffn, hidden)?)
            };
            layers.push(Layer {
                attn_norm: g.vector(&n("attn_norm"), hidden)?,
                qkv,
                o: g.matmul(&n("attn_output"), hidden, q_rows)?,
                qk_norm,
                ffn_norm: g.vector(&n("ffn_norm"), hidden)?,
                gate_up,
                down: g.matmul(&n("ffn_down"), hidden, ffn)?,
            });
        }
        let window = match g.opt_usize("attention.sliding_window")? {
            Some(w) if w > 0 && w < ctx => Window::Sliding(w),
            _ => Window::Full,
        };
        Ok(Self {
            info: shape.info(&g.arch, vocab, ctx),
            embed,
            output,
            final_norm: g.vector("output_norm.weight", hidden)?,
            layers,
            heads,
            kv_heads,
            head_dim,
            eps,
            rope,
            rope_kind,
            window,
        })
    }
}

impl LanguageModel for Llama {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn forward(&self, tokens: &[u32], cache: &mut Cache, logits: Logits) -> Result<Tensor> {
        check_tokens(tokens, self.info.vocab_size)?;
        let t = tokens.len();
        cache.check_room(t)?;
        let start = cache.len;
        let positions: Vec<usize> = (start..start + t).collect();
        let (cos, sin) = self.rope.cos_sin(&positions, &Device::Cpu)?;
        let (hd, eps) = (self.head_dim, self.eps);
        let dims = Dims {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: hd,
        };
        let scale = 1.0 / (hd as f64).sqrt();
        let mut x = self.embed.rows(tokens)?;
        for (layer, kv) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let h = x.rms_norm(&layer.attn_norm, eps)?;
            let (qn, kn) = match &layer.qk_norm {
                Some((q, k)) => (Some(q), Some(k)),
                None => (None, None),
            };
            let (q, k, v) = match &layer.qkv {
                Qkv::Split { q, k, v } => {
                    let ys = QMatMul::forward_many(&[&q.w, &k.w, &v.w], &h)?;
                    let [q, k, v] = [(q, &ys[0]), (k, &ys[1]), (v, &ys[2])].map(|(p, y)| p.bias(y));
                    (q?, k?, v?)
                }
                Qkv::Fused(p) => {
                    let y = p.forward(&h)?;
                    let (qr, kr) = (self.heads * hd, self.kv_heads * hd);
                    (
                        y.narrow(1, 0, qr)?,
                        y.narrow(1, qr, kr)?,
                        y.narrow(1, qr + kr, kr)?,
                    )
                }
            };
            let heads = |y: Tensor, n: usize, norm: Option<&Tensor>| -> Result<Tensor> {
                let mut y = y.contiguous()?.reshape((t, n, hd))?;
                if let Some(w) = norm {
                    y = y.rms_norm(w, eps)?;
                }
                rope_heads(&y, &cos, &sin, self.rope_kind)
            };
            let q = heads(q, self.heads, qn)?.affine(scale, 0.0)?;
            let k = heads(k, self.kv_heads, kn)?;
            let v = v.contiguous()?;
            kv.append(&k.to_vec_flat()?, &v.to_vec_flat()?, t);
            let a = attention(&q.to_vec_flat()?, kv, start, self.window, dims);
            let a = Tensor::from_vec(a, (t, self.heads * hd), &Device::Cpu)?;
            x = x.add(&layer.o.forward(&a)?)?;
            let h = x.rms_norm(&layer.ffn_norm, eps)?;
            let (gate, up) = match &layer.gate_up {
                GateUp::Split { gate, up } => {
                    let [g, u] = QMatMul::forward_many(&[gate, up], &h)?
                        .try_into()
                        .expect("two products");
                    (g, u)
                }
                GateUp::Fused(w) => {
                    let y = w.forward(&h)?;
                    let f = y.dims()[1] / 2;
                    (y.narrow(1, 0, f)?, y.narrow(1, f, f)?)
                }
            };
            let y = layer.down.forward(&gate.silu()?.mul(&up)?)?;
            x = x.add(&y)?;
        }
        cache.len += t;
        let x = match logits {
            Logits::Last => x.narrow(0, t - 1, 1)?,
            Logits::All => x,
        };
        output_logits(&self.output, &x.rms_norm(&self.final_norm, eps)?, t)
    }
}

//! The Llama family from GGUF (or a safetensors directory presented as GGUF, see `hf`): Llama 2/3/3.x, Mistral, SmolLM (`llama`), Qwen2/2.5 (`qwen2`,
//! biased Q/K/V), Qwen3 (`qwen3`, RMS-normed Q/K). Pre-norm blocks, RoPE, grouped-query
//! attention, SiLU-gated MLP; output tied to the embedding when the file has no
//! `output.weight`. Phi-3 (`phi3`) is the same block with fused QKV and gate/up matmuls.

use super::decoder::{Activation, Block, Config, Decoder, GateUp, Proj, Qkv, Rope};
use super::meta::Gguf;
use crate::{Error, Result};
use hanzo_ml::RopeKind;
use hanzo_nn::{RopeScaling, RotaryEmbedding};

/// The context the model runs at and each layer's sliding window, from the metadata alone
/// (what `load` builds, for `models::describe_gguf`).
pub(crate) fn context_and_windows(g: &Gguf) -> Result<(usize, Vec<Option<usize>>)> {
    let ctx = g.opt_usize("context_length")?.unwrap_or(4096);
    // Phi-3 128k ("LongRoPE"): per-frequency factors, the short ones within the original
    // context. The long ones would need a rope table per context size; we cap the
    // context at the original length instead.
    let long_rope = g.has_tensor("rope_factors_short.weight");
    let ctx = match g.opt_usize("rope.scaling.original_context_length")? {
        Some(orig) if long_rope => ctx.min(orig),
        _ => ctx,
    };
    let window = g
        .opt_usize("attention.sliding_window")?
        .filter(|&w| w > 0 && w < ctx);
    Ok((ctx, vec![window; g.usize("block_count")?]))
}

pub(crate) fn load(g: &Gguf) -> Result<Decoder> {
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
    let (ctx, windows) = context_and_windows(g)?;
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
    for (i, &window) in windows.iter().enumerate() {
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
        layers.push(Block {
            attn_norm: g.vector(&n("attn_norm"), hidden)?,
            qkv,
            qk_norm,
            o: g.matmul(&n("attn_output"), hidden, q_rows)?,
            post_attn_norm: None,
            ffn_norm: g.vector(&n("ffn_norm"), hidden)?,
            gate_up,
            down: g.matmul(&n("ffn_down"), hidden, ffn)?,
            post_ffn_norm: None,
            window,
            rope: 0,
        });
    }
    Ok(Decoder {
        info: shape.info(&g.arch, vocab, ctx),
        cfg: Config {
            heads,
            kv_heads,
            head_dim,
            eps,
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            embed_scale: None,
            activation: Activation::Silu,
            rope_kind,
        },
        embed,
        output,
        final_norm: g.vector("output_norm.weight", hidden)?,
        blocks: layers,
        ropes: vec![Rope::Table(rope)],
        loras: Default::default(),
    })
}

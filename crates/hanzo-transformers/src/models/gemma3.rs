//! Gemma 3 (text): interleaved sliding-window and global attention layers with their own
//! RoPE bases, RMS-normed queries and keys, norms both before and after attention and MLP,
//! embeddings scaled by sqrt(hidden), GELU-tanh gated MLP, tied output embedding.
//!
//! GGUF norm weights already include Gemma's `1 + w` offset (the converter adds it).

use super::decoder::{Activation, Block, Config, Decoder, GateUp, Proj, Qkv, Rope};
use super::meta::Gguf;
use crate::Result;
use hanzo_ml::RopeKind;

/// Every `SWA_PATTERN`-th layer is global; the others use the sliding window.
const SWA_PATTERN: usize = 6;
/// RoPE base of the sliding-window layers (fixed by the architecture, not in the file).
const LOCAL_ROPE_BASE: f32 = 10_000.0;

/// The training context and each layer's sliding window (every `SWA_PATTERN`-th layer
/// global), from the metadata alone.
pub(crate) fn context_and_windows(g: &Gguf) -> Result<(usize, Vec<Option<usize>>)> {
    let window = g.opt_usize("attention.sliding_window")?;
    let ctx = g.opt_usize("context_length")?.unwrap_or(32_768);
    let windows = (0..g.usize("block_count")?)
        .map(|i| window.filter(|_| !(i + 1).is_multiple_of(SWA_PATTERN)))
        .collect();
    Ok((ctx, windows))
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
    let eps = g.f64_or("attention.layer_norm_rms_epsilon", 1e-6)?;
    let (ctx, windows) = context_and_windows(g)?;
    let base = g.f64_or("rope.freq_base", 1_000_000.0)?;
    let factor = g.f64_or("rope.scaling.factor", 1.0)?.max(1.0);
    let (embed, output) = g.embedding_and_output(hidden)?;
    let vocab = embed.vocab();
    let (global_rope, local_rope) = (0, 1);
    let mut blocks = Vec::with_capacity(n_layers);
    for (i, &window) in windows.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let proj = |s: &str, out: usize| -> Result<Proj> {
            Ok(Proj {
                w: g.matmul(&n(s), out, hidden)?,
                bias: None,
            })
        };
        blocks.push(Block {
            attn_norm: g.vector(&n("attn_norm"), hidden)?,
            qkv: Qkv::Split {
                q: proj("attn_q", heads * head_dim)?,
                k: proj("attn_k", kv_heads * head_dim)?,
                v: proj("attn_v", kv_heads * head_dim)?,
            },
            qk_norm: Some((
                g.vector(&n("attn_q_norm"), head_dim)?,
                g.vector(&n("attn_k_norm"), head_dim)?,
            )),
            o: g.matmul(&n("attn_output"), hidden, heads * head_dim)?,
            post_attn_norm: Some(g.vector(&n("post_attention_norm"), hidden)?),
            ffn_norm: g.vector(&n("ffn_norm"), hidden)?,
            gate_up: GateUp::Split {
                gate: g.matmul(&n("ffn_gate"), ffn, hidden)?,
                up: g.matmul(&n("ffn_up"), ffn, hidden)?,
            },
            down: g.matmul(&n("ffn_down"), hidden, ffn)?,
            post_ffn_norm: Some(g.vector(&n("post_ffw_norm"), hidden)?),
            rope: if window.is_some() {
                local_rope
            } else {
                global_rope
            },
            window,
        });
    }
    Ok(Decoder {
        info: shape.info("gemma3", vocab, ctx),
        cfg: Config {
            heads,
            kv_heads,
            head_dim,
            eps,
            // Gemma 3 scales queries by query_pre_attn_scalar^-1/2, which equals head_dim
            // for the released text models.
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            embed_scale: Some((hidden as f64).sqrt()),
            activation: Activation::GeluTanh,
            rope_kind: RopeKind::HalfSplit,
        },
        embed,
        output,
        final_norm: g.vector("output_norm.weight", hidden)?,
        blocks,
        ropes: vec![
            // The global layers' positions are divided by the linear scaling factor.
            Rope::Ggml {
                base: base as f32,
                scale: (1.0 / factor) as f32,
            },
            Rope::Ggml {
                base: LOCAL_ROPE_BASE,
                scale: 1.0,
            },
        ],
        loras: Default::default(),
    })
}

//! Multi-head attention with grouped (GQA) and multi-query (MQA) key/value heads, causal and
//! sliding-window masks and rotary embeddings, on top of the core's differentiable
//! `scaled_dot_product_attention`: a whole sequence per call (training, encoders).
//! Generation keeps keys and values in `hanzo_ml::kv::PagedKv` and attends with
//! `PagedKv::attention`, the one inference attention of the workspace.

use crate::{Linear, Module, RotaryEmbedding, VarBuilder};
use hanzo_ml::{AttentionMask, Device, Error, Result, Tensor};

/// Which keys a query may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskKind {
    /// Every key (encoders).
    Bidirectional,
    /// Keys at positions <= the query's.
    Causal,
    /// Causal, and only the last `window` positions (the query's own included).
    SlidingWindow(usize),
}

/// `[t_q, t_k]` u8 mask (1 = may attend) for queries and keys at the given absolute positions,
/// or `None` when every key is visible.
pub fn attention_mask(
    kind: MaskKind,
    q_pos: &[usize],
    k_pos: &[usize],
    device: &Device,
) -> Result<Option<Tensor>> {
    let allowed = |q: usize, k: usize| match kind {
        MaskKind::Bidirectional => true,
        MaskKind::Causal => k <= q,
        MaskKind::SlidingWindow(w) => k <= q && q - k < w,
    };
    let data: Vec<u8> = q_pos
        .iter()
        .flat_map(|&q| k_pos.iter().map(move |&k| allowed(q, k) as u8))
        .collect();
    if data.iter().all(|&a| a == 1) {
        return Ok(None);
    }
    Ok(Some(Tensor::from_vec(
        data,
        (q_pos.len(), k_pos.len()),
        device,
    )?))
}

#[derive(Clone, Debug)]
pub struct AttentionConfig {
    pub hidden: usize,
    pub num_heads: usize,
    /// `num_heads` for MHA, 1 for MQA, a divisor of `num_heads` for GQA.
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub bias: bool,
    pub mask: MaskKind,
    /// Softmax scale; `None` is `1 / sqrt(head_dim)`.
    pub scale: Option<f64>,
}

impl AttentionConfig {
    pub fn validate(&self) -> Result<()> {
        if self.num_kv_heads == 0
            || !self.num_heads.is_multiple_of(self.num_kv_heads)
            || self.head_dim == 0
        {
            return Err(Error::invalid(
                "Attention",
                format!(
                    "{} query heads cannot share {} key/value heads (head_dim {})",
                    self.num_heads, self.num_kv_heads, self.head_dim
                ),
            ));
        }
        Ok(())
    }
}

type Proj = Box<dyn Module + Send + Sync>;

pub struct Attention {
    q: Proj,
    k: Proj,
    v: Proj,
    o: Proj,
    rope: Option<RotaryEmbedding>,
    cfg: AttentionConfig,
}

impl Attention {
    /// From projections `[.., hidden] -> [.., heads * head_dim]` (dense or quantized).
    pub fn new(
        q: Proj,
        k: Proj,
        v: Proj,
        o: Proj,
        rope: Option<RotaryEmbedding>,
        cfg: AttentionConfig,
    ) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            q,
            k,
            v,
            o,
            rope,
            cfg,
        })
    }

    /// Dense projections named `q_proj`, `k_proj`, `v_proj`, `o_proj` (Hugging Face).
    pub fn load(
        cfg: AttentionConfig,
        rope: Option<RotaryEmbedding>,
        vb: &VarBuilder,
    ) -> Result<Self> {
        cfg.validate()?;
        let (h, d) = (cfg.hidden, cfg.head_dim);
        let q = Linear::load(h, cfg.num_heads * d, cfg.bias, &vb.pp("q_proj"))?;
        let k = Linear::load(h, cfg.num_kv_heads * d, cfg.bias, &vb.pp("k_proj"))?;
        let v = Linear::load(h, cfg.num_kv_heads * d, cfg.bias, &vb.pp("v_proj"))?;
        let o = Linear::load(cfg.num_heads * d, h, cfg.bias, &vb.pp("o_proj"))?;
        Self::new(
            Box::new(q),
            Box::new(k),
            Box::new(v),
            Box::new(o),
            rope,
            cfg,
        )
    }

    pub fn config(&self) -> &AttentionConfig {
        &self.cfg
    }

    /// `x` `[b, t, hidden]` holding the tokens at positions `start..start + t`, attending
    /// among themselves.
    pub fn forward(&self, x: &Tensor, start: usize) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let c = &self.cfg;
        let heads = |y: Tensor, n: usize| -> Result<Tensor> {
            y.reshape((b, t, n, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let mut q = heads(self.q.forward(x)?, c.num_heads)?;
        let mut k = heads(self.k.forward(x)?, c.num_kv_heads)?;
        let v = heads(self.v.forward(x)?, c.num_kv_heads)?;
        if let Some(rope) = &self.rope {
            q = rope.apply(&q, start)?;
            k = rope.apply(&k, start)?;
        }
        let positions: Vec<usize> = (start..start + t).collect();
        let mask = attention_mask(c.mask, &positions, &positions, &x.device())?;
        let mask = match &mask {
            Some(m) => AttentionMask::Keep(m),
            None => AttentionMask::None,
        };
        let y = Tensor::scaled_dot_product_attention(&q, &k, &v, mask, c.scale)?;
        let y = y
            .transpose(1, 2)?
            .reshape((b, t, c.num_heads * c.head_dim))?;
        self.o.forward(&y)
    }
}

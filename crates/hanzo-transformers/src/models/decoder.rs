//! The one decoder of every supported architecture: a stack of [`Block`]s whose differences
//! (norms after attention and MLP, QK-norm, biases, fused projections, GEGLU or SwiGLU,
//! sliding windows, RoPE per layer) are configuration the loaders fill in.
//!
//! A forward pass runs a batch: the tokens of many sequences packed into one activation
//! matrix (prefill chunks and decode tokens mixed), every weight read once for all of them,
//! each sequence attending over its own blocks of the paged KV store.

use super::lora::{spans, Loras, Site, Span};
use super::meta::Embedding;
use super::numerics::{geglu, rope_tables};
use super::{check_tokens, rope_heads, Logits, ModelInfo, SeqChunk};
use crate::{Error, Result};
use hanzo_ml::kv::{Heads, KvLayout, Mask, PagedKv, SeqId};
use hanzo_ml::quantized::QMatMul;
use hanzo_ml::{DType, Device, RopeKind, Tensor};
use hanzo_nn::RotaryEmbedding;

/// A projection with an optional bias.
pub(crate) struct Proj {
    pub w: QMatMul,
    pub bias: Option<Tensor>,
}

impl Proj {
    /// `y` (this projection's product) plus the bias, if any.
    fn bias(&self, y: &Tensor) -> Result<Tensor> {
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y.clone(),
        })
    }
}

/// Q, K and V projections: separate, or one fused `[q | k | v]` matmul (Phi-3).
pub(crate) enum Qkv {
    Split { q: Proj, k: Proj, v: Proj },
    Fused(Proj),
}

/// The gated MLP's input projections: separate, or one fused `[gate | up]` matmul (Phi-3).
pub(crate) enum GateUp {
    Split { gate: QMatMul, up: QMatMul },
    Fused(QMatMul),
}

/// The MLP's gate activation.
#[derive(Clone, Copy)]
pub(crate) enum Activation {
    /// GELU (tanh form) the way ggml evaluates it (Gemma).
    GeluTanh,
    /// SiLU (Llama, Qwen, Mistral, Phi-3).
    Silu,
}

/// How a layer's rotary tables are made.
pub(crate) enum Rope {
    /// ggml's recurrence for the angles (Gemma 3), with a position multiplier.
    Ggml { base: f32, scale: f32 },
    /// Scaled or plain RoPE with per-frequency factors (the Llama family).
    Table(RotaryEmbedding),
}

impl Rope {
    fn tables(&self, positions: &[usize], head_dim: usize) -> Result<(Tensor, Tensor)> {
        Ok(match self {
            Rope::Ggml { base, scale } => rope_tables(*base, head_dim, *scale, None, positions)?,
            Rope::Table(r) => r.cos_sin(positions, &Device::Cpu)?,
        })
    }
}

/// One transformer block: pre-norm attention and MLP, each optionally followed by a norm of
/// its output before the residual add (Gemma).
pub(crate) struct Block {
    pub attn_norm: Tensor,
    pub qkv: Qkv,
    /// Per-head RMS norms of queries and keys (Gemma 3, Qwen3).
    pub qk_norm: Option<(Tensor, Tensor)>,
    pub o: QMatMul,
    pub post_attn_norm: Option<Tensor>,
    pub ffn_norm: Tensor,
    pub gate_up: GateUp,
    pub down: QMatMul,
    pub post_ffn_norm: Option<Tensor>,
    pub window: Option<usize>,
    /// Index into [`Decoder::ropes`].
    pub rope: usize,
}

/// What the blocks share.
pub(crate) struct Config {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f64,
    /// Multiplier of the queries after RoPE.
    pub attn_scale: f64,
    /// Multiplier of the embeddings (Gemma: sqrt(hidden)).
    pub embed_scale: Option<f64>,
    pub activation: Activation,
    pub rope_kind: RopeKind,
}

/// A decoder-only language model (see the module docs).
pub struct Decoder {
    pub(crate) info: ModelInfo,
    pub(crate) cfg: Config,
    pub(crate) embed: Embedding,
    pub(crate) output: QMatMul,
    pub(crate) final_norm: Tensor,
    pub(crate) blocks: Vec<Block>,
    pub(crate) ropes: Vec<Rope>,
    /// Attached LoRA adapter sets (`LanguageModel::attach_lora`).
    pub(crate) loras: Loras,
}

impl Decoder {
    pub(crate) fn kv_layout(&self) -> KvLayout {
        KvLayout::new(
            self.cfg.kv_heads * self.cfg.head_dim,
            self.blocks.iter().map(|b| b.window).collect(),
        )
    }

    fn heads(&self) -> Heads {
        Heads {
            heads: self.cfg.heads,
            kv_heads: self.cfg.kv_heads,
            head_dim: self.cfg.head_dim,
        }
    }

    /// Checks a batch before anything changes: tokens, distinct sequences, context room,
    /// then KV blocks for all of it.
    fn admit(&self, batch: &[SeqChunk], kv: &mut PagedKv) -> Result<()> {
        if batch.is_empty() {
            return Err(Error::Invalid("forward needs at least one sequence".into()));
        }
        if !kv.layout().fits(&self.kv_layout()) {
            return Err(Error::Invalid(format!(
                "the KV store was made for {:?}, not for this model ({:?})",
                kv.layout(),
                self.kv_layout()
            )));
        }
        for (i, c) in batch.iter().enumerate() {
            check_tokens(c.tokens, self.info.vocab_size)?;
            if let Some(id) = c.lora() {
                if !self.loras.has(id) {
                    return Err(Error::Invalid(format!(
                        "LoRA set {id:?} is not attached to this model"
                    )));
                }
            }
            if batch[..i].iter().any(|o| o.seq == c.seq) {
                return Err(Error::Invalid(format!(
                    "sequence {} appears twice in one batch",
                    c.seq
                )));
            }
            let start = kv.len(c.seq)?;
            if start + c.tokens.len() > self.info.context_length {
                return Err(Error::ContextFull {
                    needed: start + c.tokens.len(),
                    limit: self.info.context_length,
                });
            }
        }
        let needed: usize = batch
            .iter()
            .map(|c| kv.blocks_needed(c.seq, c.tokens.len()))
            .sum::<std::result::Result<_, _>>()?;
        if needed > kv.free_blocks() {
            // Name the first sequence that does not fit, as `reserve` would.
            let mut free = kv.free_blocks();
            for c in batch {
                let n = kv.blocks_needed(c.seq, c.tokens.len())?;
                if n > free {
                    return Err(hanzo_ml::kv::KvError::OutOfBlocks {
                        seq: c.seq,
                        needed: n,
                        free,
                    }
                    .into());
                }
                free -= n;
            }
        }
        for c in batch {
            kv.reserve(c.seq, c.tokens.len())?;
        }
        Ok(())
    }

    pub(crate) fn forward_batch(&self, batch: &[SeqChunk], kv: &mut PagedKv) -> Result<Tensor> {
        let pass = self.run_blocks(batch, kv)?;
        let wanted = self.wanted_rows(&pass)?;
        if wanted.places.is_empty() {
            let vocab = self.info.vocab_size;
            return Ok(Tensor::zeros((0, vocab), DType::F32, &Device::Cpu)?);
        }
        let out = wanted.head.project(&self.output, &wanted.hidden)?;
        let out = self
            .loras
            .add(out, &wanted.hidden, &wanted.loras, Site::Output)?;
        wanted.in_caller_order(out)
    }

    /// Like [`Self::forward_batch`], but the wanted rows are the hidden states after the
    /// final norm `[rows, hidden]` (what the output head reads) instead of logits: the
    /// sentence vectors of last-token pooling.
    pub(crate) fn hidden_batch(&self, batch: &[SeqChunk], kv: &mut PagedKv) -> Result<Tensor> {
        let pass = self.run_blocks(batch, kv)?;
        let wanted = self.wanted_rows(&pass)?;
        let hidden = wanted.hidden.clone();
        wanted.in_caller_order(hidden)
    }

    /// Every block over the batch (reordered: short runs first), the positions written to
    /// the store. Returns the residual stream `[tokens, hidden]` and how to pick its rows.
    fn run_blocks<'a>(&self, batch: &[SeqChunk<'a>], kv: &mut PagedKv) -> Result<Pass<'a>> {
        self.admit(batch, kv)?;
        // Shortest runs first: for each weight, the runs shorter than its GEMM panels'
        // threshold take the decode kernels however large the batch (`Rows::split`), as each
        // would alone, and those runs are then a prefix of the rows.
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by_key(|&i| batch[i].run());
        let batch: Vec<SeqChunk> = order.iter().map(|&i| batch[i]).collect();
        let starts = batch
            .iter()
            .map(|c| kv.len(c.seq))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let cfg = &self.cfg;
        let (hd, eps) = (cfg.head_dim, cfg.eps);
        let tokens: Vec<u32> = batch
            .iter()
            .flat_map(|c| c.tokens.iter().copied())
            .collect();
        let positions: Vec<usize> = batch
            .iter()
            .zip(&starts)
            .flat_map(|(c, &s)| s..s + c.tokens.len())
            .collect();
        let offsets: Vec<usize> = batch
            .iter()
            .scan(0, |o, c| {
                let at = *o;
                *o += c.tokens.len();
                Some(at)
            })
            .collect();
        let n = tokens.len();
        let lora = spans(batch.iter().map(|c| (c.tokens.len(), c.lora())));
        let lora = &lora[..];
        let rows = Rows {
            runs: batch
                .iter()
                .map(|c| Run {
                    rows: c.tokens.len(),
                    whole: c.run(),
                })
                .collect(),
            // A lone sequence's pass is its prompt when it holds several tokens or starts
            // the sequence (a one-token prompt is not a decode step either).
            may_repack: !(batch.len() == 1 && (n > 1 || starts[0] == 0)),
        };
        let row = cfg.kv_heads * hd;
        let tables = self
            .ropes
            .iter()
            .map(|r| r.tables(&positions, hd))
            .collect::<Result<Vec<_>>>()?;
        let mut x = self.embed.rows(&tokens)?;
        if let Some(s) = cfg.embed_scale {
            x = x.affine(s, 0.0)?;
        }
        for (li, block) in self.blocks.iter().enumerate() {
            let (cos, sin) = &tables[block.rope];
            let h = x.rms_norm(&block.attn_norm, eps)?;
            let (q, k, v) = self.qkv(li, block, &h, &rows, lora)?;
            let (qn, kn) = match &block.qk_norm {
                Some((q, k)) => (Some(q), Some(k)),
                None => (None, None),
            };
            // [n, heads, head_dim], per-head norm, rotary embedding.
            let heads = |y: Tensor, count: usize, norm: Option<&Tensor>| -> Result<Tensor> {
                let mut y = y.contiguous()?.reshape((n, count, hd))?;
                if let Some(w) = norm {
                    y = y.rms_norm(w, eps)?;
                }
                rope_heads(&y, cos, sin, cfg.rope_kind)
            };
            let q = heads(q, cfg.heads, qn)?.affine(cfg.attn_scale, 0.0)?;
            let k = heads(k, cfg.kv_heads, kn)?.to_vec_flat::<f32>()?;
            let v = v.contiguous()?.to_vec_flat::<f32>()?;
            let mut parts = Vec::with_capacity(batch.len());
            for ((c, &at), &start) in batch.iter().zip(&offsets).zip(&starts) {
                let t = c.tokens.len();
                let span = at * row..(at + t) * row;
                kv.write(c.seq, li, &k[span.clone()], &v[span])?;
                let q = q.narrow(0, at, t)?;
                let mask = Mask::causal(block.window);
                parts.push(kv.attention(c.seq, li, &q, start, c.run(), mask, self.heads())?);
            }
            let a = match parts.len() {
                1 => parts.pop().expect("one part"),
                _ => Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)?,
            };
            let o = rows.project(&block.o, &a)?;
            let mut a = self.loras.add(o, &a, lora, Site::O(li))?;
            if let Some(w) = &block.post_attn_norm {
                a = a.rms_norm(w, eps)?;
            }
            x = x.add(&a)?;
            let h = x.rms_norm(&block.ffn_norm, eps)?;
            let (gate, up) = match &block.gate_up {
                GateUp::Split { gate, up } => {
                    let [g, u] = rows.project_many(&[gate, up], &h)?.try_into().expect("two");
                    let g = self.loras.add(g, &h, lora, Site::Gate(li))?;
                    (g, self.loras.add(u, &h, lora, Site::Up(li))?)
                }
                GateUp::Fused(w) => {
                    let y = rows.project(w, &h)?;
                    let y = self.loras.add(y, &h, lora, Site::GateUp(li))?;
                    let f = y.dims()[1] / 2;
                    (y.narrow(1, 0, f)?, y.narrow(1, f, f)?)
                }
            };
            let m = match cfg.activation {
                Activation::GeluTanh => geglu(&gate, &up)?,
                Activation::Silu => gate.silu()?.mul(&up)?,
            };
            let y = rows.project(&block.down, &m)?;
            let mut y = self.loras.add(y, &m, lora, Site::Down(li))?;
            if let Some(w) = &block.post_ffn_norm {
                y = y.rms_norm(w, eps)?;
            }
            x = x.add(&y)?;
        }
        for c in &batch {
            kv.commit(c.seq, c.tokens)?;
        }
        Ok(Pass {
            x,
            batch,
            offsets,
            order,
            rows,
        })
    }

    /// The rows the chunks asked for (see [`Logits`]) after the final norm. A row goes with
    /// the rows of its class: alone (a last position, or every position of a short run)
    /// first, then through the panels (every position of a long run), as the sequence's own
    /// pass would take it.
    fn wanted_rows(&self, pass: &Pass) -> Result<Wanted> {
        let mut caller = vec![0; pass.order.len()];
        for (i, &o) in pass.order.iter().enumerate() {
            caller[o] = i;
        }
        let (mut alone, mut panels, mut picks) = (Vec::new(), Vec::new(), Vec::new());
        let (mut alone_lora, mut panel_lora) = (Vec::new(), Vec::new());
        let mut shortest_panel_run = usize::MAX;
        for &i in &caller {
            let (c, at) = (&pass.batch[i], pass.offsets[i]);
            let t = c.tokens.len();
            let wanted = match c.logits {
                Logits::All => at..at + t,
                Logits::Last => at + t - 1..at + t,
                Logits::None => at..at,
            };
            let panel = c.logits == Logits::All && c.run() >= self.output.panels_from();
            if panel {
                shortest_panel_run = shortest_panel_run.min(c.run());
            }
            for r in wanted {
                let (class, loras) = match panel {
                    true => (&mut panels, &mut panel_lora),
                    false => (&mut alone, &mut alone_lora),
                };
                picks.push((panel, class.len()));
                class.push(r as u32);
                loras.push((1, c.lora()));
            }
        }
        let na = alone.len();
        let places: Vec<u32> = picks
            .iter()
            .map(|&(panel, j)| (if panel { na + j } else { j }) as u32)
            .collect();
        let ids: Vec<u32> = alone.into_iter().chain(panels).collect();
        let hidden = if ids.is_empty() {
            Tensor::zeros((0, pass.x.dims()[1]), DType::F32, &Device::Cpu)?
        } else {
            let ids = Tensor::from_vec(ids, places.len(), &Device::Cpu)?;
            pass.x
                .index_select(&ids, 0)?
                .rms_norm(&self.final_norm, self.cfg.eps)?
        };
        // The head sees single rows alone, then the panel rows as one run (each of the
        // runs they come from reaches the head's threshold).
        let np = places.len() - na;
        let single = Run { rows: 1, whole: 1 };
        let head = Rows {
            runs: std::iter::repeat_n(single, na)
                .chain((np > 0).then_some(Run {
                    rows: np,
                    whole: shortest_panel_run,
                }))
                .collect(),
            may_repack: pass.rows.may_repack,
        };
        Ok(Wanted {
            hidden,
            head,
            places,
            loras: spans(alone_lora.into_iter().chain(panel_lora)),
        })
    }

    /// See `LanguageModel::repack_weights`.
    pub(crate) fn repack_weights(&self) -> usize {
        let mut ws: Vec<&QMatMul> = Vec::new();
        for b in &self.blocks {
            match &b.qkv {
                Qkv::Split { q, k, v } => ws.extend([&q.w, &k.w, &v.w]),
                Qkv::Fused(p) => ws.push(&p.w),
            }
            ws.push(&b.o);
            match &b.gate_up {
                GateUp::Split { gate, up } => ws.extend([gate, up]),
                GateUp::Fused(w) => ws.push(w),
            }
            ws.push(&b.down);
        }
        ws.push(&self.output);
        ws.into_iter().filter(|w| w.repack_now()).count()
    }

    /// See `LanguageModel::evict`. A key at position `p` was rotated by the angles of `p`;
    /// moved to `p - count` it is rotated by those of `-count` (rotations by angles linear
    /// in the position compose), with the tables' magnitude (YaRN's attention factor)
    /// divided out so only the rotation applies.
    pub(crate) fn evict(&self, kv: &mut PagedKv, seq: SeqId, count: usize) -> Result<()> {
        let moved = kv.evict(seq, count)?;
        let hd = self.cfg.head_dim;
        let back: Vec<(Vec<f32>, Vec<f32>)> = self
            .ropes
            .iter()
            .map(|r| -> Result<_> {
                let (cos, sin) = r.tables(&[0, count], hd)?;
                let (cos, sin) = (cos.to_vec2::<f32>()?, sin.to_vec2::<f32>()?);
                let unit = &cos[0];
                let c = cos[1].iter().zip(unit).map(|(c, m)| c / m).collect();
                let s = sin[1].iter().zip(unit).map(|(s, m)| -s / m).collect();
                Ok((c, s))
            })
            .collect::<Result<_>>()?;
        for (li, (block, range)) in self.blocks.iter().zip(moved).enumerate() {
            let t = range.len();
            if t == 0 {
                continue;
            }
            let (c, s) = &back[block.rope];
            let half = c.len();
            let repeat = |v: &[f32]| -> Result<Tensor> {
                let all: Vec<f32> = (0..t).flat_map(|_| v.iter().copied()).collect();
                Ok(Tensor::from_vec(all, (t, half), &Device::Cpu)?)
            };
            let keys = kv.keys(seq, li, range.clone());
            let k = Tensor::from_vec(keys, (t, self.cfg.kv_heads, hd), &Device::Cpu)?;
            let k = rope_heads(&k, &repeat(c)?, &repeat(s)?, self.cfg.rope_kind)?;
            kv.set_keys(seq, li, range.start, &k.to_vec_flat::<f32>()?)?;
        }
        Ok(())
    }

    fn qkv(
        &self,
        li: usize,
        block: &Block,
        h: &Tensor,
        rows: &Rows,
        lora: &[Span],
    ) -> Result<(Tensor, Tensor, Tensor)> {
        Ok(match &block.qkv {
            Qkv::Split { q, k, v } => {
                let ys = rows.project_many(&[&q.w, &k.w, &v.w], h)?;
                let [q, k, v] = [
                    (q, &ys[0], Site::Q(li)),
                    (k, &ys[1], Site::K(li)),
                    (v, &ys[2], Site::V(li)),
                ]
                .map(|(p, y, site)| p.bias(&self.loras.add(y.clone(), h, lora, site)?));
                (q?, k?, v?)
            }
            Qkv::Fused(p) => {
                let y = self
                    .loras
                    .add(rows.project(&p.w, h)?, h, lora, Site::Qkv(li))?;
                let y = p.bias(&y)?;
                let (qr, kr) = (
                    self.cfg.heads * self.cfg.head_dim,
                    self.cfg.kv_heads * self.cfg.head_dim,
                );
                (
                    y.narrow(1, 0, qr)?,
                    y.narrow(1, qr, kr)?,
                    y.narrow(1, qr + kr, kr)?,
                )
            }
        })
    }
}

/// A batch after every block: the residual stream `[tokens, hidden]` of the reordered
/// batch (`order[i]` is the caller's index of `batch[i]`).
struct Pass<'a> {
    x: Tensor,
    batch: Vec<SeqChunk<'a>>,
    offsets: Vec<usize>,
    order: Vec<usize>,
    rows: Rows,
}

/// The rows a batch's chunks asked for, final-normed, grouped by class for the head.
struct Wanted {
    hidden: Tensor,
    /// How the head splits `hidden`'s rows.
    head: Rows,
    /// Where each row, in the caller's order, lies in `hidden`.
    places: Vec<u32>,
    /// The adapter sets of `hidden`'s rows.
    loras: Vec<Span>,
}

impl Wanted {
    /// `out` (one row per row of `hidden`) with its rows in the caller's order.
    fn in_caller_order(&self, out: Tensor) -> Result<Tensor> {
        if self.places.iter().enumerate().all(|(i, &a)| i as u32 == a) {
            return Ok(out);
        }
        let at = Tensor::from_vec(self.places.clone(), self.places.len(), &Device::Cpu)?;
        Ok(out.index_select(&at, 0)?)
    }
}

/// How a batch's rows go through a weight: the rows of the runs shorter than the weight's
/// `QMatMul::panels_from` each as alone, the rest through the panels (where they apply), so
/// every sequence computes what its own pass over the whole run would.
#[derive(Clone)]
struct Rows {
    /// The batch's runs, in row order, shortest whole run first.
    runs: Vec<Run>,
    /// False for a lone prompt's pass: it never repacks a weight
    /// (`QMatMul::forward_prompt`), so the first token does not wait for the copy; the
    /// first decode step makes it.
    may_repack: bool,
}

/// One sequence's rows in a batch.
#[derive(Clone, Copy)]
struct Run {
    rows: usize,
    /// The length of the run they end (`SeqChunk::run`): it picks their kernels.
    whole: usize,
}

impl Rows {
    /// How many leading rows take `w` as alone: those of the runs too short for its panels.
    fn split(&self, w: &QMatMul) -> usize {
        let from = w.panels_from();
        self.runs
            .iter()
            .take_while(|r| r.whole < from)
            .map(|r| r.rows)
            .sum()
    }

    fn project(&self, w: &QMatMul, x: &Tensor) -> Result<Tensor> {
        Ok(self.project_many(&[w], x)?.pop().expect("one product"))
    }

    fn project_many(&self, ws: &[&QMatMul], x: &Tensor) -> Result<Vec<Tensor>> {
        let split = self.split(ws[0]);
        if ws.len() > 1 && ws.iter().any(|w| self.split(w) != split) {
            // Weights of types with different thresholds: each splits the rows its own way.
            return ws.iter().map(|w| self.project(w, x)).collect();
        }
        let n = x.dims()[0];
        // Rows of runs that reach the panels take them however few are in this pass.
        // Every weight reads the same rows: their quantization is shared.
        let panels = |x: &Tensor| -> Result<Vec<Tensor>> {
            Ok(hanzo_ml::quantized::cpu::gemm::share_activations(|| {
                ws.iter()
                    .map(|w| w.forward_panels(x, self.may_repack))
                    .collect::<hanzo_ml::Result<_>>()
            })?)
        };
        let alone = |x: &Tensor| -> Result<Vec<Tensor>> {
            Ok(match (x.dims()[0], self.may_repack) {
                // One decode row for every weight in one pass over their rows.
                (1, true) => QMatMul::forward_many(ws, x)?,
                (1, false) => ws
                    .iter()
                    .map(|w| w.forward_prompt(x))
                    .collect::<hanzo_ml::Result<_>>()?,
                _ => ws
                    .iter()
                    .map(|w| w.forward_rows_alone(x, self.may_repack))
                    .collect::<hanzo_ml::Result<_>>()?,
            })
        };
        if split == 0 {
            return panels(x);
        }
        if split == n {
            return alone(x);
        }
        let a = alone(&x.narrow(0, 0, split)?)?;
        let b = panels(&x.narrow(0, split, n - split)?)?;
        a.iter()
            .zip(&b)
            .map(|(a, b)| Ok(Tensor::cat(&[a, b], 0)?))
            .collect()
    }
}

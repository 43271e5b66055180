//! Adapters attached to a decoder (`LanguageModel::attach_lora`): each adapter set's
//! updates by the projection they change, laid out for the product `x·Aᵀ·(scale·Bᵀ)` that
//! runs beside the projection's own (quantized) matmul on the rows of the sequences that
//! chose the set.

use super::decoder::{Decoder, GateUp, Qkv};
use crate::lora::{Adapter, LoraId};
use crate::{Error, Result};
use hanzo_ml::quantized::QMatMul;
use hanzo_ml::{Device, Tensor};

/// A projection an adapter can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Site {
    Q(usize),
    K(usize),
    V(usize),
    Qkv(usize),
    O(usize),
    Gate(usize),
    Up(usize),
    GateUp(usize),
    Down(usize),
    Output,
}

/// One update, ready to multiply: `A` `[r, in]` and `scale·Bᵀ` `[r, out]`, row-major.
struct Pair {
    a: Vec<f32>,
    b_t: Vec<f32>,
    rank: usize,
}

impl Pair {
    /// `x·Aᵀ·(scale·Bᵀ)` for the rows of `x` `[n, in]`, added to `out` `[n, out]`. Each row
    /// is computed on its own in a fixed order, so a row gets the same numbers whatever
    /// rows share its pass (a general matrix product picks its blocking by the row count).
    fn add_product(&self, x: &[f32], out: &mut [f32]) {
        let k = hanzo_ml::cpu::simd::kernels();
        let inp = self.a.len() / self.rank;
        let width = self.b_t.len() / self.rank;
        let row = |(x, out): (&[f32], &mut [f32])| {
            for (a, b) in self.a.chunks_exact(inp).zip(self.b_t.chunks_exact(width)) {
                (k.axpy)((k.dot)(x, a), b, out);
            }
        };
        // Threads only where a pass has rows enough to share out.
        if x.len() / inp >= 8 {
            hanzo_ml::cpu::par::for_each_chunk(out, width, &|i, o| {
                row((&x[i * inp..(i + 1) * inp], o))
            });
        } else {
            x.chunks_exact(inp)
                .zip(out.chunks_exact_mut(width))
                .for_each(row);
        }
    }
}

/// The adapter sets attached to one decoder; a [`LoraId`] indexes `sets`, and a set holds
/// each site's updates at `Site::slot`.
#[derive(Default)]
pub(crate) struct Loras {
    sets: Vec<Vec<Vec<Pair>>>,
}

impl Site {
    /// Where a set keeps this site's updates: the head first, then nine per block.
    fn slot(self) -> usize {
        let (i, k) = match self {
            Site::Output => return 0,
            Site::Q(i) => (i, 0),
            Site::K(i) => (i, 1),
            Site::V(i) => (i, 2),
            Site::Qkv(i) => (i, 3),
            Site::O(i) => (i, 4),
            Site::Gate(i) => (i, 5),
            Site::Up(i) => (i, 6),
            Site::GateUp(i) => (i, 7),
            Site::Down(i) => (i, 8),
        };
        1 + 9 * i + k
    }
}

/// Rows `start..start + len` of a pass run with adapter set `id`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub start: usize,
    pub len: usize,
    pub id: LoraId,
}

/// The spans of rows `0..` given each row group's set, merging neighbours with the same
/// set and leaving out groups without one.
pub(crate) fn spans(groups: impl IntoIterator<Item = (usize, Option<LoraId>)>) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    let mut at = 0;
    for (len, id) in groups {
        if let Some(id) = id {
            match out.last_mut() {
                Some(s) if s.id == id && s.start + s.len == at => s.len += len,
                _ => out.push(Span { start: at, len, id }),
            }
        }
        at += len;
    }
    out
}

impl Loras {
    pub fn has(&self, id: LoraId) -> bool {
        (id.0 as usize) < self.sets.len()
    }

    /// `y` (a projection's output for the rows of `x`) plus every span's update, added to
    /// a copy of `y`'s values row by row.
    pub fn add(&self, y: Tensor, x: &Tensor, spans: &[Span], site: Site) -> Result<Tensor> {
        let active: Vec<(&Span, &Vec<Pair>)> = spans
            .iter()
            .filter_map(|s| {
                let pairs = self.sets.get(s.id.0 as usize)?.get(site.slot())?;
                (!pairs.is_empty()).then_some((s, pairs))
            })
            .collect();
        if active.is_empty() {
            return Ok(y);
        }
        let (n, width) = y.dims2()?;
        let inp = x.dims()[1];
        let mut out = y.to_vec_flat::<f32>()?;
        x.with_contiguous(|xs: &[f32]| {
            for (s, pairs) in &active {
                let rows = s.start..s.start + s.len;
                let x = &xs[rows.start * inp..rows.end * inp];
                let o = &mut out[rows.start * width..rows.end * width];
                for p in pairs.iter() {
                    p.add_product(x, o);
                }
            }
        })?;
        Ok(Tensor::from_vec(out, (n, width), &Device::Cpu)?)
    }
}

impl Decoder {
    /// See `LanguageModel::attach_lora`.
    pub(crate) fn attach_lora(&mut self, adapters: &[Adapter]) -> Result<LoraId> {
        if adapters.is_empty() {
            return Err(Error::Invalid(
                "attach_lora needs at least one adapter".into(),
            ));
        }
        let id = LoraId(self.loras.sets.len() as u32);
        let mut set: Vec<Vec<Pair>> = Vec::new();
        for adapter in adapters {
            let (heads, kv_heads) = (self.cfg.heads, self.cfg.kv_heads);
            let adapter = adapter.for_model(&self.info.architecture, heads, kv_heads)?;
            for (name, w) in adapter.weights() {
                let (site, weight) = self.site(name).ok_or_else(|| {
                    Error::model(
                        format!("LoRA adapter {}", adapter.name),
                        format!("{name}: this model has no such projection"),
                    )
                })?;
                let dims = weight.weight_dims();
                if w.weight_dims() != dims {
                    return Err(Error::model(
                        format!("LoRA adapter {}", adapter.name),
                        format!(
                            "{name}: the update is [{}, {}] (out, in), the model's weight is \
                             [{}, {}]",
                            w.weight_dims().0,
                            w.weight_dims().1,
                            dims.0,
                            dims.1
                        ),
                    ));
                }
                let pair = Pair {
                    a: w.a.flatten_all()?.to_vec1::<f32>()?,
                    b_t: w
                        .b
                        .affine(w.scale, 0.0)?
                        .t()?
                        .contiguous()?
                        .flatten_all()?
                        .to_vec1::<f32>()?,
                    rank: w.rank(),
                };
                let slot = site.slot();
                if set.len() <= slot {
                    set.resize_with(slot + 1, Vec::new);
                }
                set[slot].push(pair);
            }
        }
        self.loras.sets.push(set);
        Ok(id)
    }

    /// The projection a GGUF weight name stands for in this model, with its weight, if the
    /// model has it.
    fn site(&self, name: &str) -> Option<(Site, &QMatMul)> {
        if name == "output.weight" {
            return Some((Site::Output, &self.output));
        }
        let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
        let (layer, part) = rest.split_once('.')?;
        let i: usize = layer.parse().ok()?;
        let block = self.blocks.get(i)?;
        Some(match (part, &block.qkv, &block.gate_up) {
            ("attn_q", Qkv::Split { q, .. }, _) => (Site::Q(i), &q.w),
            ("attn_k", Qkv::Split { k, .. }, _) => (Site::K(i), &k.w),
            ("attn_v", Qkv::Split { v, .. }, _) => (Site::V(i), &v.w),
            ("attn_qkv", Qkv::Fused(p), _) => (Site::Qkv(i), &p.w),
            ("attn_output", _, _) => (Site::O(i), &block.o),
            ("ffn_gate", _, GateUp::Split { gate, .. }) => (Site::Gate(i), gate),
            ("ffn_up", _, GateUp::Split { up, .. }) => (Site::Up(i), up),
            ("ffn_up", _, GateUp::Fused(w)) => (Site::GateUp(i), w),
            ("ffn_down", _, _) => (Site::Down(i), &block.down),
            _ => return None,
        })
    }
}

//! Adapters attached to a decoder (`LanguageModel::attach_lora`): each adapter set's
//! updates by the projection they change, laid out for the product `x·Aᵀ·(scale·Bᵀ)` that
//! runs beside the projection's own (quantized) matmul on the rows of the sequences that
//! chose the set.

use super::decoder::{Decoder, GateUp, Qkv};
use crate::lora::{Adapter, LoraId};
use crate::{Error, Result};
use hanzo_ml::{DType, Device, Tensor};
use std::collections::HashMap;

/// A projection an adapter can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
        let inp = self.a.len() / self.rank;
        let width = self.b_t.len() / self.rank;
        let row = |(x, out): (&[f32], &mut [f32])| {
            for (a, b) in self.a.chunks_exact(inp).zip(self.b_t.chunks_exact(width)) {
                let t = dot(x, a);
                for (o, &b) in out.iter_mut().zip(b) {
                    *o += t * b;
                }
            }
        };
        let rows = x.chunks_exact(inp).zip(out.chunks_exact_mut(width));
        // Threads only where a pass has rows enough to share out.
        if x.len() / inp >= 8 {
            use rayon::prelude::*;
            x.par_chunks_exact(inp)
                .zip(out.par_chunks_exact_mut(width))
                .for_each(row);
        } else {
            rows.for_each(row);
        }
    }
}

/// `Σ a·b` in eight interleaved partial sums (the compiler keeps them in one vector).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let half = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (half[0] + half[2]) + (half[1] + half[3]) + tail
}

/// The adapter sets attached to one decoder; a [`LoraId`] indexes `sets`.
#[derive(Default)]
pub(crate) struct Loras {
    sets: Vec<HashMap<Site, Vec<Pair>>>,
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

    /// `y` (a projection's output for the rows of `x`) plus every span's update.
    pub fn add(&self, y: Tensor, x: &Tensor, spans: &[Span], site: Site) -> Result<Tensor> {
        if spans.is_empty() {
            return Ok(y);
        }
        let n = x.dims()[0];
        let mut pieces: Vec<(usize, Tensor)> = Vec::new();
        for s in spans {
            let Some(pairs) = self.sets.get(s.id.0 as usize).and_then(|m| m.get(&site)) else {
                continue;
            };
            let xs = x.narrow(0, s.start, s.len)?.to_vec_flat::<f32>()?;
            let width = y.dims()[1];
            let mut d = vec![0f32; s.len * width];
            for p in pairs {
                p.add_product(&xs, &mut d);
            }
            let d = Tensor::from_vec(d, (s.len, width), &Device::Cpu)?;
            pieces.push((s.start, d));
        }
        match pieces.len() {
            0 => return Ok(y),
            1 if pieces[0].1.dims()[0] == n => return Ok(y.add(&pieces[0].1)?),
            _ => {}
        }
        // The rows without an update get zeros.
        let out = y.dims()[1];
        let zeros = |rows: usize| Tensor::zeros((rows, out), DType::F32, &Device::Cpu);
        let mut parts = Vec::with_capacity(2 * pieces.len() + 1);
        let mut at = 0;
        for (start, d) in pieces {
            if start > at {
                parts.push(zeros(start - at)?);
            }
            at = start + d.dims()[0];
            parts.push(d);
        }
        if at < n {
            parts.push(zeros(n - at)?);
        }
        Ok(y.add(&Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)?)?)
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
        let mut set: HashMap<Site, Vec<Pair>> = HashMap::new();
        for adapter in adapters {
            let (heads, kv_heads) = (self.cfg.heads, self.cfg.kv_heads);
            let adapter = adapter.for_model(&self.info.architecture, heads, kv_heads)?;
            for (name, w) in adapter.weights() {
                let site = self.site(name).ok_or_else(|| {
                    Error::model(
                        format!("LoRA adapter {}", adapter.name),
                        format!("{name}: this model has no such projection"),
                    )
                })?;
                let dims = self.site_dims(site);
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
                set.entry(site).or_default().push(pair);
            }
        }
        self.loras.sets.push(set);
        Ok(id)
    }

    /// The projection a GGUF weight name stands for in this model, if it has it.
    fn site(&self, name: &str) -> Option<Site> {
        if name == "output.weight" {
            return Some(Site::Output);
        }
        let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
        let (layer, part) = rest.split_once('.')?;
        let i: usize = layer.parse().ok()?;
        let block = self.blocks.get(i)?;
        let fused_qkv = matches!(block.qkv, Qkv::Fused(_));
        let fused_gate_up = matches!(block.gate_up, GateUp::Fused(_));
        Some(match part {
            "attn_q" if !fused_qkv => Site::Q(i),
            "attn_k" if !fused_qkv => Site::K(i),
            "attn_v" if !fused_qkv => Site::V(i),
            "attn_qkv" if fused_qkv => Site::Qkv(i),
            "attn_output" => Site::O(i),
            "ffn_gate" if !fused_gate_up => Site::Gate(i),
            "ffn_up" if fused_gate_up => Site::GateUp(i),
            "ffn_up" => Site::Up(i),
            "ffn_down" => Site::Down(i),
            _ => return None,
        })
    }

    /// `(out, in)` of the weight at `site` (one `site` returned).
    fn site_dims(&self, site: Site) -> (usize, usize) {
        let b = |i: usize| &self.blocks[i];
        match site {
            Site::Q(i) | Site::K(i) | Site::V(i) => match &b(i).qkv {
                Qkv::Split { q, k, v } => match site {
                    Site::Q(_) => q.w.weight_dims(),
                    Site::K(_) => k.w.weight_dims(),
                    _ => v.w.weight_dims(),
                },
                Qkv::Fused(p) => p.w.weight_dims(),
            },
            Site::Qkv(i) => match &b(i).qkv {
                Qkv::Fused(p) => p.w.weight_dims(),
                Qkv::Split { q, .. } => q.w.weight_dims(),
            },
            Site::O(i) => b(i).o.weight_dims(),
            Site::Gate(i) | Site::Up(i) | Site::GateUp(i) => match &b(i).gate_up {
                GateUp::Split { gate, up } => match site {
                    Site::Gate(_) => gate.weight_dims(),
                    _ => up.weight_dims(),
                },
                GateUp::Fused(w) => w.weight_dims(),
            },
            Site::Down(i) => b(i).down.weight_dims(),
            Site::Output => self.output.weight_dims(),
        }
    }
}

//! The top layer of `quantized`: `QMatMul`, f32 activations times quantized weights with no
//! dequantization pass.
//!
//! It picks the path for each product (`cpu::matvec` for decode and small batches as the
//! blocks are stored, `cpu::gemm` panels for prefill, `cpu::interleaved` for the types it
//! `repacks` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4; IQ4_XS, and IQ3_S and IQ3_XXS
//! transcoded into IQ4_XS's layout) repacked eight rows at a time where the CPU has AVX2, or
//! loaded that way) and owns the repacking.

use super::cpu::interleaved::{self, Interleaved, RowGroups};
use super::cpu::interleaved_iq4xs::InterleavedIQ4XS;
use super::cpu::matvec::{self, matvec_many};
use super::cpu::Route;
use super::format::interleaved::with_interleave_type;
use super::format::interleaved_iq4xs::IQ4XSLayout;
use super::format::{BlockIQ3S, BlockIQ3XXS, BlockIQ4XS, GgmlDType};
use super::QTensor;
use crate::{DType, Error, Result, Tensor};
use std::sync::{Arc, OnceLock};

/// A linear map `y = x Wᵀ` with `W` of shape `[out, in]`.
#[derive(Clone, Debug)]
pub enum QMatMul {
    /// Blocks multiplied as they are stored.
    Quantized(Arc<QTensor>),
    /// Blocks of the types `interleaved::repacks`, repacked eight rows at a time (see
    /// `interleaved`) on their first decode product, or loaded that way.
    Interleaved(Arc<Repacking>),
    /// F32 weights go through the dense matmul. (F16/BF16 ones are `Quantized`: read in
    /// their two-byte form, half the bytes per decode step.)
    Dense(Tensor),
}

/// A weight of a type `interleaved::repacks` that it repacks on its first decode product (one
/// activation row; a prompt's logits do not count, see `QMatMul::forward_prompt`). Until then,
/// which covers loading and the first prompt, it is multiplied as stored, so the first token
/// does not wait for the copy (tens of milliseconds for Gemma 3 270M's 44 MB of Q5_0 and
/// 178 MB Q8_0 head); the stored bytes' pages leave the resident set as they are copied, and
/// nothing reads them after.
#[derive(Debug)]
pub struct Repacking {
    stored: Arc<QTensor>,
    packed: OnceLock<Box<dyn RowGroups>>,
}

impl Repacking {
    /// Checks everything repacking needs, so that it cannot fail later.
    fn new(stored: Arc<QTensor>) -> Result<Self> {
        let (n, k) = QMatMul::dims_of(&stored)?;
        if !interleaved::repacks(stored.dtype(), n, k) {
            return Err(Error::invalid(
                "QMatMul::interleave",
                format!(
                    "{} weight [{n}, {k}]: only Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, IQ4_XS, IQ3_S and IQ3_XXS weights of whole groups of {} rows are repacked",
                    stored.dtype(),
                    super::format::interleaved::ROWS
                ),
            ));
        }
        Ok(Self {
            stored,
            packed: OnceLock::new(),
        })
    }

    /// A weight whose bytes are already interleaved (`QTensor::is_interleaved`): nothing to
    /// copy, and no stored layout to fall back on.
    fn in_place(stored: Arc<QTensor>) -> Result<Self> {
        Ok(Self {
            packed: OnceLock::from(interleaved::view(stored.clone())?),
            stored,
        })
    }

    /// The repacked weight, made on the first call.
    fn packed(&self) -> &dyn RowGroups {
        self.packed
            .get_or_init(|| {
                let w = &self.stored;
                let (n, k) = (w.shape().dims()[0], w.shape().dims()[1]);
                match w.dtype() {
                    GgmlDType::IQ4XS => return Box::new(Self::transcode::<BlockIQ4XS>(w, n, k)),
                    GgmlDType::IQ3S => return Box::new(Self::transcode::<BlockIQ3S>(w, n, k)),
                    GgmlDType::IQ3XXS => return Box::new(Self::transcode::<BlockIQ3XXS>(w, n, k)),
                    _ => {}
                }
                with_interleave_type!(w.dtype(), B => {
                    Box::new(Self::pack::<B>(w, n, k)) as Box<dyn RowGroups>
                }, _ => unreachable!("dtype checked in Repacking::new"))
            })
            .as_ref()
    }

    /// IQ4_XS repacked, or IQ3_S or IQ3_XXS transcoded into its layout.
    fn transcode<B: IQ4XSLayout>(w: &QTensor, n: usize, k: usize) -> InterleavedIQ4XS {
        let blocks = w.blocks::<B>().expect("dtype checked in Repacking::new");
        InterleavedIQ4XS::new_releasing(blocks, n, k, &|bytes| w.release_bytes(bytes))
            .expect("shape checked in Repacking::new")
    }

    fn pack<B: super::kernels::interleaved::InterleavedKernels>(
        w: &QTensor,
        n: usize,
        k: usize,
    ) -> Interleaved<B> {
        let blocks = w.blocks::<B>().expect("dtype checked in Repacking::new");
        Interleaved::new_releasing(blocks, n, k, &|bytes| w.release_bytes(bytes))
            .expect("shape checked in Repacking::new")
    }
}

impl QMatMul {
    pub fn from_qtensor(w: QTensor) -> Result<Self> {
        Self::from_arc(Arc::new(w))
    }

    /// F32 weights go to the dense matmul; the types `interleaved::repacks` are repacked where
    /// that pays (`interleaved::pays`); the rest stay as stored.
    pub fn from_arc(w: Arc<QTensor>) -> Result<Self> {
        let (n, k) = Self::dims_of(&w)?;
        // An interleaved tensor has nothing to repack: `from_arc_as_stored` views it.
        if !w.is_interleaved() && interleaved::pays(w.dtype(), n, k) {
            return Ok(QMatMul::Interleaved(Arc::new(Repacking::new(w)?)));
        }
        Self::from_arc_as_stored(w)
    }

    /// Bytes a `[n, k]` weight of `dtype`, `stored` bytes in its file, holds in memory once
    /// `from_arc` has it the way it multiplies it and it has been used: a repacked copy
    /// replaces the stored pages (released as they are copied; the IQ3 types grow to
    /// IQ4_XS's layout, 136 bytes per 256 weights), an F32 weight is copied for the dense
    /// matmul beside its read pages, the rest stays as stored.
    pub fn resident_bytes(dtype: GgmlDType, n: usize, k: usize, stored: usize) -> usize {
        if dtype == GgmlDType::F32 {
            return 2 * stored;
        }
        if interleaved::pays(dtype, n, k) && interleaved::iq4xs_layout(dtype) {
            return (n * k).div_ceil(256) * 136;
        }
        stored
    }

    /// Never repacks: quantized blocks are multiplied as they are stored (interleaved ones
    /// with the interleaved kernels).
    pub fn from_arc_as_stored(w: Arc<QTensor>) -> Result<Self> {
        Self::dims_of(&w)?;
        if w.is_interleaved() {
            return Ok(QMatMul::Interleaved(Arc::new(Repacking::in_place(w)?)));
        }
        Ok(match w.dtype() {
            GgmlDType::F32 => QMatMul::Dense(w.dequantize()?),
            _ => QMatMul::Quantized(w),
        })
    }

    /// Repacks a weight of a type `interleaved::repacks` eight rows at a time now, whatever the
    /// CPU (the kernels fall back to portable code); an error for other types or a row count
    /// not a multiple of 8.
    pub fn interleave(w: &QTensor) -> Result<Self> {
        if w.is_interleaved() {
            return Self::from_arc_as_stored(Arc::new(w.clone()));
        }
        let r = Repacking::new(Arc::new(w.clone()))?;
        r.packed();
        Ok(QMatMul::Interleaved(Arc::new(r)))
    }

    /// Makes the repacked copy now if this weight repacks lazily and has not yet: a caller
    /// that wants the memory settled before the first pass (its stored pages are read once,
    /// here, and released as they are copied, instead of being read whole by a prompt's
    /// pass first). Returns whether it copied anything.
    pub fn repack_now(&self) -> bool {
        match self {
            QMatMul::Interleaved(r) if r.packed.get().is_none() => {
                r.packed();
                true
            }
            _ => false,
        }
    }

    /// Whether this weight is held repacked (`interleave`, or a lazily repacking weight after
    /// its first decode product).
    pub fn is_repacked(&self) -> bool {
        matches!(self, QMatMul::Interleaved(r) if r.packed.get().is_some())
    }

    fn dims_of(w: &QTensor) -> Result<(usize, usize)> {
        match w.shape().dims() {
            &[n, k] => Ok((n, k)),
            d => Err(Error::invalid(
                "QMatMul",
                format!("weights must be 2-D [out, in], got {d:?}"),
            )),
        }
    }

    /// `[out, in]`.
    pub fn weight_dims(&self) -> (usize, usize) {
        let d = match self {
            QMatMul::Quantized(w) => w.shape().dims(),
            QMatMul::Interleaved(w) => w.stored.shape().dims(),
            QMatMul::Dense(t) => t.dims(),
        };
        (d[0], d[1])
    }

    /// Rows `ids` of the weight as an f32 `[ids.len(), in]` tensor: the embedding lookup of a
    /// tied output head. A repacked weight reads its copy: its stored pages were released, and
    /// reading them back would be a page fault (often a disk read) per token.
    pub fn dequantize_rows(&self, ids: &[u32]) -> Result<Tensor> {
        let packed = match self {
            QMatMul::Quantized(w) => return w.dequantize_rows(ids),
            QMatMul::Dense(t) => {
                let ids = Tensor::from_vec(ids.to_vec(), ids.len(), &t.device())?;
                return t.index_select(&ids, 0)?.to_dtype(DType::F32);
            }
            QMatMul::Interleaved(r) => match r.packed.get() {
                Some(p) => p,
                None => return r.stored.dequantize_rows(ids),
            },
        };
        let (n, k) = self.weight_dims();
        super::qtensor::check_row_ids("QMatMul::dequantize_rows", ids, n)?;
        let mut out = vec![0f32; ids.len() * k];
        for (&id, o) in ids.iter().zip(out.chunks_exact_mut(k.max(1))) {
            packed.dequantize_row(id as usize, o);
        }
        Tensor::from_vec(out, (ids.len(), k), &crate::Device::Cpu)
    }

    /// The block type `rows` activation rows are quantized to before the integer products
    /// (F16/BF16 for those weights' decode, F32 for their prefill; `None` for F32 weights,
    /// which take the dense matmul).
    pub fn activation_dtype(&self, rows: usize) -> Option<GgmlDType> {
        let w = match self {
            QMatMul::Quantized(w) => w,
            // IQ4_XS (and IQ3_S and IQ3_XXS in its layout) decodes against Q8_K, below the
            // panels' rows.
            QMatMul::Interleaved(r)
                if super::cpu::interleaved::iq4xs_layout(r.stored.dtype())
                    && rows < super::cpu::gemm::MIN_ROWS =>
            {
                return Some(GgmlDType::Q8K)
            }
            QMatMul::Interleaved(_) => return Some(GgmlDType::Q8_0),
            QMatMul::Dense(_) => return None,
        };
        let k = self.weight_dims().1;
        if w.dtype().afq().is_some() {
            return Some(GgmlDType::Q8_0);
        }
        use super::cpu::matvec::{panels_by_rows, Panels};
        Some(
            crate::with_block_type!(w.dtype(), B => match panels_by_rows::<B>(rows, k) {
                Some(Panels::Quantized) => GgmlDType::Q8_0,
                Some(Panels::Float) => super::cpu::float::activation_dtype::<B>(),
                None => <<B as GgmlBlock>::Dot as GgmlBlock>::DTYPE,
            }),
        )
    }

    /// Rows from which a product with this weight takes the GEMM panels (whose numerics
    /// differ from the decode kernels'): a batch keeps the rows of shorter runs apart to give
    /// each sequence what it would get alone (see `forward_rows_alone`), and sends the rows
    /// of longer runs through `forward_panels`. It depends on the weight type
    /// (`cpu::gemm::min_rows`): the panels unpack every weight block once, which pays from
    /// fewer rows for some types than for others.
    pub fn panels_from(&self) -> usize {
        match self {
            QMatMul::Quantized(w) => super::cpu::gemm::min_rows(w.dtype()),
            QMatMul::Interleaved(_) | QMatMul::Dense(_) => super::cpu::gemm::MIN_ROWS,
        }
    }

    /// `x`: `[..., in]` in any float dtype; returns `[..., out]` in x's dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, true, Route::ByRows)
    }

    /// `forward` with every row computed exactly as a product with that row alone would
    /// compute it (the decode kernels' activation type and summation order), however many
    /// rows there are. A batch of decode steps from different sequences takes this, so that
    /// each sequence gets the logits it would get alone. `may_repack` as in `forward_prompt`.
    pub fn forward_rows_alone(&self, x: &Tensor, may_repack: bool) -> Result<Tensor> {
        self.forward_with(x, may_repack, Route::Alone)
    }

    /// `forward` with every row through the GEMM panels however few rows there are (where
    /// they apply to this weight), each row computed as a product of `panels_from` rows or
    /// more computes it. A run that long which reaches the product in pieces (its first
    /// rows came from the prefix cache, or with a pass of their own) takes this, so that
    /// each piece computes what the whole run computes. `may_repack` as in `forward_prompt`.
    pub fn forward_panels(&self, x: &Tensor, may_repack: bool) -> Result<Tensor> {
        self.forward_with(x, may_repack, Route::Panels)
    }

    /// `forward` for a prompt: never the product that repacks a weight (see `Repacking`). A
    /// prompt's last-position logits are a one-row product with the output head, but not yet
    /// the decode loop, and the first token should not wait for a 178 MB copy.
    pub fn forward_prompt(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, false, Route::ByRows)
    }

    /// The product, its rows taking the kernels `route` picks.
    fn forward_with(&self, x: &Tensor, may_repack: bool, route: Route) -> Result<Tensor> {
        let (n, k) = self.weight_dims();
        let dims = x.dims();
        if dims.last() != Some(&k) {
            return Err(Error::invalid(
                "QMatMul::forward",
                format!("input {dims:?} does not end in the weight's in-dim {k}"),
            ));
        }
        let m = x.elem_count() / k.max(1);
        let x32 = x.to_dtype(DType::F32)?;
        let out = match self {
            QMatMul::Dense(w) => return x.matmul(&w.to_dtype(x.dtype())?.t()?),
            QMatMul::Quantized(w) => {
                x32.with_contiguous(|xs: &[f32]| as_stored(w, xs, m, route))??
            }
            QMatMul::Interleaved(w)
                if m == 1 && route != Route::Panels && (may_repack || w.packed.get().is_some()) =>
            {
                x32.with_contiguous(|xs: &[f32]| {
                    matvec_many(&[w.packed().job(xs)]).pop().expect("one job")
                })?
            }
            QMatMul::Interleaved(w) => {
                // Rows alone are decode steps: they repack like a one-row product.
                let packed = match may_repack && route == Route::Alone {
                    true => Some(w.packed()),
                    false => w.packed.get().map(|p| p.as_ref()),
                };
                // Not repacked yet: the panels from the repacked form's row count, so that
                // `panels_from` holds in both states.
                let route = match route {
                    Route::ByRows if m >= super::cpu::gemm::MIN_ROWS => Route::Panels,
                    r => r,
                };
                x32.with_contiguous(|xs: &[f32]| match packed {
                    Some(p) => Ok(p.matmul(xs, m, route)),
                    None => as_stored(&w.stored, xs, m, route),
                })??
            }
        };
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("rank >= 1") = n;
        Tensor::from_vec(out, out_dims, &x.device())?.to_dtype(x.dtype())
    }

    /// `[w.forward(x) for w in ws]`. For one activation row (decode) with quantized weights,
    /// all the products run in a single parallel pass over the rows of every weight: one
    /// hand-off to the thread pool instead of one per weight (Q/K/V, gate/up).
    pub fn forward_many(ws: &[&QMatMul], x: &Tensor) -> Result<Vec<Tensor>> {
        let k = x.dims().last().copied().unwrap_or(0);
        let one_row = x.elem_count() == k && k > 0;
        let all_quantized = ws.iter().all(|w| {
            matches!(w, QMatMul::Quantized(_) | QMatMul::Interleaved(_)) && w.weight_dims().1 == k
        });
        if !one_row || !all_quantized {
            return ws.iter().map(|w| w.forward(x)).collect();
        }
        let xs = x.to_dtype(DType::F32)?.to_vec_flat::<f32>()?; // one row: a short copy
        let jobs = ws
            .iter()
            .map(|w| match w {
                QMatMul::Quantized(q) if q.dtype().afq().is_some() => {
                    let (t, n) = (q.dtype().afq().expect("matched"), w.weight_dims().0);
                    Ok(super::cpu::afq::job(t, q.data(), n, &xs))
                }
                QMatMul::Quantized(q) => {
                    let n = w.weight_dims().0;
                    crate::with_block_type!(q.dtype(), B => Ok(
                        matvec::job::<B>(q.blocks::<B>()?, n, k, &xs)
                    ))
                }
                QMatMul::Interleaved(r) => Ok(r.packed().job(&xs)),
                QMatMul::Dense(_) => unreachable!("checked above"),
            })
            .collect::<Result<Vec<_>>>()?;
        let outs = matvec_many(&jobs);
        let mut dims = x.dims().to_vec();
        outs.into_iter()
            .map(|o| {
                *dims.last_mut().expect("rank >= 1") = o.len();
                Tensor::from_vec(o, dims.clone(), &x.device())?.to_dtype(x.dtype())
            })
            .collect()
    }
}

/// `x [m, k]` times the stored blocks of `w [n, k]` transposed, by `route`.
fn as_stored(w: &QTensor, x: &[f32], m: usize, route: Route) -> Result<Vec<f32>> {
    let (n, k) = QMatMul::dims_of(w)?;
    if let Some(t) = w.dtype().afq() {
        return Ok(super::cpu::afq::matmul(t, w.data(), n, k, x, m, route));
    }
    crate::with_block_type!(w.dtype(), B => {
        let w = w.blocks::<B>()?;
        Ok(matvec::matmul_by::<B>(w, n, k, x, m, route))
    })
}

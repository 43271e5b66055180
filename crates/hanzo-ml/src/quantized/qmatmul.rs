//! `QMatMul`: f32 activations times quantized weights, with no dequantization pass.
//!
//! Activation rows are quantized once to the weight type's partner (Q8_0, Q8_1 or Q8_K);
//! then every output is an integer dot product of one weight row with one activation row,
//! done by the SIMD kernel `dot::pick_*` chose. Work is split over weight rows. With several
//! activation rows (prefill), a small tile of weight rows stays in L1 while every activation
//! row passes over it; from 16 rows on, types with an unpacked form take the panel GEMM in
//! `gemm` instead. Q4_0 and Q5_0 weights are repacked eight rows at a time where the kernels
//! are 256 bits wide (`interleaved`).

use super::blocks::{BlockQ4_0, BlockQ5_0, BlockQ8_0, GgmlBlock, TileFn, VecDotFn};
use super::interleaved::{self, Interleaved, RowGroups};
use super::{GgmlDType, QTensor};
use crate::{DType, Error, Result, Tensor};
use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};

/// A linear map `y = x Wᵀ` with `W` of shape `[out, in]`.
#[derive(Clone, Debug)]
pub enum QMatMul {
    /// Blocks multiplied as they are stored.
    Quantized(Arc<QTensor>),
    /// Q4_0/Q5_0/Q8_0 blocks, repacked eight rows at a time (see `interleaved`) on their first
    /// decode product.
    Interleaved(Arc<Repacking>),
    /// Float weights (F32/F16/BF16 files) go through the dense matmul.
    Dense(Tensor),
}

/// A Q4_0/Q5_0/Q8_0 weight that `interleaved` repacks on its first decode product (one
/// activation row; a prompt's logits do not count, see `QMatMul::forward_prompt`). Until then,
/// which covers loading and the first prompt, it is multiplied as stored, so the first token
/// does not wait for the copy (~40 ms for Gemma 3 270M's 44 MB of Q5_0 and 178 MB Q8_0 head
/// on 2 threads); the stored bytes' pages leave the resident set as they are copied, and
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
        if !interleaved::fits(stored.dtype(), n, k) {
            return Err(Error::invalid(
                "QMatMul::interleave",
                format!(
                    "{} weight [{n}, {k}]: only Q4_0, Q5_0 and Q8_0 weights of whole groups of {} rows are repacked",
                    stored.dtype(),
                    interleaved::ROWS
                ),
            ));
        }
        Ok(Self {
            stored,
            packed: OnceLock::new(),
        })
    }

    /// The repacked weight, made on the first call.
    fn packed(&self) -> &dyn RowGroups {
        self.packed
            .get_or_init(|| {
                let w = &self.stored;
                let (n, k) = (w.shape().dims()[0], w.shape().dims()[1]);
                let packed: Box<dyn RowGroups> = match w.dtype() {
                    GgmlDType::Q4_0 => Box::new(Self::pack::<BlockQ4_0>(w, n, k)),
                    GgmlDType::Q5_0 => Box::new(Self::pack::<BlockQ5_0>(w, n, k)),
                    _ => Box::new(Self::pack::<BlockQ8_0>(w, n, k)),
                };
                packed
            })
            .as_ref()
    }

    fn pack<B: interleaved::Interleave>(w: &QTensor, n: usize, k: usize) -> Interleaved<B> {
        let blocks = w.blocks::<B>().expect("dtype checked in Repacking::new");
        Interleaved::new_releasing(blocks, n, k, &|bytes| w.release_bytes(bytes))
            .expect("shape checked in Repacking::new")
    }
}

/// Fewest weight rows per task for decode.
const MATVEC_ROWS: usize = 16;
/// Weight rows kept hot while all activation rows pass (prefill).
const TILE_ROWS: usize = 32;

impl QMatMul {
    pub fn from_qtensor(w: QTensor) -> Result<Self> {
        Self::from_arc(Arc::new(w))
    }

    /// Float weights go to the dense matmul; Q4_0/Q5_0/Q8_0 ones are repacked where that pays
    /// (`interleaved::pays`); the rest stay as stored.
    pub fn from_arc(w: Arc<QTensor>) -> Result<Self> {
        let (n, k) = Self::dims_of(&w)?;
        if interleaved::pays(w.dtype(), n, k) {
            return Ok(QMatMul::Interleaved(Arc::new(Repacking::new(w)?)));
        }
        Self::from_arc_as_stored(w)
    }

    /// Never repacks: quantized blocks are multiplied as they are stored.
    pub fn from_arc_as_stored(w: Arc<QTensor>) -> Result<Self> {
        Self::dims_of(&w)?;
        Ok(match w.dtype() {
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => QMatMul::Dense(w.dequantize()?),
            _ => QMatMul::Quantized(w),
        })
    }

    /// Repacks a Q4_0/Q5_0/Q8_0 weight eight rows at a time now, whatever the CPU (the kernels
    /// fall back to portable code); an error for other types or a row count not a multiple of
    /// 8.
    pub fn interleave(w: &QTensor) -> Result<Self> {
        let r = Repacking::new(Arc::new(w.clone()))?;
        r.packed();
        Ok(QMatMul::Interleaved(Arc::new(r)))
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
    /// (`None` for float weights, which multiply in floating point).
    pub fn activation_dtype(&self, rows: usize) -> Option<GgmlDType> {
        let w = match self {
            QMatMul::Quantized(w) => w,
            QMatMul::Interleaved(_) => return Some(GgmlDType::Q8_0),
            QMatMul::Dense(_) => return None,
        };
        let k = self.weight_dims().1;
        Some(crate::with_block_type!(w.dtype(), B => {
            if rows > 1 && super::gemm::applies::<B>(rows, k) {
                GgmlDType::Q8_0
            } else {
                <<B as GgmlBlock>::Dot as GgmlBlock>::DTYPE
            }
        }))
    }

    /// `x`: `[..., in]` in any float dtype; returns `[..., out]` in x's dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, true)
    }

    /// `forward` for a prompt: never the product that repacks a weight (see `Repacking`). A
    /// prompt's last-position logits are a one-row product with the output head, but not yet
    /// the decode loop, and the first token should not wait for a 178 MB copy.
    pub fn forward_prompt(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, false)
    }

    fn forward_with(&self, x: &Tensor, may_repack: bool) -> Result<Tensor> {
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
            QMatMul::Quantized(w) => x32.with_contiguous(|xs: &[f32]| as_stored(w, xs, m))??,
            QMatMul::Interleaved(w) if m == 1 && (may_repack || w.packed.get().is_some()) => x32
                .with_contiguous(|xs: &[f32]| {
                    matvec_many(&[w.packed().job(xs)]).pop().expect("one job")
                })?,
            QMatMul::Interleaved(w) => {
                x32.with_contiguous(|xs: &[f32]| match w.packed.get() {
                    Some(p) => Ok(p.matmul(xs, m)),
                    None => as_stored(&w.stored, xs, m),
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
                QMatMul::Quantized(q) => {
                    let n = w.weight_dims().0;
                    crate::with_block_type!(q.dtype(), B => Ok(
                        Box::new(Matvec::<B>::new(q.blocks::<B>()?, n, k, &xs)) as Box<dyn MatvecJob>
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

/// `x [m, k]` times the stored blocks of `w [n, k]` transposed.
fn as_stored(w: &QTensor, x: &[f32], m: usize) -> Result<Vec<f32>> {
    let (n, k) = QMatMul::dims_of(w)?;
    crate::with_block_type!(w.dtype(), B => Ok(matmul::<B>(w.blocks::<B>()?, n, k, x, m)))
}

/// One weight's share of a decode step: its kernels, its rows and the activation row
/// quantized to its partner type.
pub(crate) trait MatvecJob: Sync {
    fn rows(&self) -> usize;
    /// `out[i] = w[r0 + i] · x`.
    fn run(&self, r0: usize, out: &mut [f32]);
}

struct Matvec<'a, B: GgmlBlock> {
    kernels: Kernels<B>,
    w: Rows<'a, B>,
    n: usize,
    xq: Vec<B::Dot>,
}

impl<'a, B: GgmlBlock> Matvec<'a, B> {
    fn new(w: &'a [B], n: usize, k: usize, x: &[f32]) -> Self {
        let mut xq =
            vec![<B::Dot as bytemuck::Zeroable>::zeroed(); k / <B::Dot as GgmlBlock>::BLOCK_SIZE];
        <B::Dot as GgmlBlock>::quantize(x, &mut xq);
        Self {
            kernels: Kernels::pick(),
            w: Rows::new(w, k / B::BLOCK_SIZE),
            n,
            xq,
        }
    }
}

impl<B: GgmlBlock> MatvecJob for Matvec<'_, B> {
    fn rows(&self) -> usize {
        self.n
    }

    fn run(&self, r0: usize, out: &mut [f32]) {
        self.kernels.matvec(&self.w, r0, &self.xq, out)
    }
}

/// Every job's output vector, computed in one parallel pass over row chunks: on the spinning
/// decode team when it is free (see `cpu::team`), on rayon otherwise.
pub(crate) fn matvec_many(jobs: &[Box<dyn MatvecJob + '_>]) -> Vec<Vec<f32>> {
    let mut outs: Vec<Vec<f32>> = jobs.iter().map(|j| vec![0f32; j.rows()]).collect();
    let team = crate::cpu::team::global();
    let rows = chunk_rows(jobs.iter().map(|j| j.rows()).sum(), team.threads());
    let tasks: Vec<(&dyn MatvecJob, usize, Mutex<&mut [f32]>)> = jobs
        .iter()
        .zip(outs.iter_mut())
        .flat_map(|(j, o)| {
            o.chunks_mut(rows)
                .enumerate()
                .map(move |(c, o)| (j.as_ref(), c * rows, Mutex::new(o)))
        })
        .collect();
    let run = |(j, r0, o): &(&dyn MatvecJob, usize, Mutex<&mut [f32]>)| {
        // Each task index is claimed once, so the lock is never contended.
        j.run(*r0, &mut o.lock().unwrap_or_else(|e| e.into_inner()));
    };
    if !team.run(tasks.len(), &|i| run(&tasks[i])) {
        tasks.par_iter().for_each(run);
    }
    outs
}

/// Rows per decode task: about `TASKS_PER_THREAD` tasks per thread, so a thread slowed down
/// by the machine leaves its share to the others, but at least `MATVEC_ROWS` so a claim (one
/// shared atomic) is small next to the rows it buys. Whole groups of interleaved rows (a
/// multiple of `MATVEC_TILE` too).
fn chunk_rows(total: usize, threads: usize) -> usize {
    const TASKS_PER_THREAD: usize = 16;
    total
        .div_ceil(threads * TASKS_PER_THREAD)
        .next_multiple_of(interleaved::ROWS)
        .max(MATVEC_ROWS)
}

/// `x [m, k]` (row-major f32) times `w [n, k]` (blocks) transposed → `[m, n]`.
pub fn matmul<B: GgmlBlock>(w: &[B], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    if m == 0 || n == 0 {
        return vec![0f32; m * n];
    }
    if m == 1 {
        let job: Box<dyn MatvecJob> = Box::new(Matvec::new(w, n, k, x));
        return matvec_many(&[job]).pop().expect("one job");
    }
    if let Some(out) = super::gemm::matmul(w, n, k, x, m) {
        return out;
    }
    let wpr = k / B::BLOCK_SIZE;
    let xpr = k / <B::Dot as GgmlBlock>::BLOCK_SIZE;
    let mut xq = vec![<B::Dot as bytemuck::Zeroable>::zeroed(); m * xpr];
    xq.par_chunks_mut(xpr.max(1))
        .zip(x.par_chunks(k.max(1)))
        .for_each(|(q, x)| <B::Dot as GgmlBlock>::quantize(x, q));
    let kernels = Kernels::<B>::pick();
    let wrows = Rows::new(w, wpr);
    let xrows = Rows::new(&xq, xpr);
    let mut out = vec![0f32; m * n];
    // Each task fills a [TILE_ROWS, m] tile of the transposed output.
    let mut out_t = vec![0f32; n * m];
    out_t
        .par_chunks_mut(TILE_ROWS * m)
        .enumerate()
        .for_each(|(t, tile)| kernels.tile(&wrows, t * TILE_ROWS, &xrows, m, tile));
    for (j, o) in out.chunks_exact_mut(n).enumerate() {
        for (r, o) in o.iter_mut().enumerate() {
            *o = out_t[r * m + j];
        }
    }
    out
}

/// Decode: ask for the bytes of rows `r..r + n` a fixed distance ahead (see `dot::prefetch_ahead`).
#[inline(always)]
fn prefetch_rows<B>(w: &Rows<B>, r: usize, n: usize) {
    let span = w.span(r, n);
    let (at, bytes) = (span.as_ptr() as *const u8, std::mem::size_of_val(span));
    if w.streamed {
        super::dot::prefetch_ahead::<true>(at, bytes)
    } else {
        super::dot::prefetch_ahead::<false>(at, bytes)
    }
}

/// A matrix of blocks stored row after row.
struct Rows<'a, B> {
    blocks: &'a [B],
    per_row: usize,
    /// Larger than the last-level cache: decode prefetches it as non-temporal.
    streamed: bool,
}

impl<'a, B> Rows<'a, B> {
    fn new(blocks: &'a [B], per_row: usize) -> Self {
        let streamed = super::dot::streamed(std::mem::size_of_val(blocks));
        Self {
            blocks,
            per_row,
            streamed,
        }
    }

    /// Rows `r..r + n`, which lie back to back in memory.
    fn span(&self, r: usize, n: usize) -> &'a [B] {
        &self.blocks[r * self.per_row..(r + n) * self.per_row]
    }

    fn row(&self, r: usize) -> &'a [B] {
        &self.blocks[r * self.per_row..(r + 1) * self.per_row]
    }
}

/// The kernels for one weight type: tiles where the CPU has them, the single dot for the
/// edges (and for every type without tiles).
struct Kernels<B: GgmlBlock> {
    one: VecDotFn<B>,
    rows: Option<TileFn<B, MATVEC_TILE, 1>>,
    tile: Option<TileFn<B, TILE_R, TILE_C>>,
}

/// Weight rows per kernel call in decode.
const MATVEC_TILE: usize = 4;
/// Prefill tile: weight rows × activation rows per kernel call.
const TILE_R: usize = 2;
const TILE_C: usize = 4;
/// Activation rows per pass over a task's weight rows.
const COLUMN_CHUNK: usize = 16;

impl<B: GgmlBlock> Kernels<B> {
    fn pick() -> Self {
        // Several rows per call pay off for the 32-element types, where the activation block
        // and its scale are a large share of each step. The AVX2 k-quant kernels already hold
        // enough state per row that more rows spill registers (measured slower); AVX-512's 32
        // registers take 4 rows (Q6_K matvec +20% measured, Q4_K unchanged).
        use crate::quantized::dot::{isa, Isa};
        let several_rows = B::BLOCK_SIZE == 32 || isa() >= Isa::Avx512Vnni;
        Self {
            one: B::vec_dot_fn(),
            rows: if several_rows { B::tile_fn() } else { None },
            tile: B::tile_fn(),
        }
    }

    /// `out[i] = w[r0 + i] · x`.
    fn matvec(&self, w: &Rows<B>, r0: usize, x: &[B::Dot], out: &mut [f32]) {
        let mut i = 0;
        if let Some(rows) = self.rows {
            while i + MATVEC_TILE <= out.len() {
                prefetch_rows(w, r0 + i, MATVEC_TILE);
                let y = rows(std::array::from_fn(|k| w.row(r0 + i + k)), [x]);
                for (k, y) in y.iter().enumerate() {
                    out[i + k] = y[0];
                }
                i += MATVEC_TILE;
            }
        }
        for (k, o) in out.iter_mut().enumerate().skip(i) {
            prefetch_rows(w, r0 + k, 1);
            *o = (self.one)(w.row(r0 + k), x);
        }
    }

    /// `out[i * m + j] = w[r0 + i] · x[j]` for every activation row j (m of them).
    fn tile(&self, w: &Rows<B>, r0: usize, x: &Rows<B::Dot>, m: usize, out: &mut [f32]) {
        let rows = out.len() / m;
        // Columns go in chunks small enough to stay in L2 while every row pair of this task
        // passes over them (each pair itself staying in L1).
        for c0 in (0..m).step_by(COLUMN_CHUNK) {
            let cols = COLUMN_CHUNK.min(m - c0);
            let (mut i, mut j) = (0, 0);
            if let Some(tile) = self.tile {
                while i + TILE_R <= rows {
                    j = 0;
                    while j + TILE_C <= cols {
                        let xs = std::array::from_fn(|c| x.row(c0 + j + c));
                        let y = tile(std::array::from_fn(|r| w.row(r0 + i + r)), xs);
                        for (r, y) in y.iter().enumerate() {
                            out[(i + r) * m + c0 + j..][..TILE_C].copy_from_slice(y);
                        }
                        j += TILE_C;
                    }
                    i += TILE_R;
                }
            }
            // The ragged right and bottom edges take the single dot.
            for r in 0..rows {
                let from = if r < i { j } else { 0 };
                for c in from..cols {
                    out[r * m + c0 + c] = (self.one)(w.row(r0 + r), x.row(c0 + c));
                }
            }
        }
    }
}

//! Quantized products on the CPU as the blocks are stored: decode (one activation row, a
//! pass over row chunks of every weight at once) and the tile path of prefill.
//!
//! Activation rows are quantized once to the weight type's partner (Q8_0, Q8_1 or Q8_K);
//! then every output is an integer dot product of one weight row with one activation row,
//! done by the kernel `kernels::Kernels` chose. Work is split over weight rows. With several
//! activation rows, a small tile of weight rows stays in L1 while every activation row passes
//! over it; from 16 rows on, types with an unpacked form take the panel GEMM (`gemm`) instead,
//! and float weights the f32 GEMM (`float`).

use super::sink::{filled, Sink};
use super::Route;
use crate::cpu::par::{for_each_chunk, par_for_with};
use crate::quantized::format::interleaved::ROWS;
use crate::quantized::format::GgmlBlock;
use crate::quantized::kernels::prefetch::{prefetch_ahead, streamed, PREFETCH_DISTANCE};
use crate::quantized::kernels::{isa, Isa, Kernels, QuantizeRow, TileFn, VecDotFn, WidenedDotFn};

/// Fewest weight rows per task for decode.
const MATVEC_ROWS: usize = 16;
/// Weight rows kept hot while all activation rows pass (prefill).
const TILE_ROWS: usize = 32;

/// One weight's share of a decode step: its kernels, its rows and the activation row
/// quantized to its partner type.
pub(crate) trait MatvecJob: Sync {
    fn rows(&self) -> usize;
    /// `out[i] = w[r0 + i] · x`.
    fn run(&self, r0: usize, out: &mut [f32]);
}

/// The decode job of a `B` weight against the activation row `x`: through the tiles, or
/// against the row widened once where the type has a kernel for that (`Kernels::widened_dot`).
pub(crate) fn job<'a, B: Kernels>(
    w: &'a [B],
    n: usize,
    k: usize,
    x: &[f32],
) -> Box<dyn MatvecJob + 'a> {
    let xq = quantized_row::<B>(x);
    let w = Rows::new(w, k / B::BLOCK_SIZE);
    match B::widened_dot() {
        Some(dot) => {
            let mut x = vec![0f32; k];
            B::Dot::dequantize(&xq, &mut x);
            Box::new(Widened { dot, w, n, x })
        }
        None => Box::new(Matvec {
            kernels: TileKernels::pick(),
            w,
            n,
            xq,
        }),
    }
}

/// The activation row quantized to `B`'s partner type.
fn quantized_row<B: Kernels>(x: &[f32]) -> Vec<B::Dot> {
    let mut xq = vec![<B::Dot as bytemuck::Zeroable>::zeroed(); x.len() / B::Dot::BLOCK_SIZE];
    B::Dot::quantize_row()(x, &mut xq);
    xq
}

struct Matvec<'a, B: Kernels> {
    kernels: TileKernels<B>,
    w: Rows<'a, B>,
    n: usize,
    xq: Vec<B::Dot>,
}

impl<B: Kernels> MatvecJob for Matvec<'_, B> {
    fn rows(&self) -> usize {
        self.n
    }

    fn run(&self, r0: usize, out: &mut [f32]) {
        self.kernels.matvec(&self.w, r0, &self.xq, out)
    }
}

/// Decode against the activation row quantized to `B::Dot` and widened back to f32 once.
struct Widened<'a, B: Kernels> {
    dot: WidenedDotFn<B>,
    w: Rows<'a, B>,
    n: usize,
    x: Vec<f32>,
}

impl<B: Kernels> MatvecJob for Widened<'_, B> {
    fn rows(&self) -> usize {
        self.n
    }

    fn run(&self, r0: usize, out: &mut [f32]) {
        each_row(&self.w, r0, out, |row| (self.dot)(row, &self.x))
    }
}

/// `out[i] = dot(w[r0 + i])`, a row at a time, each row's bytes asked for a row ahead.
#[inline(always)]
fn each_row<B>(w: &Rows<B>, r0: usize, out: &mut [f32], dot: impl Fn(&[B]) -> f32) {
    for (k, o) in out.iter_mut().enumerate() {
        prefetch_rows(w, r0 + k, 1);
        *o = dot(w.row(r0 + k));
    }
}

/// Every job's output vector, computed in one parallel pass over row chunks (`cpu::par`: on
/// the spinning decode team when it is free).
pub(crate) fn matvec_many(jobs: &[Box<dyn MatvecJob + '_>]) -> Vec<Vec<f32>> {
    let mut outs: Vec<Vec<f32>> = jobs.iter().map(|j| vec![0f32; j.rows()]).collect();
    let threads = crate::cpu::team::global().threads();
    let rows = chunk_rows(jobs.iter().map(|j| j.rows()).sum(), threads);
    let mut tasks: Vec<(&dyn MatvecJob, usize, &mut [f32])> = jobs
        .iter()
        .zip(outs.iter_mut())
        .flat_map(|(j, o)| {
            o.chunks_mut(rows)
                .enumerate()
                .map(move |(c, o)| (j.as_ref(), c * rows, o))
        })
        .collect();
    for_each_chunk(&mut tasks, 1, &|_, task| {
        let (j, r0, o) = &mut task[0];
        j.run(*r0, o)
    });
    outs
}

/// Rows per decode task: about `TASKS_PER_THREAD` tasks per thread, so a thread slowed down
/// by the machine leaves its share to the others, but at least `MATVEC_ROWS` so a claim (one
/// shared atomic) is small next to the rows it buys. Whole groups of interleaved rows (a
/// multiple of `MATVEC_TILE` too).
pub(super) fn chunk_rows(total: usize, threads: usize) -> usize {
    const TASKS_PER_THREAD: usize = 16;
    total
        .div_ceil(threads * TASKS_PER_THREAD)
        .next_multiple_of(ROWS)
        .max(MATVEC_ROWS)
}

/// The prefill panels a product can take instead of the tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Panels {
    /// The GEMM panels (`gemm`), on activations quantized to Q8_0.
    Quantized,
    /// The float panels of F16/BF16 weights (`float`), on f32 activations (or bf16, see
    /// `float::activation_dtype`).
    Float,
}

/// The panels `B` weights of width `k` have on this CPU, whatever the number of rows.
pub(crate) fn panels<B: Kernels>(k: usize) -> Option<Panels> {
    if super::gemm::has_panels::<B>(k) {
        Some(Panels::Quantized)
    } else if B::BLOCK_SIZE == 1 {
        Some(Panels::Float)
    } else {
        None
    }
}

/// The panels `m` activation rows of width `k` take with `B` weights in `matmul` (the
/// weight type's row threshold, `gemm::min_rows`), or `None` for the tiles, which compute
/// each row as it is alone. The one answer to "which kernels take these rows", for
/// `matmul` and for `QMatMul::activation_dtype`.
pub(crate) fn panels_by_rows<B: Kernels>(m: usize, k: usize) -> Option<Panels> {
    match m > 1 && m >= super::gemm::min_rows(B::DTYPE) {
        true => panels::<B>(k),
        false => None,
    }
}

/// `x [m, k]` (row-major f32) times `w [n, k]` (blocks) transposed → `[m, n]`.
/// Rows take the panels from the weight type's threshold on (`panels_by_rows`); below it,
/// or where there are none, each row is computed as it is alone.
pub fn matmul<B: Kernels>(w: &[B], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    if panels_by_rows::<B>(m, k).is_some() {
        if let Some(out) = matmul_panels(w, n, k, x, m) {
            return out;
        }
    }
    matmul_rows_alone(w, n, k, x, m)
}

/// `x [m, k]` times `w [n, k]` through the GEMM panels (or the float panels of F16/BF16
/// weights) however few rows there are, or `None` where they do not apply: what `matmul`
/// takes from the weight's row threshold on, and what it is weighed against when choosing
/// that threshold (`examples/panel_crossover.rs`).
pub fn matmul_panels<B: Kernels>(
    w: &[B],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
) -> Option<Vec<f32>> {
    if m == 0 || n == 0 {
        return None;
    }
    match panels::<B>(k)? {
        Panels::Quantized => super::gemm::matmul_any_rows(w, n, k, x, m),
        Panels::Float => super::float::matmul_any_rows(w, n, k, x, m),
    }
}

/// `x [m, k]` times `w [n, k]` by `route`.
pub fn matmul_by<B: Kernels>(
    w: &[B],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    route: Route,
) -> Vec<f32> {
    match route {
        Route::Alone => matmul_rows_alone(w, n, k, x, m),
        Route::ByRows => matmul(w, n, k, x, m),
        Route::Panels => {
            matmul_panels(w, n, k, x, m).unwrap_or_else(|| matmul_rows_alone(w, n, k, x, m))
        }
    }
}

/// `matmul` with every row computed as a product with that row alone computes it (the
/// matvec's activation type and sums), however many rows there are: never the GEMM panels,
/// which quantize activations to Q8_0 for every weight type.
pub fn matmul_rows_alone<B: Kernels>(w: &[B], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    if m == 0 || n == 0 {
        return vec![0f32; m * n];
    }
    if m == 1 {
        return matvec_many(&[job(w, n, k, x)]).pop().expect("one job");
    }
    let wpr = k / B::BLOCK_SIZE;
    let xpr = k / B::Dot::BLOCK_SIZE;
    let quantize = B::Dot::quantize_row();
    let mut xq = vec![<B::Dot as bytemuck::Zeroable>::zeroed(); m * xpr];
    // `cpu::par`'s loops, not rayon chains: those would be instantiated per block type.
    for_each_chunk(&mut xq, xpr, &|j, q| quantize(&x[j * k..][..k], q));
    let kernels = TileKernels::<B>::pick();
    let wrows = Rows::new(w, wpr);
    let xrows = Rows::new(&xq, xpr);
    // Each task computes a [TILE_ROWS, m] tile, then writes it transposed into `[m, n]`.
    let task = |sink: &Sink, tile: &mut Vec<f32>, t: usize| {
        let r0 = t * TILE_ROWS;
        let rows = TILE_ROWS.min(n - r0);
        let tile = &mut tile[..rows * m];
        kernels.tile(&wrows, r0, &xrows, m, tile);
        let mut column = [0f32; TILE_ROWS];
        for j in 0..m {
            for (r, c) in column[..rows].iter_mut().enumerate() {
                *c = tile[r * m + j];
            }
            // SAFETY: only task t writes rows r0..r0 + rows of the output's columns.
            unsafe { sink.write(j * n + r0, &column[..rows]) };
        }
    };
    // SAFETY: the tasks cover weight rows 0..n, and each writes them for all m activation
    // rows: all m · n elements.
    unsafe {
        filled(m * n, |sink| {
            par_for_with(
                n.div_ceil(TILE_ROWS),
                &|| vec![0f32; TILE_ROWS * m],
                &|tile, t| task(sink, tile, t),
            )
        })
    }
}

/// Decode: ask for the bytes of rows `r..r + n` a fixed distance ahead (see `kernels::prefetch`).
///
/// A tile reads its `n` rows side by side, from the start of each. Where the span of its rows
/// is longer than `PREFETCH_DISTANCE` (long float rows; four rows of a type 2,048 wide), the
/// requests start at the end of the span instead, so that they are for the next rows, not
/// for lines this tile reads at once (Gemma 3 F16 and Q5_1 decode, docs/BENCHMARKS.md).
#[inline(always)]
fn prefetch_rows<B>(w: &Rows<B>, r: usize, n: usize) {
    if cfg!(target_arch = "wasm32") {
        return touch_ahead(w, r, n);
    }
    let span = w.span(r, n);
    let bytes = std::mem::size_of_val(span);
    let lead = bytes.saturating_sub(PREFETCH_DISTANCE);
    let at = (span.as_ptr() as *const u8).wrapping_add(lead);
    if w.streamed {
        prefetch_ahead::<true>(at, bytes)
    } else {
        prefetch_ahead::<false>(at, bytes)
    }
}

/// WebAssembly has no prefetch instruction: decode loads one byte of each cache line of rows
/// `r..r + n` `PREFETCH_DISTANCE` ahead itself, so those lines are on their way from memory
/// (several misses in flight at once) before the kernel reaches them.
///
/// The loads are volatile, one plain byte load per line: left to itself LLVM gathers sixteen
/// of them into one vector with lane loads, which V8 11 (Node 20) runs well but V8 14
/// (Chromium, Node 26) runs no better than no read-ahead at all. A 16-byte load per line,
/// eight loads per loop step, or every other line all measured slower (docs/BENCHMARKS.md).
#[inline(always)]
fn touch_ahead<B>(w: &Rows<B>, r: usize, n: usize) {
    let all = std::mem::size_of_val(w.blocks);
    let start = r * w.per_row * std::mem::size_of::<B>() + PREFETCH_DISTANCE;
    let end = (start + n * w.per_row * std::mem::size_of::<B>()).min(all);
    let base = w.blocks.as_ptr() as *const u8;
    let mut any = 0u8;
    for at in (start..end).step_by(64) {
        // SAFETY: `at < all`: a byte inside the matrix, whose blocks (GGUF block types and
        // floats) are plain bytes with no padding.
        any ^= unsafe { base.add(at).read_volatile() };
    }
    std::hint::black_box(any);
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
        let streamed = streamed(std::mem::size_of_val(blocks));
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
struct TileKernels<B: Kernels> {
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

impl<B: Kernels> TileKernels<B> {
    fn pick() -> Self {
        // Several rows per call pay off for the 32-element types, where the activation block
        // and its scale are a large share of each step. The AVX2 k-quant kernels already hold
        // enough state per row that more rows spill registers; AVX-512's 32 registers take 4
        // rows (`cargo bench --bench quant -- qmatvec`, docs/QUANTIZATION.md). Float weights
        // (one-element blocks) go one row at a time: their rows are long (two bytes a
        // weight), and four of them read side by side streamed from memory at about 3/4 of
        // the rate one row read front to back does (Gemma 3 F16 decode, docs/BENCHMARKS.md).
        // The lattice types decode a row per call (`Kernels::DECODE_ROW_TILES`).
        let several_rows = B::DECODE_ROW_TILES
            && (B::BLOCK_SIZE == 32 || (B::BLOCK_SIZE > 1 && isa() >= Isa::Avx512));
        Self {
            one: B::vec_dot(),
            rows: if several_rows { B::tile() } else { None },
            tile: B::tile(),
        }
    }

    /// `out[i] = w[r0 + i] · x`.
    fn matvec(&self, w: &Rows<B>, r0: usize, x: &[B::Dot], out: &mut [f32]) {
        let mut i = 0;
        // A tile asks for its successor's rows all at once (`prefetch_rows`): past a few KiB
        // (k-quant rows 4,864 wide: 10–16 KiB) most of those requests find the miss buffers
        // full and are dropped, and one row at a time, each asked for a row ahead, streams
        // faster (Qwen2.5-0.5B IQ4_XS decode on AVX-512 1.20x, Q6_K 1.09x, Q4_K 1.08x,
        // docs/BENCHMARKS.md). Measured for the 256-element types only.
        let span = MATVEC_TILE * w.per_row * std::mem::size_of::<B>();
        let tiles = B::BLOCK_SIZE == 32 || span <= 2 * PREFETCH_DISTANCE;
        if let Some(rows) = self.rows.filter(|_| tiles) {
            while i + MATVEC_TILE <= out.len() {
                prefetch_rows(w, r0 + i, MATVEC_TILE);
                let y = rows(std::array::from_fn(|k| w.row(r0 + i + k)), [x]);
                for (k, y) in y.iter().enumerate() {
                    out[i + k] = y[0];
                }
                i += MATVEC_TILE;
            }
        }
        each_row(w, r0 + i, &mut out[i..], |row| (self.one)(row, x));
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

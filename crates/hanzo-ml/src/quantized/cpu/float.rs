//! Prefill with float weights (F16, BF16 files): the weights stay in their two-byte form, and
//! each task widens one panel of weight rows to f32 and multiplies every activation row by it
//! with the f32 GEMM of the `gemm` crate.
//!
//! Widening a row costs about as much as one activation row's products with it, so it pays
//! from a few rows on; decode (one row) takes the tiles in `matvec` instead, which read the
//! two-byte weights directly. The activations stay f32 here, so prefill rounds less than
//! decode (whose activations are rounded to the weight type, as ggml's are).

use super::sink::{filled, Sink};
use crate::cpu::par::par_for_with;
use crate::quantized::format::GgmlBlock;
use gemm::Parallelism;

/// Fewest activation rows for this path (as for the quantized panels).
const MIN_ROWS: usize = super::gemm::MIN_ROWS;
/// A task's widened panel: about 1 MiB of f32, so that `gemm`'s repacking of the
/// activations, done once per task, is a small share of the task's products.
const PANEL_ELEMS: usize = 256 * 1024;

/// Whether `matmul` takes `m` activation rows (which it keeps in f32).
pub(crate) fn applies<B: GgmlBlock>(m: usize) -> bool {
    B::BLOCK_SIZE == 1 && m >= MIN_ROWS
}

/// `x [m, k]` times `w [n, k]` (float elements) transposed, or `None` where this path does
/// not apply (quantized blocks, too few rows).
pub(crate) fn matmul<B: GgmlBlock>(
    w: &[B],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
) -> Option<Vec<f32>> {
    if !applies::<B>(m) || n == 0 || k == 0 {
        return None;
    }
    assert!(w.len() == n * k && x.len() == m * k, "float matmul shapes");
    let threads = crate::cpu::team::global().threads();
    // Panels as large as PANEL_ELEMS allows, in a number of tasks that is a multiple of the
    // thread count (at least two each), so that no thread is left with an extra one at the end.
    let tasks = n
        .div_ceil((PANEL_ELEMS / k).max(8))
        .next_multiple_of(threads)
        .max(2 * threads);
    let rows = n.div_ceil(tasks).next_multiple_of(8);
    let task = |sink: &Sink, (panel, out): &mut (Vec<f32>, Vec<f32>), p: usize| {
        let r0 = p * rows;
        let live = rows.min(n - r0);
        let panel = &mut panel[..live * k];
        B::dequantize(&w[r0 * k..(r0 + live) * k], panel);
        let out = &mut out[..m * live];
        // SAFETY: dst is m x live with row stride `live` (exactly `out`); lhs is x, m x k
        // row-major (`x.len() == m * k`); rhs is the panel read as k x live (element (i, j)
        // at j * k + i, inside its live * k elements). gemm writes dst only.
        unsafe {
            gemm::gemm(
                m,
                live,
                k,
                out.as_mut_ptr(),
                1,
                live as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                panel.as_ptr(),
                k as isize,
                1,
                0f32,
                1f32,
                false,
                false,
                false,
                Parallelism::None,
            )
        };
        for (j, o) in out.chunks_exact(live).enumerate() {
            // SAFETY: this task is the only writer of columns r0..r0 + live.
            unsafe { sink.write(j * n + r0, o) };
        }
    };
    // SAFETY: the panels 0..ceil(n / rows) cover columns 0..n, and each writes its columns of
    // all m rows: all m · n elements.
    Some(unsafe {
        filled(m * n, |sink| {
            par_for_with(
                n.div_ceil(rows),
                &|| (vec![0f32; rows * k], vec![0f32; m * rows]),
                &|scratch, p| task(sink, scratch, p),
            )
        })
    })
}

//! Prefill with float weights (F16, BF16 files): the weights stay in their two-byte form and
//! the activations in f32, so prefill rounds less than decode (whose activations are rounded
//! to the weight type, as ggml's are). The exception is BF16 where `kernels::bf16_pairs` takes
//! the AVX512-BF16 pair panel (AMD CPUs with it), which takes activations rounded to bf16 as
//! decode does (`activation_dtype`). Each task takes one panel of weight rows against every
//! activation row.
//!
//! Where the CPU has a float panel kernel (`Kernels::float_panel`, AVX2 or AVX-512), the
//! kernel widens and packs the task's weight rows itself, a piece of the row width at a time.
//! Elsewhere the task widens its panel to f32 and hands it to the f32 GEMM of the `gemm`
//! crate, 16 activation rows a call; widening a row costs about as much as one activation
//! row's products with it, so it pays from a few rows on. Decode (one row) takes the tiles
//! in `matvec` instead.

use super::sink::{filled, Sink};
use crate::cpu::par::par_for_with;
use crate::quantized::format::GgmlBlock;
use crate::quantized::kernels::Kernels;
use crate::quantized::GgmlDType;
use gemm::Parallelism;

/// Most weight rows in a task of the float panel kernel: each pass over the activations
/// serves this many rows (the kernel packs 256 columns of them at a time, 128 KiB, for L2).
const KERNEL_ROWS: usize = 128;
/// A task's widened panel for `gemm`: about 1 MiB of f32, so that `gemm`'s repacking of the
/// activations, done once per task, is a small share of the task's products.
const GEMM_PANEL_ELEMS: usize = 256 * 1024;

/// What this path rounds the activations to: BF16 where BF16 weights take the AVX512-BF16
/// pair panel (as decode does), none (F32) otherwise.
pub(crate) fn activation_dtype<B: GgmlBlock>() -> GgmlDType {
    if B::DTYPE == GgmlDType::BF16 && crate::quantized::kernels::bf16_pairs() {
        GgmlDType::BF16
    } else {
        GgmlDType::F32
    }
}

/// `x [m, k]` times `w [n, k]` (float elements) transposed, however few rows there are, or
/// `None` for quantized blocks. `matvec::matmul` takes it from `gemm::MIN_ROWS` rows on.
pub(crate) fn matmul_any_rows<B: Kernels>(
    w: &[B],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
) -> Option<Vec<f32>> {
    if B::BLOCK_SIZE != 1 || n == 0 || k == 0 {
        return None;
    }
    assert!(w.len() == n * k && x.len() == m * k, "float matmul shapes");
    Some(match B::float_panel() {
        Some(kernel) => over_panels(n, m, KERNEL_ROWS, &|r0, live, out| {
            kernel(&w[r0 * k..(r0 + live) * k], k, x, m, out)
        }),
        None => widened::<B>(w, n, k, x, m),
    })
}

/// Runs `task(r0, live, out)` over panels of at most about `most_rows` weight rows,
/// each computing `out [m, live]` for its rows `r0..r0 + live`, and gathers them into
/// `[m, n]`.
fn over_panels(
    n: usize,
    m: usize,
    most_rows: usize,
    task: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
) -> Vec<f32> {
    let threads = crate::cpu::team::global().threads();
    // Panels as large as `most_rows` allows, in a number of tasks that is a multiple of the
    // thread count (at least two each), so that no thread is left with an extra one at the end.
    let tasks = n
        .div_ceil(most_rows)
        .next_multiple_of(threads)
        .max(2 * threads);
    let rows = n.div_ceil(tasks).next_multiple_of(16);
    let run = |sink: &Sink, out: &mut Vec<f32>, p: usize| {
        let r0 = p * rows;
        let live = rows.min(n - r0);
        let out = &mut out[..m * live];
        task(r0, live, out);
        for (j, o) in out.chunks_exact(live).enumerate() {
            // SAFETY: this task is the only writer of columns r0..r0 + live.
            unsafe { sink.write(j * n + r0, o) };
        }
    };
    // SAFETY: the panels 0..ceil(n / rows) cover columns 0..n, and each writes its columns of
    // all m rows: all m · n elements.
    unsafe {
        filled(m * n, |sink| {
            par_for_with(n.div_ceil(rows), &|| vec![0f32; m * rows], &|out, p| {
                run(sink, out, p)
            })
        })
    }
}

/// Activation rows per call of the `gemm` crate: every call has the same shape, the last
/// block padded with zero rows, so a row's sums do not depend on how many rows come with it
/// (the crate picks its blocking and kernels by shape).
const GEMM_ROWS: usize = 16;

/// The portable form: each task widens its panel to f32 for the `gemm` crate.
fn widened<B: GgmlBlock>(w: &[B], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    thread_local! {
        static PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
        /// A last block of activation rows padded with zeros, and its outputs.
        static EDGE: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
            const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    over_panels(n, m, (GEMM_PANEL_ELEMS / k).max(8), &|r0, live, out| {
        PANEL.with_borrow_mut(|panel| {
            panel.resize(live * k, 0.0);
            B::dequantize(&w[r0 * k..(r0 + live) * k], panel);
            for j0 in (0..m).step_by(GEMM_ROWS) {
                let rows = GEMM_ROWS.min(m - j0);
                let out = &mut out[j0 * live..(j0 + rows) * live];
                let x = &x[j0 * k..(j0 + rows) * k];
                if rows == GEMM_ROWS {
                    gemm_rows(x, panel, k, live, out);
                    continue;
                }
                EDGE.with_borrow_mut(|(xs, ys)| {
                    xs.clear();
                    xs.extend_from_slice(x);
                    xs.resize(GEMM_ROWS * k, 0.0);
                    ys.resize(GEMM_ROWS * live, 0.0);
                    gemm_rows(xs, panel, k, live, ys);
                    out.copy_from_slice(&ys[..rows * live]);
                })
            }
        })
    })
}

/// `out [GEMM_ROWS, live]` = `x [GEMM_ROWS, k]` times `panel [live, k]` transposed.
fn gemm_rows(x: &[f32], panel: &[f32], k: usize, live: usize, out: &mut [f32]) {
    assert!(
        x.len() == GEMM_ROWS * k && panel.len() == live * k && out.len() == GEMM_ROWS * live,
        "gemm_rows shapes"
    );
    // SAFETY: dst is GEMM_ROWS x live with row stride `live` (exactly `out`); lhs is x,
    // GEMM_ROWS x k row-major; rhs is the panel read as k x live (element (i, j) at j * k + i,
    // inside its live * k elements), as the assert checked. gemm writes dst only.
    unsafe {
        gemm::gemm(
            GEMM_ROWS,
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
    }
}

//! Prefill: activations `[m, k]` times quantized weights `[n, k]` when `m` is large.
//!
//! Each task unpacks panels of weight rows (16 on AVX-512, 8 on AVX2; up to four panels a
//! task) into bytes with per-group scales and mins (`GgmlBlock::unpacking`), interleaved for
//! the kernels in `kernels::panel`, and passes every activation row over each. Unpacking a
//! row costs about as much as a few activation rows, so small batches keep the tile path in
//! `qmatmul`.

use super::sink::{filled, Sink};
use crate::cpu::par::{for_each_chunk, par_for_with};
use crate::quantized::format::{BlockQ8_0, GgmlBlock, Unpacking};
use crate::quantized::kernels::panel::{pick_panel, Panel, PanelFn, PanelRow};
use crate::quantized::kernels::QuantizeRow;
use crate::quantized::GgmlDType;
use std::rc::Rc;

/// Fewest activation rows for the panels of any type (and of the float weights): below it
/// every type takes the tile path, which unpacks each weight block per call rather than
/// once, and that is cheaper for a handful of rows.
pub(crate) const MIN_ROWS: usize = 16;

/// Fewest activation rows from which the panels beat the tiles for weights of `dtype` (at
/// least `MIN_ROWS`); `QMatMul::panels_from` and a batch's numerics follow it per weight.
/// The types whose tiles are strongest (the k-quants' AVX-512 tiles) or whose unpacking
/// costs most pay for the unpacking later. Measured with
/// `cargo run --release -p hanzo-ml --example panel_crossover` (docs/BENCHMARKS.md).
pub(crate) fn min_rows(dtype: GgmlDType) -> usize {
    use GgmlDType as T;
    match dtype {
        T::Q3K | T::Q6K => 48,
        T::Q2K => 40,
        T::Q4K | T::IQ2S | T::IQ4XS | T::IQ4NL | T::TQ1_0 | T::TQ2_0 | T::MXFP4 => 32,
        T::Q5K | T::IQ2XS | T::IQ3S | T::IQ1S | T::IQ1M | T::Q4_0 | T::Q5_0 | T::Q8_0 => 24,
        _ => MIN_ROWS,
    }
}

/// The unpacked form and the panel kernel for `B` weights of width `k`, whatever the number
/// of activation rows.
fn plan<B: GgmlBlock>(k: usize) -> Option<(Unpacking<B>, usize, PanelFn)> {
    let unpacking = B::unpacking()?;
    if !k.is_multiple_of(B::BLOCK_SIZE) {
        return None;
    }
    let (rows, kernel) = panel_kernel(k, unpacking.group, unpacking.max_level)?;
    Some((unpacking, rows, kernel))
}

/// This CPU's panel kernel for levels up to `max_level` in scale groups of `group`, where
/// `k` is whole Q8_0 blocks.
fn panel_kernel(k: usize, group: usize, max_level: u8) -> Option<(usize, PanelFn)> {
    if k == 0 || !k.is_multiple_of(32) {
        return None;
    }
    pick_panel(group, max_level)
}

/// Whether `B` weights of width `k` have panels on this CPU (`matvec::panels`).
pub(crate) fn has_panels<B: GgmlBlock>(k: usize) -> bool {
    plan::<B>(k).is_some()
}

/// `x [m, k]` times `w [n, k]` transposed through the panels, however few rows there are,
/// or `None` where this path does not apply (type without an unpacked form, CPU without a
/// panel kernel, `k` not whole blocks). `matvec::matmul` takes it from `min_rows` on.
pub(crate) fn matmul_any_rows<B: GgmlBlock>(
    w: &[B],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
) -> Option<Vec<f32>> {
    let (unpacking, rows, kernel) = plan::<B>(k)?;
    let per_row = k / B::BLOCK_SIZE;
    let fill = |s: &mut Scratch, r0: usize, live: usize| {
        s.unpack(&unpacking, &w[r0 * per_row..(r0 + live) * per_row], per_row)
    };
    over_panels(n, k, x, m, unpacking.group, (rows, kernel), &fill)
}

/// The panel kernel for activation rows of width `k` times weights that come already
/// unpacked `per_group` rows at a time (see `cpu::interleaved`): `None` where this CPU's
/// panels hold a number of rows not a multiple of `per_group`.
pub(crate) fn plan_prepacked(
    k: usize,
    group: usize,
    max_level: u8,
    per_group: usize,
) -> Option<(usize, PanelFn)> {
    panel_kernel(k, group, max_level).filter(|&(rows, _)| rows.is_multiple_of(per_group))
}

/// Runs `kernel` over panels of `rows` weight rows each, which `fill(scratch, r0, live)`
/// writes into `scratch` (rows `r0..r0 + live` of the `n`; the rest of a last partial panel
/// must be zero), `panels_per_task` of them to a task.
pub(crate) fn over_panels(
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    group: usize,
    (rows, kernel): (usize, PanelFn),
    fill: &(dyn Fn(&mut Scratch, usize, usize) + Sync),
) -> Option<Vec<f32>> {
    if n == 0 {
        return None;
    }
    let acts = Activations::shared(x, m, k, group);
    let xs: Vec<PanelRow> = (0..m).map(|j| acts.row(j)).collect();
    let panels = n.div_ceil(rows);
    let per_task = panels_per_task(panels, crate::cpu::team::global().threads());
    let task = |sink: &Sink, scratch: &mut Scratch, t: usize| {
        let first = t * per_task;
        let last = (first + per_task).min(panels);
        let (c0, width) = (first * rows, (last * rows).min(n) - first * rows);
        for p in first..last {
            let r0 = p * rows;
            let live = rows.min(n - r0);
            fill(scratch, r0, live);
            let panel = Panel {
                u: &scratch.u,
                scale: &scratch.scale,
                min: &scratch.min,
            };
            kernel(&panel, &xs, &mut scratch.out);
            for (j, o) in scratch.out.chunks_exact(rows).enumerate() {
                scratch.wide[j * width + r0 - c0..][..live].copy_from_slice(&o[..live]);
            }
        }
        for (j, o) in scratch.wide[..m * width].chunks_exact(width).enumerate() {
            // SAFETY: this task is the only writer of columns c0..c0 + width.
            unsafe { sink.write(j * n + c0, o) };
        }
    };
    // Every element is written exactly once, so the buffer starts uninitialised (a zeroing
    // pass over a 4 MB output is a visible share of a prefill).
    // SAFETY: the tasks' panels 0..ceil(n / rows) cover columns 0..n, and each task writes
    // its columns of all m rows: all m · n elements.
    let out = unsafe {
        filled(m * n, |sink| {
            par_for_with(
                panels.div_ceil(per_task),
                &|| Scratch::new(rows, k, m, group, per_task),
                &|scratch, t| task(sink, scratch, t),
            )
        })
    };
    Some(out)
}

/// Panels per task: up to 4, as long as every thread gets several tasks. A task's outputs
/// are its panels' columns of each of the m rows, `n` floats apart; one 16-float panel at a
/// time, each write straddled two cache lines that the next panel's task wrote again (the
/// copies out were 8.7% of a prefill's samples in `perf`, 6.6% with four panels).
fn panels_per_task(panels: usize, threads: usize) -> usize {
    match panels / threads.max(1) {
        8.. => 4,
        4.. => 2,
        _ => 1,
    }
}

thread_local! {
    /// Open `share_activations` scopes on this thread.
    static SHARING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Inside a scope, the last input quantized: its address, length and group.
    static LAST: std::cell::RefCell<Option<(InputKey, Rc<Activations>)>> =
        const { std::cell::RefCell::new(None) };
}

/// An input's address, length and scale group.
type InputKey = (usize, usize, usize);

/// Runs `f`, in which every panel product reads the same input (Q, K and V of one
/// activation matrix; gate and up): the activations are quantized once for all of them
/// rather than once per weight (a third of `quantize_q8_0`'s share of a prefill). The input
/// must stay alive and unchanged for the whole of `f`; it is recognised by its address.
pub fn share_activations<R>(f: impl FnOnce() -> R) -> R {
    struct Close;
    impl Drop for Close {
        fn drop(&mut self) {
            if SHARING.with(|s| s.replace(s.get() - 1)) == 1 {
                LAST.with_borrow_mut(|l| *l = None);
            }
        }
    }
    SHARING.with(|s| s.set(s.get() + 1));
    let _close = Close;
    f()
}

/// Activation rows quantized to Q8_0, with each weight group's `d` and `d · Σ q`.
struct Activations {
    q: Vec<BlockQ8_0>,
    d: Vec<f32>,
    dsum: Vec<f32>,
    blocks: usize,
    groups: usize,
}

impl Activations {
    /// `new`, or inside `share_activations` the previous product's quantization of the same
    /// input.
    fn shared(x: &[f32], m: usize, k: usize, group: usize) -> Rc<Self> {
        if SHARING.with(|s| s.get()) == 0 {
            return Rc::new(Self::new(x, m, k, group));
        }
        let key = (x.as_ptr() as usize, x.len(), group);
        if let Some(a) =
            LAST.with_borrow(|l| l.as_ref().filter(|l| l.0 == key).map(|l| l.1.clone()))
        {
            return a;
        }
        let a = Rc::new(Self::new(x, m, k, group));
        LAST.with_borrow_mut(|l| *l = Some((key, a.clone())));
        a
    }

    fn new(x: &[f32], m: usize, k: usize, group: usize) -> Self {
        let (blocks, groups) = (k / 32, k / group);
        let mut q = vec![<BlockQ8_0 as bytemuck::Zeroable>::zeroed(); m * blocks];
        let mut d = vec![0f32; m * groups];
        let mut dsum = vec![0f32; m * groups];
        let quantize = BlockQ8_0::quantize_row();
        // One task per activation row, each with its own pieces of the three outputs.
        let mut rows: Vec<_> = q
            .chunks_mut(blocks.max(1))
            .zip(
                d.chunks_mut(groups.max(1))
                    .zip(dsum.chunks_mut(groups.max(1))),
            )
            .collect();
        for_each_chunk(&mut rows, 1, &|j, row| {
            let (q, (d, dsum)) = &mut row[0];
            quantize(&x[j * k..][..k], q);
            for (g, (d, dsum)) in d.iter_mut().zip(dsum.iter_mut()).enumerate() {
                let (b, at) = (&q[g * group / 32], (g * group) % 32);
                let sum: i32 = b.qs[at..at + group].iter().map(|&v| v as i32).sum();
                *d = b.d.to_f32();
                *dsum = *d * sum as f32;
            }
        });
        Self {
            q,
            d,
            dsum,
            blocks,
            groups,
        }
    }

    fn row(&self, j: usize) -> PanelRow<'_> {
        let groups = j * self.groups..(j + 1) * self.groups;
        PanelRow {
            q: &self.q[j * self.blocks..(j + 1) * self.blocks],
            d: &self.d[groups.clone()],
            dsum: &self.dsum[groups],
        }
    }
}

/// Row `r` of a panel of `rows` rows gets `levels`, four at a time from step `step0` on
/// (`Panel`'s interleaved layout).
#[inline(always)]
pub(crate) fn place_levels(u: &mut [u8], rows: usize, r: usize, step0: usize, levels: &[u8]) {
    // Fixed-size words: a slice copy of runtime length 4 becomes a memmove call.
    let (words, _) = levels.as_chunks::<4>();
    for (t, four) in words.iter().enumerate() {
        let at = ((step0 + t) * rows + r) * 4;
        u[at..at + 4].copy_from_slice(four);
    }
}

/// A task's unpacked panel and its output, reused across the panels the task takes.
pub(crate) struct Scratch {
    rows: usize,
    u: Vec<u8>,
    scale: Vec<f32>,
    min: Vec<f32>,
    out: Vec<f32>,
    /// The outputs of the task's panels side by side, `[m][panels · rows]`.
    wide: Vec<f32>,
    /// One block's levels, scales and mins, before interleaving.
    block_u: [u8; 256],
    block_scale: [f32; 16],
    block_min: [f32; 16],
}

impl Scratch {
    fn new(rows: usize, k: usize, m: usize, group: usize, panels: usize) -> Self {
        let groups = k / group;
        Self {
            rows,
            u: vec![0; k * rows],
            scale: vec![0.0; groups * rows],
            min: vec![0.0; groups * rows],
            out: vec![0.0; m * rows],
            wide: vec![0.0; m * rows * panels],
            block_u: [0; 256],
            block_scale: [0.0; 16],
            block_min: [0.0; 16],
        }
    }

    /// The panel's rows, and its levels, scales and mins, laid out as `Panel` describes, for
    /// `live` rows of weights: zeroed where that is fewer than the panel holds, so the rows
    /// past the end of the matrix are zero.
    pub(crate) fn panel_for(&mut self, live: usize) -> (usize, &mut [u8], &mut [f32], &mut [f32]) {
        if live < self.rows {
            self.u.fill(0);
            self.scale.fill(0.0);
            self.min.fill(0.0);
        }
        (self.rows, &mut self.u, &mut self.scale, &mut self.min)
    }

    /// Unpacks `w` (`per_row` blocks per row, at most `self.rows` rows) into the panel; rows
    /// past the end of the matrix are zero.
    fn unpack<B: GgmlBlock>(&mut self, un: &Unpacking<B>, w: &[B], per_row: usize) {
        let rows = self.rows;
        self.panel_for(w.len() / per_row);
        let per_block = B::BLOCK_SIZE / un.group;
        for (r, row) in w.chunks_exact(per_row).enumerate() {
            for (i, b) in row.iter().enumerate() {
                (un.unpack)(
                    b,
                    &mut self.block_u,
                    &mut self.block_scale,
                    &mut self.block_min,
                );
                let step0 = i * B::BLOCK_SIZE / 4;
                place_levels(&mut self.u, rows, r, step0, &self.block_u[..B::BLOCK_SIZE]);
                for j in 0..per_block {
                    let at = (i * per_block + j) * rows + r;
                    self.scale[at] = self.block_scale[j];
                    self.min[at] = self.block_min[j];
                }
            }
        }
    }
}

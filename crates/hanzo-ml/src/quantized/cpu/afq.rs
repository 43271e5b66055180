//! Products with AFQ weights (`format::afq`), f32 activations quantized to 8-bit blocks of 32
//! as for ggml's types. Decode: one dot product per weight row (`kernels::afq`), rows split
//! over threads like the ggml types' (`matvec::matvec_many`). Prefill: the weights unpacked
//! into the GEMM panels ggml's types use (`gemm::over_panels`; every 32 weights one level
//! group, with the group's scale and `-bias` as min), where this CPU has a panel kernel for
//! the width; else each activation row against every weight row with the decode kernel.

use super::gemm::{self, Scratch};
use super::matvec::MatvecJob;
use super::sink::{filled, Sink};
use super::Route;
use crate::cpu::par::par_for_with;
use crate::quantized::format::afq::{level, scale_bias};
use crate::quantized::format::{AfqType, BlockQ8_0};
use crate::quantized::kernels::afq::{pick, AfqDot};
use crate::quantized::kernels::QuantizeRow;

/// One activation row as the kernels read it.
struct Row {
    q: Vec<i8>,
    d: Vec<f32>,
    gsum: Vec<f32>,
}

impl Row {
    /// `x` quantized as ggml's Q8_0 (the panels' activation type), in the byte order `dot`
    /// reads, with each group's quantized sum.
    fn new(x: &[f32], group: usize, dot: AfqDot) -> Self {
        let mut blocks = vec![<BlockQ8_0 as bytemuck::Zeroable>::zeroed(); x.len() / 32];
        BlockQ8_0::quantize_row()(x, &mut blocks);
        let mut q = Vec::with_capacity(x.len());
        let mut d = Vec::with_capacity(blocks.len());
        let mut sums = Vec::with_capacity(blocks.len());
        for b in &blocks {
            let dj = b.d.to_f32();
            sums.push(dj * b.qs.iter().map(|&v| v as i32).sum::<i32>() as f32);
            if !dot.nibble_order {
                q.extend_from_slice(&b.qs);
                d.push(dj);
            }
        }
        if dot.nibble_order {
            for pair in blocks.chunks_exact(2) {
                let chunk = || pair.iter().flat_map(|b| b.qs.iter().copied());
                q.extend(chunk().step_by(2));
                q.extend(chunk().skip(1).step_by(2));
                for b in pair {
                    d.extend([b.d.to_f32(); 4]);
                }
            }
        }
        let gsum = sums.chunks(group / 32).map(|s| s.iter().sum()).collect();
        Self { q, d, gsum }
    }
}

/// The decode job of an AFQ weight `[n, k]` (its blocks `w`) against one activation row.
pub(crate) fn job<'a>(t: AfqType, w: &'a [u8], n: usize, x: &[f32]) -> Box<dyn MatvecJob + 'a> {
    let dot = pick(t, x.len());
    Box::new(Job {
        t,
        w,
        n,
        row_bytes: x.len() / t.group() * t.block_bytes(),
        dot,
        x: Row::new(x, t.group(), dot),
    })
}

struct Job<'a> {
    t: AfqType,
    w: &'a [u8],
    n: usize,
    row_bytes: usize,
    dot: AfqDot,
    x: Row,
}

impl MatvecJob for Job<'_> {
    fn rows(&self) -> usize {
        self.n
    }

    fn run(&self, r0: usize, out: &mut [f32]) {
        let x = &self.x;
        for (i, o) in out.iter_mut().enumerate() {
            let w = &self.w[(r0 + i) * self.row_bytes..][..self.row_bytes];
            *o = (self.dot.dot)(self.t, w, &x.q, &x.d, &x.gsum);
        }
    }
}

/// `x [m, k]` times the AFQ weight `w [n, k]` transposed, by `route` (as the ggml types).
pub(crate) fn matmul(
    t: AfqType,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    route: Route,
) -> Vec<f32> {
    let panels = match route {
        Route::Alone => false,
        Route::Panels => true,
        Route::ByRows => m >= gemm::MIN_ROWS,
    };
    if panels {
        if let Some(out) = through_panels(t, w, n, k, x, m) {
            return out;
        }
    }
    rows_alone(t, w, n, k, x, m)
}

/// Every activation row against every weight row with the decode kernel: weight rows split
/// over threads, each task's rows kept in cache while the activation rows pass, its outputs
/// written straight into place (`sink`).
fn rows_alone(t: AfqType, w: &[u8], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    let dot = pick(t, k);
    let rows: Vec<Row> = x
        .chunks_exact(k)
        .map(|x| Row::new(x, t.group(), dot))
        .collect();
    let row_bytes = k / t.group() * t.block_bytes();
    const ROWS_PER_TASK: usize = 16;
    let tasks = n.div_ceil(ROWS_PER_TASK);
    // A task's weight rows against every activation row, `[m][rows]`, written where they go.
    let task = |sink: &Sink, part: &mut Vec<f32>, c: usize| {
        let r0 = c * ROWS_PER_TASK;
        let live = ROWS_PER_TASK.min(n - r0);
        part.resize(m * live, 0.0);
        for i in 0..live {
            let wr = &w[(r0 + i) * row_bytes..][..row_bytes];
            for (j, x) in rows.iter().enumerate() {
                part[j * live + i] = (dot.dot)(t, wr, &x.q, &x.d, &x.gsum);
            }
        }
        for (j, o) in part.chunks_exact(live).enumerate() {
            // SAFETY: this task is the only writer of columns r0..r0 + live.
            unsafe { sink.write(j * n + r0, o) };
        }
    };
    // SAFETY: the tasks' rows cover 0..n, and each writes its columns of all m rows.
    unsafe {
        filled(m * n, |sink| {
            par_for_with(tasks, &Vec::new, &|part, c| task(sink, part, c))
        })
    }
}

/// Prefill through the ggml types' GEMM panels, or `None` where this CPU has no panel kernel
/// for these levels.
fn through_panels(
    t: AfqType,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
) -> Option<Vec<f32>> {
    // AVX2's kernel for 8-bit levels reads them as Q8_0's (`q + 128`, min `128 · scale`):
    // not an AFQ group's affine levels.
    #[cfg(target_arch = "x86_64")]
    if t.bits() == 8 && crate::quantized::kernels::isa() == crate::quantized::kernels::Isa::Avx2 {
        return None;
    }
    let plan = gemm::plan_prepacked(k, 32, t.max_level(), 1)?;
    let row_bytes = k / t.group() * t.block_bytes();
    let fill = |s: &mut Scratch, r0: usize, live: usize| {
        unpack(t, &w[r0 * row_bytes..][..live * row_bytes], row_bytes, s)
    };
    gemm::over_panels(n, k, x, m, 32, plan, &fill)
}

/// Weight rows into a panel: levels four at a time, row-interleaved; per 32 levels the
/// group's scale and `-bias` (the panels compute `scale · u - min`).
fn unpack(t: AfqType, w: &[u8], row_bytes: usize, s: &mut Scratch) {
    let (bits, g) = (t.bits(), t.group());
    let (rows, u, scale, min) = s.panel_for(w.len() / row_bytes);
    let mut levels = [0u8; 32];
    for (r, row) in w.chunks_exact(row_bytes).enumerate() {
        for (gi, block) in row.chunks_exact(t.block_bytes()).enumerate() {
            let (sc, bias) = scale_bias(t, block);
            let packed = &block[4..];
            for j in 0..g / 32 {
                let sub = gi * g / 32 + j;
                match bits {
                    4 => {
                        for (i, b) in packed[16 * j..16 * j + 16].iter().enumerate() {
                            levels[2 * i] = b & 0x0f;
                            levels[2 * i + 1] = b >> 4;
                        }
                    }
                    8 => levels.copy_from_slice(&packed[32 * j..32 * j + 32]),
                    _ => {
                        for (i, l) in levels.iter_mut().enumerate() {
                            *l = level(packed, bits, 32 * j + i);
                        }
                    }
                }
                gemm::place_levels(u, rows, r, sub * 8, &levels);
                scale[sub * rows + r] = sc;
                min[sub * rows + r] = -bias;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantized::format::afq;
    use crate::quantized::format::AfqScale;
    use crate::quantized::kernels::afq::dot_portable;

    fn weights(t: AfqType, n: usize, k: usize) -> (Vec<f32>, Vec<u8>) {
        let xs: Vec<f32> = (0..n * k)
            .map(|i| (((i * 7919) % 1013) as f32 / 1013.0 - 0.45) * 0.2)
            .collect();
        let mut data = vec![0u8; n * k / t.group() * t.block_bytes()];
        afq::quantize(t, &xs, &mut data);
        (xs, data)
    }

    fn reference(t: AfqType, w: &[u8], n: usize, k: usize, x: &[f32]) -> Vec<f32> {
        let mut wf = vec![0f32; n * k];
        afq::dequantize(t, w, &mut wf);
        let m = x.len() / k;
        let mut out = vec![0f32; m * n];
        for j in 0..m {
            for r in 0..n {
                out[j * n + r] = (0..k)
                    .map(|i| (x[j * k + i] * wf[r * k + i]) as f64)
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    /// Every route and kernel of every width is within activation-quantization error of the
    /// f64 product with the dequantized weights, and this CPU's kernel equals the portable one
    /// to f32 rounding.
    #[test]
    fn products_match_the_dequantized_weights() {
        let (n, k) = (24, 256);
        for t in AfqType::all() {
            let (_, w) = weights(t, n, k);
            for m in [1, 3, 20] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 31 % 97) as f32 - 48.0) / 40.0)
                    .collect();
                let want = reference(t, &w, n, k, &x);
                let scale = want.iter().fold(0f32, |a, v| a.max(v.abs())).max(1.0);
                for route in [Route::Alone, Route::ByRows, Route::Panels] {
                    let got = matmul(t, &w, n, k, &x, m, route);
                    for (a, b) in got.iter().zip(&want) {
                        assert!(
                            (a - b).abs() <= 0.02 * scale,
                            "{} m={m} {route:?}: {a} vs {b}",
                            t.name()
                        );
                    }
                }
            }
            let x: Vec<f32> = (0..k)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
                .collect();
            let dot = pick(t, k);
            let fast = Row::new(&x, t.group(), dot);
            let plain = Row::new(
                &x,
                t.group(),
                AfqDot {
                    dot: dot_portable,
                    nibble_order: false,
                },
            );
            let rb = k / t.group() * t.block_bytes();
            for r in 0..n {
                let wr = &w[r * rb..][..rb];
                let a = (dot.dot)(t, wr, &fast.q, &fast.d, &fast.gsum);
                let b = dot_portable(t, wr, &plain.q, &plain.d, &plain.gsum);
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "{}: {a} vs {b}",
                    t.name()
                );
            }
        }
        let _ = AfqScale::F16;
    }
}

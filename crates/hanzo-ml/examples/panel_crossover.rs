//! Where the GEMM panels start to beat the tiles, per stored weight type: for a few row
//! counts `m`, the time of `m` activation rows through the tiles (`matmul_rows_alone`, each
//! weight block decoded per call) over their time through the panels (`matmul_panels`, each
//! weight block unpacked once). Above 1.0 the panels are faster. `from` is the threshold in
//! force (`QMatMul::panels_from`, `cpu::gemm::min_rows`). Medians of interleaved runs, on
//! every core, at a 2048 x 2048 weight. F16 and BF16 weigh their float panels (f32
//! activations) against the decode tiles (activations rounded to the weight type).
//!
//!   cargo run --release -p hanzo-ml --example panel_crossover [TYPE ...]

use hanzo_ml::quantized::cpu::matvec::{matmul_panels, matmul_rows_alone};
use hanzo_ml::quantized::kernels::Kernels;
use hanzo_ml::quantized::{GgmlDType, QMatMul, QTensor};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

#[path = "../benches/common/weights.rs"]
mod common;
use common::weights;

const ROWS: [usize; 8] = [8, 16, 24, 32, 48, 64, 96, 128];
const RUNS: usize = 11;

fn seconds(f: &dyn Fn() -> Vec<f32>) -> f64 {
    let t = Instant::now();
    black_box(f());
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Tiles' time over panels' time at each of `ROWS`, or `None` without panels for `B`.
fn ratios<B: Kernels>(q: &QTensor, n: usize, k: usize) -> Option<Vec<f64>> {
    let w = q.blocks::<B>().ok()?;
    ROWS.iter()
        .map(|&m| {
            let x = weights(m, k);
            matmul_panels::<B>(w, n, k, &x, m)?;
            let (mut tiles, mut panels) = (Vec::new(), Vec::new());
            for _ in 0..RUNS {
                tiles.push(seconds(&|| matmul_rows_alone::<B>(w, n, k, &x, m)));
                panels.push(seconds(&|| {
                    matmul_panels::<B>(w, n, k, &x, m).expect("panels")
                }));
            }
            Some(median(tiles) / median(panels))
        })
        .collect()
}

/// A weight of type `dt`: quantized from `w` where that needs no importance matrix, else
/// bytes of the generator (the speed does not depend on the values).
fn weight(dt: GgmlDType, w: &[f32], n: usize, k: usize) -> QTensor {
    QTensor::quantize_f32(w, (n, k), dt).unwrap_or_else(|_| {
        let len = n * k / dt.block_size() * dt.type_size();
        let bytes: Vec<u8> = weights(1, len).iter().map(|v| v.to_bits() as u8).collect();
        QTensor::from_bytes(dt, (n, k), &bytes).expect("weight bytes")
    })
}

fn main() {
    let (n, k) = (2048, 2048);
    let w = weights(n, k);
    let only: Vec<String> = std::env::args().skip(1).collect();
    print!("{:<8} {:>5} |", "type", "from");
    for m in ROWS {
        print!(" {m:>5}");
    }
    println!();
    for dt in GgmlDType::ALL {
        if matches!(dt, GgmlDType::F32 | GgmlDType::Q8K | GgmlDType::Q8_1) {
            continue;
        }
        if !only.is_empty() && !only.iter().any(|t| t == dt.name()) {
            continue;
        }
        let q = weight(dt, &w, n, k);
        let Some(r) = hanzo_ml::with_block_type!(dt, B => ratios::<B>(&q, n, k)) else {
            continue;
        };
        let from = QMatMul::from_arc_as_stored(Arc::new(q))
            .expect("weight")
            .panels_from();
        print!("{:<8} {from:>5} |", dt.name());
        for v in r {
            print!(" {v:>5.2}");
        }
        println!();
    }
}

//! Decode's quantized matrix-vector products, one thread, for the weight types of the
//! WebAssembly fixtures (and Q4_0, IQ4_NL and IQ4_XS repacked, IQ3_S and IQ3_XXS as stored and
//! transcoded into IQ4_XS's layout, F16, BF16, and MLX's AFQ4 and AFQ8): GB/s of weights read,
//! from cache (4,096 rows) and from memory (262,144 rows, Gemma 3's output head), the 10th
//! percentile of many runs (the least disturbed by a noisy machine); the `x8` rows over the
//! weight repacked eight rows at a time (`cpu::interleaved`). Built for `wasm32-wasip1` it
//! times the SIMD128 kernels under Node, where criterion does not run:
//!
//!   CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-C target-feature=+simd128" cargo build --release \
//!     -p hanzo-ml --example decode_kernels --target wasm32-wasip1
//!   node scripts/wasi_run.mjs target/wasm32-wasip1/release/examples/decode_kernels.wasm
//!
//! Natively: `RAYON_NUM_THREADS=1 cargo run --release -p hanzo-ml --example decode_kernels`.
//! Arguments, if any, replace the row counts.

use hanzo_ml::quantized::cpu::interleaved::Interleaved;
use hanzo_ml::quantized::cpu::interleaved_iq4xs::InterleavedIQ4XS;
use hanzo_ml::quantized::cpu::matvec::matmul;
use hanzo_ml::quantized::cpu::Route;
use hanzo_ml::quantized::format::interleaved_iq4xs::IQ4XSLayout;
use hanzo_ml::quantized::format::{
    BlockIQ3S, BlockIQ3XXS, BlockIQ4NL, BlockIQ4XS, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5_0,
    BlockQ6K, BlockQ8_0, HalfBF16, HalfF16,
};
use hanzo_ml::quantized::kernels::interleaved::InterleavedKernels;
use hanzo_ml::quantized::kernels::Kernels;
use hanzo_ml::quantized::{GgmlDType, QTensor};
use std::time::Instant;

#[path = "../benches/common/weights.rs"]
mod common;
use common::weights;

/// Times `product` (one decode product over `bytes` of weights): its 10th percentile.
fn report(label: &str, rows: usize, k: usize, bytes: usize, product: impl Fn() -> Vec<f32>) {
    let runs = (400_000_000 / (rows * k)).clamp(10, 1000);
    let mut seconds: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(product());
            t.elapsed().as_secs_f64()
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    let s = seconds[runs / 10];
    let gb_s = bytes as f64 / s / 1e9;
    println!(
        "{label:<8} {rows:>7} x {k:<5} {:>9.3} ms {gb_s:>6.2} GB/s",
        s * 1e3
    );
}

fn time<B: Kernels>(dtype: GgmlDType, rows: usize, k: usize) {
    let q = QTensor::quantize_f32(&weights(rows, k), (rows, k), dtype).expect("quantize");
    let blocks = q.blocks::<B>().expect("blocks");
    let x = weights(1, k);
    let bytes = q.data().len();
    report(&format!("{dtype:?}"), rows, k, bytes, || {
        matmul::<B>(blocks, rows, k, &x, 1)
    });
}

/// The same product over the weight repacked eight rows at a time (`cpu::interleaved`).
fn time_interleaved<B: Kernels + InterleavedKernels>(dtype: GgmlDType, rows: usize, k: usize) {
    let q = QTensor::quantize_f32(&weights(rows, k), (rows, k), dtype).expect("quantize");
    let packed = Interleaved::new(q.blocks::<B>().expect("blocks"), rows, k).expect("repack");
    let x = weights(1, k);
    let bytes = q.data().len();
    report(&format!("{dtype:?}x8"), rows, k, bytes, || {
        packed.matmul(&x, 1, Route::Alone)
    });
}

/// IQ4_XS the same way, and IQ3_S and IQ3_XXS transcoded into its layout
/// (`cpu::interleaved_iq4xs`); GB/s of the stored type's bytes.
fn time_iq4xs_interleaved<B: IQ4XSLayout>(dtype: GgmlDType, rows: usize, k: usize) {
    let q = QTensor::quantize_f32(&weights(rows, k), (rows, k), dtype).expect("quantize");
    let packed = InterleavedIQ4XS::new(q.blocks::<B>().expect("blocks"), rows, k).expect("repack");
    let x = weights(1, k);
    report(&format!("{dtype:?}x8"), rows, k, q.data().len(), || {
        packed.matmul(&x, 1, Route::Alone)
    });
}

/// A weight type through `QMatMul` (AFQ, whose products are not public on their own).
fn time_qmatmul(dtype: GgmlDType, rows: usize, k: usize) {
    use hanzo_ml::quantized::QMatMul;
    use hanzo_ml::{Device, Tensor};
    let q = QTensor::quantize_f32(&weights(rows, k), (rows, k), dtype).expect("quantize");
    let bytes = q.data().len();
    let w = QMatMul::from_qtensor(q).expect("matmul");
    let x = Tensor::from_vec(weights(1, k), (1, k), &Device::Cpu).expect("x");
    report(dtype.name(), rows, k, bytes, || {
        let y = w.forward_rows_alone(&x, false).expect("product");
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    });
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("row counts"))
        .collect();
    let rows = if args.is_empty() {
        vec![4096, 262_144]
    } else {
        args
    };
    for &n in &rows {
        time::<BlockQ8_0>(GgmlDType::Q8_0, n, 640);
        time_interleaved::<BlockQ8_0>(GgmlDType::Q8_0, n, 640);
        time::<BlockQ5_0>(GgmlDType::Q5_0, n, 640);
        time_interleaved::<BlockQ5_0>(GgmlDType::Q5_0, n, 640);
        time::<BlockQ4_1>(GgmlDType::Q4_1, n, 576);
        time_interleaved::<BlockQ4_1>(GgmlDType::Q4_1, n, 576);
        time_interleaved::<BlockQ4_0>(GgmlDType::Q4_0, n, 640);
        time_interleaved::<BlockIQ4NL>(GgmlDType::IQ4NL, n, 640);
        time::<BlockIQ4XS>(GgmlDType::IQ4XS, n / 4, 2048);
        time_iq4xs_interleaved::<BlockIQ4XS>(GgmlDType::IQ4XS, n / 4, 2048);
        time::<BlockIQ3S>(GgmlDType::IQ3S, n / 4, 2048);
        time_iq4xs_interleaved::<BlockIQ3S>(GgmlDType::IQ3S, n / 4, 2048);
        time::<BlockIQ3XXS>(GgmlDType::IQ3XXS, n / 4, 2048);
        time_iq4xs_interleaved::<BlockIQ3XXS>(GgmlDType::IQ3XXS, n / 4, 2048);
        time::<BlockQ4K>(GgmlDType::Q4K, n / 2, 1024);
        time::<BlockQ6K>(GgmlDType::Q6K, n / 2, 1024);
        time::<HalfF16>(GgmlDType::F16, n / 2, 640);
        time::<HalfBF16>(GgmlDType::BF16, n / 2, 640);
        for name in ["AFQ4", "AFQ8"] {
            let t = GgmlDType::from_name(name).expect("an AFQ type");
            time_qmatmul(t, n / 2, 1024);
        }
    }
}

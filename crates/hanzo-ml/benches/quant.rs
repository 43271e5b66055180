//! Quantized matmul: the weight types of the Gemma 3 Q4_K_M file (Q4_K, Q6_K, Q8_0, Q5_0) and
//! the two-byte floats (F16, BF16) at a 4096x4096 and a 640x2048 ([out, in], Gemma's FFN down
//! projection) weight, times one column (decode: reported as GB/s of weights streamed) and 512
//! columns (prefill: reported as elements = flops, so criterion's Gelem/s reads as GFLOP/s).
//!
//! The `qmatvec_dram` group streams weights larger than any cache (a 712 MB Q8_0 matrix with
//! the 640 columns of Gemma 3's output head, a 302 MB Q4_K one and a 671 MB F16 one), so its
//! GB/s compares with the machine's memory bandwidth (on AVX2, Q8_0 also as decode holds it:
//! `Q8_0x8`, repacked eight rows at a time). `qmatvec_dram/read` runs alongside: a plain
//! parallel sum over 1 GiB with hardware prefetch only, a lower bound for that bandwidth (the
//! matvecs prefetch in software and can beat it).
//!
//! The `qtypes` group runs every stored weight type at 640x2048, one column and 512: each
//! type's decode and prefill kernels side by side (the types without a quantizer, IQ1/IQ2,
//! from random bytes; their speed does not depend on the values).
//!
//! `cargo bench -p hanzo-ml --bench quant` (RAYON_NUM_THREADS sets the thread count). Runs
//! inside the rayon pool, as a model's forward pass does, so the calling thread computes too
//! instead of waiting on the pool for every product.

use criterion::{black_box, BenchmarkId, Criterion, Throughput};
use hanzo_ml::quantized::cpu::matvec::matmul as qmatmul_raw;
use hanzo_ml::quantized::kernels::Kernels;
use hanzo_ml::quantized::{GgmlDType, QMatMul, QTensor};
use hanzo_ml::{Device, Tensor};

#[path = "common/weights.rs"]
mod common;
use common::weights;

fn run<B: Kernels>(q: &QTensor, n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    qmatmul_raw::<B>(q.blocks::<B>().unwrap(), n, k, x, m)
}

fn bench_in_pool(c: &mut Criterion) {
    let types = [
        GgmlDType::Q4K,
        GgmlDType::Q6K,
        GgmlDType::Q8_0,
        GgmlDType::Q5_0,
        GgmlDType::F16,
        GgmlDType::BF16,
    ];
    let shapes = [(4096usize, 4096usize), (640, 2048)];
    let mut g = c.benchmark_group("qmatvec");
    g.sample_size(30);
    for &(n, k) in &shapes {
        let w = weights(n, k);
        let x = weights(1, k);
        for dt in types {
            let q = QTensor::quantize_f32(&w, (n, k), dt).unwrap();
            g.throughput(Throughput::Bytes(q.data().len() as u64));
            g.bench_with_input(
                BenchmarkId::new(dt.name(), format!("{n}x{k}")),
                &q,
                |b, q| {
                    b.iter(
                        || hanzo_ml::with_block_type!(dt, B => black_box(run::<B>(q, n, k, &x, 1))),
                    )
                },
            );
        }
    }
    g.finish();

    // Memory-bound decode: the quantized bytes of a 1024-row slice, repeated (the values do
    // not matter for speed, and quantizing 100M+ floats would dominate the run).
    let mut g = c.benchmark_group("qmatvec_dram");
    g.sample_size(20);
    let mem = vec![1u64; 1 << 27];
    g.throughput(Throughput::Bytes(8 << 27));
    g.bench_function("read/1GiB", |b| {
        b.iter(|| {
            use rayon::prelude::*;
            let s = mem
                .par_chunks(1 << 16)
                .map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
                .reduce(|| 0, u64::wrapping_add);
            black_box(s)
        })
    });
    drop(mem);
    for (dt, n, k) in [
        (GgmlDType::Q8_0, 1_048_576usize, 640usize),
        (GgmlDType::Q4K, 262_144, 2048),
        (GgmlDType::F16, 524_288, 640),
    ] {
        let slice = QTensor::quantize_f32(&weights(1024, k), (1024, k), dt).unwrap();
        let bytes = slice.data().repeat(n / 1024);
        let q = QTensor::from_bytes(dt, (n, k), &bytes).unwrap();
        let x = weights(1, k);
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_with_input(
            BenchmarkId::new(dt.name(), format!("{n}x{k}")),
            &q,
            |b, q| {
                b.iter(|| hanzo_ml::with_block_type!(dt, B => black_box(run::<B>(q, n, k, &x, 1))))
            },
        );
        // Q8_0 as decode holds it on AVX2: repacked eight rows at a time (`cpu::interleaved`).
        use hanzo_ml::cpu::features::{isa, Isa};
        if dt == GgmlDType::Q8_0 && matches!(isa(), Isa::Avx2 | Isa::AvxVnni) {
            let w = QMatMul::interleave(&q).unwrap();
            drop(q);
            let x = Tensor::from_vec(x, (1, k), &Device::Cpu).unwrap();
            g.bench_function(BenchmarkId::new("Q8_0x8", format!("{n}x{k}")), |b| {
                b.iter(|| black_box(w.forward(&x).unwrap()))
            });
            // Sixteen decode rows at once, each computed as alone (a batched decode step
            // through Gemma 3's output head when n = 262,144).
            let x16 = Tensor::from_vec(weights(16, k), (16, k), &Device::Cpu).unwrap();
            g.bench_function(
                BenchmarkId::new("Q8_0x8 16 rows", format!("{n}x{k}")),
                |b| b.iter(|| black_box(w.forward_rows_alone(&x16, true).unwrap())),
            );
        }
    }
    g.finish();

    // Every weight type at Gemma 3's FFN-down shape, decode and prefill.
    let (n, k) = (640, 2048);
    let w = weights(n, k);
    let mut g = c.benchmark_group("qtypes");
    g.sample_size(10);
    for dt in GgmlDType::ALL {
        if !dt.is_quantized() || matches!(dt, GgmlDType::Q8K | GgmlDType::Q8_1) {
            continue;
        }
        let q = QTensor::quantize_f32(&w, (n, k), dt).unwrap_or_else(|_| {
            let len = n * k / dt.block_size() * dt.type_size();
            let bytes: Vec<u8> = weights(1, len).iter().map(|v| v.to_bits() as u8).collect();
            QTensor::from_bytes(dt, (n, k), &bytes).unwrap()
        });
        for m in [1, 512] {
            let x = weights(m, k);
            let id = BenchmarkId::new(dt.name(), format!("{n}x{k}x{m}"));
            g.throughput(Throughput::Elements((2 * n * k * m) as u64));
            g.bench_with_input(id, &q, |b, q| {
                b.iter(|| hanzo_ml::with_block_type!(dt, B => black_box(run::<B>(q, n, k, &x, m))))
            });
        }
    }
    g.finish();

    let m = 512;
    let mut g = c.benchmark_group("qmatmul512");
    g.sample_size(10);
    for &(n, k) in &shapes {
        let w = weights(n, k);
        let x = weights(m, k);
        for dt in types {
            let q = QTensor::quantize_f32(&w, (n, k), dt).unwrap();
            g.throughput(Throughput::Elements((2 * n * k * m) as u64));
            g.bench_with_input(
                BenchmarkId::new(dt.name(), format!("{n}x{k}")),
                &q,
                |b, q| {
                    b.iter(
                        || hanzo_ml::with_block_type!(dt, B => black_box(run::<B>(q, n, k, &x, m))),
                    )
                },
            );
        }
    }
    g.finish();
}

// A hand-written main instead of `criterion_main!`: `Criterion` is not `Send`, so it is built
// inside the pool rather than carried into it.
fn main() {
    rayon::ThreadPoolBuilder::new()
        .build()
        .expect("thread pool")
        .install(|| {
            let mut c = Criterion::default().configure_from_args();
            bench_in_pool(&mut c);
            c.final_summary();
        })
}

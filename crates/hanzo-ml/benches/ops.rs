//! CPU op benchmarks. Run: `cargo bench -p hanzo-ml --bench ops`.
//!
//! Throughput units: `matmul` reports Elements = FLOPs (2·m·n·k), so criterion's "elem/s" is
//! FLOP/s. Everything else reports bytes moved (reads + writes of the f32 data, not counting
//! write-allocate traffic), to compare against the `copy` reference (`copy_from_slice`,
//! bytes = 2·4·n). Set `HANZO_ISA=scalar` (or another lower set) to bench those kernels instead.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use hanzo_ml::cpu::simd::kernels;
use hanzo_ml::{DType, Device, Tensor};
use rayon::prelude::*;
use std::time::Duration;

const N16M: usize = 16 << 20;
const CHUNK: usize = 1 << 14;

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(0.0, 1.0, shape.to_vec(), DType::F32, &Device::Cpu).unwrap()
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

fn matmul(c: &mut Criterion) {
    let (m, n, k) = (1024, 1024, 1024);
    let a = randn(&[m, k]);
    let b = randn(&[k, n]);
    let mut g = c.benchmark_group("matmul");
    g.throughput(Throughput::Elements((2 * m * n * k) as u64));
    g.bench_function("f32_1024x1024x1024 (elem/s = FLOP/s)", |bch| {
        bch.iter(|| black_box(a.matmul(&b).unwrap()))
    });
    g.finish();

    let (m, k) = (4096, 4096);
    let a = randn(&[m, k]);
    let x = randn(&[k, 1]);
    let mut g = c.benchmark_group("matvec");
    g.throughput(Throughput::Bytes((4 * m * k) as u64));
    g.bench_function("f32_4096x4096@4096x1 (bytes = matrix read)", |bch| {
        bch.iter(|| black_box(a.matmul(&x).unwrap()))
    });
    g.finish();
}

fn rows(c: &mut Criterion) {
    let (r, d) = (32, 4096);
    let x = randn(&[r, d]);
    let w = randn(&[d]);
    let mut g = c.benchmark_group("rows");
    g.throughput(Throughput::Bytes((2 * 4 * r * d) as u64));
    g.bench_function("softmax_32x4096", |b| {
        b.iter(|| black_box(x.softmax(1).unwrap()))
    });
    g.bench_function("rms_norm_32x4096", |b| {
        b.iter(|| black_box(x.rms_norm(&w, 1e-5).unwrap()))
    });
    // The row kernels alone (no tensor plumbing, no allocation), one thread.
    let (xv, wv) = (
        x.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        w.to_vec1::<f32>().unwrap(),
    );
    let mut out = vec![0f32; r * d];
    let k = kernels();
    g.bench_function("softmax kernel, 32 rows, 1 thread", |b| {
        b.iter(|| {
            for (o, x) in out.chunks_mut(d).zip(xv.chunks(d)) {
                (k.softmax)(x, o);
            }
            black_box(&out);
        })
    });
    g.bench_function("rms_norm kernel, 32 rows, 1 thread", |b| {
        b.iter(|| {
            for (o, x) in out.chunks_mut(d).zip(xv.chunks(d)) {
                (k.rms_norm)(x, &wv, 1e-5, o);
            }
            black_box(&out);
        })
    });
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    let n = N16M;
    let a = randn(&[n]);
    let b = randn(&[n]);
    let av = a.to_vec1::<f32>().unwrap();
    let bv = b.to_vec1::<f32>().unwrap();
    let mut out = vec![0f32; n];

    let mut g = c.benchmark_group("elementwise_16M");
    g.throughput(Throughput::Bytes((3 * 4 * n) as u64));
    g.bench_function("add tensor (allocates output)", |bch| {
        bch.iter(|| black_box(a.add(&b).unwrap()))
    });
    let add = kernels().add;
    g.bench_function("add kernel, preallocated, rayon", |bch| {
        bch.iter(|| {
            out.par_chunks_mut(CHUNK)
                .zip(av.par_chunks(CHUNK).zip(bv.par_chunks(CHUNK)))
                .for_each(|(o, (x, y))| add(x, y, o));
            black_box(&out);
        })
    });
    g.bench_function("add kernel, preallocated, 1 thread", |bch| {
        bch.iter(|| {
            add(&av, &bv, &mut out);
            black_box(&out);
        })
    });

    g.throughput(Throughput::Bytes((2 * 4 * n) as u64));
    g.bench_function("copy_from_slice, 1 thread (reference)", |bch| {
        bch.iter(|| {
            out.copy_from_slice(&av);
            black_box(&out);
        })
    });
    g.bench_function("copy to a fresh Vec (allocating reference)", |bch| {
        bch.iter(|| black_box(av.to_vec()))
    });
    g.bench_function("copy, rayon (reference)", |bch| {
        bch.iter(|| {
            out.par_chunks_mut(CHUNK)
                .zip(av.par_chunks(CHUNK))
                .for_each(|(o, x)| o.copy_from_slice(x));
            black_box(&out);
        })
    });

    g.throughput(Throughput::Bytes((4 * n) as u64));
    g.bench_function("sum_all tensor", |bch| {
        bch.iter(|| black_box(a.sum_all().unwrap()))
    });
    let sum = kernels().sum;
    g.bench_function("sum kernel, 1 thread", |bch| {
        bch.iter(|| black_box(sum(&av)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = matmul, rows, elementwise
}
criterion_main!(benches);

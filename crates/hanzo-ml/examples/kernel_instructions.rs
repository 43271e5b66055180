//! Runs one weight type's decode product (one activation row) or prefill product (eight) a
//! given number of times over fixed weights, for counting the instructions its kernels take
//! under an emulator where the CPU cannot be timed: `scripts/neon_instructions.sh` runs it
//! under qemu's AArch64 emulation twice, with `REPS` and with none, and divides the
//! difference by the weights multiplied.
//!
//!   kernel_instructions TYPE REPS [ROWS_OF_ACTIVATIONS | dot]
//!
//! `dot` runs the type's dot product on each row instead of the matmul (the kernel without
//! the driver's tiles, threads and prefetch: what ggml's `vec_dot` does per row).
//! One thread (`RAYON_NUM_THREADS=1`): a waiting worker's spin would be counted too.

use hanzo_ml::quantized::cpu::matvec::matmul_rows_alone;
use hanzo_ml::quantized::format::GgmlBlock;
use hanzo_ml::quantized::kernels::{Kernels, QuantizeRow};
use hanzo_ml::quantized::{GgmlDType, QTensor};

#[path = "../benches/common/weights.rs"]
mod common;
use common::weights;

/// Weight rows and their length: 512 rows of 2,048 (eight 256-element blocks, 64 of 32), so
/// that quantizing the activations once per product weighs about what it does in a model.
const ROWS: usize = 512;
const K: usize = 2048;

fn run<B: Kernels>(dtype: GgmlDType, reps: usize, m: usize, dots: bool) {
    // Uniform importance: IQ2_XXS, IQ2_XS and IQ1_S are only written under one. Quantized
    // once for 32 rows (the lattice searches are slow under emulation), repeated to ROWS.
    let importance = vec![1f32; K];
    let q = QTensor::quantize_f32_weighted(&weights(32, K), (32, K), dtype, &importance)
        .expect("quantize");
    let blocks = q.blocks::<B>().expect("blocks").repeat(ROWS / 32);
    let x = weights(m, K);
    let mut check = 0f32;
    for _ in 0..reps {
        if dots {
            // The kernel alone, a row at a time: the activations quantized once, then the
            // dot product of every row (what ggml's `vec_dot` does per row).
            let per_row = K / B::BLOCK_SIZE;
            let mut xq = vec![<B::Dot as bytemuck::Zeroable>::zeroed(); K / B::Dot::BLOCK_SIZE];
            B::Dot::quantize_row()(&x[..K], &mut xq);
            for row in blocks.chunks_exact(per_row) {
                check += std::hint::black_box(B::vec_dot()(row, &xq));
            }
        } else {
            check += std::hint::black_box(matmul_rows_alone::<B>(&blocks, ROWS, K, &x, m))[0];
        }
    }
    println!(
        "{dtype:?} m={m} reps={reps} weights={} check={check}",
        ROWS * K * m
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dtype, reps, rest @ ..] = args.as_slice() else {
        eprintln!("usage: kernel_instructions TYPE REPS [ROWS_OF_ACTIVATIONS | dot]");
        std::process::exit(2);
    };
    let dtype: GgmlDType = dtype.parse().expect("a ggml type name");
    let reps: usize = reps.parse().expect("a repetition count");
    let dots = rest.first().is_some_and(|a| a == "dot");
    let m: usize = match rest.first() {
        Some(a) if !dots => a.parse().expect("a row count"),
        _ => 1,
    };
    hanzo_ml::with_block_type!(dtype, B => run::<B>(dtype, reps, m, dots));
}

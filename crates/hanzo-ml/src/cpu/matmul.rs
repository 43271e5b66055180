//! Dense batched matmul through the `gemm` crate (f32, f64, f16; bf16 computes in f32).
//! Operands are any strided views; batch dims may broadcast (stride 0).

use super::{unary_map, CpuStorage};
use crate::backend::MatMulDims;
use crate::layout::StridedIndex;
use crate::{Error, Layout, Result, WithDType};
use gemm::Parallelism;
use half::bf16;
use rayon::prelude::*;

/// Storage offset of each batch's matrix.
fn batch_offsets(l: &Layout) -> Vec<usize> {
    let r = l.dims().len();
    StridedIndex::new(&l.dims()[..r - 2], &l.stride()[..r - 2], l.start_offset()).collect()
}

fn gemm_typed<T: WithDType>(
    a: &[T],
    al: &Layout,
    b: &[T],
    bl: &Layout,
    d: MatMulDims,
) -> Result<Vec<T>> {
    let MatMulDims { b: nb, m, n, k } = d;
    let mut out = super::alloc::zeroed_vec::<T>(nb * m * n);
    if m == 0 || n == 0 || k == 0 || nb == 0 {
        return Ok(out);
    }
    if al.required_storage_len() > a.len() || bl.required_storage_len() > b.len() {
        return Err(Error::invalid(
            "matmul",
            "operand layout exceeds its storage",
        ));
    }
    let r = al.dims().len();
    let (a_rs, a_cs) = (al.stride()[r - 2] as isize, al.stride()[r - 1] as isize);
    let (b_rs, b_cs) = (bl.stride()[r - 2] as isize, bl.stride()[r - 1] as isize);
    let (ao, bo) = (batch_offsets(al), batch_offsets(bl));
    let threads = rayon::current_num_threads();
    // Small matrices: one thread per batch item; large ones: gemm's own threading.
    let small = m * n * k < 48 * 48 * 48;
    let run = |dst: &mut [T], i: usize, par: Parallelism| {
        // SAFETY: every index gemm touches is offset + row*rs + col*cs for row < m|k and
        // col < k|n, which required_storage_len bounds above; dst holds exactly m*n elements
        // written with row stride n; T is f32/f64/f16, the types gemm dispatches on.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr().add(ao[i]),
                a_cs,
                a_rs,
                b.as_ptr().add(bo[i]),
                b_cs,
                b_rs,
                T::zero(),
                T::one(),
                false,
                false,
                false,
                par,
            )
        }
    };
    if small && nb > 1 {
        out.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(i, dst)| run(dst, i, Parallelism::None));
    } else {
        let par = if small || threads <= 1 {
            Parallelism::None
        } else {
            Parallelism::Rayon(threads)
        };
        for (i, dst) in out.chunks_mut(m * n).enumerate() {
            run(dst, i, par);
        }
    }
    Ok(out)
}

pub fn matmul(
    a: &CpuStorage,
    b: &CpuStorage,
    d: MatMulDims,
    al: &Layout,
    bl: &Layout,
) -> Result<CpuStorage> {
    Ok(match (a, b) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => {
            CpuStorage::from_vec(gemm_typed(x, al, y, bl, d)?)
        }
        (CpuStorage::F64(x), CpuStorage::F64(y)) => {
            CpuStorage::from_vec(gemm_typed(x, al, y, bl, d)?)
        }
        (CpuStorage::F16(x), CpuStorage::F16(y)) => {
            CpuStorage::from_vec(gemm_typed(x, al, y, bl, d)?)
        }
        (CpuStorage::BF16(x), CpuStorage::BF16(y)) => {
            let xf = unary_map(x, al, |v| v.to_f32());
            let yf = unary_map(y, bl, |v| v.to_f32());
            let (cl, cr) = (
                Layout::contiguous(al.shape().clone()),
                Layout::contiguous(bl.shape().clone()),
            );
            let o = gemm_typed(&xf, &cl, &yf, &cr, d)?;
            CpuStorage::from_vec(o.into_iter().map(bf16::from_f32).collect::<Vec<_>>())
        }
        (x, y) if x.dtype() != y.dtype() => {
            return Err(Error::DTypeMismatch {
                op: "matmul",
                expected: x.dtype(),
                got: y.dtype(),
            })
        }
        (x, _) => {
            return Err(Error::UnsupportedDType {
                op: "matmul",
                dtype: x.dtype(),
            })
        }
    })
}

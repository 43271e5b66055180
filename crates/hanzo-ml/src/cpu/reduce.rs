//! Reductions, prefix sums and sorting. Reduced dims are permuted to the end so every
//! reduction is a row reduction over contiguous data (copying only when the view is strided).

use super::{compute_dtype, simd, CpuStorage};
use crate::op::ReduceOp;
use crate::{Error, Layout, Result, WithDType};
use rayon::prelude::*;
use std::borrow::Cow;

/// The data of `l`'s view with `dims` moved last, as contiguous rows of their product.
fn rows_with_dims_last<'a, T: WithDType>(
    v: &'a [T],
    l: &Layout,
    dims: &[usize],
) -> (Cow<'a, [T]>, usize) {
    let rank = l.dims().len();
    let mut perm: Vec<usize> = (0..rank).filter(|d| !dims.contains(d)).collect();
    perm.extend_from_slice(dims);
    let p = l.permute(&perm);
    let row: usize = dims.iter().map(|&d| l.dims()[d]).product();
    (super::contiguous_cow(v, &p), row)
}

fn par_rows<T: Sync, U: Send>(
    data: &[T],
    row: usize,
    nrows: usize,
    f: impl Fn(&[T]) -> U + Sync + Send,
) -> Vec<U> {
    if row == 0 {
        return (0..nrows).map(|_| f(&[])).collect();
    }
    if data.len() >= super::elementwise::PAR_MIN && nrows > 1 {
        data.par_chunks(row).map(f).collect()
    } else {
        data.chunks(row).map(f).collect()
    }
}

fn sum_row<T: WithDType>(r: &[T]) -> T {
    if T::DTYPE == crate::DType::F32 {
        return T::from_f32(simd::sum_f32(bytemuck::cast_slice(r)));
    }
    if T::DTYPE == crate::DType::F64 {
        return T::from_f64(r.iter().map(|x| x.to_f64()).sum());
    }
    if T::DTYPE.is_float() {
        return T::from_f32(r.iter().map(|x| x.to_f32()).sum());
    }
    T::from_i64(r.iter().fold(0i64, |a, x| a.wrapping_add(x.to_i64())))
}

/// Index of the extreme value (first occurrence; a NaN wins, as in NumPy).
fn arg_extreme<T: WithDType>(r: &[T], max: bool) -> usize {
    let mut best = 0;
    for (i, &x) in r.iter().enumerate().skip(1) {
        let b = r[best];
        #[allow(clippy::eq_op)]
        if b != b {
            break;
        }
        #[allow(clippy::eq_op)]
        let better = x != x || if max { x > b } else { x < b };
        if better {
            best = i;
        }
    }
    best
}

fn reduce_typed<T: WithDType>(
    v: &[T],
    l: &Layout,
    op: ReduceOp,
    dims: &[usize],
) -> Result<CpuStorage> {
    let (data, row) = rows_with_dims_last(v, l, dims);
    let kept: usize = l
        .dims()
        .iter()
        .enumerate()
        .filter(|(i, _)| !dims.contains(i))
        .map(|(_, &d)| d)
        .product();
    let nrows = data.len().checked_div(row).unwrap_or(kept);
    if row == 0 && op != ReduceOp::Sum && nrows > 0 {
        return Err(Error::invalid(
            op.name(),
            "reduction over an empty dimension has no identity",
        ));
    }
    Ok(match op {
        ReduceOp::Sum => CpuStorage::from_vec(par_rows(&data, row, nrows, sum_row)),
        ReduceOp::Max => {
            CpuStorage::from_vec(par_rows(&data, row, nrows, |r| r[arg_extreme(r, true)]))
        }
        ReduceOp::Min => {
            CpuStorage::from_vec(par_rows(&data, row, nrows, |r| r[arg_extreme(r, false)]))
        }
        ReduceOp::ArgMax => {
            CpuStorage::from_vec(par_rows(&data, row, nrows, |r| arg_extreme(r, true) as u32))
        }
        ReduceOp::ArgMin => CpuStorage::from_vec(par_rows(&data, row, nrows, |r| {
            arg_extreme(r, false) as u32
        })),
    })
}

pub fn reduce(s: &CpuStorage, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<CpuStorage> {
    compute_dtype!(s, op.name(), v => reduce_typed(v, l, op, dims))
}

fn cumsum_typed<T: WithDType>(v: &[T], l: &Layout) -> Vec<T> {
    let last = l.dims().len() - 1;
    let (data, row) = rows_with_dims_last(v, l, &[last]);
    let mut out = Vec::with_capacity(data.len());
    if row == 0 {
        return out;
    }
    for r in data.chunks(row) {
        if T::DTYPE.is_float() {
            let mut acc = 0f64;
            out.extend(r.iter().map(|x| {
                acc += x.to_f64();
                T::from_f64(acc)
            }));
        } else {
            let mut acc = 0i64;
            out.extend(r.iter().map(|x| {
                acc = acc.wrapping_add(x.to_i64());
                T::from_i64(acc)
            }));
        }
    }
    out
}

pub fn cumsum_last(s: &CpuStorage, l: &Layout) -> Result<CpuStorage> {
    compute_dtype!(s, "cumsum", v => Ok(CpuStorage::from_vec(cumsum_typed(v, l))))
}

fn argsort_typed<T: WithDType>(v: &[T], l: &Layout, asc: bool) -> Vec<u32> {
    let last = l.dims().len() - 1;
    let (data, row) = rows_with_dims_last(v, l, &[last]);
    let mut out = Vec::with_capacity(data.len());
    if row == 0 {
        return out;
    }
    for r in data.chunks(row) {
        let mut idx: Vec<u32> = (0..row as u32).collect();
        // Total order with NaN largest; the sort is stable so ties keep index order.
        let key = |i: &u32| r[*i as usize];
        idx.sort_by(|a, b| {
            let (x, y) = (key(a), key(b));
            let o = x.partial_cmp(&y).unwrap_or_else(|| {
                #[allow(clippy::eq_op)]
                (x != x).cmp(&(y != y))
            });
            if asc {
                o
            } else {
                o.reverse()
            }
        });
        out.extend(idx);
    }
    out
}

pub fn argsort_last(s: &CpuStorage, l: &Layout, asc: bool) -> Result<CpuStorage> {
    compute_dtype!(s, "argsort", v => Ok(CpuStorage::from_vec(argsort_typed(v, l, asc))))
}

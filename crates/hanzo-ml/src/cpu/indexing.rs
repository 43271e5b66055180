//! index_select, gather, scatter(_add) and index_add. Every index is bounds-checked before
//! any write (`CpuStorage::indices`).

use super::{compute_dtype, contiguous_cow, copy_view, same_dtype2, CpuStorage};
use crate::{Error, Layout, Result, WithDType};

#[inline]
fn add<T: WithDType>(a: T, b: T) -> T {
    if T::DTYPE.is_float() {
        T::from_f64(a.to_f64() + b.to_f64())
    } else {
        T::from_i64(a.to_i64().wrapping_add(b.to_i64()))
    }
}

/// (outer, size, inner) around `dim`.
fn split(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    (
        dims[..dim].iter().product(),
        dims[dim],
        dims[dim + 1..].iter().product(),
    )
}

pub fn index_select(
    s: &CpuStorage,
    l: &Layout,
    ids: &CpuStorage,
    ids_l: &Layout,
    dim: usize,
) -> Result<CpuStorage> {
    let (outer, size, inner) = split(l.dims(), dim);
    let idx = ids.indices(ids_l, size, "index_select")?;
    fn run<T: WithDType>(
        v: &[T],
        l: &Layout,
        idx: &[usize],
        outer: usize,
        size: usize,
        inner: usize,
    ) -> Vec<T> {
        let src = contiguous_cow(v, l);
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in idx {
                let start = (o * size + i) * inner;
                out.extend_from_slice(&src[start..start + inner]);
            }
        }
        out
    }
    Ok(
        compute_dtype!(s, "index_select", v => CpuStorage::from_vec(run(v, l, &idx, outer, size, inner))),
    )
}

/// Storage offsets into a contiguous tensor of shape `src_dims` for each position of
/// `ids_dims`, with the `dim` coordinate taken from `idx`.
fn gather_offsets(
    src_dims: &[usize],
    ids_dims: &[usize],
    dim: usize,
    idx: &[usize],
    op: &'static str,
) -> Result<Vec<usize>> {
    if src_dims.len() != ids_dims.len() {
        return Err(Error::RankMismatch {
            op,
            expected: src_dims.len(),
            got: ids_dims.len(),
            shape: ids_dims.to_vec().into(),
        });
    }
    for (k, (&s, &i)) in src_dims.iter().zip(ids_dims).enumerate() {
        if k != dim && i > s {
            return Err(Error::ShapeMismatch {
                op,
                expected: src_dims.to_vec().into(),
                got: ids_dims.to_vec().into(),
            });
        }
    }
    let stride = crate::Shape::from(src_dims.to_vec()).stride_contiguous();
    let mut base_stride = stride.clone();
    base_stride[dim] = 0;
    let base = Layout::new(ids_dims.to_vec().into(), base_stride, 0);
    Ok(base
        .offsets()
        .zip(idx)
        .map(|(b, &i)| b + i * stride[dim])
        .collect())
}

pub fn gather(
    s: &CpuStorage,
    l: &Layout,
    ids: &CpuStorage,
    ids_l: &Layout,
    dim: usize,
) -> Result<CpuStorage> {
    let idx = ids.indices(ids_l, l.dims()[dim], "gather")?;
    let offs = gather_offsets(l.dims(), ids_l.dims(), dim, &idx, "gather")?;
    Ok(compute_dtype!(s, "gather", v => {
        let src = contiguous_cow(v, l);
        CpuStorage::from_vec(offs.iter().map(|&o| src[o]).collect::<Vec<_>>())
    }))
}

#[allow(clippy::too_many_arguments)]
pub fn scatter(
    s: &CpuStorage,
    l: &Layout,
    ids: &CpuStorage,
    ids_l: &Layout,
    src: &CpuStorage,
    src_l: &Layout,
    dim: usize,
    accumulate: bool,
) -> Result<CpuStorage> {
    let op = if accumulate { "scatter_add" } else { "scatter" };
    if src_l.dims() != ids_l.dims() {
        return Err(Error::ShapeMismatch {
            op,
            expected: ids_l.shape().clone(),
            got: src_l.shape().clone(),
        });
    }
    let idx = ids.indices(ids_l, l.dims()[dim], op)?;
    let offs = gather_offsets(l.dims(), ids_l.dims(), dim, &idx, op)?;
    Ok(same_dtype2!(s, src, op, (v, w) => {
        let mut out = contiguous_cow(v, l).into_owned();
        let vals = copy_view(w, src_l);
        for (&o, &x) in offs.iter().zip(&vals) {
            out[o] = if accumulate { add(out[o], x) } else { x };
        }
        CpuStorage::from_vec(out)
    }))
}

pub fn index_add(
    s: &CpuStorage,
    l: &Layout,
    ids: &CpuStorage,
    ids_l: &Layout,
    src: &CpuStorage,
    src_l: &Layout,
    dim: usize,
) -> Result<CpuStorage> {
    let (outer, size, inner) = split(l.dims(), dim);
    let idx = ids.indices(ids_l, size, "index_add")?;
    let mut expected = l.dims().to_vec();
    expected[dim] = idx.len();
    if src_l.dims() != expected {
        return Err(Error::ShapeMismatch {
            op: "index_add",
            expected: expected.into(),
            got: src_l.shape().clone(),
        });
    }
    Ok(same_dtype2!(s, src, "index_add", (v, w) => {
        let mut out = contiguous_cow(v, l).into_owned();
        let vals = contiguous_cow(w, src_l);
        for o in 0..outer {
            for (j, &i) in idx.iter().enumerate() {
                let (d, sidx) = ((o * size + i) * inner, (o * idx.len() + j) * inner);
                for k in 0..inner {
                    out[d + k] = add(out[d + k], vals[sidx + k]);
                }
            }
        }
        CpuStorage::from_vec(out)
    }))
}

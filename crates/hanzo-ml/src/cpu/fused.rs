//! Fused last-dim kernels: softmax / log-softmax, layer norm, RMS norm, rotary embedding.
//! f32 runs the SIMD row kernels; f16/bf16 convert whole rows to f32 and back with the `half`
//! slice conversions; f64 is scalar.

use super::par::{filled_chunks, for_each_chunk};
use super::{simd, unary_map, CpuStorage};
use crate::backend::RopeKind;
use crate::{Error, Layout, Result, WithDType};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// Rows per task of the row-wise ops: enough to outweigh the hand-off. The loops go through
/// `cpu::par`'s one copy of rayon's machinery (a rayon chain per dtype and op would each be
/// instantiated anew).
const ROWS_PER_TASK: usize = 8;

/// Apply `f32_row` to each last-dim row of any float storage.
fn map_rows(
    s: &CpuStorage,
    l: &Layout,
    op: &'static str,
    f32_row: &(dyn Fn(&[f32], &mut [f32]) + Sync),
    f64_row: &(dyn Fn(&[f64], &mut [f64]) + Sync),
) -> Result<CpuStorage> {
    let d = *l
        .dims()
        .last()
        .ok_or_else(|| Error::invalid(op, "needs at least one dim"))?;
    fn rows<T: WithDType>(
        v: &[T],
        l: &Layout,
        d: usize,
        f: &(dyn Fn(&[T], &mut [T]) + Sync),
    ) -> Vec<T> {
        let src = super::contiguous_cow(v, l);
        if d == 0 {
            return super::alloc::zeroed_vec::<T>(src.len());
        }
        filled_chunks(src.len(), ROWS_PER_TASK * d, &|i, o| {
            let src = &src[i * ROWS_PER_TASK * d..][..o.len()];
            for (o, x) in o.chunks_mut(d).zip(src.chunks(d)) {
                f(x, o)
            }
        })
    }
    /// f16/bf16 rows: widen each row into per-task f32 scratch with the `half` slice
    /// conversions (F16C where available), run the f32 kernel, narrow back.
    fn via_f32<T: WithDType>(
        v: &[T],
        l: &Layout,
        d: usize,
        f: &(dyn Fn(&[f32], &mut [f32]) + Sync),
    ) -> Vec<T>
    where
        [T]: HalfFloatSliceExt,
    {
        let src = super::contiguous_cow(v, l);
        let mut out = super::alloc::zeroed_vec::<T>(src.len());
        if d == 0 {
            return out;
        }
        for_each_chunk(&mut out, ROWS_PER_TASK * d, &|i, o| {
            let src = &src[i * ROWS_PER_TASK * d..][..o.len()];
            let (mut xf, mut of) = (vec![0f32; d], vec![0f32; d]);
            for (o, x) in o.chunks_mut(d).zip(src.chunks(d)) {
                x.convert_to_f32_slice(&mut xf);
                f(&xf, &mut of);
                o.convert_from_f32_slice(&of);
            }
        });
        out
    }
    Ok(match s {
        CpuStorage::F32(v) => CpuStorage::from_vec(rows(v, l, d, f32_row)),
        CpuStorage::F64(v) => CpuStorage::from_vec(rows(v, l, d, f64_row)),
        CpuStorage::F16(v) => CpuStorage::from_vec(via_f32::<f16>(v, l, d, f32_row)),
        CpuStorage::BF16(v) => CpuStorage::from_vec(via_f32::<bf16>(v, l, d, f32_row)),
        s => {
            return Err(Error::UnsupportedDType {
                op,
                dtype: s.dtype(),
            })
        }
    })
}

fn softmax_f64(x: &[f64], out: &mut [f64], log: bool) {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = x.iter().map(|&v| (v - m).exp()).sum();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = if log {
            v - m - s.ln()
        } else {
            (v - m).exp() / s
        };
    }
}

pub fn softmax_last(s: &CpuStorage, l: &Layout, log: bool) -> Result<CpuStorage> {
    let k = simd::kernels();
    let f32_row = if log { k.log_softmax } else { k.softmax };
    map_rows(s, l, "softmax", &f32_row, &|x, o| softmax_f64(x, o, log))
}

/// A weight/bias vector as f32 and f64 (norm weights are small; converting once is cheap).
fn vec_f64(s: &CpuStorage, l: &Layout, d: usize, op: &'static str) -> Result<Vec<f64>> {
    if l.dims() != [d] {
        return Err(Error::ShapeMismatch {
            op,
            expected: vec![d].into(),
            got: l.shape().clone(),
        });
    }
    Ok(super::compute_dtype!(s, op, v => unary_map(v, l, |x| x.to_f64())))
}

pub fn layer_norm(
    s: &CpuStorage,
    l: &Layout,
    w: &CpuStorage,
    wl: &Layout,
    b: Option<(&CpuStorage, &Layout)>,
    eps: f64,
) -> Result<CpuStorage> {
    let d = *l.dims().last().unwrap_or(&0);
    let w64 = vec_f64(w, wl, d, "layer_norm")?;
    let b64 = b
        .map(|(b, bl)| vec_f64(b, bl, d, "layer_norm"))
        .transpose()?;
    let w32: Vec<f32> = w64.iter().map(|&v| v as f32).collect();
    let b32: Option<Vec<f32>> = b64.as_ref().map(|b| b.iter().map(|&v| v as f32).collect());
    let k = simd::kernels();
    map_rows(
        s,
        l,
        "layer_norm",
        &|x, o| (k.layer_norm)(x, &w32, b32.as_deref(), eps as f32, o),
        &|x, o| {
            let n = x.len() as f64;
            let mean = x.iter().sum::<f64>() / n;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let r = 1.0 / (var + eps).sqrt();
            for (i, (o, &v)) in o.iter_mut().zip(x).enumerate() {
                *o = (v - mean) * r * w64[i] + b64.as_ref().map_or(0.0, |b| b[i]);
            }
        },
    )
}

pub fn rms_norm(
    s: &CpuStorage,
    l: &Layout,
    w: &CpuStorage,
    wl: &Layout,
    eps: f64,
) -> Result<CpuStorage> {
    let d = *l.dims().last().unwrap_or(&0);
    let w64 = vec_f64(w, wl, d, "rms_norm")?;
    let w32: Vec<f32> = w64.iter().map(|&v| v as f32).collect();
    let k = simd::kernels();
    map_rows(
        s,
        l,
        "rms_norm",
        &|x, o| (k.rms_norm)(x, &w32, eps as f32, o),
        &|x, o| {
            let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
            for ((o, &v), &w) in o.iter_mut().zip(x).zip(&w64) {
                *o = v * r * w;
            }
        },
    )
}

/// Rotate each pair of one [t, d] block by the angle whose cos/sin are given per
/// (position, pair).
#[allow(clippy::too_many_arguments)]
fn rope_block<T: Copy>(
    x: &[T],
    o: &mut [T],
    cos: &[T],
    sin: &[T],
    t: usize,
    d: usize,
    kind: RopeKind,
    mul_add: &impl Fn(T, T, T, T, bool) -> T,
) {
    let half = d / 2;
    for p in 0..t {
        let (cs, sn) = (
            &cos[p * half..(p + 1) * half],
            &sin[p * half..(p + 1) * half],
        );
        let (xr, or) = (&x[p * d..(p + 1) * d], &mut o[p * d..(p + 1) * d]);
        for i in 0..half {
            let (a, b) = match kind {
                RopeKind::Interleaved => (2 * i, 2 * i + 1),
                RopeKind::HalfSplit => (i, i + half),
            };
            // a' = x_a cos - x_b sin; b' = x_a sin + x_b cos
            or[a] = mul_add(xr[a], cs[i], xr[b], sn[i], false);
            or[b] = mul_add(xr[a], sn[i], xr[b], cs[i], true);
        }
    }
}

/// Heads (`[t, d]` blocks of `n` values) per rope task: enough that a task outweighs handing
/// it to another thread. A decode step's few heads of one position then rotate on the calling
/// thread: spreading Gemma 3's four query heads over rayon costs more in wake-ups than the
/// rotation itself (`hanzo-engine bench -n 128` shows it in decode).
fn heads_per_task(n: usize) -> usize {
    super::elementwise::PAR_MIN.div_ceil(n.max(1))
}

fn rope_rows<T: Copy + Send + Sync>(
    x: &[T],
    cos: &[T],
    sin: &[T],
    t: usize,
    d: usize,
    kind: RopeKind,
    mul_add: impl Fn(T, T, T, T, bool) -> T + Sync,
) -> Vec<T> {
    let mut out = x.to_vec();
    if t * d == 0 {
        return out;
    }
    let n = t * d;
    for_each_chunk(&mut out, heads_per_task(n) * n, &|i, o| {
        let x = &x[i * heads_per_task(n) * n..][..o.len()];
        for (o, x) in o.chunks_mut(n).zip(x.chunks(n)) {
            rope_block(x, o, cos, sin, t, d, kind, &mul_add)
        }
    });
    out
}

/// One `[t, d]` block in f32 through the SIMD rope kernel, a position at a time.
fn rope_block_f32(
    x: &[f32],
    o: &mut [f32],
    cos: &[f32],
    sin: &[f32],
    t: usize,
    d: usize,
    kind: RopeKind,
) {
    let k = simd::kernels();
    let f = match kind {
        RopeKind::Interleaved => k.rope_interleaved,
        RopeKind::HalfSplit => k.rope_halfsplit,
    };
    let half = d / 2;
    for p in 0..t {
        let (c, s) = (
            &cos[p * half..(p + 1) * half],
            &sin[p * half..(p + 1) * half],
        );
        f(&x[p * d..(p + 1) * d], c, s, &mut o[p * d..(p + 1) * d]);
    }
}

fn rope_rows_f32(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    t: usize,
    d: usize,
    kind: RopeKind,
) -> Vec<f32> {
    if t * d == 0 {
        return super::alloc::zeroed_vec::<f32>(x.len());
    }
    let n = t * d;
    filled_chunks(x.len(), heads_per_task(n) * n, &|i, o| {
        let x = &x[i * heads_per_task(n) * n..][..o.len()];
        for (o, x) in o.chunks_mut(n).zip(x.chunks(n)) {
            rope_block_f32(x, o, cos, sin, t, d, kind)
        }
    })
}

/// f16/bf16 rope: cos/sin are widened once; each [t, d] block of x is widened into per-task
/// f32 scratch, rotated in f32 and narrowed back.
fn rope_rows_half<T: WithDType>(
    x: &[T],
    cos: &[T],
    sin: &[T],
    t: usize,
    d: usize,
    kind: RopeKind,
) -> Vec<T>
where
    [T]: HalfFloatSliceExt,
{
    let mut out = x.to_vec();
    let (mut cf, mut sf) = (vec![0f32; cos.len()], vec![0f32; sin.len()]);
    cos.convert_to_f32_slice(&mut cf);
    sin.convert_to_f32_slice(&mut sf);
    let n = t * d;
    if n == 0 {
        return out;
    }
    for_each_chunk(&mut out, heads_per_task(n) * n, &|i, o| {
        let x = &x[i * heads_per_task(n) * n..][..o.len()];
        let (mut xf, mut of) = (vec![0f32; n], vec![0f32; n]);
        for (o, x) in o.chunks_mut(n).zip(x.chunks(n)) {
            x.convert_to_f32_slice(&mut xf);
            rope_block_f32(&xf, &mut of, &cf, &sf, t, d, kind);
            o.convert_from_f32_slice(&of);
        }
    });
    out
}

pub fn rope(
    s: &CpuStorage,
    l: &Layout,
    cos: &CpuStorage,
    sin: &CpuStorage,
    kind: RopeKind,
) -> Result<CpuStorage> {
    let (_, _, t, d) = l.shape().dims4()?;
    let x_range = l
        .contiguous_offsets()
        .ok_or_else(|| Error::invalid("rope", "x must be contiguous"))?;
    let n = t * d / 2;
    macro_rules! go {
        ($x:expr, $c:expr, $s:expr, $f:expr) => {{
            let (c, sn) = ($c, $s);
            if c.len() < n || sn.len() < n {
                return Err(Error::invalid("rope", "cos/sin smaller than [t, d/2]"));
            }
            rope_rows(&$x[x_range.0..x_range.1], &c[..n], &sn[..n], t, d, kind, $f)
        }};
    }
    macro_rules! go_half {
        ($x:expr, $c:expr, $s:expr) => {{
            let (c, sn) = ($c, $s);
            if c.len() < n || sn.len() < n {
                return Err(Error::invalid("rope", "cos/sin smaller than [t, d/2]"));
            }
            rope_rows_half(&$x[x_range.0..x_range.1], &c[..n], &sn[..n], t, d, kind)
        }};
    }
    Ok(match (s, cos, sin) {
        (CpuStorage::F32(x), CpuStorage::F32(c), CpuStorage::F32(sn)) => {
            if c.len() < n || sn.len() < n {
                return Err(Error::invalid("rope", "cos/sin smaller than [t, d/2]"));
            }
            CpuStorage::from_vec(rope_rows_f32(
                &x[x_range.0..x_range.1],
                &c[..n],
                &sn[..n],
                t,
                d,
                kind,
            ))
        }
        (CpuStorage::F64(x), CpuStorage::F64(c), CpuStorage::F64(sn)) => CpuStorage::from_vec(go!(
            x,
            &c[..],
            &sn[..],
            |a: f64, b, c: f64, d, plus| if plus { a * b + c * d } else { a * b - c * d }
        )),
        (CpuStorage::F16(x), CpuStorage::F16(c), CpuStorage::F16(sn)) => {
            CpuStorage::from_vec::<f16>(go_half!(x, &c[..], &sn[..]))
        }
        (CpuStorage::BF16(x), CpuStorage::BF16(c), CpuStorage::BF16(sn)) => {
            CpuStorage::from_vec::<bf16>(go_half!(x, &c[..], &sn[..]))
        }
        (x, c, _) if x.dtype() != c.dtype() => {
            return Err(Error::DTypeMismatch {
                op: "rope",
                expected: x.dtype(),
                got: c.dtype(),
            })
        }
        (x, _, sn) if x.dtype() != sn.dtype() => {
            return Err(Error::DTypeMismatch {
                op: "rope",
                expected: x.dtype(),
                got: sn.dtype(),
            })
        }
        (x, _, _) => {
            return Err(Error::UnsupportedDType {
                op: "rope",
                dtype: x.dtype(),
            })
        }
    })
}

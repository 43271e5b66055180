//! Generic element-wise maps over strided views. Unary maps run over flat (parallel) slices,
//! a strided view copied to row-major first; binary maps walk contiguous blocks, and
//! broadcasts of a contiguous block reuse it.

use super::par::{filled_chunks, for_each_chunk};
use crate::layout::Blocks;
use crate::Layout;
use half::slice::HalfFloatSliceExt;

/// Below this many elements, threading costs more than it saves.
pub(crate) const PAR_MIN: usize = 1 << 15;
/// Elements per parallel work item: big enough to amortise scheduling, small enough that a
/// descheduled thread holds back little work (the others take the rest).
pub(crate) const PAR_CHUNK: usize = 1 << 14;

/// `f` over the view's elements in row-major order. A strided view is copied first
/// (`copy_view`, one instantiation per element type), so each op's map is instantiated for
/// flat slices alone: the strided walks per (op, type) pair cost 372 KB of the binary.
pub fn unary_map<
    T: Copy + Sync + Send + bytemuck::Zeroable,
    U: Send + Copy + bytemuck::Zeroable,
>(
    v: &[T],
    l: &Layout,
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    map_slice(&contiguous_cow(v, l), f)
}

/// `f` over a flat slice, in parallel chunks for large inputs.
pub(crate) fn map_slice<T: Copy + Sync, U: Send + Copy + bytemuck::Zeroable>(
    src: &[T],
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    if src.len() >= PAR_MIN {
        filled_chunks(src.len(), PAR_CHUNK, &|i, o| {
            for (o, &s) in o.iter_mut().zip(&src[i * PAR_CHUNK..]) {
                *o = f(s)
            }
        })
    } else {
        src.iter().map(|&x| f(x)).collect()
    }
}

/// Views whose second-to-last dim has unit stride (`x.t()` and friends): reading them in
/// row-major order jumps a whole source row per element. Copy in square tiles instead so
/// both sides stay in cache, in parallel over bands of output rows.
fn transposed_copy<T: Copy + Sync + Send + bytemuck::Zeroable>(
    v: &[T],
    l: &Layout,
) -> Option<Vec<T>> {
    const TILE: usize = 32;
    let (dims, stride) = (l.dims(), l.stride());
    let r = dims.len();
    if r < 2 || stride[r - 2] != 1 || stride[r - 1] == 1 || dims[r - 2] < TILE || dims[r - 1] < TILE
    {
        return None;
    }
    let (rows_per_outer, cols, col_stride) = (dims[r - 2], dims[r - 1], stride[r - 1]);
    let outer: Vec<usize> =
        crate::layout::StridedIndex::new(&dims[..r - 2], &stride[..r - 2], l.start_offset())
            .collect();
    let mut out = super::alloc::zeroed_vec::<T>(l.shape().elem_count());
    // Source offset of output row `row` (its first column).
    let row_src = |row: usize| outer[row / rows_per_outer] + row % rows_per_outer;
    for_each_chunk(&mut out, TILE * cols, &|band, o| {
        let row0 = band * TILE;
        let nrows = o.len() / cols;
        let srcs: Vec<usize> = (0..nrows).map(|i| row_src(row0 + i)).collect();
        for j0 in (0..cols).step_by(TILE) {
            let j1 = (j0 + TILE).min(cols);
            for (i, &s) in srcs.iter().enumerate() {
                let orow = &mut o[i * cols..(i + 1) * cols];
                for j in j0..j1 {
                    orow[j] = v[s + j * col_stride];
                }
            }
        }
    });
    Some(out)
}

/// The view's elements in row-major order: borrowed when already contiguous, else copied.
pub(crate) fn contiguous_cow<'a, T: Copy + Sync + Send + bytemuck::Zeroable>(
    v: &'a [T],
    l: &Layout,
) -> std::borrow::Cow<'a, [T]> {
    match l.contiguous_offsets() {
        Some((s, e)) => std::borrow::Cow::Borrowed(&v[s..e]),
        None => std::borrow::Cow::Owned(copy_view(v, l)),
    }
}

/// The view's elements copied in row-major order. One instantiation per element type, shared
/// by every strided map (`unary_map`) and copy.
pub(crate) fn copy_view<T: Copy + Sync + Send + bytemuck::Zeroable>(v: &[T], l: &Layout) -> Vec<T> {
    match l.blocks() {
        Blocks::Single { start, len } => v[start..start + len].to_vec(),
        Blocks::Multiple { block_len, starts } => {
            if let Some(out) = transposed_copy(v, l) {
                return out;
            }
            let mut out = Vec::with_capacity(l.shape().elem_count());
            if block_len == 1 {
                out.extend(starts.map(|o| v[o]));
            } else {
                for s in starts {
                    out.extend_from_slice(&v[s..s + block_len]);
                }
            }
            out
        }
    }
}

/// Apply a vectorised slice kernel, in parallel chunks for large inputs.
pub(crate) fn par_map_slice(src: &[f32], k: fn(&[f32], &mut [f32])) -> Vec<f32> {
    filled_chunks(src.len(), chunk_of(src.len()), &|i, o| {
        k(&src[i * PAR_CHUNK..][..o.len()], o)
    })
}

pub(crate) fn par_zip_slices(a: &[f32], b: &[f32], k: fn(&[f32], &[f32], &mut [f32])) -> Vec<f32> {
    filled_chunks(a.len(), chunk_of(a.len()), &|i, o| {
        let at = i * PAR_CHUNK..i * PAR_CHUNK + o.len();
        k(&a[at.clone()], &b[at], o)
    })
}

/// `PAR_CHUNK`, or all `n` elements in one piece where `n` is too few to share out (then
/// only piece 0 exists, so `i * PAR_CHUNK` still finds its start).
fn chunk_of(n: usize) -> usize {
    if n >= PAR_MIN {
        PAR_CHUNK
    } else {
        n
    }
}

/// f32 elements staged per block when running f32 kernels over f16/bf16 data (on the stack).
const HALF_BLOCK: usize = 1024;

/// Run an f32 slice kernel over contiguous f16/bf16 data: each block is widened with the
/// `half` slice conversions (F16C where available), processed, and narrowed back.
pub(crate) fn par_map_half<H>(src: &[H], k: &(dyn Fn(&[f32], &mut [f32]) + Sync)) -> Vec<H>
where
    H: bytemuck::Pod + Send + Sync,
    [H]: HalfFloatSliceExt,
{
    let mut out = super::alloc::zeroed_vec::<H>(src.len());
    let run = |o: &mut [H], s: &[H]| {
        let (mut xf, mut of) = ([0f32; HALF_BLOCK], [0f32; HALF_BLOCK]);
        for (o, s) in o.chunks_mut(HALF_BLOCK).zip(s.chunks(HALF_BLOCK)) {
            let n = s.len();
            s.convert_to_f32_slice(&mut xf[..n]);
            k(&xf[..n], &mut of[..n]);
            o.convert_from_f32_slice(&of[..n]);
        }
    };
    if src.len() >= PAR_MIN {
        for_each_chunk(&mut out, PAR_CHUNK, &|i, o| {
            run(o, &src[i * PAR_CHUNK..][..o.len()])
        });
    } else {
        run(&mut out, src);
    }
    out
}

/// A binary f32 slice kernel (`out[i] = f(a[i], b[i])`).
pub(crate) type ZipF32 = dyn Fn(&[f32], &[f32], &mut [f32]) + Sync;

/// Binary form of [`par_map_half`].
pub(crate) fn par_zip_half<H>(a: &[H], b: &[H], k: &ZipF32) -> Vec<H>
where
    H: bytemuck::Pod + Send + Sync,
    [H]: HalfFloatSliceExt,
{
    let n = a.len().min(b.len());
    let mut out = super::alloc::zeroed_vec::<H>(n);
    let run = |o: &mut [H], a: &[H], b: &[H]| {
        let mut af = [0f32; HALF_BLOCK];
        let mut bf = [0f32; HALF_BLOCK];
        let mut of = [0f32; HALF_BLOCK];
        for ((o, a), b) in o
            .chunks_mut(HALF_BLOCK)
            .zip(a.chunks(HALF_BLOCK))
            .zip(b.chunks(HALF_BLOCK))
        {
            let n = o.len();
            a.convert_to_f32_slice(&mut af[..n]);
            b.convert_to_f32_slice(&mut bf[..n]);
            k(&af[..n], &bf[..n], &mut of[..n]);
            o.convert_from_f32_slice(&of[..n]);
        }
    };
    if n >= PAR_MIN {
        for_each_chunk(&mut out, PAR_CHUNK, &|i, o| {
            let at = i * PAR_CHUNK..i * PAR_CHUNK + o.len();
            run(o, &a[at.clone()], &b[at])
        });
    } else {
        run(&mut out, &a[..n], &b[..n]);
    }
    out
}

/// Number of trailing dims over which `l` walks storage contiguously, and their element count.
fn contiguous_suffix(l: &Layout, stride_zero: bool) -> (usize, usize) {
    let (dims, stride) = (l.dims(), l.stride());
    let mut acc = 1;
    let mut n = 0;
    for i in (0..dims.len()).rev() {
        let ok = if stride_zero {
            stride[i] == 0 || dims[i] == 1
        } else {
            stride[i] == acc || dims[i] == 1
        };
        if !ok {
            break;
        }
        if !stride_zero {
            acc *= dims[i];
        }
        n += 1;
    }
    (n, dims[dims.len() - n..].iter().product())
}

/// `f` over two views of one shape; output is contiguous in that shape.
pub fn binary_map<T: Copy + Sync, U: Send + Copy + bytemuck::Zeroable>(
    a: &[T],
    al: &Layout,
    b: &[T],
    bl: &Layout,
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Vec<U> {
    let n = al.shape().elem_count();
    if n == 0 {
        return vec![];
    }
    if let (Some((s1, e1)), Some((s2, e2))) = (al.contiguous_offsets(), bl.contiguous_offsets()) {
        let (a, b) = (&a[s1..e1], &b[s2..e2]);
        return filled_chunks(n, chunk_of(n), &|i, o| {
            let (a, b) = (&a[i * PAR_CHUNK..], &b[i * PAR_CHUNK..]);
            for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                *o = f(x, y)
            }
        });
    }
    let rank = al.dims().len();
    let (na, _) = contiguous_suffix(al, false);
    let (nb, _) = contiguous_suffix(bl, false);
    let (nza, _) = contiguous_suffix(al, true);
    let (nzb, _) = contiguous_suffix(bl, true);
    // Pick the longest inner run over which both sides are either contiguous or constant.
    let cands = [(na.min(nb), 0u8), (na.min(nzb), 1), (nza.min(nb), 2)];
    let (inner, kind) = cands.into_iter().max_by_key(|c| c.0).unwrap_or((0, 0));
    let inner_len: usize = al.dims()[rank - inner..].iter().product();
    if inner == 0 || inner_len < 4 {
        return al
            .offsets()
            .zip(bl.offsets())
            .map(|(i, j)| f(a[i], b[j]))
            .collect();
    }
    let outer = rank - inner;
    let oa = crate::layout::StridedIndex::new(
        &al.dims()[..outer],
        &al.stride()[..outer],
        al.start_offset(),
    );
    let ob = crate::layout::StridedIndex::new(
        &bl.dims()[..outer],
        &bl.stride()[..outer],
        bl.start_offset(),
    );
    let mut out = Vec::with_capacity(n);
    for (i, j) in oa.zip(ob) {
        match kind {
            0 => out.extend(
                a[i..i + inner_len]
                    .iter()
                    .zip(&b[j..j + inner_len])
                    .map(|(&x, &y)| f(x, y)),
            ),
            1 => {
                let y = b[j];
                out.extend(a[i..i + inner_len].iter().map(|&x| f(x, y)))
            }
            _ => {
                let x = a[i];
                out.extend(b[j..j + inner_len].iter().map(|&y| f(x, y)))
            }
        }
    }
    out
}

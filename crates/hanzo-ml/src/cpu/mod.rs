//! The CPU backend: typed buffers (owned, or borrowed zero-copy from a shared `Blob`: a
//! memory map or bytes handed over whole) and the
//! kernels over them. Work is split over rayon in chunks so a busy core slows one chunk, not a
//! barrier every row.

pub(crate) mod alloc;
pub mod attention;
mod blob;
mod buffer;
mod elementwise;
pub mod features;
mod fused;
pub(crate) mod huge_pages;
mod indexing;
mod matmul;
pub mod par;
mod reduce;
pub mod simd;
pub mod team;

pub use alloc::reuse_large_buffers;
pub use blob::Blob;
pub use buffer::Buf;
pub(crate) use elementwise::{binary_map, contiguous_cow, copy_view, unary_map};

use crate::backend::{BackendStorage, MatMulDims, RopeKind};
use crate::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use crate::{DType, Device, Error, Layout, Result, WithDType, F8E4M3};
use half::{bf16, f16};

#[derive(Clone)]
pub enum CpuStorage {
    U8(Buf<u8>),
    U32(Buf<u32>),
    I64(Buf<i64>),
    BF16(Buf<bf16>),
    F16(Buf<f16>),
    F32(Buf<f32>),
    F64(Buf<f64>),
    F8E4M3(Buf<F8E4M3>),
}

impl std::fmt::Debug for CpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuStorage({:?}, {} elems)", self.dtype(), self.len())
    }
}

/// Run `$e` with `$v` bound to the typed slice, for any dtype.
macro_rules! any_dtype {
    ($s:expr, $v:ident => $e:expr) => {
        match $s {
            CpuStorage::U8($v) => $e,
            CpuStorage::U32($v) => $e,
            CpuStorage::I64($v) => $e,
            CpuStorage::BF16($v) => $e,
            CpuStorage::F16($v) => $e,
            CpuStorage::F32($v) => $e,
            CpuStorage::F64($v) => $e,
            CpuStorage::F8E4M3($v) => $e,
        }
    };
}

/// Same, but f8 (storage only) is an error naming `$op`.
macro_rules! compute_dtype {
    ($s:expr, $op:expr, $v:ident => $e:expr) => {
        match $s {
            CpuStorage::U8($v) => $e,
            CpuStorage::U32($v) => $e,
            CpuStorage::I64($v) => $e,
            CpuStorage::BF16($v) => $e,
            CpuStorage::F16($v) => $e,
            CpuStorage::F32($v) => $e,
            CpuStorage::F64($v) => $e,
            CpuStorage::F8E4M3(_) => {
                return Err(Error::UnsupportedDType {
                    op: $op,
                    dtype: $crate::DType::F8E4M3,
                })
            }
        }
    };
}
pub(crate) use compute_dtype;

/// Same as compute_dtype, but binding two storages that must have the same dtype.
macro_rules! same_dtype2 {
    ($a:expr, $b:expr, $op:expr, ($x:ident, $y:ident) => $e:expr) => {
        match ($a, $b) {
            (CpuStorage::U8($x), CpuStorage::U8($y)) => $e,
            (CpuStorage::U32($x), CpuStorage::U32($y)) => $e,
            (CpuStorage::I64($x), CpuStorage::I64($y)) => $e,
            (CpuStorage::BF16($x), CpuStorage::BF16($y)) => $e,
            (CpuStorage::F16($x), CpuStorage::F16($y)) => $e,
            (CpuStorage::F32($x), CpuStorage::F32($y)) => $e,
            (CpuStorage::F64($x), CpuStorage::F64($y)) => $e,
            (a, b) => {
                return Err(Error::DTypeMismatch {
                    op: $op,
                    expected: a.dtype(),
                    got: b.dtype(),
                })
            }
        }
    };
}
pub(crate) use same_dtype2;

impl CpuStorage {
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::U32(_) => DType::U32,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::F8E4M3(_) => DType::F8E4M3,
        }
    }

    pub fn len(&self) -> usize {
        any_dtype!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn from_vec<T: WithDType>(v: Vec<T>) -> Self {
        T::to_cpu_storage(Buf::owned(v))
    }

    pub fn as_slice<T: WithDType>(&self) -> Result<&[T]> {
        T::cpu_slice(self).ok_or(Error::DTypeMismatch {
            op: "as_slice",
            expected: T::DTYPE,
            got: self.dtype(),
        })
    }

    pub fn zeros(len: usize, dtype: DType) -> Self {
        Self::filled(len, dtype, 0.0)
    }

    pub fn filled(len: usize, dtype: DType, v: f64) -> Self {
        fn fill<T: WithDType>(len: usize, v: f64) -> CpuStorage {
            CpuStorage::from_vec(vec![T::from_f64(v); len])
        }
        match dtype {
            DType::U8 => fill::<u8>(len, v),
            DType::U32 => fill::<u32>(len, v),
            DType::I64 => fill::<i64>(len, v),
            DType::BF16 => fill::<bf16>(len, v),
            DType::F16 => fill::<f16>(len, v),
            DType::F32 => fill::<f32>(len, v),
            DType::F64 => fill::<f64>(len, v),
            DType::F8E4M3 => fill::<F8E4M3>(len, v),
        }
    }

    /// Build a storage of `dtype` from f64 values (for creation ops and tests).
    pub fn from_f64_iter(dtype: DType, it: impl Iterator<Item = f64>) -> Self {
        fn conv<T: WithDType>(it: impl Iterator<Item = f64>) -> CpuStorage {
            CpuStorage::from_vec(it.map(T::from_f64).collect::<Vec<T>>())
        }
        match dtype {
            DType::U8 => conv::<u8>(it),
            DType::U32 => conv::<u32>(it),
            DType::I64 => conv::<i64>(it),
            DType::BF16 => conv::<bf16>(it),
            DType::F16 => conv::<f16>(it),
            DType::F32 => conv::<f32>(it),
            DType::F64 => conv::<f64>(it),
            DType::F8E4M3 => conv::<F8E4M3>(it),
        }
    }

    /// Indices stored as u8/u32/i64, read as usize and bounds-checked against `size`.
    pub(crate) fn indices(
        &self,
        layout: &Layout,
        size: usize,
        op: &'static str,
    ) -> Result<Vec<usize>> {
        fn get<T: WithDType>(
            v: &[T],
            l: &Layout,
            size: usize,
            op: &'static str,
        ) -> Result<Vec<usize>> {
            l.offsets()
                .map(|o| {
                    let i = v[o].to_i64();
                    if i < 0 || i as u64 >= size as u64 {
                        Err(Error::IndexOutOfRange { op, index: i, size })
                    } else {
                        Ok(i as usize)
                    }
                })
                .collect()
        }
        match self {
            CpuStorage::U8(v) => get(v, layout, size, op),
            CpuStorage::U32(v) => get(v, layout, size, op),
            CpuStorage::I64(v) => get(v, layout, size, op),
            s => Err(Error::invalid(
                op,
                format!("indices must be u8, u32 or i64, got {:?}", s.dtype()),
            )),
        }
    }
}

/// Conversions between rarely paired types: the view is made contiguous first (one shared
/// strided copy per source type), then converted in a flat, serial loop.
fn convert<T: WithDType, U: WithDType>(v: &[T], l: &Layout, f: impl Fn(T) -> U) -> CpuStorage {
    CpuStorage::from_vec(
        contiguous_cow(v, l)
            .iter()
            .map(|&x| f(x))
            .collect::<Vec<U>>(),
    )
}

/// Conversions between the float types models compute in keep the parallel map; the others
/// go through [`convert`]. Float targets convert from f32, except from an f64
/// source, which `half`'s own f64 conversion takes.
fn to_dtype_typed<T: WithDType>(v: &[T], l: &Layout, dtype: DType) -> CpuStorage {
    let hot = matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16);
    let wide = T::DTYPE == DType::F64;
    match dtype {
        DType::F32 if hot => CpuStorage::from_vec(unary_map(v, l, |x| x.to_f32())),
        DType::F16 if hot => CpuStorage::from_vec(unary_map(v, l, |x| f16::from_f32(x.to_f32()))),
        DType::BF16 if hot => CpuStorage::from_vec(unary_map(v, l, |x| bf16::from_f32(x.to_f32()))),
        DType::F32 => convert(v, l, |x| x.to_f32()),
        DType::F16 if !wide => convert(v, l, |x| f16::from_f32(x.to_f32())),
        DType::BF16 if !wide => convert(v, l, |x| bf16::from_f32(x.to_f32())),
        DType::F8E4M3 => convert(v, l, |x| F8E4M3::from_f32(x.to_f32())),
        DType::U8 => convert(v, l, |x| u8::from_f64(x.to_f64())),
        DType::U32 => convert(v, l, |x| u32::from_f64(x.to_f64())),
        DType::I64 => convert(v, l, |x| i64::from_f64(x.to_f64())),
        DType::F64 => convert(v, l, |x| x.to_f64()),
        DType::F16 => convert(v, l, |x| f16::from_f64(x.to_f64())),
        DType::BF16 => convert(v, l, |x| bf16::from_f64(x.to_f64())),
    }
}

fn affine_typed<T: WithDType>(v: &[T], l: &Layout, mul: f64, add: f64) -> Vec<T> {
    unary_map(v, l, |x| T::from_f64(x.to_f64() * mul + add))
}

/// A strided view is copied to row-major first (`contiguous_cow`), so every op runs its flat
/// kernel: the vectorised f32 one where it has one, over f16/bf16 blocks widened to f32.
fn unary_typed<T: WithDType, U: UnaryOpT>(v: &[T], l: &Layout) -> Result<Vec<T>> {
    use std::any::TypeId;
    let v = contiguous_cow(v, l);
    let t = TypeId::of::<T>();
    if t == TypeId::of::<f32>() {
        // T is f32 here; bytemuck's checked cast reinterprets the slice without unsafe.
        let v32: &[f32] = bytemuck::cast_slice(&v);
        let out = match U::F32_VEC {
            Some(k) => elementwise::par_map_slice(v32, k),
            None => elementwise::map_slice(v32, U::f32),
        };
        return Ok(bytemuck::cast_vec(out));
    }
    if t == TypeId::of::<f64>() {
        return Ok(elementwise::map_slice(&v, |x| {
            T::from_f64(U::f64(x.to_f64()))
        }));
    }
    // f16/bf16: widen blocks to f32, run the f32 kernel (vectorised where one exists).
    let k = |x: &[f32], o: &mut [f32]| match U::F32_VEC {
        Some(k) => k(x, o),
        None => o.iter_mut().zip(x).for_each(|(o, &x)| *o = U::f32(x)),
    };
    if t == TypeId::of::<f16>() {
        let h: &[f16] = bytemuck::cast_slice(&v);
        return Ok(bytemuck::cast_vec(elementwise::par_map_half(h, &k)));
    }
    if t == TypeId::of::<bf16>() {
        let h: &[bf16] = bytemuck::cast_slice(&v);
        return Ok(bytemuck::cast_vec(elementwise::par_map_half(h, &k)));
    }
    if T::DTYPE.is_float() {
        return Ok(elementwise::map_slice(&v, |x| {
            T::from_f32(U::f32(x.to_f32()))
        }));
    }
    if !U::INT {
        return Err(Error::UnsupportedDType {
            op: U::NAME,
            dtype: T::DTYPE,
        });
    }
    Ok(elementwise::map_slice(&v, |x| {
        T::from_i64(U::i64(x.to_i64()))
    }))
}

fn binary_typed<T: WithDType, B: BinaryOpT>(a: &[T], al: &Layout, b: &[T], bl: &Layout) -> Vec<T> {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    if t == TypeId::of::<f32>() {
        let (a32, b32): (&[f32], &[f32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
        let out = match (B::F32_VEC, al.contiguous_offsets(), bl.contiguous_offsets()) {
            (Some(k), Some((s1, e1)), Some((s2, e2))) => {
                elementwise::par_zip_slices(&a32[s1..e1], &b32[s2..e2], k)
            }
            _ => binary_map(a32, al, b32, bl, B::f32),
        };
        return bytemuck::cast_vec(out);
    }
    if t == TypeId::of::<f64>() {
        return binary_map(a, al, b, bl, |x, y| {
            T::from_f64(B::f64(x.to_f64(), y.to_f64()))
        });
    }
    if let (true, Some((s1, e1)), Some((s2, e2))) = (
        T::DTYPE.is_float(),
        al.contiguous_offsets(),
        bl.contiguous_offsets(),
    ) {
        // f16/bf16: widen blocks to f32, run the f32 kernel (vectorised where one exists).
        let k = |x: &[f32], y: &[f32], o: &mut [f32]| match B::F32_VEC {
            Some(k) => k(x, y, o),
            None => o
                .iter_mut()
                .zip(x.iter().zip(y))
                .for_each(|(o, (&x, &y))| *o = B::f32(x, y)),
        };
        let (a, b) = (&a[s1..e1], &b[s2..e2]);
        if t == TypeId::of::<f16>() {
            let (a, b): (&[f16], &[f16]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
            return bytemuck::cast_vec(elementwise::par_zip_half(a, b, &k));
        }
        if t == TypeId::of::<bf16>() {
            let (a, b): (&[bf16], &[bf16]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
            return bytemuck::cast_vec(elementwise::par_zip_half(a, b, &k));
        }
    }
    if T::DTYPE.is_float() {
        return binary_map(a, al, b, bl, |x, y| {
            T::from_f32(B::f32(x.to_f32(), y.to_f32()))
        });
    }
    binary_map(a, al, b, bl, |x, y| {
        T::from_i64(B::i64(x.to_i64(), y.to_i64()))
    })
}

impl BackendStorage for CpuStorage {
    fn dtype(&self) -> DType {
        CpuStorage::dtype(self)
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn to_cpu(&self) -> Result<CpuStorage> {
        Ok(self.clone())
    }

    fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<Self> {
        Ok(any_dtype!(self, v => to_dtype_typed(v, layout, dtype)))
    }

    fn copy_strided(&self, layout: &Layout) -> Result<Self> {
        Ok(any_dtype!(self, v => CpuStorage::from_vec(copy_view(v, layout))))
    }

    fn copy2d(
        &self,
        dst: &mut Self,
        rows: usize,
        cols: usize,
        src_stride: usize,
        dst_stride: usize,
        src_offset: usize,
        dst_offset: usize,
    ) -> Result<()> {
        #[allow(clippy::too_many_arguments)]
        fn copy<T: Copy>(
            s: &[T],
            d: &mut [T],
            r: usize,
            c: usize,
            ss: usize,
            ds: usize,
            so: usize,
            dof: usize,
        ) {
            for i in 0..r {
                let (a, b) = (so + i * ss, dof + i * ds);
                d[b..b + c].copy_from_slice(&s[a..a + c]);
            }
        }
        macro_rules! arm {
            ($($v:ident),*) => {
                match (self, dst) {
                    $((CpuStorage::$v(s), CpuStorage::$v(d)) => {
                        copy(s, d.make_mut(), rows, cols, src_stride, dst_stride, src_offset, dst_offset)
                    })*
                    (s, d) => return Err(Error::DTypeMismatch { op: "copy2d", expected: d.dtype(), got: s.dtype() }),
                }
            };
        }
        arm!(U8, U32, I64, BF16, F16, F32, F64, F8E4M3);
        Ok(())
    }

    fn unary<U: UnaryOpT>(&self, layout: &Layout) -> Result<Self> {
        Ok(
            compute_dtype!(self, U::NAME, v => CpuStorage::from_vec(unary_typed::<_, U>(v, layout)?)),
        )
    }

    fn binary<B: BinaryOpT>(&self, lhs_l: &Layout, rhs: &Self, rhs_l: &Layout) -> Result<Self> {
        Ok(
            same_dtype2!(self, rhs, B::NAME, (a, b) => CpuStorage::from_vec(binary_typed::<_, B>(a, lhs_l, b, rhs_l))),
        )
    }

    fn cmp(&self, op: CmpOp, lhs_l: &Layout, rhs: &Self, rhs_l: &Layout) -> Result<Self> {
        Ok(
            same_dtype2!(self, rhs, "cmp", (a, b) => CpuStorage::from_vec(
            binary_map(a, lhs_l, b, rhs_l, |x, y| op.apply(x, y) as u8))),
        )
    }

    fn affine(&self, layout: &Layout, mul: f64, add: f64) -> Result<Self> {
        Ok(match self {
            CpuStorage::F32(v) => {
                let (m, a) = (mul as f32, add as f32);
                CpuStorage::from_vec(unary_map(v, layout, |x| x * m + a))
            }
            s => {
                compute_dtype!(s, "affine", v => CpuStorage::from_vec(affine_typed(v, layout, mul, add)))
            }
        })
    }

    fn powf(&self, layout: &Layout, e: f64) -> Result<Self> {
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::from_vec(unary_map(v, layout, |x| x.powf(e as f32))),
            CpuStorage::F64(v) => CpuStorage::from_vec(unary_map(v, layout, |x| x.powf(e))),
            CpuStorage::F16(v) => CpuStorage::from_vec(unary_map(v, layout, |x| {
                f16::from_f32(x.to_f32().powf(e as f32))
            })),
            CpuStorage::BF16(v) => CpuStorage::from_vec(unary_map(v, layout, |x| {
                bf16::from_f32(x.to_f32().powf(e as f32))
            })),
            s => {
                return Err(Error::UnsupportedDType {
                    op: "powf",
                    dtype: s.dtype(),
                })
            }
        })
    }

    fn where_cond(
        &self,
        layout: &Layout,
        t: &Self,
        t_l: &Layout,
        f: &Self,
        f_l: &Layout,
    ) -> Result<Self> {
        let cond: Vec<bool> = match self {
            CpuStorage::U8(c) => unary_map(c, layout, |x| x != 0),
            CpuStorage::U32(c) => unary_map(c, layout, |x| x != 0),
            CpuStorage::I64(c) => unary_map(c, layout, |x| x != 0),
            s => {
                return Err(Error::invalid(
                    "where_cond",
                    format!("condition must be an integer dtype, got {:?}", s.dtype()),
                ))
            }
        };
        Ok(same_dtype2!(t, f, "where_cond", (a, b) => {
            let out: Vec<_> = t_l.offsets().zip(f_l.offsets()).zip(cond).map(|((i, j), c)| if c { a[i] } else { b[j] }).collect();
            CpuStorage::from_vec(out)
        }))
    }

    fn reduce(&self, op: ReduceOp, layout: &Layout, dims: &[usize]) -> Result<Self> {
        reduce::reduce(self, op, layout, dims)
    }

    fn cumsum_last(&self, layout: &Layout) -> Result<Self> {
        reduce::cumsum_last(self, layout)
    }

    fn argsort_last(&self, layout: &Layout, ascending: bool) -> Result<Self> {
        reduce::argsort_last(self, layout, ascending)
    }

    fn matmul(&self, rhs: &Self, dims: MatMulDims, lhs_l: &Layout, rhs_l: &Layout) -> Result<Self> {
        matmul::matmul(self, rhs, dims, lhs_l, rhs_l)
    }

    fn index_select(
        &self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        indexing::index_select(self, layout, ids, ids_l, dim)
    }

    fn gather(&self, layout: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self> {
        indexing::gather(self, layout, ids, ids_l, dim)
    }

    fn scatter(
        &self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
        add: bool,
    ) -> Result<Self> {
        indexing::scatter(self, layout, ids, ids_l, src, src_l, dim, add)
    }

    fn index_add(
        &self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        indexing::index_add(self, layout, ids, ids_l, src, src_l, dim)
    }

    fn softmax_last(&self, layout: &Layout, log: bool) -> Result<Option<Self>> {
        fused::softmax_last(self, layout, log).map(Some)
    }

    fn layer_norm(
        &self,
        l: &Layout,
        w: &Self,
        w_l: &Layout,
        b: Option<(&Self, &Layout)>,
        eps: f64,
    ) -> Result<Option<Self>> {
        fused::layer_norm(self, l, w, w_l, b, eps).map(Some)
    }

    fn rms_norm(&self, l: &Layout, w: &Self, w_l: &Layout, eps: f64) -> Result<Option<Self>> {
        fused::rms_norm(self, l, w, w_l, eps).map(Some)
    }

    fn rope(&self, l: &Layout, cos: &Self, sin: &Self, kind: RopeKind) -> Result<Option<Self>> {
        fused::rope(self, l, cos, sin, kind).map(Some)
    }
}

impl CpuStorage {
    /// Copies `src` (viewed through `src_layout`, same dtype) into this contiguous buffer of
    /// shape `dims` at `start..` along `dim`. Shapes were checked by `Tensor::write_slice`.
    pub(crate) fn write_block(
        &mut self,
        dims: &[usize],
        dim: usize,
        start: usize,
        src: &CpuStorage,
        src_layout: &Layout,
    ) -> Result<()> {
        let outer: usize = dims[..dim].iter().product();
        let inner: usize = dims[dim + 1..].iter().product();
        let n = src_layout.dims()[dim];
        same_dtype2!(self, src, "write_slice", (d, s) => {
            let s = contiguous_cow(s, src_layout);
            let d = d.make_mut();
            let (block, stride) = (n * inner, dims[dim] * inner);
            for o in 0..outer {
                let at = o * stride + start * inner;
                d[at..at + block].copy_from_slice(&s[o * block..(o + 1) * block]);
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    /// Every (source, target) pair on a transposed view (the tiled strided path for float
    /// pairs, the contiguous-first path for the others): small integers are exact in every
    /// type, so the result must be the view's values in row-major order.
    #[test]
    fn every_dtype_pair_converts_a_strided_view() -> crate::Result<()> {
        let (rows, cols) = (40, 36);
        let vals: Vec<f64> = (0..rows * cols).map(|i| (i % 16) as f64).collect();
        let base = Tensor::from_vec(vals, (rows, cols), &Device::Cpu)?;
        let want: Vec<f64> = (0..cols)
            .flat_map(|c| (0..rows).map(move |r| ((r * cols + c) % 16) as f64))
            .collect();
        for src in DType::ALL {
            let view = base.to_dtype(src)?.t()?;
            for dst in DType::ALL {
                let got = view.to_dtype(dst)?;
                assert_eq!(got.dtype(), dst);
                let got = got.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
                assert_eq!(got, want, "{src:?} -> {dst:?}");
            }
        }
        Ok(())
    }
}

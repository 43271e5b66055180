//! Creating tensors: from Rust data, constants, ranges, identity, random values.

use super::Tensor;
use crate::{CpuStorage, DType, Device, Error, Result, Shape, Storage, WithDType};
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;
use std::cell::RefCell;

/// Rust values a tensor can be built from: scalars, slices, Vecs and nested arrays.
pub trait NdArray {
    fn shape(&self) -> Result<Shape>;
    fn to_cpu_storage(&self) -> CpuStorage;
}

macro_rules! scalar_ndarray {
    ($($t:ty),*) => {$(
        impl NdArray for $t {
            fn shape(&self) -> Result<Shape> {
                Ok(().into())
            }
            fn to_cpu_storage(&self) -> CpuStorage {
                CpuStorage::from_vec(vec![*self])
            }
        }
    )*};
}
scalar_ndarray!(u8, u32, i64, half::f16, half::bf16, f32, f64, crate::F8E4M3);
impl<A: NdArray + ?Sized> NdArray for &A {
    fn shape(&self) -> Result<Shape> {
        (**self).shape()
    }
    fn to_cpu_storage(&self) -> CpuStorage {
        (**self).to_cpu_storage()
    }
}
impl<T: WithDType> NdArray for [T] {
    fn shape(&self) -> Result<Shape> {
        Ok(self.len().into())
    }
    fn to_cpu_storage(&self) -> CpuStorage {
        CpuStorage::from_vec(self.to_vec())
    }
}
impl<T: WithDType> NdArray for Vec<T> {
    fn shape(&self) -> Result<Shape> {
        Ok(self.len().into())
    }
    fn to_cpu_storage(&self) -> CpuStorage {
        CpuStorage::from_vec(self.clone())
    }
}
impl<T: WithDType, const N: usize> NdArray for [T; N] {
    fn shape(&self) -> Result<Shape> {
        Ok(N.into())
    }
    fn to_cpu_storage(&self) -> CpuStorage {
        CpuStorage::from_vec(self.to_vec())
    }
}
impl<T: WithDType, const N: usize, const M: usize> NdArray for [[T; N]; M] {
    fn shape(&self) -> Result<Shape> {
        Ok((M, N).into())
    }
    fn to_cpu_storage(&self) -> CpuStorage {
        CpuStorage::from_vec(self.iter().flatten().copied().collect::<Vec<_>>())
    }
}
impl<T: WithDType, const N: usize, const M: usize, const K: usize> NdArray for [[[T; N]; M]; K] {
    fn shape(&self) -> Result<Shape> {
        Ok((K, M, N).into())
    }
    fn to_cpu_storage(&self) -> CpuStorage {
        CpuStorage::from_vec(self.iter().flatten().flatten().copied().collect::<Vec<_>>())
    }
}
impl<T: WithDType> NdArray for Vec<Vec<T>> {
    fn shape(&self) -> Result<Shape> {
        let c = self.first().map_or(0, |r| r.len());
        if self.iter().any(|r| r.len() != c) {
            return Err(Error::invalid("Tensor::new", "rows have different lengths"));
        }
        Ok((self.len(), c).into())
    }
    fn to_cpu_storage(&self) -> CpuStorage {
        CpuStorage::from_vec(self.iter().flatten().copied().collect::<Vec<_>>())
    }
}

thread_local! {
    static RNG: RefCell<rand::rngs::StdRng> = RefCell::new(rand::rngs::StdRng::seed_from_u64(299_792_458));
}

/// Seed this thread's generator used by `rand`/`randn` (same seed, same tensors).
pub fn manual_seed(seed: u64) {
    RNG.with(|r| *r.borrow_mut() = rand::rngs::StdRng::seed_from_u64(seed));
}

fn on_device(s: CpuStorage, shape: Shape, device: &Device) -> Result<Tensor> {
    let t = Tensor::from_storage(Storage::Cpu(s), shape, None);
    t.to_device(device)
}

impl Tensor {
    pub fn new<A: NdArray>(array: A, device: &Device) -> Result<Tensor> {
        on_device(array.to_cpu_storage(), array.shape()?, device)
    }

    pub fn from_vec<T: WithDType>(
        v: Vec<T>,
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        if v.len() != shape.elem_count() {
            return Err(Error::invalid(
                "from_vec",
                format!("{} elements cannot have shape {shape:?}", v.len()),
            ));
        }
        on_device(CpuStorage::from_vec(v), shape, device)
    }

    pub fn from_slice<T: WithDType>(
        v: &[T],
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        Self::from_vec(v.to_vec(), shape, device)
    }

    pub fn full(
        value: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        on_device(
            CpuStorage::filled(shape.elem_count(), dtype, value),
            shape,
            device,
        )
    }
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Self::full(0.0, shape, dtype, device)
    }
    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Self::full(1.0, shape, dtype, device)
    }
    pub fn zeros_like(&self) -> Result<Tensor> {
        Self::zeros(self.shape().clone(), self.dtype(), &self.device())
    }
    pub fn ones_like(&self) -> Result<Tensor> {
        Self::ones(self.shape().clone(), self.dtype(), &self.device())
    }
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Self::full(value, self.shape().clone(), self.dtype(), &self.device())
    }
    /// A 0-d tensor of this tensor's dtype and device.
    pub fn scalar_like(&self, value: f64) -> Result<Tensor> {
        Self::full(value, (), self.dtype(), &self.device())
    }

    /// `[start, end)` in steps of 1.
    pub fn arange<T: WithDType>(start: T, end: T, device: &Device) -> Result<Tensor> {
        Self::arange_step(start, end, T::one(), device)
    }

    /// `[start, end)` in steps of `step` (which may be negative, never zero).
    pub fn arange_step<T: WithDType>(start: T, end: T, step: T, device: &Device) -> Result<Tensor> {
        let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
        if st == 0.0 || !st.is_finite() || !s.is_finite() || !e.is_finite() {
            return Err(Error::invalid(
                "arange",
                format!("invalid range {s}..{e} step {st}"),
            ));
        }
        let n = ((e - s) / st).ceil().max(0.0);
        if n > (1u64 << 40) as f64 {
            return Err(Error::invalid(
                "arange",
                format!("{n} elements is too many"),
            ));
        }
        let v: Vec<T> = (0..n as usize)
            .map(|i| T::from_f64(s + i as f64 * st))
            .collect();
        let len = v.len();
        Self::from_vec(v, len, device)
    }

    /// `n` evenly spaced values from `start` to `end` inclusive (NumPy's `linspace`).
    pub fn linspace(
        start: f64,
        end: f64,
        n: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let step = if n > 1 {
            (end - start) / (n - 1) as f64
        } else {
            0.0
        };
        let it = (0..n).map(|i| {
            if n > 1 && i == n - 1 {
                end
            } else {
                start + i as f64 * step
            }
        });
        on_device(CpuStorage::from_f64_iter(dtype, it), n.into(), device)
    }

    pub fn eye(n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        let it = (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 });
        on_device(CpuStorage::from_f64_iter(dtype, it), (n, n).into(), device)
    }

    /// Uniform on `[lo, hi)` from this thread's seeded generator.
    pub fn rand(
        lo: f64,
        hi: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        RNG.with(|r| Self::rand_with(&mut *r.borrow_mut(), lo, hi, shape, dtype, device))
    }

    /// Normal with `mean` and `std` from this thread's seeded generator.
    pub fn randn(
        mean: f64,
        std: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        RNG.with(|r| Self::randn_with(&mut *r.borrow_mut(), mean, std, shape, dtype, device))
    }

    pub fn rand_with(
        rng: &mut impl Rng,
        lo: f64,
        hi: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        if !dtype.is_float()
            || !lo.is_finite()
            || !hi.is_finite()
            || lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less)
        {
            return Err(Error::invalid(
                "rand",
                format!("need a float dtype and lo < hi, got {dtype:?} [{lo}, {hi})"),
            ));
        }
        let shape = shape.into();
        let d = rand_distr::Uniform::new(lo, hi);
        let it: Vec<f64> = (0..shape.elem_count()).map(|_| d.sample(rng)).collect();
        on_device(
            CpuStorage::from_f64_iter(dtype, it.into_iter()),
            shape,
            device,
        )
    }

    pub fn randn_with(
        rng: &mut impl Rng,
        mean: f64,
        std: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
            return Err(Error::invalid(
                "randn",
                format!("mean {mean} and std {std} must be finite, std >= 0"),
            ));
        }
        let d = rand_distr::Normal::new(mean, std)
            .map_err(|e| Error::invalid("randn", format!("mean {mean}, std {std}: {e}")))?;
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType { op: "randn", dtype });
        }
        let shape = shape.into();
        let it: Vec<f64> = (0..shape.elem_count()).map(|_| d.sample(rng)).collect();
        on_device(
            CpuStorage::from_f64_iter(dtype, it.into_iter()),
            shape,
            device,
        )
    }
}

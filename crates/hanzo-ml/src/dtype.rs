//! Element types, their sizes and NumPy-style type promotion.

use half::{bf16, f16};

/// Element type of a tensor. The discriminants are stable (append-only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    U8 = 0,
    U32 = 1,
    I64 = 2,
    BF16 = 3,
    F16 = 4,
    F32 = 5,
    F64 = 6,
    /// 8-bit float (4 exponent bits, 3 mantissa bits, no infinities). Storage only: it converts
    /// to and from the other types but computes nothing itself.
    F8E4M3 = 7,
}

impl DType {
    pub const ALL: [DType; 8] = [
        DType::U8,
        DType::U32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::F8E4M3,
    ];

    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::U8 | DType::F8E4M3 => 1,
            DType::BF16 | DType::F16 => 2,
            DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::BF16 | DType::F16 | DType::F32 | DType::F64 | DType::F8E4M3
        )
    }

    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    /// The name NumPy and safetensors use for this dtype.
    pub fn as_str(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F8E4M3 => "f8e4m3",
        }
    }

    /// The result type of a binary op on `self` and `other`, following NumPy's promotion
    /// table: `u8 + f32 -> f32`, `f16 + f32 -> f32`, `bf16 + f16 -> f32`, `u32 + f32 -> f64`,
    /// `i64 + f32 -> f64`, `u8 + f16 -> f16`.
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        // f8 computes as f32.
        let a = if self == F8E4M3 { F32 } else { self };
        let b = if other == F8E4M3 { F32 } else { other };
        if a == b {
            return a;
        }
        match (a.is_float(), b.is_float()) {
            (false, false) => {
                // u8 < u32 < i64 (u32 + i64 -> i64, which holds every u32).
                let rank = |d: DType| match d {
                    U8 => 0,
                    U32 => 1,
                    _ => 2,
                };
                if rank(a) >= rank(b) {
                    a
                } else {
                    b
                }
            }
            (true, true) => match (a, b) {
                (F64, _) | (_, F64) => F64,
                (F32, _) | (_, F32) => F32,
                // bf16 with f16: neither holds the other.
                _ => F32,
            },
            (ai, _) => {
                let (f, i) = if ai { (a, b) } else { (b, a) };
                // The float must hold every integer of the other type exactly enough, as NumPy
                // decides: u8 fits every float; u32 needs f64 (f32 for none); i64 needs f64.
                match (i, f) {
                    (U8, f) => f,
                    (_, _) => F64,
                }
            }
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// 8-bit float, E4M3 "FN" variant (bias 7, no infinities, 0x7f/0xff are NaN, max 448).
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

/// Compares the values (so +0 == -0 and NaN != NaN), not the bit patterns.
impl PartialEq for F8E4M3 {
    fn eq(&self, other: &Self) -> bool {
        self.to_f32() == other.to_f32()
    }
}

impl PartialOrd for F8E4M3 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.to_f32().partial_cmp(&other.to_f32())
    }
}

impl F8E4M3 {
    pub fn to_f32(self) -> f32 {
        let b = self.0;
        let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
        let exp = ((b >> 3) & 0x0f) as i32;
        let man = (b & 0x07) as f32;
        if exp == 0x0f && (b & 0x07) == 0x07 {
            return f32::NAN;
        }
        if exp == 0 {
            sign * man / 8.0 * 2f32.powi(-6)
        } else {
            sign * (1.0 + man / 8.0) * 2f32.powi(exp - 7)
        }
    }

    /// Round to nearest even, saturating to ±448 (the largest finite value).
    pub fn from_f32(v: f32) -> Self {
        if v.is_nan() {
            return F8E4M3(0x7f);
        }
        let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
        let a = v.abs();
        if a >= 448.0 {
            return F8E4M3(sign | 0x7e);
        }
        // Quantise on the grid of the binade `a` lies in (subnormal grid below 2^-6).
        let e = if a < 2f32.powi(-6) {
            -6
        } else {
            a.log2().floor() as i32
        };
        let step = 2f32.powi(e - 3);
        let q = (a / step).round_ties_even() * step;
        // Re-encode q (rounding may carry into the next binade; still exact there).
        if q == 0.0 {
            return F8E4M3(sign);
        }
        let qe = if q < 2f32.powi(-6) {
            -7
        } else {
            q.log2().floor() as i32
        };
        let bits = if qe < -6 {
            (q / 2f32.powi(-9)) as u8 // subnormal: mantissa counts 2^-9 steps
        } else {
            let exp = (qe + 7) as u8;
            let man = ((q / 2f32.powi(qe) - 1.0) * 8.0).round() as u8;
            (exp << 3) | man
        };
        F8E4M3(sign | bits)
    }
}

/// A Rust type that can be a tensor element.
pub trait WithDType:
    Copy + Send + Sync + 'static + PartialOrd + PartialEq + std::fmt::Debug + bytemuck::Pod
{
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_f32(self) -> f32 {
        self.to_f64() as f32
    }
    fn from_f32(v: f32) -> Self {
        Self::from_f64(v as f64)
    }
    /// Integer value (floats truncate toward zero).
    fn to_i64(self) -> i64;
    /// Wrapping conversion from i64 (floats convert).
    fn from_i64(v: i64) -> Self;
    fn to_cpu_storage(buf: crate::cpu::Buf<Self>) -> crate::CpuStorage;
    fn cpu_slice(s: &crate::CpuStorage) -> Option<&[Self]>;
    fn zero() -> Self {
        Self::from_f64(0.0)
    }
    fn one() -> Self {
        Self::from_f64(1.0)
    }
}

macro_rules! with_dtype_int {
    ($t:ty, $d:ident) => {
        impl WithDType for $t {
            const DTYPE: DType = DType::$d;
            fn to_cpu_storage(buf: crate::cpu::Buf<Self>) -> crate::CpuStorage {
                crate::CpuStorage::$d(buf)
            }
            fn cpu_slice(s: &crate::CpuStorage) -> Option<&[Self]> {
                match s {
                    crate::CpuStorage::$d(v) => Some(v),
                    _ => None,
                }
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}
with_dtype_int!(u8, U8);
with_dtype_int!(u32, U32);
with_dtype_int!(i64, I64);

impl WithDType for f32 {
    const DTYPE: DType = DType::F32;
    fn to_cpu_storage(buf: crate::cpu::Buf<Self>) -> crate::CpuStorage {
        crate::CpuStorage::F32(buf)
    }
    fn cpu_slice(s: &crate::CpuStorage) -> Option<&[Self]> {
        match s {
            crate::CpuStorage::F32(v) => Some(v),
            _ => None,
        }
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v as f32
    }
}

impl WithDType for f64 {
    const DTYPE: DType = DType::F64;
    fn to_cpu_storage(buf: crate::cpu::Buf<Self>) -> crate::CpuStorage {
        crate::CpuStorage::F64(buf)
    }
    fn cpu_slice(s: &crate::CpuStorage) -> Option<&[Self]> {
        match s {
            crate::CpuStorage::F64(v) => Some(v),
            _ => None,
        }
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v as f64
    }
}

macro_rules! with_dtype_half {
    ($t:ty, $d:ident) => {
        impl WithDType for $t {
            const DTYPE: DType = DType::$d;
            fn to_cpu_storage(buf: crate::cpu::Buf<Self>) -> crate::CpuStorage {
                crate::CpuStorage::$d(buf)
            }
            fn cpu_slice(s: &crate::CpuStorage) -> Option<&[Self]> {
                match s {
                    crate::CpuStorage::$d(v) => Some(v),
                    _ => None,
                }
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
            fn from_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            fn to_i64(self) -> i64 {
                <$t>::to_f32(self) as i64
            }
            fn from_i64(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
        }
    };
}
with_dtype_half!(f16, F16);
with_dtype_half!(bf16, BF16);

impl WithDType for F8E4M3 {
    const DTYPE: DType = DType::F8E4M3;
    fn to_cpu_storage(buf: crate::cpu::Buf<Self>) -> crate::CpuStorage {
        crate::CpuStorage::F8E4M3(buf)
    }
    fn cpu_slice(s: &crate::CpuStorage) -> Option<&[Self]> {
        match s {
            crate::CpuStorage::F8E4M3(v) => Some(v),
            _ => None,
        }
    }
    fn to_f64(self) -> f64 {
        self.to_f32() as f64
    }
    fn from_f64(v: f64) -> Self {
        F8E4M3::from_f32(v as f32)
    }
    fn to_f32(self) -> f32 {
        F8E4M3::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        F8E4M3::from_f32(v)
    }
    fn to_i64(self) -> i64 {
        self.to_f32() as i64
    }
    fn from_i64(v: i64) -> Self {
        F8E4M3::from_f32(v as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_promotion() {
        use DType::*;
        assert_eq!(U8.promote(F32), F32);
        assert_eq!(F16.promote(F32), F32);
        assert_eq!(BF16.promote(F16), F32);
        assert_eq!(U8.promote(F16), F16);
        assert_eq!(U32.promote(F32), F64);
        assert_eq!(I64.promote(F32), F64);
        assert_eq!(U8.promote(U32), U32);
        assert_eq!(U32.promote(I64), I64);
        assert_eq!(F64.promote(BF16), F64);
    }

    #[test]
    fn f8e4m3_round_trip_all_codes() {
        for b in 0u8..=255 {
            let v = F8E4M3(b).to_f32();
            if v.is_nan() {
                continue;
            }
            let back = F8E4M3::from_f32(v);
            // +0 / -0 both decode to zero.
            assert_eq!(back.to_f32(), v, "code {b:#x}");
        }
        assert_eq!(F8E4M3::from_f32(448.0).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_f32(1e6).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_f32(1.0).0, 0x38);
        assert_eq!(F8E4M3::from_f32(2f32.powi(-9)).0, 0x01);
    }
}

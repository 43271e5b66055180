//! NumPy-style printing: nested brackets, at most `EDGE` items at each end of a dim.

use super::Tensor;
use crate::DType;
use std::fmt;

const EDGE: usize = 3;
const FULL_UP_TO: usize = 2 * EDGE + 1;

fn fmt_value(v: f64, dtype: DType) -> String {
    if dtype.is_int() {
        format!("{}", v as i64)
    } else if v.is_finite() && v == v.trunc() && v.abs() < 1e16 {
        format!("{v:.1}")
    } else if v.is_finite() && (v.abs() >= 1e6 || (v != 0.0 && v.abs() < 1e-4)) {
        format!("{v:.4e}")
    } else {
        // Four decimals, trailing zeros trimmed (2.5000 -> 2.5).
        let s = format!("{v:.4}");
        let t = s.trim_end_matches('0');
        if t.ends_with('.') {
            format!("{t}0")
        } else {
            t.to_string()
        }
    }
}

fn write_dim(
    f: &mut fmt::Formatter<'_>,
    vals: &[f64],
    dims: &[usize],
    dtype: DType,
    depth: usize,
) -> fmt::Result {
    let Some((&n, rest)) = dims.split_first() else {
        return write!(f, "{}", fmt_value(vals[0], dtype));
    };
    let inner: usize = rest.iter().product();
    write!(f, "[")?;
    let shown: Vec<usize> = if n <= FULL_UP_TO {
        (0..n).collect()
    } else {
        (0..EDGE).chain(n - EDGE..n).collect()
    };
    for (k, &i) in shown.iter().enumerate() {
        if k > 0 {
            if rest.is_empty() {
                write!(f, ", ")?;
            } else {
                write!(f, ",\n{}", " ".repeat(depth + 1))?;
            }
        }
        if n > FULL_UP_TO && k == EDGE {
            write!(f, "...")?;
            write!(f, "{}", if rest.is_empty() { ", " } else { ",\n" })?;
            if !rest.is_empty() {
                write!(f, "{}", " ".repeat(depth + 1))?;
            }
        }
        write_dim(f, &vals[i * inner..(i + 1) * inner], rest, dtype, depth + 1)?;
    }
    write!(f, "]")
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vals = self
            .to_dtype(DType::F64)
            .and_then(|t| t.to_vec_flat::<f64>())
            .map_err(|_| fmt::Error)?;
        if self.elem_count() == 0 {
            write!(f, "[]")?;
        } else {
            write_dim(f, &vals, self.dims(), self.dtype(), 0)?;
        }
        write!(f, "\nTensor[{:?}, {}]", self.dims(), self.dtype())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    #[test]
    fn prints_like_numpy() {
        let t = Tensor::new([[1f32, 2.5], [3., 4.]], &Device::Cpu).unwrap();
        assert_eq!(
            t.to_string(),
            "[[1.0, 2.5],\n [3.0, 4.0]]\nTensor[[2, 2], f32]"
        );
        let long = Tensor::arange(0u32, 10, &Device::Cpu).unwrap();
        assert_eq!(
            long.to_string(),
            "[0, 1, 2, ..., 7, 8, 9]\nTensor[[10], u32]"
        );
        let s = Tensor::full(0.5, (), DType::F64, &Device::Cpu).unwrap();
        assert_eq!(s.to_string(), "0.5\nTensor[[], f64]");
    }
}

//! Shapes, dimension arguments and NumPy broadcasting.

use crate::{Error, Result};

#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<usize>);

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Shape {
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    pub fn elem_count(&self) -> usize {
        self.0.iter().product()
    }
    pub fn into_dims(self) -> Vec<usize> {
        self.0
    }
    /// Row-major strides of a contiguous tensor of this shape.
    pub fn stride_contiguous(&self) -> Vec<usize> {
        let mut stride = vec![0; self.rank()];
        let mut acc = 1;
        for (s, &d) in stride.iter_mut().zip(self.0.iter()).rev() {
            *s = acc;
            acc *= d;
        }
        stride
    }
    pub fn is_contiguous(&self, stride: &[usize]) -> bool {
        let mut acc = 1;
        for (&d, &s) in self.0.iter().zip(stride).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc *= d;
        }
        true
    }

    /// The shape two operands broadcast to, NumPy rules (trailing dims align; 1 stretches).
    pub fn broadcast_shape_binary(&self, rhs: &Shape, op: &'static str) -> Result<Shape> {
        let (l, r) = (self.dims(), rhs.dims());
        let rank = l.len().max(r.len());
        let mut out = vec![0; rank];
        for i in 0..rank {
            let a = if i < rank - l.len() {
                1
            } else {
                l[i - (rank - l.len())]
            };
            let b = if i < rank - r.len() {
                1
            } else {
                r[i - (rank - r.len())]
            };
            out[i] = if a == b || b == 1 {
                a
            } else if a == 1 {
                b
            } else {
                return Err(Error::BroadcastIncompatible {
                    op,
                    lhs: self.clone(),
                    rhs: rhs.clone(),
                });
            };
        }
        Ok(Shape(out))
    }

    pub fn dims0(&self) -> Result<()> {
        self.expect_rank(0, "dims0").map(|_| ())
    }
    fn expect_rank(&self, r: usize, op: &'static str) -> Result<&[usize]> {
        if self.rank() != r {
            return Err(Error::RankMismatch {
                op,
                expected: r,
                got: self.rank(),
                shape: self.clone(),
            });
        }
        Ok(&self.0)
    }
    pub fn dims1(&self) -> Result<usize> {
        let d = self.expect_rank(1, "dims1")?;
        Ok(d[0])
    }
    pub fn dims2(&self) -> Result<(usize, usize)> {
        let d = self.expect_rank(2, "dims2")?;
        Ok((d[0], d[1]))
    }
    pub fn dims3(&self) -> Result<(usize, usize, usize)> {
        let d = self.expect_rank(3, "dims3")?;
        Ok((d[0], d[1], d[2]))
    }
    pub fn dims4(&self) -> Result<(usize, usize, usize, usize)> {
        let d = self.expect_rank(4, "dims4")?;
        Ok((d[0], d[1], d[2], d[3]))
    }
}

macro_rules! shape_from_tuple {
    ($($n:ident),*) => {
        impl From<($(shape_from_tuple!(@u $n),)*)> for Shape {
            #[allow(non_snake_case)]
            fn from(($($n,)*): ($(shape_from_tuple!(@u $n),)*)) -> Self {
                Shape(vec![$($n),*])
            }
        }
    };
    (@u $n:ident) => { usize };
}
shape_from_tuple!(A);
shape_from_tuple!(A, B);
shape_from_tuple!(A, B, C);
shape_from_tuple!(A, B, C, D);
shape_from_tuple!(A, B, C, D, E);
shape_from_tuple!(A, B, C, D, E, F);

impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(vec![])
    }
}
impl From<usize> for Shape {
    fn from(d: usize) -> Self {
        Shape(vec![d])
    }
}
impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        Shape(d)
    }
}
impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape(d.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Self {
        Shape(d.to_vec())
    }
}
impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}

/// A dimension argument: a `usize`, or a negative `i64`/`isize` counting from the end
/// (`-1` is the last dim).
pub trait Dim: Copy {
    fn to_index(self, shape: &Shape, op: &'static str) -> Result<usize>;
}

impl Dim for usize {
    fn to_index(self, shape: &Shape, op: &'static str) -> Result<usize> {
        if self >= shape.rank() {
            return Err(Error::DimOutOfRange {
                op,
                dim: self as i64,
                rank: shape.rank(),
            });
        }
        Ok(self)
    }
}

macro_rules! signed_dim {
    ($t:ty) => {
        impl Dim for $t {
            fn to_index(self, shape: &Shape, op: &'static str) -> Result<usize> {
                let rank = shape.rank() as i64;
                let d = self as i64;
                let i = if d < 0 { rank + d } else { d };
                if i < 0 || i >= rank {
                    return Err(Error::DimOutOfRange {
                        op,
                        dim: d,
                        rank: shape.rank(),
                    });
                }
                Ok(i as usize)
            }
        }
    };
}
signed_dim!(i32);
signed_dim!(i64);
signed_dim!(isize);

/// A set of dimensions (for reductions): one `Dim`, a slice, an array or a Vec.
pub trait Dims {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>>;
}

impl<D: Dim> Dims for D {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        Ok(vec![self.to_index(shape, op)?])
    }
}

fn dedup_dims<D: Dim>(ds: &[D], shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(ds.len());
    for d in ds {
        let i = d.to_index(shape, op)?;
        if out.contains(&i) {
            return Err(Error::invalid(op, format!("dimension {i} repeated")));
        }
        out.push(i);
    }
    out.sort_unstable();
    Ok(out)
}

impl<D: Dim> Dims for [D] {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        dedup_dims(self, shape, op)
    }
}
impl<D: Dim, const N: usize> Dims for [D; N] {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        dedup_dims(self, shape, op)
    }
}
impl<D: Dim> Dims for Vec<D> {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        dedup_dims(self, shape, op)
    }
}

/// Marker for "all dimensions" in reductions.
#[derive(Clone, Copy, Debug)]
pub struct All;
impl Dims for All {
    fn to_indexes(&self, shape: &Shape, _: &'static str) -> Result<Vec<usize>> {
        Ok((0..shape.rank()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn broadcasting() {
        let a = Shape::from((3, 1, 5));
        let b = Shape::from((4, 1));
        assert_eq!(
            a.broadcast_shape_binary(&b, "t").unwrap().dims(),
            &[3, 4, 5]
        );
        assert!(Shape::from((3,))
            .broadcast_shape_binary(&Shape::from((4,)), "t")
            .is_err());
        assert_eq!(
            Shape::from(())
                .broadcast_shape_binary(&b, "t")
                .unwrap()
                .dims(),
            &[4, 1]
        );
        assert_eq!(
            Shape::from((0, 3))
                .broadcast_shape_binary(&Shape::from(3), "t")
                .unwrap()
                .dims(),
            &[0, 3]
        );
    }
}

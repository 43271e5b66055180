//! Element-wise ops: unary maps, broadcasting binary ops with NumPy type promotion,
//! comparisons, `where_cond`, affine, powf, clamp and the operator overloads.

use super::Tensor;
use crate::backprop::BackpropOp;
use crate::op::{self, BinaryOpT, CmpOp, UnaryOpT};
use crate::{Result, Shape};

macro_rules! unary_methods {
    ($($fn:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(
                #[doc = concat!("Element-wise `", stringify!($fn), "`.")]
                pub fn $fn(&self) -> Result<Tensor> {
                    self.unary::<op::$op>()
                }
            )*
        }
    };
}
unary_methods!(
    exp => Exp, log => Log, sqrt => Sqrt, recip => Recip, tanh => Tanh, sin => Sin, cos => Cos,
    sigmoid => Sigmoid, silu => Silu, floor => Floor, ceil => Ceil, round => Round, sign => Sign,
    neg => Neg, abs => Abs, sqr => Sqr, relu => Relu, gelu => GeluTanh, gelu_erf => GeluErf,
);

macro_rules! binary_methods {
    ($($fn:ident, $bfn:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(
                #[doc = concat!("Element-wise `", stringify!($fn), "` with NumPy broadcasting and type promotion.")]
                pub fn $fn(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.binary::<op::$op>(rhs)
                }
                /// Same as the non-prefixed op (every binary op broadcasts); kept for
                /// readers coming from candle.
                pub fn $bfn(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.binary::<op::$op>(rhs)
                }
            )*
        }
    };
}
binary_methods!(
    add, broadcast_add => Add, sub, broadcast_sub => Sub, mul, broadcast_mul => Mul,
    div, broadcast_div => Div, maximum, broadcast_maximum => Maximum,
    minimum, broadcast_minimum => Minimum, pow, broadcast_pow => Pow,
);

macro_rules! cmp_methods {
    ($($fn:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(
                #[doc = concat!("Element-wise `", stringify!($fn), "` (u8 result, broadcasting).")]
                pub fn $fn(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.cmp(CmpOp::$op, rhs)
                }
            )*
        }
    };
}
cmp_methods!(eq => Eq, ne => Ne, lt => Lt, le => Le, gt => Gt, ge => Ge);

impl Tensor {
    pub fn unary<U: UnaryOpT>(&self) -> Result<Tensor> {
        let s = self.storage().unary::<U>(self.layout())?;
        let op = BackpropOp::new(U::NAME, &[self], |i, out, g| {
            Ok(vec![Some(U::backward(&i[0], out, g)?)])
        });
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    /// Both operands converted to their NumPy-promoted dtype, and their broadcast shape.
    fn promote_pair(&self, rhs: &Tensor, op: &'static str) -> Result<(Tensor, Tensor, Shape)> {
        self.device().same(&rhs.device(), op)?;
        let dt = self.dtype().promote(rhs.dtype());
        let shape = self.shape().broadcast_shape_binary(rhs.shape(), op)?;
        Ok((self.to_dtype(dt)?, rhs.to_dtype(dt)?, shape))
    }

    pub fn binary<B: BinaryOpT>(&self, rhs: &Tensor) -> Result<Tensor> {
        let (a, b, shape) = self.promote_pair(rhs, B::NAME)?;
        let (al, bl) = (
            a.layout().broadcast_as(&shape)?,
            b.layout().broadcast_as(&shape)?,
        );
        let s = a.storage().binary::<B>(&al, b.storage(), &bl)?;
        let op = BackpropOp::new(B::NAME, &[&a, &b], |i, out, g| {
            let (ga, gb) = B::backward(&i[0], &i[1], out, g)?;
            Ok(vec![
                Some(ga.sum_to_shape(i[0].shape())?),
                Some(gb.sum_to_shape(i[1].shape())?),
            ])
        });
        Ok(Tensor::from_storage(s, shape, op))
    }

    pub fn cmp(&self, cmp: CmpOp, rhs: &Tensor) -> Result<Tensor> {
        let (a, b, shape) = self.promote_pair(rhs, "cmp")?;
        let (al, bl) = (
            a.layout().broadcast_as(&shape)?,
            b.layout().broadcast_as(&shape)?,
        );
        let s = a.storage().cmp(cmp, &al, b.storage(), &bl)?;
        Ok(Tensor::from_storage(s, shape, None))
    }

    /// Sum a broadcast gradient back down to `shape` (the inverse of broadcasting).
    pub fn sum_to_shape(&self, shape: &Shape) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let fits = shape.rank() <= self.rank()
            && shape
                .dims()
                .iter()
                .zip(&self.dims()[self.rank() - shape.rank()..])
                .all(|(&t, &s)| t == s || t == 1);
        if !fits {
            return Err(crate::Error::BroadcastIncompatible {
                op: "sum_to_shape",
                lhs: self.shape().clone(),
                rhs: shape.clone(),
            });
        }
        let lead = self.rank() - shape.rank();
        let mut dims: Vec<usize> = (0..lead).collect();
        for (i, &d) in shape.dims().iter().enumerate() {
            if d == 1 && self.dims()[lead + i] != 1 {
                dims.push(lead + i);
            }
        }
        let s = if dims.is_empty() {
            self.clone()
        } else {
            self.sum_keepdim(dims)?
        };
        s.reshape(shape.clone())
    }

    /// `cond ? on_true : on_false` element-wise; `self` is the condition (any integer dtype,
    /// non-zero = true). All three broadcast together.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let (t, f, shape) = on_true.promote_pair(on_false, "where_cond")?;
        let shape = shape.broadcast_shape_binary(self.shape(), "where_cond")?;
        self.device().same(&t.device(), "where_cond")?;
        let (cl, tl, fl) = (
            self.layout().broadcast_as(&shape)?,
            t.layout().broadcast_as(&shape)?,
            f.layout().broadcast_as(&shape)?,
        );
        let s = self
            .storage()
            .where_cond(&cl, t.storage(), &tl, f.storage(), &fl)?;
        let cond = self.detach();
        let op = BackpropOp::new("where_cond", &[&t, &f], move |i, _, g| {
            let z = g.zeros_like()?;
            let gt = cond.where_cond(g, &z)?.sum_to_shape(i[0].shape())?;
            let gf = cond.where_cond(&z, g)?.sum_to_shape(i[1].shape())?;
            Ok(vec![Some(gt), Some(gf)])
        });
        Ok(Tensor::from_storage(s, shape, op))
    }

    /// `self * mul + add`.
    pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        let s = self.storage().affine(self.layout(), mul, add)?;
        let op = BackpropOp::new("affine", &[self], move |_, _, g| {
            Ok(vec![Some(g.affine(mul, 0.0)?)])
        });
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    /// `self ^ e` for a scalar exponent.
    pub fn powf(&self, e: f64) -> Result<Tensor> {
        let s = self.storage().powf(self.layout(), e)?;
        let op = BackpropOp::new("powf", &[self], move |i, _, g| {
            Ok(vec![Some(g.mul(&i[0].powf(e - 1.0)?.affine(e, 0.0)?)?)])
        });
        Ok(Tensor::from_storage(s, self.shape().clone(), op))
    }

    /// Clamp into `[min, max]`.
    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        if min > max {
            crate::bail_invalid!("clamp", "min {min} > max {max}");
        }
        self.maximum(&self.scalar_like(min)?)?
            .minimum(&self.scalar_like(max)?)
    }

    pub fn add_scalar(&self, v: f64) -> Result<Tensor> {
        self.affine(1.0, v)
    }
    pub fn mul_scalar(&self, v: f64) -> Result<Tensor> {
        self.affine(v, 0.0)
    }
}

macro_rules! tensor_operators {
    ($trait:ident, $method:ident, $fn:ident, $scalar:expr) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$fn(self, rhs)
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$fn(&self, &rhs)
            }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$fn(&self, rhs)
            }
        }
        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$fn(self, &rhs)
            }
        }
        impl std::ops::$trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                let (m, a): (f64, f64) = $scalar(rhs);
                self.affine(m, a)
            }
        }
        impl std::ops::$trait<f64> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                let (m, a): (f64, f64) = $scalar(rhs);
                self.affine(m, a)
            }
        }
    };
}
tensor_operators!(Add, add, add, |v| (1.0, v));
tensor_operators!(Sub, sub, sub, |v: f64| (1.0, -v));
tensor_operators!(Mul, mul, mul, |v| (v, 0.0));
tensor_operators!(Div, div, div, |v: f64| (1.0 / v, 0.0));

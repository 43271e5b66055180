//! The element-wise op table. Each op is declared once: its name, its scalar function per
//! number kind, an optional vectorised f32 kernel, and its backward rule. Backends map these
//! over every dtype; `Tensor` methods are generated from the same list.

use crate::{Result, Tensor};

/// A vectorised f32 map over contiguous data: `out[i] = f(x[i])`.
pub type F32UnaryKernel = fn(&[f32], &mut [f32]);
/// A vectorised f32 zip over contiguous data: `out[i] = f(a[i], b[i])`.
pub type F32BinaryKernel = fn(&[f32], &[f32], &mut [f32]);

pub trait UnaryOpT: 'static {
    const NAME: &'static str;
    /// Defined on integer dtypes too (computed through i64, wrapping).
    const INT: bool = false;
    fn f32(v: f32) -> f32;
    fn f64(v: f64) -> f64;
    fn i64(v: i64) -> i64 {
        v
    }
    /// Hand-vectorised f32 kernel over contiguous data, where one exists.
    const F32_VEC: Option<F32UnaryKernel> = None;
    /// Gradient of the input given the input `x`, the output `y` and the output gradient.
    fn backward(x: &Tensor, y: &Tensor, grad: &Tensor) -> Result<Tensor>;
}

pub trait BinaryOpT: 'static {
    const NAME: &'static str;
    fn f32(a: f32, b: f32) -> f32;
    fn f64(a: f64, b: f64) -> f64;
    fn i64(a: i64, b: i64) -> i64;
    const F32_VEC: Option<F32BinaryKernel> = None;
    /// Gradients of both inputs in the broadcast output shape (the caller sums them back to
    /// each input's shape).
    fn backward(a: &Tensor, b: &Tensor, out: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor)>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    #[inline]
    pub fn apply<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
}

/// Declares a float unary op. `$v` names the scalar in `$f` (written once, compiled for f32
/// and f64); `|$x, $y, $g|` names input, output and output-gradient in the backward rule.
macro_rules! unary_op {
    ($name:ident, $s:literal, $v:ident => $f:expr, |$x:ident, $y:ident, $g:ident| $bw:expr
     $(, vec = $vec:expr)?) => {
        pub struct $name;
        impl UnaryOpT for $name {
            const NAME: &'static str = $s;
            $(const F32_VEC: Option<fn(&[f32], &mut [f32])> = Some($vec);)?
            fn f32($v: f32) -> f32 {
                $f
            }
            fn f64($v: f64) -> f64 {
                $f
            }
            #[allow(unused_variables)]
            fn backward($x: &Tensor, $y: &Tensor, $g: &Tensor) -> Result<Tensor> {
                $bw
            }
        }
    };
}

/// Same, for ops also defined on integers (`$i` over an i64).
macro_rules! unary_op_int {
    ($name:ident, $s:literal, $v:ident => $f:expr, int $iv:ident => $i:expr, |$x:ident, $y:ident, $g:ident| $bw:expr) => {
        pub struct $name;
        impl UnaryOpT for $name {
            const NAME: &'static str = $s;
            const INT: bool = true;
            fn f32($v: f32) -> f32 {
                $f
            }
            fn f64($v: f64) -> f64 {
                $f
            }
            fn i64($iv: i64) -> i64 {
                $i
            }
            #[allow(unused_variables)]
            fn backward($x: &Tensor, $y: &Tensor, $g: &Tensor) -> Result<Tensor> {
                $bw
            }
        }
    };
}

unary_op!(Exp, "exp", v => v.exp(), |x, y, g| g.mul(y), vec = crate::cpu::simd::exp_f32);
unary_op!(Log, "log", v => v.ln(), |x, y, g| g.div(x));
unary_op!(Sqrt, "sqrt", v => v.sqrt(), |x, y, g| g.div(&y.affine(2.0, 0.0)?));
unary_op!(Recip, "recip", v => v.recip(), |x, y, g| g.mul(&y.sqr()?)?.neg());
unary_op!(Tanh, "tanh", v => v.tanh(), |x, y, g| g.mul(&y.sqr()?.affine(-1.0, 1.0)?));
unary_op!(Sin, "sin", v => v.sin(), |x, y, g| g.mul(&x.cos()?));
unary_op!(Cos, "cos", v => v.cos(), |x, y, g| g.mul(&x.sin()?)?.neg());
unary_op!(Sigmoid, "sigmoid", v => 1.0 / (1.0 + (-v).exp()),
    |x, y, g| g.mul(&y.mul(&y.affine(-1.0, 1.0)?)?));
// silu(x) = x s(x); d/dx = s (1 + x (1 - s))
unary_op!(Silu, "silu", v => v / (1.0 + (-v).exp()), |x, y, g| {
    let s = x.sigmoid()?;
    g.mul(&s.mul(&x.mul(&s.affine(-1.0, 1.0)?)?.affine(1.0, 1.0)?)?)
}, vec = crate::cpu::simd::silu_f32);
unary_op!(Floor, "floor", v => v.floor(), |x, y, g| g.zeros_like());
unary_op!(Ceil, "ceil", v => v.ceil(), |x, y, g| g.zeros_like());
// NumPy rounds halves to even.
unary_op!(Round, "round", v => v.round_ties_even(), |x, y, g| g.zeros_like());
unary_op!(Sign, "sign", v => if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { v },
    |x, y, g| g.zeros_like());
unary_op!(GeluTanhGrad, "gelu_tanh_grad", v => gelu_tanh_grad(v as f64) as _,
    |x, y, g| Err(crate::Error::Backward("gelu_tanh_grad is not differentiable".into())));
unary_op!(GeluErfGrad, "gelu_erf_grad", v => gelu_erf_grad(v as f64) as _,
    |x, y, g| Err(crate::Error::Backward("gelu_erf_grad is not differentiable".into())));

unary_op_int!(Neg, "neg", v => -v, int v => v.wrapping_neg(), |x, y, g| g.neg());
unary_op_int!(Abs, "abs", v => v.abs(), int v => v.wrapping_abs(), |x, y, g| g.mul(&x.sign()?));
unary_op_int!(Sqr, "sqr", v => v * v, int v => v.wrapping_mul(v),
    |x, y, g| g.mul(&x.affine(2.0, 0.0)?));
unary_op_int!(Relu, "relu", v => if v > 0.0 { v } else { 0.0 * v }, int v => v.max(0),
    |x, y, g| g.mul(&x.sign()?.relu()?));

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
pub struct GeluTanh;
impl UnaryOpT for GeluTanh {
    const NAME: &'static str = "gelu_tanh";
    fn f32(v: f32) -> f32 {
        let c = SQRT_2_OVER_PI as f32;
        0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
    }
    fn f64(v: f64) -> f64 {
        0.5 * v * (1.0 + (SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)).tanh())
    }
    fn backward(x: &Tensor, _: &Tensor, g: &Tensor) -> Result<Tensor> {
        g.mul(&x.unary::<GeluTanhGrad>()?)
    }
}

fn gelu_tanh_grad(v: f64) -> f64 {
    let inner = SQRT_2_OVER_PI * (v + 0.044715 * v * v * v);
    let t = inner.tanh();
    0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v)
}

/// GELU, exact: 0.5 x (1 + erf(x / sqrt 2)).
pub struct GeluErf;
impl UnaryOpT for GeluErf {
    const NAME: &'static str = "gelu";
    const F32_VEC: Option<crate::op::F32UnaryKernel> = Some(crate::cpu::simd::gelu_erf_f32);
    fn f32(v: f32) -> f32 {
        0.5 * v * (1.0 + libm::erff(v * std::f32::consts::FRAC_1_SQRT_2))
    }
    fn f64(v: f64) -> f64 {
        0.5 * v * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2))
    }
    fn backward(x: &Tensor, _: &Tensor, g: &Tensor) -> Result<Tensor> {
        g.mul(&x.unary::<GeluErfGrad>()?)
    }
}

fn gelu_erf_grad(v: f64) -> f64 {
    let cdf = 0.5 * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2));
    let pdf = (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
    cdf + v * pdf
}

/// Declares a binary op: scalar forms for float and (wrapping) integer math, and the backward
/// rule in the broadcast shape.
macro_rules! binary_op {
    ($name:ident, $s:literal, |$a:ident, $b:ident| $f:expr, int |$ia:ident, $ib:ident| $i:expr,
     |$x:ident, $y:ident, $o:ident, $g:ident| $bw:expr $(, vec = $vec:expr)?) => {
        pub struct $name;
        impl BinaryOpT for $name {
            const NAME: &'static str = $s;
            $(const F32_VEC: Option<fn(&[f32], &[f32], &mut [f32])> = Some($vec);)?
            fn f32($a: f32, $b: f32) -> f32 {
                $f
            }
            fn f64($a: f64, $b: f64) -> f64 {
                $f
            }
            fn i64($ia: i64, $ib: i64) -> i64 {
                $i
            }
            #[allow(unused_variables)]
            fn backward(
                $x: &Tensor,
                $y: &Tensor,
                $o: &Tensor,
                $g: &Tensor,
            ) -> Result<(Tensor, Tensor)> {
                $bw
            }
        }
    };
}

binary_op!(
    Add,
    "add",
    |a, b| a + b,
    int | a,
    b | a.wrapping_add(b),
    |x, y, o, g| Ok((g.clone(), g.clone())),
    vec = crate::cpu::simd::add_f32
);
binary_op!(
    Sub,
    "sub",
    |a, b| a - b,
    int | a,
    b | a.wrapping_sub(b),
    |x, y, o, g| Ok((g.clone(), g.neg()?)),
    vec = crate::cpu::simd::sub_f32
);
binary_op!(
    Mul,
    "mul",
    |a, b| a * b,
    int | a,
    b | a.wrapping_mul(b),
    |x, y, o, g| Ok((g.mul(y)?, g.mul(x)?)),
    vec = crate::cpu::simd::mul_f32
);
// Integer division truncates like Rust; division by zero gives 0 (NumPy warns and gives 0).
binary_op!(
    Div,
    "div",
    |a, b| a / b,
    int | a,
    b | a.checked_div(b).unwrap_or(0),
    |x, y, o, g| Ok((g.div(y)?, g.mul(o)?.div(y)?.neg()?)),
    vec = crate::cpu::simd::div_f32
);
// Ties split the gradient evenly, as PyTorch does.
binary_op!(
    Maximum,
    "maximum",
    |a, b| if a.is_nan() || a >= b { a } else { b },
    int | a,
    b | a.max(b),
    |x, y, o, g| {
        let w = x
            .gt(y)?
            .to_dtype(g.dtype())?
            .add(&x.eq(y)?.to_dtype(g.dtype())?.affine(0.5, 0.0)?)?;
        Ok((g.mul(&w)?, g.mul(&w.affine(-1.0, 1.0)?)?))
    },
    vec = crate::cpu::simd::maximum_f32
);
binary_op!(
    Minimum,
    "minimum",
    |a, b| if a.is_nan() || a <= b { a } else { b },
    int | a,
    b | a.min(b),
    |x, y, o, g| {
        let w = x
            .lt(y)?
            .to_dtype(g.dtype())?
            .add(&x.eq(y)?.to_dtype(g.dtype())?.affine(0.5, 0.0)?)?;
        Ok((g.mul(&w)?, g.mul(&w.affine(-1.0, 1.0)?)?))
    },
    vec = crate::cpu::simd::minimum_f32
);
// d(a^b)/da = b a^(b-1); d(a^b)/db = a^b ln a.
binary_op!(
    Pow,
    "pow",
    |a, b| a.powf(b),
    int | a,
    b | if b < 0 {
        0
    } else {
        a.wrapping_pow(b.min(u32::MAX as i64) as u32)
    },
    |x, y, o, g| {
        let ga = g.mul(&y.mul(&x.pow(&y.affine(1.0, -1.0)?)?)?)?;
        let gb = g.mul(&o.mul(&x.log()?)?)?;
        Ok((ga, gb))
    }
);

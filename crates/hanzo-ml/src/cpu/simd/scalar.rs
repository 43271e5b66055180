//! Portable reference kernels. Sums accumulate in 8 lanes (like the vector paths) so results
//! agree closely and long rows lose less precision than a single running sum.

pub fn sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut it = v.chunks_exact(8);
    for c in &mut it {
        for i in 0..8 {
            acc[i] += c[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for &x in it.remainder() {
        s += x;
    }
    s
}

pub fn max(v: &[f32]) -> f32 {
    v.iter().fold(
        f32::NEG_INFINITY,
        |m, &x| if x > m || x.is_nan() { x } else { m },
    )
}

pub fn axpy(alpha: f32, x: &[f32], o: &mut [f32]) {
    for (o, &x) in o.iter_mut().zip(x) {
        *o += alpha * x;
    }
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let n = a.len().min(b.len());
    let body = n / 8 * 8;
    for i in (0..body).step_by(8) {
        for j in 0..8 {
            acc[j] += a[i + j] * b[i + j];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in body..n {
        s += a[i] * b[i];
    }
    s
}

macro_rules! zip_kernel {
    ($name:ident, $op:tt) => {
        pub fn $name(a: &[f32], b: &[f32], out: &mut [f32]) {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = x $op y;
            }
        }
    };
}
zip_kernel!(add, +);
zip_kernel!(sub, -);
zip_kernel!(mul, *);
zip_kernel!(div, /);

/// `a` where `a >= b` or `a` is NaN, else `b`: a NaN on either side propagates (as `op::Maximum`).
pub fn maximum(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = if x.is_nan() || x >= y { x } else { y };
    }
}

pub fn minimum(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = if x.is_nan() || x <= y { x } else { y };
    }
}

pub fn exp(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v.exp();
    }
}

pub fn silu(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v / (1.0 + (-v).exp());
    }
}

pub fn softmax(x: &[f32], out: &mut [f32]) {
    let m = max(x);
    let mut s = 0f32;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - m).exp();
        s += *o;
    }
    let inv = 1.0 / s;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

pub fn log_softmax(x: &[f32], out: &mut [f32]) {
    let m = max(x);
    let s: f32 = x.iter().map(|&v| (v - m).exp()).sum();
    let l = m + s.ln();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v - l;
    }
}

pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = dot(x, x) / x.len() as f32;
    let r = 1.0 / (ms + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(w) {
        *o = v * r * w;
    }
}

pub fn layer_norm(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let n = x.len() as f32;
    let mean = sum(x) / n;
    let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let r = 1.0 / (var + eps).sqrt();
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        *o = (v - mean) * r * w[i] + b.map_or(0.0, |b| b[i]);
    }
}

/// One position of a half-split rotary embedding: pairs `(i, i + d/2)`, `cos`/`sin` of d/2.
pub fn rope_halfsplit(x: &[f32], cos: &[f32], sin: &[f32], out: &mut [f32]) {
    let h = x.len() / 2;
    let (xa, xb) = x.split_at(h);
    let (oa, ob) = out.split_at_mut(h);
    for i in 0..h {
        oa[i] = xa[i] * cos[i] - xb[i] * sin[i];
        ob[i] = xa[i] * sin[i] + xb[i] * cos[i];
    }
}

/// One position of an interleaved rotary embedding: pairs `(2i, 2i + 1)`.
pub fn rope_interleaved(x: &[f32], cos: &[f32], sin: &[f32], out: &mut [f32]) {
    for i in 0..x.len() / 2 {
        let (a, b) = (x[2 * i], x[2 * i + 1]);
        out[2 * i] = a * cos[i] - b * sin[i];
        out[2 * i + 1] = a * sin[i] + b * cos[i];
    }
}

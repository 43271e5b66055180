//! NEON kernels for aarch64 (4 f32 lanes); same math as `avx2.rs`. NEON is part of the
//! aarch64 baseline, but the table is still only built after runtime detection. Tails
//! (< 4 elements) go through a padded stack buffer so they use the same vector math.

use super::Kernels;
use std::arch::aarch64::*;

const W: usize = 4;
/// -ln2 split for Cody-Waite reduction: the high part has few significant bits so q * hi is
/// exact for |q| <= 150 (SLEEF's L2Uf / L2Lf).
const LN2_HI: f32 = f32::from_bits(0xbf317200);
const LN2_LO: f32 = f32::from_bits(0xb5bfbe8e);

/// The NEON table, if this CPU has NEON.
pub(super) fn kernels() -> Option<Kernels> {
    if !std::arch::is_aarch64_feature_detected!("neon") {
        return None;
    }
    // Rope is not yet specialised for this ISA.
    let rope = (
        super::scalar::rope_halfsplit,
        super::scalar::rope_interleaved,
    );
    Some(Kernels {
        name: "neon",
        sum,
        max,
        dot,
        add,
        sub,
        mul,
        div,
        maximum,
        minimum,
        exp,
        silu,
        softmax,
        log_softmax,
        rms_norm,
        layer_norm,
        rope_halfsplit: rope.0,
        rope_interleaved: rope.1,
    })
}

macro_rules! wrap {
    ($($name:ident => $imp:ident ($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {$(
        fn $name($($a: $t),*) $(-> $r)? {
            // SAFETY: only reachable via `kernels()`, which verified neon is present.
            unsafe { $imp($($a),*) }
        }
    )*};
}

wrap! {
    sum => sum_v(v: &[f32]) -> f32;
    max => max_v(v: &[f32]) -> f32;
    dot => dot_v(a: &[f32], b: &[f32]) -> f32;
    add => add_v(a: &[f32], b: &[f32], o: &mut [f32]);
    sub => sub_v(a: &[f32], b: &[f32], o: &mut [f32]);
    mul => mul_v(a: &[f32], b: &[f32], o: &mut [f32]);
    div => div_v(a: &[f32], b: &[f32], o: &mut [f32]);
    maximum => maximum_v(a: &[f32], b: &[f32], o: &mut [f32]);
    minimum => minimum_v(a: &[f32], b: &[f32], o: &mut [f32]);
    exp => exp_s(x: &[f32], o: &mut [f32]);
    silu => silu_s(x: &[f32], o: &mut [f32]);
    softmax => softmax_v(x: &[f32], o: &mut [f32]);
    log_softmax => log_softmax_v(x: &[f32], o: &mut [f32]);
    rms_norm => rms_norm_v(x: &[f32], w: &[f32], eps: f32, o: &mut [f32]);
    layer_norm => layer_norm_v(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, o: &mut [f32]);
}

#[inline]
#[target_feature(enable = "neon")]
fn ld(c: &[f32]) -> float32x4_t {
    let c = &c[..W];
    // SAFETY: `c` has exactly 4 elements, so the 16-byte read is in bounds.
    unsafe { vld1q_f32(c.as_ptr()) }
}

#[inline]
#[target_feature(enable = "neon")]
fn st(c: &mut [f32], v: float32x4_t) {
    let c = &mut c[..W];
    // SAFETY: `c` has exactly 4 elements, so the 16-byte write is in bounds.
    unsafe { vst1q_f32(c.as_mut_ptr(), v) }
}

#[inline]
#[target_feature(enable = "neon")]
fn ld_tail(c: &[f32], fill: f32) -> float32x4_t {
    let mut buf = [fill; W];
    buf[..c.len()].copy_from_slice(c);
    ld(&buf)
}

/// Lanes of `v` as an array.
#[inline]
#[target_feature(enable = "neon")]
fn lanes(v: float32x4_t) -> [f32; W] {
    let mut b = [0f32; W];
    st(&mut b, v);
    b
}

/// exp(x); see `avx2::exp_v`. `vminq`/`vmaxq` propagate NaN.
#[inline]
#[target_feature(enable = "neon")]
fn exp_v(x: float32x4_t) -> float32x4_t {
    let x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0)), vdupq_n_f32(89.0));
    let q = vcvtnq_s32_f32(vmulq_f32(x, vdupq_n_f32(std::f32::consts::LOG2_E)));
    let qf = vcvtq_f32_s32(q);
    let s = vfmaq_f32(x, qf, vdupq_n_f32(LN2_HI));
    let s = vfmaq_f32(s, qf, vdupq_n_f32(LN2_LO));
    let mut u = vdupq_n_f32(0.000_198_527_62);
    u = vfmaq_f32(vdupq_n_f32(0.001_393_043_6), u, s);
    u = vfmaq_f32(vdupq_n_f32(0.008_333_361), u, s);
    u = vfmaq_f32(vdupq_n_f32(0.041_666_485), u, s);
    u = vfmaq_f32(vdupq_n_f32(0.166_666_67), u, s);
    u = vfmaq_f32(vdupq_n_f32(0.5), u, s);
    u = vaddq_f32(vdupq_n_f32(1.0), vfmaq_f32(s, vmulq_f32(s, s), u));
    let q1 = vshrq_n_s32::<1>(q);
    let q2 = vsubq_s32(q, q1);
    let bias = vdupq_n_s32(127);
    let p1 = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(q1, bias)));
    let p2 = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(q2, bias)));
    vmulq_f32(vmulq_f32(u, p1), p2)
}

#[inline]
#[target_feature(enable = "neon")]
fn map1(x: &[f32], o: &mut [f32], f: impl Fn(float32x4_t) -> float32x4_t) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    let mut ox = o.chunks_exact_mut(W);
    let mut ix = x.chunks_exact(W);
    for (o, x) in (&mut ox).zip(&mut ix) {
        st(o, f(ld(x)));
    }
    let t = ix.remainder();
    let o = ox.into_remainder();
    o.copy_from_slice(&lanes(f(ld_tail(t, 0.0)))[..t.len()]);
}

#[inline]
#[target_feature(enable = "neon")]
fn map2(a: &[f32], b: &[f32], o: &mut [f32], f: impl Fn(float32x4_t, float32x4_t) -> float32x4_t) {
    let n = a.len().min(b.len()).min(o.len());
    let (a, b, o) = (&a[..n], &b[..n], &mut o[..n]);
    let mut oc = o.chunks_exact_mut(W);
    let mut ac = a.chunks_exact(W);
    let mut bc = b.chunks_exact(W);
    for ((o, a), b) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        st(o, f(ld(a), ld(b)));
    }
    let (ta, tb) = (ac.remainder(), bc.remainder());
    let r = lanes(f(ld_tail(ta, 1.0), ld_tail(tb, 1.0)));
    oc.into_remainder().copy_from_slice(&r[..ta.len()]);
}

/// Fold `f(acc, chunk)` over 4-lane chunks (the tail padded with `fill`) into two
/// accumulators, returned merged with `merge`.
#[inline]
#[target_feature(enable = "neon")]
fn fold(
    v: &[f32],
    fill: f32,
    init: float32x4_t,
    f: impl Fn(float32x4_t, float32x4_t) -> float32x4_t,
    merge: impl Fn(float32x4_t, float32x4_t) -> float32x4_t,
) -> float32x4_t {
    let mut acc = [init; 2];
    let mut it = v.chunks_exact(2 * W);
    for c in &mut it {
        acc[0] = f(acc[0], ld(c));
        acc[1] = f(acc[1], ld(&c[W..]));
    }
    let mut it4 = it.remainder().chunks_exact(W);
    for c in &mut it4 {
        acc[0] = f(acc[0], ld(c));
    }
    acc[1] = f(acc[1], ld_tail(it4.remainder(), fill));
    merge(acc[0], acc[1])
}

#[target_feature(enable = "neon")]
fn sum_v(v: &[f32]) -> f32 {
    let add = |a, x| vaddq_f32(a, x);
    vaddvq_f32(fold(v, 0.0, vdupq_n_f32(0.0), add, add))
}

#[target_feature(enable = "neon")]
fn max_v(v: &[f32]) -> f32 {
    // vmaxq propagates NaN, so the result is NaN iff an element is.
    let max = |a, x| vmaxq_f32(a, x);
    let ninf = f32::NEG_INFINITY;
    vmaxvq_f32(fold(v, ninf, vdupq_n_f32(ninf), max, max))
}

#[target_feature(enable = "neon")]
fn dot_v(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = vdupq_n_f32(0.0);
    let mut ia = a.chunks_exact(W);
    let mut ib = b.chunks_exact(W);
    for (x, y) in (&mut ia).zip(&mut ib) {
        acc = vfmaq_f32(acc, ld(x), ld(y));
    }
    acc = vfmaq_f32(
        acc,
        ld_tail(ia.remainder(), 0.0),
        ld_tail(ib.remainder(), 0.0),
    );
    vaddvq_f32(acc)
}

macro_rules! binop {
    ($name:ident, $intr:ident) => {
        #[target_feature(enable = "neon")]
        fn $name(a: &[f32], b: &[f32], o: &mut [f32]) {
            map2(a, b, o, |x, y| $intr(x, y))
        }
    };
}
binop!(add_v, vaddq_f32);
binop!(sub_v, vsubq_f32);
binop!(mul_v, vmulq_f32);
binop!(div_v, vdivq_f32);

/// `a` where a >= b or a is NaN, else `b`.
#[target_feature(enable = "neon")]
fn maximum_v(a: &[f32], b: &[f32], o: &mut [f32]) {
    map2(a, b, o, |x, y| {
        let m = vorrq_u32(vcgeq_f32(x, y), vmvnq_u32(vceqq_f32(x, x)));
        vbslq_f32(m, x, y)
    })
}

#[target_feature(enable = "neon")]
fn minimum_v(a: &[f32], b: &[f32], o: &mut [f32]) {
    map2(a, b, o, |x, y| {
        let m = vorrq_u32(vcleq_f32(x, y), vmvnq_u32(vceqq_f32(x, x)));
        vbslq_f32(m, x, y)
    })
}

#[target_feature(enable = "neon")]
fn exp_s(x: &[f32], o: &mut [f32]) {
    map1(x, o, |v| exp_v(v))
}

#[target_feature(enable = "neon")]
fn silu_s(x: &[f32], o: &mut [f32]) {
    map1(x, o, |v| {
        vdivq_f32(v, vaddq_f32(vdupq_n_f32(1.0), exp_v(vnegq_f32(v))))
    })
}

#[target_feature(enable = "neon")]
fn softmax_v(x: &[f32], o: &mut [f32]) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    let mv = vdupq_n_f32(max_v(x));
    map1(x, o, |v| exp_v(vsubq_f32(v, mv)));
    let inv = vdupq_n_f32(1.0 / sum_v(o));
    let mut it = o.chunks_exact_mut(W);
    for c in &mut it {
        let v = vmulq_f32(ld(c), inv);
        st(c, v);
    }
    let inv = vgetq_lane_f32::<0>(inv);
    for v in it.into_remainder() {
        *v *= inv;
    }
}

#[target_feature(enable = "neon")]
fn log_softmax_v(x: &[f32], o: &mut [f32]) {
    let m = max_v(x);
    let mv = vdupq_n_f32(m);
    let mut s = 0f32;
    for c in x.chunks(256) {
        let mut e = [0f32; 256];
        map1(c, &mut e, |v| exp_v(vsubq_f32(v, mv)));
        s += sum_v(&e[..c.len()]);
    }
    let lv = vdupq_n_f32(m + s.ln());
    map1(x, o, |v| vsubq_f32(v, lv))
}

#[target_feature(enable = "neon")]
fn rms_norm_v(x: &[f32], w: &[f32], eps: f32, o: &mut [f32]) {
    let ms = dot_v(x, x) / x.len() as f32;
    let r = vdupq_n_f32(1.0 / (ms + eps).sqrt());
    map2(x, w, o, |v, w| vmulq_f32(vmulq_f32(v, r), w))
}

#[target_feature(enable = "neon")]
fn layer_norm_v(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, o: &mut [f32]) {
    let n = x.len() as f32;
    let mean = sum_v(x) / n;
    let mv = vdupq_n_f32(mean);
    // Padding with `mean` contributes 0.
    let sq = |a, v| {
        let d = vsubq_f32(v, mv);
        vfmaq_f32(a, d, d)
    };
    let var = vaddvq_f32(fold(x, mean, vdupq_n_f32(0.0), sq, |a, b| vaddq_f32(a, b))) / n;
    let r = vdupq_n_f32(1.0 / (var + eps).sqrt());
    map2(x, w, o, |v, w| vmulq_f32(vmulq_f32(vsubq_f32(v, mv), r), w));
    if let Some(b) = b {
        for (o, b) in o.iter_mut().zip(b) {
            *o += b;
        }
    }
}

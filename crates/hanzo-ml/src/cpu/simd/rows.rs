//! The row kernels, written once over `F32Vector` and instantiated per instruction set by
//! `row_kernels!`. Every function is `#[inline(always)]` so that it compiles inside the
//! instruction set's `#[target_feature]` entry point, intrinsics included. Tails (fewer
//! elements than a vector) go through a padded stack buffer, so they use the same vector math
//! as the body.

use super::vector::{F32Vector, MAX_LANES};

/// -ln2 split for Cody-Waite reduction: the high part has few significant bits so q * hi is
/// exact for |q| <= 150 (SLEEF's L2Uf / L2Lf).
const LN2_HI: f32 = f32::from_bits(0xbf317200);
const LN2_LO: f32 = f32::from_bits(0xb5bfbe8e);

/// The first `c.len() < LANES` lanes from `c`, the rest `fill`.
#[inline(always)]
fn load_tail<S: F32Vector>(s: S, c: &[f32], fill: f32) -> S::V {
    let mut buf = [fill; MAX_LANES];
    buf[..c.len()].copy_from_slice(c);
    s.load(&buf)
}

/// The first `c.len() < LANES` lanes of `v` into `c`.
#[inline(always)]
fn store_tail<S: F32Vector>(s: S, c: &mut [f32], v: S::V) {
    let mut buf = [0f32; MAX_LANES];
    s.store(&mut buf, v);
    let n = c.len();
    c.copy_from_slice(&buf[..n]);
}

// ---- exp ----------------------------------------------------------------------------------

/// exp(x), ~1 ulp (SLEEF's expf polynomial). x = q ln2 + r with |r| <= ln2/2 (Cody-Waite
/// split of ln2); 2^q is applied as two factors so results in the subnormal range round once.
/// Inputs are clamped to [-104, 89]: below, exp rounds to 0; above, the scaling overflows to
/// inf. NaN passes through the clamp and the polynomial.
#[inline(always)]
fn exp_v<S: F32Vector>(s: S, x: S::V) -> S::V {
    let x = s.min(s.splat(89.0), s.max(s.splat(-104.0), x));
    let q = s.round(s.mul(x, s.splat(std::f32::consts::LOG2_E)));
    let r = s.fma(q, s.splat(LN2_HI), x);
    let r = s.fma(q, s.splat(LN2_LO), r);
    let mut u = s.splat(0.000_198_527_62);
    for c in [
        0.001_393_043_6,
        0.008_333_361,
        0.041_666_485,
        0.166_666_67,
        0.5,
    ] {
        u = s.fma(u, r, s.splat(c));
    }
    let u = s.add(s.splat(1.0), s.fma(s.mul(r, r), u, r));
    // q = q1 + q2 with q1 = floor(q / 2): each factor stays a normal power of two.
    let q1 = s.floor(s.mul(q, s.splat(0.5)));
    let q2 = s.sub(q, q1);
    s.mul(s.mul(u, s.pow2i(q1)), s.pow2i(q2))
}

#[inline(always)]
fn silu_v<S: F32Vector>(s: S, x: S::V) -> S::V {
    let e = exp_v(s, s.sub(s.splat(0.0), x));
    s.div(x, s.add(s.splat(1.0), e))
}

// ---- reductions ---------------------------------------------------------------------------

/// Folds `$f(acc, chunk)` over `$v` with four accumulators (so four independent chains are in
/// flight), the tail padded with `$fill`; the accumulators are merged by `$merge`. A macro
/// rather than a function taking closures: a closure is a function of its own, compiled
/// without the caller's target features, so the intrinsics inside it would not inline.
macro_rules! fold {
    ($s:expr, $v:expr, $fill:expr, $init:expr, |$a:ident, $x:ident| $f:expr, |$l:ident, $r:ident| $merge:expr) => {{
        let (s, v) = ($s, $v);
        let w = S::LANES;
        let mut acc = [$init; 4];
        let mut it = v.chunks_exact(4 * w);
        for c in &mut it {
            for (k, acc) in acc.iter_mut().enumerate() {
                let ($a, $x) = (*acc, s.load(&c[k * w..]));
                *acc = $f;
            }
        }
        let mut it1 = it.remainder().chunks_exact(w);
        for c in &mut it1 {
            let ($a, $x) = (acc[0], s.load(c));
            acc[0] = $f;
        }
        let ($a, $x) = (acc[1], load_tail(s, it1.remainder(), $fill));
        acc[1] = $f;
        let ($l, $r) = (acc[0], acc[1]);
        let low = $merge;
        let ($l, $r) = (acc[2], acc[3]);
        let high = $merge;
        let ($l, $r) = (low, high);
        $merge
    }};
}

#[inline(always)]
pub(super) fn sum<S: F32Vector>(s: S, v: &[f32]) -> f32 {
    s.hsum(fold!(
        s,
        v,
        0.0,
        s.splat(0.0),
        |a, x| s.add(a, x),
        |l, r| s.add(l, r)
    ))
}

/// Max; NaN if any element is NaN (tracked apart from the lane maxima, whose NaN handling
/// differs between instruction sets); -inf if empty.
#[inline(always)]
pub(super) fn max<S: F32Vector>(s: S, v: &[f32]) -> f32 {
    let w = S::LANES;
    let ninf = s.splat(f32::NEG_INFINITY);
    let mut acc = [ninf; 4];
    let mut nan = s.is_nan(s.splat(0.0));
    let mut it = v.chunks_exact(4 * w);
    for c in &mut it {
        for (k, acc) in acc.iter_mut().enumerate() {
            let x = s.load(&c[k * w..]);
            *acc = s.max(*acc, x);
            nan = s.or(nan, s.is_nan(x));
        }
    }
    let mut it1 = it.remainder().chunks_exact(w);
    for c in &mut it1 {
        let x = s.load(c);
        acc[0] = s.max(acc[0], x);
        nan = s.or(nan, s.is_nan(x));
    }
    let x = load_tail(s, it1.remainder(), f32::NEG_INFINITY);
    acc[1] = s.max(acc[1], x);
    nan = s.or(nan, s.is_nan(x));
    if s.any(nan) {
        return f32::NAN;
    }
    s.hmax(s.max(s.max(acc[0], acc[1]), s.max(acc[2], acc[3])))
}

#[inline(always)]
pub(super) fn dot<S: F32Vector>(s: S, a: &[f32], b: &[f32]) -> f32 {
    let w = S::LANES;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [s.splat(0.0); 4];
    let mut ia = a.chunks_exact(4 * w);
    let mut ib = b.chunks_exact(4 * w);
    for (x, y) in (&mut ia).zip(&mut ib) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = s.fma(s.load(&x[k * w..]), s.load(&y[k * w..]), *acc);
        }
    }
    let mut ia = ia.remainder().chunks_exact(w);
    let mut ib = ib.remainder().chunks_exact(w);
    for (x, y) in (&mut ia).zip(&mut ib) {
        acc[0] = s.fma(s.load(x), s.load(y), acc[0]);
    }
    let (x, y) = (ia.remainder(), ib.remainder());
    acc[1] = s.fma(load_tail(s, x, 0.0), load_tail(s, y, 0.0), acc[1]);
    s.hsum(s.add(s.add(acc[0], acc[1]), s.add(acc[2], acc[3])))
}

/// `o += alpha · x` over their common length.
#[inline(always)]
pub(super) fn axpy<S: F32Vector>(s: S, alpha: f32, x: &[f32], o: &mut [f32]) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    let a = s.splat(alpha);
    let mut oc = o.chunks_exact_mut(S::LANES);
    let mut xc = x.chunks_exact(S::LANES);
    for (o, x) in (&mut oc).zip(&mut xc) {
        let v = s.fma(a, s.load(x), s.load(o));
        s.store(o, v);
    }
    for (o, &x) in oc.into_remainder().iter_mut().zip(xc.remainder()) {
        *o += alpha * x;
    }
}

/// Sum of (x - c)^2 (the tail is padded with `c`, which adds 0).
#[inline(always)]
fn sq_dev<S: F32Vector>(s: S, x: &[f32], c: f32) -> f32 {
    let cv = s.splat(c);
    let sq = fold!(
        s,
        x,
        c,
        s.splat(0.0),
        |a, v| {
            let d = s.sub(v, cv);
            s.fma(d, d, a)
        },
        |l, r| s.add(l, r)
    );
    s.hsum(sq)
}

// ---- element-wise -------------------------------------------------------------------------

/// `$o[i] = $f($x[i])` over the common length (a macro for the reason `fold!` is one).
macro_rules! map1 {
    ($s:expr, $x:expr, $o:expr, |$v:ident| $f:expr) => {{
        let (s, x, o) = ($s, $x, $o);
        let n = x.len().min(o.len());
        let (x, o) = (&x[..n], &mut o[..n]);
        let mut oc = o.chunks_exact_mut(S::LANES);
        let mut xc = x.chunks_exact(S::LANES);
        for (o, x) in (&mut oc).zip(&mut xc) {
            let $v = s.load(x);
            s.store(o, $f);
        }
        let t = xc.remainder();
        if !t.is_empty() {
            let $v = load_tail(s, t, 0.0);
            store_tail(s, oc.into_remainder(), $f);
        }
    }};
}

/// `$o[i] = $f($a[i], $b[i])` over the common length.
macro_rules! map2 {
    ($s:expr, $a:expr, $b:expr, $o:expr, |$x:ident, $y:ident| $f:expr) => {{
        let (s, a, b, o) = ($s, $a, $b, $o);
        let n = a.len().min(b.len()).min(o.len());
        let (a, b, o) = (&a[..n], &b[..n], &mut o[..n]);
        let mut oc = o.chunks_exact_mut(S::LANES);
        let mut ac = a.chunks_exact(S::LANES);
        let mut bc = b.chunks_exact(S::LANES);
        for ((o, a), b) in (&mut oc).zip(&mut ac).zip(&mut bc) {
            let ($x, $y) = (s.load(a), s.load(b));
            s.store(o, $f);
        }
        let (ta, tb) = (ac.remainder(), bc.remainder());
        if !ta.is_empty() {
            // Pad with 1 so a padded division stays finite (the lanes are discarded anyway).
            let ($x, $y) = (load_tail(s, ta, 1.0), load_tail(s, tb, 1.0));
            store_tail(s, oc.into_remainder(), $f);
        }
    }};
}

/// `o[i] = a[i] op b[i]` for the vector arithmetic ops.
macro_rules! arithmetic {
    ($($op:ident),*) => {$(
        #[inline(always)]
        pub(super) fn $op<S: F32Vector>(s: S, a: &[f32], b: &[f32], o: &mut [f32]) {
            map2!(s, a, b, o, |x, y| s.$op(x, y))
        }
    )*};
}
arithmetic!(add, sub, mul, div);

/// `a` where a >= b or a is NaN, else `b` (so a NaN on either side propagates).
#[inline(always)]
pub(super) fn maximum<S: F32Vector>(s: S, a: &[f32], b: &[f32], o: &mut [f32]) {
    map2!(s, a, b, o, |x, y| s.select(
        s.or(s.ge(x, y), s.is_nan(x)),
        x,
        y
    ))
}

#[inline(always)]
pub(super) fn minimum<S: F32Vector>(s: S, a: &[f32], b: &[f32], o: &mut [f32]) {
    map2!(s, a, b, o, |x, y| s.select(
        s.or(s.le(x, y), s.is_nan(x)),
        x,
        y
    ))
}

#[inline(always)]
pub(super) fn exp<S: F32Vector>(s: S, x: &[f32], o: &mut [f32]) {
    map1!(s, x, o, |v| exp_v(s, v))
}

#[inline(always)]
pub(super) fn silu<S: F32Vector>(s: S, x: &[f32], o: &mut [f32]) {
    map1!(s, x, o, |v| silu_v(s, v))
}

// ---- rows ---------------------------------------------------------------------------------

/// o = exp(x - m), returning the sum of o.
#[inline(always)]
fn exp_shift_store_sum<S: F32Vector>(s: S, x: &[f32], m: f32, o: &mut [f32]) -> f32 {
    let mv = s.splat(m);
    let mut acc = [s.splat(0.0); 2];
    let w = S::LANES;
    let mut oc = o.chunks_exact_mut(2 * w);
    let mut xc = x.chunks_exact(2 * w);
    for (o, x) in (&mut oc).zip(&mut xc) {
        for (k, acc) in acc.iter_mut().enumerate() {
            let e = exp_v(s, s.sub(s.load(&x[k * w..]), mv));
            s.store(&mut o[k * w..], e);
            *acc = s.add(*acc, e);
        }
    }
    let mut oc = oc.into_remainder().chunks_exact_mut(w);
    let mut xc = xc.remainder().chunks_exact(w);
    for (o, x) in (&mut oc).zip(&mut xc) {
        let e = exp_v(s, s.sub(s.load(x), mv));
        s.store(o, e);
        acc[0] = s.add(acc[0], e);
    }
    let mut total = s.hsum(s.add(acc[0], acc[1]));
    let t = xc.remainder();
    if !t.is_empty() {
        let o = oc.into_remainder();
        store_tail(s, o, exp_v(s, s.sub(load_tail(s, t, 0.0), mv)));
        total += o.iter().sum::<f32>();
    }
    total
}

/// Sum of exp(x - m).
#[inline(always)]
fn exp_shift_sum<S: F32Vector>(s: S, x: &[f32], m: f32) -> f32 {
    let mv = s.splat(m);
    let w = S::LANES;
    let mut acc = [s.splat(0.0); 2];
    let mut it = x.chunks_exact(2 * w);
    for c in &mut it {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = s.add(*acc, exp_v(s, s.sub(s.load(&c[k * w..]), mv)));
        }
    }
    let mut it1 = it.remainder().chunks_exact(w);
    for c in &mut it1 {
        acc[0] = s.add(acc[0], exp_v(s, s.sub(s.load(c), mv)));
    }
    let mut total = s.hsum(s.add(acc[0], acc[1]));
    let t = it1.remainder();
    if !t.is_empty() {
        let mut e = [0f32; MAX_LANES];
        store_tail(
            s,
            &mut e[..t.len()],
            exp_v(s, s.sub(load_tail(s, t, 0.0), mv)),
        );
        total += e[..t.len()].iter().sum::<f32>();
    }
    total
}

#[inline(always)]
fn scale<S: F32Vector>(s: S, o: &mut [f32], k: f32) {
    let kv = s.splat(k);
    let mut it = o.chunks_exact_mut(S::LANES);
    for c in &mut it {
        let v = s.mul(s.load(c), kv);
        s.store(c, v);
    }
    for v in it.into_remainder() {
        *v *= k;
    }
}

#[inline(always)]
pub(super) fn softmax<S: F32Vector>(s: S, x: &[f32], o: &mut [f32]) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    let m = max(s, x);
    let total = exp_shift_store_sum(s, x, m, o);
    scale(s, o, 1.0 / total);
}

#[inline(always)]
pub(super) fn log_softmax<S: F32Vector>(s: S, x: &[f32], o: &mut [f32]) {
    let m = max(s, x);
    let l = s.splat(m + exp_shift_sum(s, x, m).ln());
    map1!(s, x, o, |v| s.sub(v, l))
}

#[inline(always)]
pub(super) fn rms_norm<S: F32Vector>(s: S, x: &[f32], w: &[f32], eps: f32, o: &mut [f32]) {
    let ms = dot(s, x, x) / x.len() as f32;
    let r = s.splat(1.0 / (ms + eps).sqrt());
    map2!(s, x, w, o, |v, w| s.mul(s.mul(v, r), w))
}

#[inline(always)]
pub(super) fn layer_norm<S: F32Vector>(
    s: S,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
    o: &mut [f32],
) {
    let n = x.len() as f32;
    let mean = sum(s, x) / n;
    let var = sq_dev(s, x, mean) / n;
    let r = s.splat(1.0 / (var + eps).sqrt());
    let mv = s.splat(mean);
    map2!(s, x, w, &mut *o, |v, w| s.mul(s.mul(s.sub(v, mv), r), w));
    if let Some(b) = b {
        let len = o.len().min(b.len());
        let mut oc = o[..len].chunks_exact_mut(S::LANES);
        let mut bc = b[..len].chunks_exact(S::LANES);
        for (o, b) in (&mut oc).zip(&mut bc) {
            let v = s.add(s.load(o), s.load(b));
            s.store(o, v);
        }
        for (o, b) in oc.into_remainder().iter_mut().zip(bc.remainder()) {
            *o += b;
        }
    }
}

// ---- rotary embedding ---------------------------------------------------------------------

/// Half-split pairs `(i, i + d/2)`: both halves are contiguous, so a' = a c - b s and
/// b' = a s + b c are two fused multiply-adds per vector of pairs.
#[inline(always)]
pub(super) fn rope_halfsplit<S: F32Vector>(
    s: S,
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    o: &mut [f32],
) {
    let h = x.len() / 2;
    let (xa, xb) = x.split_at(h);
    let (oa, ob) = o.split_at_mut(h);
    let body = h / S::LANES * S::LANES;
    for i in (0..body).step_by(S::LANES) {
        let (a, b) = (s.load(&xa[i..]), s.load(&xb[i..]));
        let (c, sn) = (s.load(&cos[i..]), s.load(&sin[i..]));
        let bs = s.mul(b, sn);
        s.store(&mut oa[i..], s.fma(a, c, s.sub(s.splat(0.0), bs)));
        s.store(&mut ob[i..], s.fma(a, sn, s.mul(b, c)));
    }
    for i in body..h {
        oa[i] = xa[i] * cos[i] - xb[i] * sin[i];
        ob[i] = xa[i] * sin[i] + xb[i] * cos[i];
    }
}

/// Interleaved pairs `(2i, 2i + 1)`: with cos/sin duplicated per pair and the pair-swapped
/// vector, out = x * cos + swap(x) * (sin * [-1, 1, ...]).
#[inline(always)]
pub(super) fn rope_interleaved<S: F32Vector>(
    s: S,
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    o: &mut [f32],
) {
    let h = x.len() / 2;
    let pairs = S::LANES / 2;
    let body = h / pairs * pairs;
    let signs: [f32; MAX_LANES] = std::array::from_fn(|i| if i % 2 == 0 { -1.0 } else { 1.0 });
    let sign = s.load(&signs);
    for p in (0..body).step_by(pairs) {
        let v = s.load(&x[2 * p..]);
        let c = s.load_pairs(&cos[p..]);
        let sn = s.mul(s.load_pairs(&sin[p..]), sign);
        s.store(&mut o[2 * p..], s.fma(s.swap_pairs(v), sn, s.mul(v, c)));
    }
    // The last pairs, fewer than a vector's worth, are themselves an interleaved rotation.
    let (x, o) = (&x[2 * body..2 * h], &mut o[2 * body..]);
    super::scalar::rope_interleaved(x, &cos[body..h], &sin[body..h], o);
}

//! AVX-512F kernels (16 f32 lanes); same structure and math as `avx2.rs`. Every kernel is a
//! `#[target_feature]` fn; the safe wrappers below are private and only reachable through the
//! table returned by `kernels()`, which checks the CPU first. Tails (< 16 elements) go
//! through a padded stack buffer so they use the same vector math as the body.

use super::Kernels;
use std::arch::x86_64::*;

const W: usize = 16;
/// -ln2 split for Cody-Waite reduction: the high part has few significant bits so q * hi is
/// exact for |q| <= 150 (SLEEF's L2Uf / L2Lf).
const LN2_HI: f32 = f32::from_bits(0xbf317200);
const LN2_LO: f32 = f32::from_bits(0xb5bfbe8e);

/// The AVX-512 table, if this CPU has AVX-512F.
pub(super) fn kernels() -> Option<Kernels> {
    if !is_x86_feature_detected!("avx512f") {
        return None;
    }
    // Rope is not yet specialised for this ISA.
    let rope = super::avx2::rope_kernels().unwrap_or((
        super::scalar::rope_halfsplit,
        super::scalar::rope_interleaved,
    ));
    Some(Kernels {
        name: "avx512",
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

/// Safe wrappers. Sound because they are private to this module and only handed out by
/// `kernels()` after runtime feature detection.
macro_rules! wrap {
    ($($name:ident => $imp:ident ($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {$(
        fn $name($($a: $t),*) $(-> $r)? {
            // SAFETY: only reachable via `kernels()`, which verified avx512f is present.
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

// ---- loads, stores, horizontal ops -------------------------------------------------------

/// Load the first 16 elements of `c` (panics if shorter; the slice index is elided when the
/// caller iterates `chunks_exact(16)`).
#[inline]
#[target_feature(enable = "avx512f")]
fn ld(c: &[f32]) -> __m512 {
    let c = &c[..W];
    // SAFETY: `c` has exactly 16 elements, so the unaligned 64-byte read is in bounds.
    unsafe { _mm512_loadu_ps(c.as_ptr()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn st(c: &mut [f32], v: __m512) {
    let c = &mut c[..W];
    // SAFETY: `c` has exactly 16 elements, so the unaligned 64-byte write is in bounds.
    unsafe { _mm512_storeu_ps(c.as_mut_ptr(), v) }
}

/// Load a tail of fewer than 16 elements, filling the missing lanes with `fill`.
#[inline]
#[target_feature(enable = "avx512f")]
fn ld_tail(c: &[f32], fill: f32) -> __m512 {
    let mut buf = [fill; W];
    buf[..c.len()].copy_from_slice(c);
    ld(&buf)
}

#[inline]
#[target_feature(enable = "avx512f")]
fn st_tail(c: &mut [f32], v: __m512) {
    let mut buf = [0f32; W];
    st(&mut buf, v);
    let n = c.len();
    c.copy_from_slice(&buf[..n]);
}

#[inline]
#[target_feature(enable = "avx512f")]
fn hsum(v: __m512) -> f32 {
    _mm512_reduce_add_ps(v)
}

#[inline]
#[target_feature(enable = "avx512f")]
fn hmax(v: __m512) -> f32 {
    _mm512_reduce_max_ps(v)
}

// ---- exp ----------------------------------------------------------------------------------

/// exp(x), ~1 ulp (SLEEF's expf polynomial). x = q ln2 + s with |s| <= ln2/2 (Cody-Waite
/// split of ln2); 2^q is applied as two factors so results in the subnormal range round once.
/// Inputs are clamped to [-104, 89]: below, exp rounds to 0; above, the scaling overflows to
/// inf. NaN passes through the clamp (min/max return the second operand when it is NaN).
#[inline]
#[target_feature(enable = "avx512f")]
fn exp_v(x: __m512) -> __m512 {
    let x = _mm512_max_ps(_mm512_set1_ps(-104.0), x);
    let x = _mm512_min_ps(_mm512_set1_ps(89.0), x);
    let q = _mm512_cvtps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)));
    let qf = _mm512_cvtepi32_ps(q);
    let s = _mm512_fmadd_ps(qf, _mm512_set1_ps(LN2_HI), x);
    let s = _mm512_fmadd_ps(qf, _mm512_set1_ps(LN2_LO), s);
    let mut u = _mm512_set1_ps(0.000_198_527_62);
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.001_393_043_6));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.008_333_361));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.041_666_485));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.166_666_67));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.5));
    u = _mm512_add_ps(
        _mm512_set1_ps(1.0),
        _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s),
    );
    let q1 = _mm512_srai_epi32::<1>(q);
    let q2 = _mm512_sub_epi32(q, q1);
    let bias = _mm512_set1_epi32(127);
    let p1 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(q1, bias)));
    let p2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(q2, bias)));
    _mm512_mul_ps(_mm512_mul_ps(u, p1), p2)
}

#[inline]
#[target_feature(enable = "avx512f")]
fn silu_v(x: __m512) -> __m512 {
    let e = exp_v(_mm512_sub_ps(_mm512_setzero_ps(), x));
    _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

// ---- reductions ---------------------------------------------------------------------------

#[target_feature(enable = "avx512f")]
fn sum_v(v: &[f32]) -> f32 {
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut it = v.chunks_exact(4 * W);
    for c in &mut it {
        for (k, a) in acc.iter_mut().enumerate() {
            *a = _mm512_add_ps(*a, ld(&c[k * W..]));
        }
    }
    let mut it8 = it.remainder().chunks_exact(W);
    for c in &mut it8 {
        acc[0] = _mm512_add_ps(acc[0], ld(c));
    }
    acc[1] = _mm512_add_ps(acc[1], ld_tail(it8.remainder(), 0.0));
    hsum(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ))
}

/// Max; NaN if any element is NaN (tracked separately: `max_ps` drops NaNs); -inf if empty.
#[target_feature(enable = "avx512f")]
fn max_v(v: &[f32]) -> f32 {
    let mut acc = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
    let mut nan: __mmask16 = 0;
    let mut it = v.chunks_exact(4 * W);
    for c in &mut it {
        for (k, a) in acc.iter_mut().enumerate() {
            let x = ld(&c[k * W..]);
            *a = _mm512_max_ps(*a, x);
            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        }
    }
    let mut it8 = it.remainder().chunks_exact(W);
    for c in &mut it8 {
        let x = ld(c);
        acc[0] = _mm512_max_ps(acc[0], x);
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
    }
    let x = ld_tail(it8.remainder(), f32::NEG_INFINITY);
    acc[1] = _mm512_max_ps(acc[1], x);
    nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
    if nan != 0 {
        return f32::NAN;
    }
    hmax(_mm512_max_ps(
        _mm512_max_ps(acc[0], acc[1]),
        _mm512_max_ps(acc[2], acc[3]),
    ))
}

#[target_feature(enable = "avx512f")]
fn dot_v(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut ia = a.chunks_exact(4 * W);
    let mut ib = b.chunks_exact(4 * W);
    for (x, y) in (&mut ia).zip(&mut ib) {
        for (k, s) in acc.iter_mut().enumerate() {
            *s = _mm512_fmadd_ps(ld(&x[k * W..]), ld(&y[k * W..]), *s);
        }
    }
    let mut ia = ia.remainder().chunks_exact(W);
    let mut ib = ib.remainder().chunks_exact(W);
    for (x, y) in (&mut ia).zip(&mut ib) {
        acc[0] = _mm512_fmadd_ps(ld(x), ld(y), acc[0]);
    }
    acc[1] = _mm512_fmadd_ps(
        ld_tail(ia.remainder(), 0.0),
        ld_tail(ib.remainder(), 0.0),
        acc[1],
    );
    hsum(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ))
}

/// Sum of (x - c)^2.
#[inline]
#[target_feature(enable = "avx512f")]
fn sq_dev_v(x: &[f32], c: f32) -> f32 {
    let cv = _mm512_set1_ps(c);
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut it = x.chunks_exact(2 * W);
    for ch in &mut it {
        for (k, a) in acc.iter_mut().enumerate() {
            let d = _mm512_sub_ps(ld(&ch[k * W..]), cv);
            *a = _mm512_fmadd_ps(d, d, *a);
        }
    }
    let mut it8 = it.remainder().chunks_exact(W);
    for ch in &mut it8 {
        let d = _mm512_sub_ps(ld(ch), cv);
        acc[0] = _mm512_fmadd_ps(d, d, acc[0]);
    }
    // Padding with `c` contributes (c - c)^2 = 0.
    let d = _mm512_sub_ps(ld_tail(it8.remainder(), c), cv);
    acc[1] = _mm512_fmadd_ps(d, d, acc[1]);
    hsum(_mm512_add_ps(acc[0], acc[1]))
}

// ---- element-wise -------------------------------------------------------------------------

/// out[i] = f(x[i]) over the common length.
#[inline]
#[target_feature(enable = "avx512f")]
fn map1(x: &[f32], o: &mut [f32], f: impl Fn(__m512) -> __m512) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    let mut ox = o.chunks_exact_mut(W);
    let mut ix = x.chunks_exact(W);
    for (o, x) in (&mut ox).zip(&mut ix) {
        st(o, f(ld(x)));
    }
    let t = ix.remainder();
    if !t.is_empty() {
        st_tail(ox.into_remainder(), f(ld_tail(t, 0.0)));
    }
}

/// out[i] = f(a[i], b[i]) over the common length.
#[inline]
#[target_feature(enable = "avx512f")]
fn map2(a: &[f32], b: &[f32], o: &mut [f32], f: impl Fn(__m512, __m512) -> __m512) {
    let n = a.len().min(b.len()).min(o.len());
    let (a, b, o) = (&a[..n], &b[..n], &mut o[..n]);
    let mut oc = o.chunks_exact_mut(2 * W);
    let mut ac = a.chunks_exact(2 * W);
    let mut bc = b.chunks_exact(2 * W);
    for ((o, a), b) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        let r0 = f(ld(a), ld(b));
        let r1 = f(ld(&a[W..]), ld(&b[W..]));
        st(o, r0);
        st(&mut o[W..], r1);
    }
    let (o, a, b) = (oc.into_remainder(), ac.remainder(), bc.remainder());
    let mut oc = o.chunks_exact_mut(W);
    let mut ac = a.chunks_exact(W);
    let mut bc = b.chunks_exact(W);
    for ((o, a), b) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        st(o, f(ld(a), ld(b)));
    }
    let (ta, tb) = (ac.remainder(), bc.remainder());
    if !ta.is_empty() {
        // Pad with 1 so a padded division stays finite (the lanes are discarded anyway).
        st_tail(oc.into_remainder(), f(ld_tail(ta, 1.0), ld_tail(tb, 1.0)));
    }
}

macro_rules! binop {
    ($name:ident, $intr:ident) => {
        #[target_feature(enable = "avx512f")]
        fn $name(a: &[f32], b: &[f32], o: &mut [f32]) {
            map2(a, b, o, |x, y| $intr(x, y))
        }
    };
}
binop!(add_v, _mm512_add_ps);
binop!(sub_v, _mm512_sub_ps);
binop!(mul_v, _mm512_mul_ps);
binop!(div_v, _mm512_div_ps);

/// `a` where a >= b or a is NaN, else `b` (so a NaN on either side propagates).
#[target_feature(enable = "avx512f")]
fn maximum_v(a: &[f32], b: &[f32], o: &mut [f32]) {
    map2(a, b, o, |x, y| {
        let m = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, y) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_mask_blend_ps(m, y, x)
    })
}

#[target_feature(enable = "avx512f")]
fn minimum_v(a: &[f32], b: &[f32], o: &mut [f32]) {
    map2(a, b, o, |x, y| {
        let m = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(x, y) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_mask_blend_ps(m, y, x)
    })
}

#[target_feature(enable = "avx512f")]
fn exp_s(x: &[f32], o: &mut [f32]) {
    map1(x, o, |v| exp_v(v))
}

#[target_feature(enable = "avx512f")]
fn silu_s(x: &[f32], o: &mut [f32]) {
    map1(x, o, |v| silu_v(v))
}

// ---- rows ---------------------------------------------------------------------------------

/// o = exp(x - m), returning the sum of o.
#[inline]
#[target_feature(enable = "avx512f")]
fn exp_shift_store_sum(x: &[f32], m: f32, o: &mut [f32]) -> f32 {
    let mv = _mm512_set1_ps(m);
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut ox = o.chunks_exact_mut(2 * W);
    let mut ix = x.chunks_exact(2 * W);
    for (o, x) in (&mut ox).zip(&mut ix) {
        let e0 = exp_v(_mm512_sub_ps(ld(x), mv));
        let e1 = exp_v(_mm512_sub_ps(ld(&x[W..]), mv));
        st(o, e0);
        st(&mut o[W..], e1);
        acc[0] = _mm512_add_ps(acc[0], e0);
        acc[1] = _mm512_add_ps(acc[1], e1);
    }
    let mut ox = ox.into_remainder().chunks_exact_mut(W);
    let mut ix = ix.remainder().chunks_exact(W);
    for (o, x) in (&mut ox).zip(&mut ix) {
        let e = exp_v(_mm512_sub_ps(ld(x), mv));
        st(o, e);
        acc[0] = _mm512_add_ps(acc[0], e);
    }
    let t = ix.remainder();
    if !t.is_empty() {
        let mut b = [0f32; W];
        st(&mut b, exp_v(_mm512_sub_ps(ld_tail(t, 0.0), mv)));
        let (o, b) = (ox.into_remainder(), &b[..t.len()]);
        o.copy_from_slice(b);
        return hsum(_mm512_add_ps(acc[0], acc[1])) + b.iter().sum::<f32>();
    }
    hsum(_mm512_add_ps(acc[0], acc[1]))
}

/// Sum of exp(x - m).
#[inline]
#[target_feature(enable = "avx512f")]
fn exp_shift_sum(x: &[f32], m: f32) -> f32 {
    let mv = _mm512_set1_ps(m);
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut it = x.chunks_exact(2 * W);
    for c in &mut it {
        for (k, a) in acc.iter_mut().enumerate() {
            *a = _mm512_add_ps(*a, exp_v(_mm512_sub_ps(ld(&c[k * W..]), mv)));
        }
    }
    let mut it8 = it.remainder().chunks_exact(W);
    for c in &mut it8 {
        acc[0] = _mm512_add_ps(acc[0], exp_v(_mm512_sub_ps(ld(c), mv)));
    }
    let t = it8.remainder();
    let mut s = hsum(_mm512_add_ps(acc[0], acc[1]));
    if !t.is_empty() {
        let mut b = [0f32; W];
        st(&mut b, exp_v(_mm512_sub_ps(ld_tail(t, 0.0), mv)));
        s += b[..t.len()].iter().sum::<f32>();
    }
    s
}

#[target_feature(enable = "avx512f")]
fn scale(o: &mut [f32], k: f32) {
    let kv = _mm512_set1_ps(k);
    let mut it = o.chunks_exact_mut(W);
    for c in &mut it {
        let v = _mm512_mul_ps(ld(c), kv);
        st(c, v);
    }
    for v in it.into_remainder() {
        *v *= k;
    }
}

#[target_feature(enable = "avx512f")]
fn softmax_v(x: &[f32], o: &mut [f32]) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    let m = max_v(x);
    let s = exp_shift_store_sum(x, m, o);
    scale(o, 1.0 / s);
}

#[target_feature(enable = "avx512f")]
fn log_softmax_v(x: &[f32], o: &mut [f32]) {
    let m = max_v(x);
    let l = m + exp_shift_sum(x, m).ln();
    let lv = _mm512_set1_ps(l);
    map1(x, o, |v| _mm512_sub_ps(v, lv))
}

#[target_feature(enable = "avx512f")]
fn rms_norm_v(x: &[f32], w: &[f32], eps: f32, o: &mut [f32]) {
    let ms = dot_v(x, x) / x.len() as f32;
    let r = _mm512_set1_ps(1.0 / (ms + eps).sqrt());
    map2(x, w, o, |v, w| _mm512_mul_ps(_mm512_mul_ps(v, r), w))
}

#[target_feature(enable = "avx512f")]
fn layer_norm_v(x: &[f32], w: &[f32], b: Option<&[f32]>, eps: f32, o: &mut [f32]) {
    let n = x.len() as f32;
    let mean = sum_v(x) / n;
    let var = sq_dev_v(x, mean) / n;
    let r = _mm512_set1_ps(1.0 / (var + eps).sqrt());
    let mv = _mm512_set1_ps(mean);
    map2(x, w, o, |v, w| {
        _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(v, mv), r), w)
    });
    if let Some(b) = b {
        let len = o.len().min(b.len());
        let o = &mut o[..len];
        let mut oc = o.chunks_exact_mut(W);
        let mut bc = b[..len].chunks_exact(W);
        for (o, b) in (&mut oc).zip(&mut bc) {
            let v = _mm512_add_ps(ld(o), ld(b));
            st(o, v);
        }
        for (o, b) in oc.into_remainder().iter_mut().zip(bc.remainder()) {
            *o += b;
        }
    }
}

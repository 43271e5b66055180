//! The scale searches behind ggml's k-quant reference quantizers. Each fits `x ≈ scale·l`
//! (or `scale·l - min`) over one sub-block, trying a small grid of candidate scales and keeping
//! the one with the least weighted squared (or absolute) error. The searches are called from
//! many quantizers and stay out of line (`inline(never)`): the binary has a size budget.

/// Below this a sub-block counts as all zeros.
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, through the float adder exactly as ggml does (the same
/// result as `round_ties_even` for |x| < 2^22, and bit-compatible with ggml beyond it).
#[inline]
pub fn nearest_int(x: f32) -> i32 {
    let v = x + 12582912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Signed levels in `[-nmax, nmax)`, stored offset by `nmax`. The error weights are `qw` where
/// given (an importance matrix's), else `rmse_type` picks them (1: x², 2: 1, 3: |x|, 4: √|x|);
/// `rmse_type` 0 skips the search.
#[inline(never)]
pub fn make_qx_quants(
    x: &[f32],
    nmax: i32,
    l_out: &mut [i8],
    rmse_type: i32,
    qw: Option<&[f32]>,
) -> f32 {
    let n = x.len();
    let max = super::signed_absmax(x);
    if max.abs() < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let weight = |i: usize, v: f32| match (qw, rmse_type) {
        (Some(qw), _) => qw[i],
        (None, 1) => v * v,
        (None, 2) => 1.0,
        (None, 3) => v.abs(),
        (None, _) => v.abs().sqrt(),
    };
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    if rmse_type == 0 {
        for (o, &v) in l_out.iter_mut().zip(x) {
            *o = (nmax + level(iscale, v)) as i8;
        }
        return 1.0 / iscale;
    }
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (i, (o, &v)) in l_out.iter_mut().zip(x).enumerate() {
        let l = level(iscale, v);
        *o = (l + nmax) as i8;
        let w = weight(i, v);
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (mut slx, mut sl2) = (0f32, 0f32);
        for (i, &v) in x.iter().enumerate() {
            let l = level(iscale, v);
            let w = weight(i, v);
            slx += w * v * l as f32;
            sl2 += w * l as f32 * l as f32;
        }
        if sl2 > 0.0 && slx * slx > best * sl2 {
            for (o, &v) in l_out.iter_mut().zip(x) {
                *o = (nmax + level(iscale, v)) as i8;
            }
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    scale
}

/// Q3_K's search: start from the plain rounding, then move single levels while that lowers
/// the x²-weighted error (up to 5 sweeps). Levels are returned offset by `nmax`.
#[inline(never)]
pub fn make_q3_quants(x: &[f32], nmax: i32, l_out: &mut [i8]) -> f32 {
    let max = super::signed_absmax(x);
    if max.abs() < GROUP_MAX_EPS {
        l_out[..x.len()].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (o, &v) in l_out.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let li = l_out[i] as f32;
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l_out[i] as i32 {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for o in l_out[..x.len()].iter_mut() {
        *o += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Affine fit `x ≈ scale·l - min` with levels in `[0, nmax]` and `min ≥ 0` (the minimum is
/// returned positive). Tries `nstep + 1` scales `(nmax + rmin + rdelta·i)/(max - min)` and keeps
/// the weighted least-squares solution with the lowest error (absolute when `use_mad`).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    // `w · (d²)`, squared first as in ggml: `(w · d) · d` rounds differently.
    let err = |d: f32, w: f32| if use_mad { w * d.abs() } else { w * (d * d) };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        best_error += err(scale * l as f32 + min - x[i], weights[i]);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let (w, lf) = (weights[i], l as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                cur_error += err(this_scale * laux[i] as f32 + this_min - x[i], weights[i]);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Non-negative `x ≈ scale·l` with levels in `[0, nmax]` under importance `qw` (ggml's
/// `make_qp_quants`, which quantizes the sub-block scales and mins of the weighted k-quants):
/// the best of nine scales around `nmax / max`, then up to five sweeps moving single levels
/// while that lowers the weighted error.
#[inline(never)]
pub fn make_qp_quants(x: &[f32], nmax: i32, l_out: &mut [u8], qw: &[f32]) -> f32 {
    let n = x.len();
    let max = x.iter().fold(0f32, |m, &v| if v > m { v } else { m });
    if max < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = nearest_int(iscale * v) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0f32;
    for i in 0..n {
        let diff = x[i] - scale * l_out[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * l as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).min(nmax);
        l_out[i] = l as u8;
        let lf = l as f32;
        sumlx += qw[i] * x[i] * lf;
        suml2 += qw[i] * lf * lf;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for i in 0..n {
            let (w, li) = (qw[i], l_out[i] as f32);
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l_out[i] as i32 {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (x, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
            (-7.7, -8),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }
}

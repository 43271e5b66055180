//! Prefill kernels over a row panel: `ROWS` weight rows unpacked to bytes (see
//! `GgmlBlock::unpacking`) and interleaved so that one vector holds 4 consecutive levels of
//! each row. Multiplying it by 4 bytes of one activation row broadcast to every lane (`vpdpbusd`,
//! or `maddubs` + `madd` on AVX2) advances all `ROWS` dot products at once, each in its own
//! lane: no horizontal sums, and one vector store per activation row.
//!
//! Per scale group `g` of a weight row (elements `i = s_g·u_i − m_g`) and activation `x = d·q`:
//! `Σ w·x = s_g·d·Σ u·q − m_g·(d·Σ q)`, so each activation row comes with `d` and `d·Σq` per
//! group (`PanelRow`). The driver, which unpacks the panels, is `quantized::cpu::gemm`.

use super::avx2::{ByteDot, Madd};
use super::panel::{Panel, PanelFn, PanelRow};
use super::vnni::AvxVnni;
use crate::quantized::format::BlockQ8_0;
use std::arch::x86_64::*;

/// The kernel for this CPU, the rows per panel it takes, or `None` where there is none (or
/// where `maddubs` could saturate: AVX2 keeps `2 · max_level · 128` within i16).
pub(crate) fn pick(group: usize, max_level: u8) -> Option<(usize, PanelFn)> {
    use super::{isa, Isa};
    let avx2_fits = (max_level as i32) * 2 * 128 <= i16::MAX as i32;
    Some(match (isa(), group) {
        (Isa::Avx512, 16) => (16, run_avx512::<16>),
        (Isa::Avx512, 32) => (16, run_avx512::<32>),
        (Isa::AvxVnni, 16) => (8, run_avxvnni::<16>),
        (Isa::AvxVnni, 32) => (8, run_avxvnni::<32>),
        (Isa::Avx2, 16) if avx2_fits => (8, run_avx2::<16>),
        (Isa::Avx2, 32) if avx2_fits => (8, run_avx2::<32>),
        // 8-bit levels are Q8_0's, stored `q + 128` with min `128 · scale`.
        (Isa::Avx2, 32) if max_level == 255 => (8, run_avx2_centred::<32>),
        _ => return None,
    })
}

/// Checks every length the kernels rely on; they read through raw pointers after this.
fn check(p: &Panel, x: &[PanelRow], out: &[f32], rows: usize, group: usize) {
    let groups = p.scale.len() / rows;
    let k = groups * group;
    assert!(p.scale.len() == groups * rows && p.min.len() == p.scale.len());
    assert_eq!(p.u.len(), k * rows);
    assert_eq!(out.len(), x.len() * rows);
    for x in x {
        assert!(x.q.len() * 32 == k && x.d.len() == groups && x.dsum.len() == groups);
    }
}

/// 4 activation bytes starting at element `e` of a row of Q8_0 blocks.
///
/// # Safety
/// `e + 4 <= 32 * q.len()` and `e % 4 == 0` (so the 4 bytes lie in one block).
#[inline(always)]
unsafe fn x4(q: &[BlockQ8_0], e: usize) -> i32 {
    // SAFETY: by the caller's bound, block `e / 32` exists and bytes `e % 32..+4` lie in its
    // `qs`; the read is unaligned.
    unsafe {
        let b = q.as_ptr().add(e / 32);
        std::ptr::read_unaligned((*b).qs.as_ptr().add(e % 32) as *const i32)
    }
}

/// Tiles of the first (largest) column count listed, then one tile of the remainder's size.
macro_rules! by_tiles {
    ($tile:ident::<$G:ident>, $p:expr, $x:expr, $out:expr, $rows:expr, [$C:literal $(, $n:literal)*]) => {{
        let mut c = 0;
        while c < $x.len() {
            let n = ($x.len() - c).min($C);
            let (x, out) = (&$x[c..c + n], &mut $out[c * $rows..(c + n) * $rows]);
            // SAFETY: `pick` returned this kernel only where the CPU has its features, and
            // `check` verified the lengths.
            unsafe {
                match n {
                    $C => $tile::<$G, $C>($p, x, out),
                    $($n => $tile::<$G, $n>($p, x, out),)*
                    _ => unreachable!("every count up to the largest is listed"),
                }
            }
            c += n;
        }
    }};
}

fn run_avx512<const G: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    check(p, x, out, 16, G);
    // Up to 8 activation rows per tile: 2·8 accumulators, the panel vector and the scales fit
    // the 32 registers.
    by_tiles!(tile_avx512::<G>, p, x, out, 16, [8, 7, 6, 5, 4, 3, 2, 1]);
}

#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_avx512<const G: usize, const C: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    let groups = p.scale.len() / 16;
    // SAFETY: `check` verified that the panel holds `groups * G` elements of 16 rows and
    // every activation row `groups * G` elements; `x.len() == C` and `out` holds 16·C floats.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); C];
        for g in 0..groups {
            let mut dot = [_mm512_setzero_si512(); C];
            for t in 0..G / 4 {
                let e = g * G + 4 * t;
                let w = _mm512_loadu_si512(p.u.as_ptr().add(e * 16) as *const __m512i);
                for (c, dot) in dot.iter_mut().enumerate() {
                    let xb = _mm512_set1_epi32(x4(x.get_unchecked(c).q, e));
                    *dot = _mm512_dpbusd_epi32(*dot, w, xb);
                }
            }
            let s = _mm512_loadu_ps(p.scale.as_ptr().add(g * 16));
            let m = _mm512_loadu_ps(p.min.as_ptr().add(g * 16));
            for c in 0..C {
                let xc = x.get_unchecked(c);
                let sd = _mm512_mul_ps(s, _mm512_set1_ps(*xc.d.get_unchecked(g)));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[c]), sd, acc[c]);
                acc[c] = _mm512_fnmadd_ps(m, _mm512_set1_ps(*xc.dsum.get_unchecked(g)), acc[c]);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(c * 16), *a);
        }
    }
}

fn run_avx2<const G: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    check(p, x, out, 8, G);
    // Up to 4 activation rows per tile (16 registers).
    by_tiles!(tile_avx2::<G>, p, x, out, 8, [4, 3, 2, 1]);
}

/// Q8_0 on AVX2. Its stored levels `u = q + 128` reach 255, and `maddubs` pair sums of
/// 255 · 127 overflow i16, so the kernel flips them back to the signed `q` and multiplies
/// `|q|` by the activation carrying `q`'s sign (`sign_epi8`): pair sums stay within
/// 2 · 128 · 127. That gives `Σ q·x` itself, so the min term `128 · scale · Σ x` is left out.
fn run_avx2_centred<const G: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    check(p, x, out, 8, G);
    by_tiles!(tile_avx2_centred::<G>, p, x, out, 8, [4, 3, 2, 1]);
}

#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_centred<const G: usize, const C: usize>(
    p: &Panel,
    x: &[PanelRow],
    out: &mut [f32],
) {
    let groups = p.scale.len() / 8;
    // SAFETY: as in tile_avx512, with 8 rows; this function enables AVX2 and FMA. Activation
    // levels are within ±127 (Q8_0 quantization), so negating them by `sign_epi8` is exact;
    // a level of -128 gives |q| = 0x80, which `maddubs` reads unsigned as 128.
    unsafe {
        let flip = _mm256_set1_epi8(i8::MIN);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); C];
        for g in 0..groups {
            let mut dot = [_mm256_setzero_si256(); C];
            for t in 0..G / 4 {
                let e = g * G + 4 * t;
                let u = _mm256_loadu_si256(p.u.as_ptr().add(e * 8) as *const __m256i);
                let q = _mm256_xor_si256(u, flip);
                let q_abs = _mm256_sign_epi8(q, q);
                for (c, dot) in dot.iter_mut().enumerate() {
                    let xb = _mm256_set1_epi32(x4(x.get_unchecked(c).q, e));
                    let pairs = _mm256_maddubs_epi16(q_abs, _mm256_sign_epi8(xb, q));
                    *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(pairs, ones));
                }
            }
            let s = _mm256_loadu_ps(p.scale.as_ptr().add(g * 8));
            for c in 0..C {
                let sd = _mm256_mul_ps(s, _mm256_set1_ps(*x.get_unchecked(c).d.get_unchecked(g)));
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c]), sd, acc[c]);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), *a);
        }
    }
}

fn run_avxvnni<const G: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    check(p, x, out, 8, G);
    by_tiles!(tile_avxvnni::<G>, p, x, out, 8, [4, 3, 2, 1]);
}

#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const G: usize, const C: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    // SAFETY: this function enables what Madd needs; the caller's guarantees pass on.
    unsafe { tile_256::<Madd, G, C>(p, x, out) }
}

#[target_feature(enable = "avx2,fma,avxvnni")]
unsafe fn tile_avxvnni<const G: usize, const C: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    // SAFETY: this function enables what AvxVnni needs; the caller's guarantees pass on.
    unsafe { tile_256::<AvxVnni, G, C>(p, x, out) }
}

#[inline(always)]
unsafe fn tile_256<D: ByteDot, const G: usize, const C: usize>(
    p: &Panel,
    x: &[PanelRow],
    out: &mut [f32],
) {
    let groups = p.scale.len() / 8;
    // SAFETY: as in tile_avx512, with 8 rows; the caller enables AVX2, FMA and D's features.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); C];
        for g in 0..groups {
            let mut dot = [_mm256_setzero_si256(); C];
            for t in 0..G / 4 {
                let e = g * G + 4 * t;
                let w = _mm256_loadu_si256(p.u.as_ptr().add(e * 8) as *const __m256i);
                for (c, dot) in dot.iter_mut().enumerate() {
                    let xb = _mm256_set1_epi32(x4(x.get_unchecked(c).q, e));
                    *dot = D::dot(*dot, w, xb);
                }
            }
            let s = _mm256_loadu_ps(p.scale.as_ptr().add(g * 8));
            let m = _mm256_loadu_ps(p.min.as_ptr().add(g * 8));
            for c in 0..C {
                let xc = x.get_unchecked(c);
                let sd = _mm256_mul_ps(s, _mm256_set1_ps(*xc.d.get_unchecked(g)));
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c]), sd, acc[c]);
                acc[c] = _mm256_fnmadd_ps(m, _mm256_set1_ps(*xc.dsum.get_unchecked(g)), acc[c]);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), *a);
        }
    }
}

//! Prefill kernels over a row panel: `ROWS` weight rows unpacked to bytes (see
//! `GgmlBlock::unpacking`) and interleaved so that one vector holds 4 consecutive levels of
//! each row. Multiplying it by 4 bytes of one activation row broadcast to every lane (`vpdpbusd`,
//! or `maddubs` + `madd` on AVX2) advances all `ROWS` dot products at once, each in its own
//! lane: no horizontal sums, and one vector store per activation row.
//!
//! Per scale group `g` of a weight row (elements `i = s_g·u_i − m_g`) and activation `x = d·q`:
//! `Σ w·x = s_g·d·Σ u·q − m_g·(d·Σ q)`, so each activation row comes with `d` and `d·Σq` per
//! group (`PanelRow`). The driver, which unpacks the panels, is `quantized::cpu::gemm`.

use super::avx2::ByteDot;
use super::panel::{Panel, PanelFn, PanelRow};
use super::vnni::AvxVnni;
use crate::quantized::format::BlockQ8_0;
use std::arch::x86_64::*;

/// The kernel for this CPU, the rows per panel it takes, or `None` where there is none (or
/// where `maddubs` could saturate: AVX2 keeps `2 · max_level · 128` within i16).
pub(crate) fn pick(group: usize, max_level: u8) -> Option<(usize, PanelFn)> {
    use super::{isa, Isa};
    Some(match (isa(), group) {
        (Isa::Avx512, 16) => (16, run_avx512::<16>),
        (Isa::Avx512, 32) => (16, run_avx512::<32>),
        (Isa::AvxVnni, 16) => (8, run_avxvnni::<16>),
        (Isa::AvxVnni, 32) => (8, run_avxvnni::<32>),
        (Isa::Avx2, _) => (8, pick_avx2(group, max_level)?),
        _ => return None,
    })
}

/// The AVX2 kernel for `max_level`. A `maddubs` pair sum of levels up to `max_level` against
/// activation bytes within ±128 is at most `2 · 128 · max_level`, so `⌊32767 / that⌋` steps
/// add up in i16 before one `madd` widens them: 8 for 4-bit levels (a whole group of 32), 4
/// for 5-bit, 2 for 6-bit, 1 for 7-bit.
fn pick_avx2(group: usize, max_level: u8) -> Option<PanelFn> {
    Some(match (group, max_level) {
        (32, 0..=15) => run_avx2::<32, 8>,
        (32, 16..=31) => run_avx2::<32, 4>,
        (32, 32..=63) => run_avx2::<32, 2>,
        (32, 64..=127) => run_avx2::<32, 1>,
        (16, 0..=31) => run_avx2::<16, 4>,
        (16, 32..=63) => run_avx2::<16, 2>,
        (16, 64..=127) => run_avx2::<16, 1>,
        // 8-bit levels are Q8_0's, stored `q + 128` with min `128 · scale`.
        (32, 255) => run_avx2_centred::<32>,
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

/// Tiles of the first (largest) column count listed, then one tile of the remainder's size;
/// `|C| kernel::<.., C>` names the tile kernel for `C` activation rows.
macro_rules! by_tiles {
    (|$c:ident| $tile:expr, $p:expr, $x:expr, $out:expr, $rows:expr, [$C:literal $(, $n:literal)*]) => {{
        let mut c = 0;
        while c < $x.len() {
            let n = ($x.len() - c).min($C);
            let (x, out) = (&$x[c..c + n], &mut $out[c * $rows..(c + n) * $rows]);
            // SAFETY: `pick` returned this kernel only where the CPU has its features, and
            // `check` verified the lengths.
            unsafe {
                match n {
                    $C => {
                        const $c: usize = $C;
                        $tile($p, x, out)
                    }
                    $($n => {
                        const $c: usize = $n;
                        $tile($p, x, out)
                    })*
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
    by_tiles!(
        |C| tile_avx512::<G, C>,
        p,
        x,
        out,
        16,
        [8, 7, 6, 5, 4, 3, 2, 1]
    );
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

fn run_avx2<const G: usize, const S: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    check(p, x, out, 8, G);
    // Up to 4 activation rows per tile (16 registers).
    by_tiles!(|C| tile_avx2::<G, S, C>, p, x, out, 8, [4, 3, 2, 1]);
}

/// Q8_0 on AVX2. Its stored levels `u = q + 128` reach 255, and `maddubs` pair sums of
/// 255 · 127 overflow i16, so the kernel multiplies `|q|` by the activation carrying `q`'s
/// sign (`sign_epi8`): pair sums stay within 2 · 128 · 127. That gives `Σ q·x` itself, so the
/// min term `128 · scale · Σ x` is left out.
///
/// The panel is first rewritten once as `|q|` and `q` side by side (`split_signed`), so the
/// tile's inner step is a broadcast, a `sign_epi8` reading `q` from memory, `maddubs` and
/// `madd`: deriving them per step cost two more instructions and spilled registers.
fn run_avx2_centred<const G: usize>(p: &Panel, x: &[PanelRow], out: &mut [f32]) {
    check(p, x, out, 8, G);
    thread_local! {
        static SPLIT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SPLIT.with_borrow_mut(|split| {
        split.resize(2 * p.u.len(), 0);
        // SAFETY: `pick` returned this kernel only where the CPU has AVX2; `check` made
        // `p.u` whole 32-byte vectors (k is whole groups of 32, 8 rows).
        unsafe { split_signed(p.u, split) };
        let p = &Panel {
            u: split,
            scale: p.scale,
            min: p.min,
        };
        by_tiles!(|C| tile_avx2_centred::<G, C>, p, x, out, 8, [4, 3, 2, 1]);
    });
}

/// Per 32 stored levels `u = q + 128`: `|q|` (as unsigned bytes), then `q`.
///
/// # Safety
/// AVX2; `u.len()` a multiple of 32 and `split.len() == 2 * u.len()`.
#[target_feature(enable = "avx2")]
unsafe fn split_signed(u: &[u8], split: &mut [u8]) {
    debug_assert!(u.len().is_multiple_of(32) && split.len() == 2 * u.len());
    // SAFETY: vector `i` reads `u[32i..32i + 32]` and writes `split[64i..64i + 64]`, inside
    // both by the caller's lengths; the accesses are unaligned.
    unsafe {
        let flip = _mm256_set1_epi8(i8::MIN);
        for i in 0..u.len() / 32 {
            let q = _mm256_xor_si256(
                _mm256_loadu_si256(u.as_ptr().add(32 * i) as *const __m256i),
                flip,
            );
            let at = split.as_mut_ptr().add(64 * i) as *mut __m256i;
            _mm256_storeu_si256(at, _mm256_sign_epi8(q, q));
            _mm256_storeu_si256(at.add(1), q);
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_centred<const G: usize, const C: usize>(
    p: &Panel,
    x: &[PanelRow],
    out: &mut [f32],
) {
    let groups = p.scale.len() / 8;
    // SAFETY: as in tile_avx512, with 8 rows and the panel split (twice the bytes); this
    // function enables AVX2 and FMA. Activation levels are within ±127 (Q8_0 quantization), so
    // negating them by `sign_epi8` is exact; a level of -128 gives |q| = 0x80, which `maddubs`
    // reads unsigned as 128.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); C];
        for g in 0..groups {
            let mut dot = [_mm256_setzero_si256(); C];
            for t in 0..G / 4 {
                let e = g * G + 4 * t;
                let at = p.u.as_ptr().add(e * 16) as *const __m256i;
                let q_abs = _mm256_loadu_si256(at);
                for (c, dot) in dot.iter_mut().enumerate() {
                    let xb = _mm256_set1_epi32(x4(x.get_unchecked(c).q, e));
                    let signed = _mm256_sign_epi8(xb, _mm256_loadu_si256(at.add(1)));
                    let pairs = _mm256_maddubs_epi16(q_abs, signed);
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
    by_tiles!(|C| tile_avxvnni::<G, C>, p, x, out, 8, [4, 3, 2, 1]);
}

/// AVX2 for levels within `max_level` (see `pick_avx2`): `S` steps of `maddubs` add up in i16
/// before one `madd` widens them, so 4-bit levels take one `madd` per group of 32 rather than
/// one per 4 elements (Q4_0 +12%, Q4_K +16% at 640x2048 x 512 on the AMD VM).
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const G: usize, const S: usize, const C: usize>(
    p: &Panel,
    x: &[PanelRow],
    out: &mut [f32],
) {
    const { assert!((G / 4).is_multiple_of(S)) };
    let groups = p.scale.len() / 8;
    // SAFETY: as in tile_avx512, with 8 rows; this function enables AVX2 and FMA. `pick_avx2`
    // chose `S` so that `S` pair sums of levels within `max_level` against bytes within
    // ±128 stay within i16: no step saturates or wraps.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); C];
        for g in 0..groups {
            let mut dot = [_mm256_setzero_si256(); C];
            for run in 0..G / 4 / S {
                let mut pairs = [_mm256_setzero_si256(); C];
                for t in run * S..(run + 1) * S {
                    let e = g * G + 4 * t;
                    let w = _mm256_loadu_si256(p.u.as_ptr().add(e * 8) as *const __m256i);
                    for (c, pairs) in pairs.iter_mut().enumerate() {
                        let xb = _mm256_set1_epi32(x4(x.get_unchecked(c).q, e));
                        *pairs = _mm256_add_epi16(*pairs, _mm256_maddubs_epi16(w, xb));
                    }
                }
                for c in 0..C {
                    dot[c] = _mm256_add_epi32(dot[c], _mm256_madd_epi16(pairs[c], ones));
                }
            }
            add_group_256(&mut acc, &dot, p, x, g);
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), *a);
        }
    }
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
            add_group_256(&mut acc, &dot, p, x, g);
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), *a);
        }
    }
}

/// Adds group `g`'s integer dots of 8 rows, scaled by `s_g · d`, less `m_g · (d · Σ q)`, into
/// each activation row's accumulator.
///
/// # Safety
/// AVX2 and FMA are enabled; the panel has group `g` of 8 rows and `x` holds `C` rows with
/// group `g` (as `check` verifies).
#[inline(always)]
unsafe fn add_group_256<const C: usize>(
    acc: &mut [__m256; C],
    dot: &[__m256i; C],
    p: &Panel,
    x: &[PanelRow],
    g: usize,
) {
    // SAFETY: by the caller's bounds.
    unsafe {
        let s = _mm256_loadu_ps(p.scale.as_ptr().add(g * 8));
        let m = _mm256_loadu_ps(p.min.as_ptr().add(g * 8));
        for c in 0..C {
            let xc = x.get_unchecked(c);
            let sd = _mm256_mul_ps(s, _mm256_set1_ps(*xc.d.get_unchecked(g)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c]), sd, acc[c]);
            acc[c] = _mm256_fnmadd_ps(m, _mm256_set1_ps(*xc.dsum.get_unchecked(g)), acc[c]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// Every level at its type's largest value against activations all at ±127: the sums the
    /// AVX2 kernels keep in i16 (several steps of 4-bit levels, one of 8-bit) come closest to
    /// overflowing here. With mins of 128, each output is `Σ (u − 128)·x`, exact in f32.
    #[test]
    fn largest_levels_do_not_overflow() {
        let k = 128;
        for group in [16, 32] {
            for max_level in [15u8, 31, 63, 127, 255] {
                let Some((rows, kernel)) = pick(group, max_level) else {
                    continue;
                };
                let groups = k / group;
                let panel_u = vec![max_level; k * rows];
                let (scale, min) = (vec![1.0; groups * rows], vec![128.0; groups * rows]);
                let panel = Panel {
                    u: &panel_u,
                    scale: &scale,
                    min: &min,
                };
                for x in [127i8, -127] {
                    let q = vec![
                        BlockQ8_0 {
                            d: f16::ONE,
                            qs: [x; 32],
                        };
                        k / 32
                    ];
                    let (d, dsum) = (
                        vec![1.0; groups],
                        vec![(group as i32 * x as i32) as f32; groups],
                    );
                    // Five activation rows: a tile of four and one of one.
                    let xs = vec![
                        PanelRow {
                            q: &q,
                            d: &d,
                            dsum: &dsum
                        };
                        5
                    ];
                    let mut out = vec![0.0; xs.len() * rows];
                    kernel(&panel, &xs, &mut out);
                    let want = (k as i32 * (max_level as i32 - 128) * x as i32) as f32;
                    assert!(
                        out.iter().all(|&o| o == want),
                        "group {group}, levels {max_level}, activations {x}: {out:?} != {want}"
                    );
                }
            }
        }
    }
}

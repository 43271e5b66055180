//! The AVX-512 form of the F16/BF16 prefill panel (`float_panel_x86`, which packs and drives
//! it). The packed blocks of 16 rows are the same; a tile takes two of them, each one 16-lane
//! vector per column, against up to 12 broadcast activations: 24 FMAs per two weight loads, on
//! 24 of the 32 registers, where the AVX2 tile does 12 of half the width. Each output is the
//! same FMA chain along `k` as in the AVX2 form, so both give the same bits.

use super::float_panel_x86::{panel, Strip, Strips, BLOCK};
use crate::quantized::format::{HalfBF16, HalfF16};
use std::arch::x86_64::*;

/// Most activation rows per tile.
const TILE_C: usize = 12;

struct Avx512Strips;

impl Strips for Avx512Strips {
    const MOST: usize = TILE_C;
    #[inline(always)]
    unsafe fn strip(c: usize, packed: &[f32], x: &[f32], at: Strip, out: &mut [f32]) -> usize {
        // SAFETY: the caller enables AVX-512 F. Tiles of 12, 4 and 1 rows only (each shape
        // is a copy of the loop in the binary, for each weight type and block count).
        unsafe {
            match c {
                12.. => strip::<12>(packed, x, at, out),
                4.. => strip::<4>(packed, x, at, out),
                _ => strip::<1>(packed, x, at, out),
            }
        }
    }
}

/// Activation rows `j..j + C` against every block of the packed columns, two blocks a tile,
/// set into `out [m, rows]` (the first columns) or added to it; returns `C`.
///
/// # Safety
/// AVX-512 F is enabled.
#[inline(always)]
unsafe fn strip<const C: usize>(packed: &[f32], x: &[f32], at: Strip, out: &mut [f32]) -> usize {
    let Strip {
        k,
        k0,
        len,
        rows,
        j,
    } = at;
    let blocks = rows.div_ceil(BLOCK);
    assert!(packed.len() == blocks * BLOCK * len);
    assert!(k0 + len <= k && x.len() >= (j + C) * k && out.len() >= (j + C) * rows);
    let xs = &x[j * k + k0..(j + C - 1) * k + k0 + len];
    let block = |b: usize| &packed[b * BLOCK * len..][..BLOCK * len];
    let mut b = 0;
    while b < blocks {
        // SAFETY: `tile` reads whole blocks of `packed` and C rows of `len` at stride k from
        // `xs` (lengths checked there).
        if b + 1 < blocks {
            let acc = unsafe { tile::<C, 2>([block(b), block(b + 1)], xs, k) };
            for (c, acc) in acc.iter().enumerate() {
                // SAFETY: as above.
                unsafe { put(acc[0], &mut out[(j + c) * rows..][..rows], b * BLOCK, k0) };
                unsafe {
                    put(
                        acc[1],
                        &mut out[(j + c) * rows..][..rows],
                        (b + 1) * BLOCK,
                        k0,
                    )
                };
            }
            b += 2;
        } else {
            let acc = unsafe { tile::<C, 1>([block(b)], xs, k) };
            for (c, acc) in acc.iter().enumerate() {
                // SAFETY: as above.
                unsafe { put(acc[0], &mut out[(j + c) * rows..][..rows], b * BLOCK, k0) };
            }
            b += 1;
        }
    }
    C
}

/// Sets (`k0 == 0`) or adds the live lanes of `v`, rows `r0..` of a block, into `row`.
///
/// # Safety
/// AVX-512 F is enabled.
#[inline(always)]
unsafe fn put(v: __m512, row: &mut [f32], r0: usize, k0: usize) {
    let mut y = [0f32; BLOCK];
    // SAFETY: 16 floats stored into a 16-float array.
    unsafe { _mm512_storeu_ps(y.as_mut_ptr(), v) };
    let live = BLOCK.min(row.len() - r0);
    let o = &mut row[r0..][..live];
    if k0 == 0 {
        o.copy_from_slice(&y[..o.len()]);
    } else {
        o.iter_mut().zip(&y).for_each(|(o, y)| *o += y);
    }
}

/// `N` blocks of 16 packed rows (`len` columns each) against `C` activation rows (`x`'s rows
/// at stride `stride`, each `len` long): `acc[c][n]` holds block `n`'s rows for activation
/// row `c`.
///
/// # Safety
/// AVX-512 F is enabled.
#[inline(always)]
unsafe fn tile<const C: usize, const N: usize>(
    blocks: [&[f32]; N],
    x: &[f32],
    stride: usize,
) -> [[__m512; N]; C] {
    let len = blocks[0].len() / BLOCK;
    assert!(blocks.iter().all(|b| b.len() == BLOCK * len));
    assert!(x.len() == (C - 1) * stride + len);
    let xp = x.as_ptr();
    // SAFETY: `i < len`: each weight load reads 16 floats at `i * 16 < 16 · len` of its
    // block, each broadcast one at `c * stride + i < (C - 1) * stride + len` (checked above).
    // Loops, not `array::from_fn`: a closure holding intrinsics may not be inlined.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); N]; C];
        for i in 0..len {
            let mut w = [_mm512_setzero_ps(); N];
            for n in 0..N {
                w[n] = _mm512_loadu_ps(blocks[n].as_ptr().add(i * BLOCK));
            }
            for (c, acc) in acc.iter_mut().enumerate() {
                let xb = _mm512_set1_ps(*xp.add(c * stride + i));
                for n in 0..N {
                    acc[n] = _mm512_fmadd_ps(w[n], xb, acc[n]);
                }
            }
        }
        acc
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn f16_panel(w: &[HalfF16], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
    // SAFETY: this function enables the features `panel` and `Avx512Strips` need.
    unsafe { panel::<_, Avx512Strips>(w, k, x, m, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn bf16_panel(w: &[HalfBF16], k: usize, x: &[f32], m: usize, out: &mut [f32]) {
    // SAFETY: as in f16_panel.
    unsafe { panel::<_, Avx512Strips>(w, k, x, m, out) }
}

#[cfg(test)]
mod tests {
    use super::super::float_panel_x86;
    use crate::quantized::format::{HalfBF16, HalfF16};

    type Panel<H> = unsafe fn(&[H], usize, &[f32], usize, &mut [f32]);

    /// The AVX-512 form gives the AVX2 form's bits, F16 and BF16: odd row counts (a lone
    /// last block, a partial one), activation row counts that take every tile shape, and `k`
    /// past one piece with a ragged end.
    #[test]
    fn avx512_panel_gives_the_avx2_panels_bits() {
        use std::arch::is_x86_feature_detected as has;
        if !(has!("avx512f") && has!("avx2") && has!("fma") && has!("f16c")) {
            return;
        }
        same_bits::<HalfF16>(
            HalfF16::from_f32,
            float_panel_x86::f16_panel,
            super::f16_panel,
        );
        same_bits::<HalfBF16>(
            HalfBF16::from_f32,
            float_panel_x86::bf16_panel,
            super::bf16_panel,
        );
    }

    fn same_bits<H: Copy>(half: fn(f32) -> H, avx2: Panel<H>, avx512: Panel<H>) {
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for (rows, k) in [(16, 32), (40, 300), (57, 515), (96, 256)] {
            let w: Vec<H> = (0..rows * k).map(|_| half(next())).collect();
            for m in [1, 3, 8, 12, 19, 29] {
                let x: Vec<f32> = (0..m * k).map(|_| next()).collect();
                let (mut a, mut b) = (vec![0f32; m * rows], vec![0f32; m * rows]);
                // SAFETY: the caller detected the features of both forms.
                unsafe {
                    avx2(&w, k, &x, m, &mut a);
                    avx512(&w, k, &x, m, &mut b);
                }
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "rows {rows}, k {k}, m {m}");
            }
        }
    }
}

//! WebAssembly SIMD128: the Q4_0/Q4_1/Q5_0/Q8_0, IQ4_NL/MXFP4 and Q4_K/Q5_K/Q6_K kernels, in
//! a build compiled with the `simd128` target feature (see `cpu::simd::simd128`). Signed
//! bytes widen to i16 and `i32x4.dot_i16x8_s` sums their products in pairs into i32 lanes,
//! which is exact; each block's integer sum is then scaled in f32 by the scalar dot's own
//! formula, so every kernel here gives the scalar results bit for bit (as the NEON ones do).

use crate::quantized::format::*;
use std::arch::wasm32::*;

/// A block's 32 signed levels as two 16-byte vectors.
type Levels = (v128, v128);

/// f16 → f32 without branches: the f16's exponent and mantissa bits moved into place and
/// scaled by 2^112 (the difference of the biases), exact for normal and subnormal values
/// alike; infinities and NaNs get the all-ones exponent. `half`'s portable conversion
/// (WebAssembly has no conversion instruction) branches per call, which cost more than the
/// integer work of a 32-level block.
#[inline(always)]
fn f16_to_f32(h: half::f16) -> f32 {
    let h = h.to_bits() as u32;
    let em = h & 0x7fff;
    let v = if em >= 0x7c00 {
        f32::from_bits((em << 13) | 0x7f80_0000)
    } else {
        f32::from_bits(em << 13) * f32::from_bits(0x7780_0000)
    };
    f32::from_bits(v.to_bits() | ((h & 0x8000) << 16))
}

#[inline(always)]
fn load16<T>(p: &[T]) -> v128 {
    assert!(std::mem::size_of_val(p) >= 16);
    // SAFETY: `p` holds at least 16 bytes (asserted); v128_load has no alignment need.
    unsafe { v128_load(p.as_ptr().cast()) }
}

#[inline(always)]
fn load_i8(p: &[i8]) -> Levels {
    (load16(&p[..16]), load16(&p[16..32]))
}

/// 16 packed bytes → the 16 low nibbles, then the 16 high nibbles.
#[inline(always)]
fn nibbles(qs: &[u8; 16]) -> (v128, v128) {
    let v = load16(qs);
    (v128_and(v, u8x16_splat(0x0F)), u8x16_shr(v, 4))
}

/// Σ w·x over 16 signed bytes each, in four i32 lanes (exact: the bytes widen to i16 and
/// `i32x4.dot_i16x8_s` multiplies and adds them in pairs in i32). Engines lower this to
/// `pmovsx` + `pmaddwd` on x86, fewer instructions than `i16x8.extmul` + pairwise adds.
#[inline(always)]
fn dot16_lanes(w: v128, x: v128) -> v128 {
    let lo = i32x4_dot_i16x8(i16x8_extend_low_i8x16(w), i16x8_extend_low_i8x16(x));
    let hi = i32x4_dot_i16x8(i16x8_extend_high_i8x16(w), i16x8_extend_high_i8x16(x));
    i32x4_add(lo, hi)
}

#[inline(always)]
fn hsum_i32(v: v128) -> i32 {
    let v = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let v = i32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
    i32x4_extract_lane::<0>(v)
}

/// Σ w·x over one 32-level block.
#[inline(always)]
fn block_dot(w: Levels, x: Levels) -> i32 {
    hsum_i32(i32x4_add(dot16_lanes(w.0, x.0), dot16_lanes(w.1, x.1)))
}

/// The sums of four i32x4 vectors, one per lane (integer, so exact in any order).
#[inline(always)]
fn hsum4(v: [v128; 4]) -> v128 {
    let lo01 = i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]);
    let hi01 = i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]);
    let lo23 = i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]);
    let hi23 = i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]);
    let (s01, s23) = (i32x4_add(lo01, hi01), i32x4_add(lo23, hi23));
    i32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(s01, s23),
        i32x4_shuffle::<2, 3, 6, 7>(s01, s23),
    )
}

#[inline(always)]
fn legacy_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8_0]; C],
    levels: impl Fn(&B) -> (Levels, f32),
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    if C == 1 && R.is_multiple_of(4) {
        // A decode product: four rows at a time share one cross-lane sum and keep their
        // running sums in the lanes of one vector. Each lane computes what the scalar dot
        // does for its row, (d_w * d_x) * sum added block by block, so the bits are the same.
        for g in (0..R).step_by(4) {
            let mut sums = f32x4_splat(0.0);
            for i in 0..x[0].len() {
                let xq = load_i8(&x[0][i].qs);
                let xd = f32x4_splat(f16_to_f32(x[0][i].d));
                let mut d = [0f32; 4];
                let dots: [v128; 4] = std::array::from_fn(|k| {
                    let (q, dk) = levels(&w[g + k][i]);
                    d[k] = dk;
                    i32x4_add(dot16_lanes(q.0, xq.0), dot16_lanes(q.1, xq.1))
                });
                let ints = f32x4_convert_i32x4(hsum4(dots));
                let scale = f32x4_mul(f32x4(d[0], d[1], d[2], d[3]), xd);
                sums = f32x4_add(sums, f32x4_mul(scale, ints));
            }
            acc[g][0] = f32x4_extract_lane::<0>(sums);
            acc[g + 1][0] = f32x4_extract_lane::<1>(sums);
            acc[g + 2][0] = f32x4_extract_lane::<2>(sums);
            acc[g + 3][0] = f32x4_extract_lane::<3>(sums);
        }
        return acc;
    }
    for i in 0..x[0].len() {
        let xs: [(Levels, f32); C] =
            std::array::from_fn(|c| (load_i8(&x[c][i].qs), f16_to_f32(x[c][i].d)));
        for r in 0..R {
            let (q, d) = levels(&w[r][i]);
            for c in 0..C {
                acc[r][c] += d * xs[c].1 * block_dot(q, xs[c].0) as f32;
            }
        }
    }
    acc
}

/// # Safety
/// None: SIMD128 is compiled in. `unsafe` to match the other kernel sets.
pub unsafe fn q8_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ8_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    legacy_tile(w, x, |b| (load_i8(&b.qs), f16_to_f32(b.d)))
}

/// The 32 levels of 16 packed nibbles looked up in a 16-entry table.
#[inline(always)]
fn table_levels(table: &[i8; 16], qs: &[u8; 16]) -> Levels {
    let t = load16(table);
    let (lo, hi) = nibbles(qs);
    (i8x16_swizzle(t, lo), i8x16_swizzle(t, hi))
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn iq4nl_tile<const R: usize, const C: usize>(
    w: [&[BlockIQ4NL]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    legacy_tile(w, x, |b| {
        (table_levels(&IQ4NL_VALUES, &b.qs), f16_to_f32(b.d))
    })
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn mxfp4_tile<const R: usize, const C: usize>(
    w: [&[BlockMXFP4]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    legacy_tile(w, x, |b| {
        (table_levels(&MXFP4_VALUES, &b.qs), e8m0_half(b.e))
    })
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q4_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    legacy_tile(w, x, |b| {
        let (lo, hi) = nibbles(&b.qs);
        let eight = i8x16_splat(8);
        (
            (i8x16_sub(lo, eight), i8x16_sub(hi, eight)),
            f16_to_f32(b.d),
        )
    })
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q5_0_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5_0]; R],
    x: [&[BlockQ8_0]; C],
) -> [[f32; C]; R] {
    let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    legacy_tile(w, x, |b| {
        let (lo, hi) = nibbles(&b.qs);
        // Level j's fifth bit is bit j of qh: all ones where it is set.
        let set = |a: u8, b: u8| {
            let bytes = u8x16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
            i8x16_ne(v128_and(bytes, bit), u8x16_splat(0))
        };
        let (set_lo, set_hi) = (set(b.qh[0], b.qh[1]), set(b.qh[2], b.qh[3]));
        // level - 16 as a signed byte: the nibble where the bit is set, the nibble with 0xF0
        // or-ed in (minus 16) where it is not.
        let f0 = u8x16_splat(0xF0);
        let q = (
            v128_or(lo, v128_andnot(f0, set_lo)),
            v128_or(hi, v128_andnot(f0, set_hi)),
        );
        (q, f16_to_f32(b.d))
    })
}

/// Q4_1 against Q8_1, block by block in the scalar dot's order and formula.
///
/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q4_1_q8_1(w: &[BlockQ4_1], x: &[BlockQ8_1]) -> f32 {
    w.iter()
        .zip(x)
        .map(|(w, x)| {
            let (lo, hi) = nibbles(&w.qs);
            let s = block_dot((lo, hi), load_i8(&x.qs));
            f16_to_f32(w.d) * f16_to_f32(x.d) * s as f32 + f16_to_f32(w.m) * f16_to_f32(x.s)
        })
        .sum()
}

/// Two 32-level sub-blocks of a Q4_K/Q5_K block (levels 0..=31, so they are valid `i8`).
type SubBlocks = (Levels, Levels);

/// The Q4_K/Q5_K tile: `meta` gives a block's `d`, `dmin` and packed scales, `levels(b, k)`
/// the levels of elements `64k..64k + 64` as sub-blocks `2k` and `2k + 1`.
#[inline(always)]
fn k4_tile<B, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[BlockQ8K]; C],
    meta: impl Fn(&B) -> (half::f16, half::f16, &[u8; 12]),
    levels: impl Fn(&B, usize) -> SubBlocks,
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        for r in 0..R {
            let b = &w[r][i];
            let (d, dmin, packed) = meta(b);
            let scale_min: [(u8, u8); 8] = std::array::from_fn(|j| scale_min_k4(j, packed));
            // Σ scale · (levels · x) in i32 lanes (exact), summed across lanes once.
            let mut lanes = [i32x4_splat(0); C];
            for k in 0..4 {
                let (l0, l1) = levels(b, k);
                let (s0, s1) = (
                    i32x4_splat(scale_min[2 * k].0 as i32),
                    i32x4_splat(scale_min[2 * k + 1].0 as i32),
                );
                for (c, lanes) in lanes.iter_mut().enumerate() {
                    let xq = &x[c][i].qs[64 * k..];
                    let (x0, x1) = (load_i8(xq), load_i8(&xq[32..]));
                    let p0 = i32x4_add(dot16_lanes(l0.0, x0.0), dot16_lanes(l0.1, x0.1));
                    let p1 = i32x4_add(dot16_lanes(l1.0, x1.0), dot16_lanes(l1.1, x1.1));
                    *lanes = i32x4_add(*lanes, i32x4_add(i32x4_mul(s0, p0), i32x4_mul(s1, p1)));
                }
            }
            let sum = lanes.map(hsum_i32);
            let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
            for c in 0..C {
                let xb = &x[c][i];
                let sum_min: i32 = (0..8)
                    .map(|j| {
                        let s = xb.bsums[2 * j] as i32 + xb.bsums[2 * j + 1] as i32;
                        scale_min[j].1 as i32 * s
                    })
                    .sum();
                acc[r][c] += xb.d * (d * sum[c] as f32 - dmin * sum_min as f32);
            }
        }
    }
    acc
}

/// Low and high nibbles of 32 bytes: levels `0..32` and `32..64` of a 64-element chunk.
#[inline(always)]
fn nibbles_32(q: &[u8]) -> SubBlocks {
    let (a, b) = (load16(&q[..16]), load16(&q[16..32]));
    let low = u8x16_splat(0x0F);
    (
        (v128_and(a, low), v128_and(b, low)),
        (u8x16_shr(a, 4), u8x16_shr(b, 4)),
    )
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q4k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ4K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    k4_tile(
        w,
        x,
        |b| (b.d, b.dmin, &b.scales),
        |b, k| nibbles_32(&b.qs[32 * k..]),
    )
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q5k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ5K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    k4_tile(
        w,
        x,
        |b| (b.d, b.dmin, &b.scales),
        |b, k| {
            let (lo, hi) = nibbles_32(&b.qs[32 * k..]);
            let qh = (load16(&b.qh[..16]), load16(&b.qh[16..]));
            // Level i of sub-block 2k + h takes bit 2k + h of qh[i] as its 0x10 bit.
            let fifth = |h: usize, v: v128| {
                let bit = v128_and(u8x16_shr(v, (2 * k + h) as u32), u8x16_splat(1));
                i8x16_shl(bit, 4)
            };
            (
                (v128_or(lo.0, fifth(0, qh.0)), v128_or(lo.1, fifth(0, qh.1))),
                (v128_or(hi.0, fifth(1, qh.0)), v128_or(hi.1, fifth(1, qh.1))),
            )
        },
    )
}

/// # Safety
/// As `q8_0_tile`.
pub unsafe fn q6k_tile<const R: usize, const C: usize>(
    w: [&[BlockQ6K]; R],
    x: [&[BlockQ8K]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    for i in 0..x[0].len() {
        for r in 0..R {
            let b = &w[r][i];
            // As in `k4_tile`: scaled sums in i32 lanes, one horizontal sum at the end.
            let mut lanes = [i32x4_splat(0); C];
            for n in 0..2 {
                let ql: [v128; 4] = std::array::from_fn(|j| load16(&b.ql[64 * n + 16 * j..]));
                let qh: [v128; 2] = std::array::from_fn(|j| load16(&b.qh[32 * n + 16 * j..]));
                for k in 0..4 {
                    // Element 128n + 32k + i: nibble k / 2 of ql[64n + 32(k % 2) + i], bits
                    // 2k..2k + 2 of qh[32n + i] above it, minus 32.
                    let levels: [v128; 2] = std::array::from_fn(|half| {
                        let l = ql[2 * (k % 2) + half];
                        let low = if k < 2 {
                            v128_and(l, u8x16_splat(0x0F))
                        } else {
                            u8x16_shr(l, 4)
                        };
                        let high = v128_and(u8x16_shr(qh[half], 2 * k as u32), u8x16_splat(3));
                        i8x16_sub(v128_or(low, i8x16_shl(high, 4)), i8x16_splat(32))
                    });
                    let g = 8 * n + 2 * k;
                    let (s0, s1) = (
                        i32x4_splat(b.scales[g] as i32),
                        i32x4_splat(b.scales[g + 1] as i32),
                    );
                    for (c, lanes) in lanes.iter_mut().enumerate() {
                        let xq = &x[c][i].qs[128 * n + 32 * k..];
                        let (x0, x1) = load_i8(xq);
                        let p = i32x4_add(
                            i32x4_mul(s0, dot16_lanes(levels[0], x0)),
                            i32x4_mul(s1, dot16_lanes(levels[1], x1)),
                        );
                        *lanes = i32x4_add(*lanes, p);
                    }
                }
            }
            let d = f16_to_f32(b.d);
            for c in 0..C {
                acc[r][c] += x[c][i].d * d * hsum_i32(lanes[c]) as f32;
            }
        }
    }
    acc
}

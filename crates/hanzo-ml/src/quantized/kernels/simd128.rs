//! WebAssembly SIMD128: the Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, IQ4_NL/MXFP4 and Q4_K/Q5_K/Q6_K kernels, in
//! a build compiled with the `simd128` target feature (see `cpu::simd::simd128`). Signed
//! bytes widen to i16 and `i32x4.dot_i16x8_s` sums their products in pairs into i32 lanes,
//! which is exact; each block's integer sum is then scaled in f32 by the scalar dot's own
//! formula, so every kernel here gives the scalar results bit for bit (as the NEON ones do).

use crate::cpu::simd::simd128::widen_f16;
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

/// `f16_to_f32` of four values at once, bit for bit the same.
#[inline(always)]
fn f16x4_to_f32(h: [half::f16; 4]) -> v128 {
    let h = h.map(|h| h.to_bits() as u32);
    widen_f16(u32x4(h[0], h[1], h[2], h[3]))
}

/// The first 16 bytes of `p` (which must hold that many).
#[inline(always)]
pub(super) fn load16<T>(p: &[T]) -> v128 {
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

/// `acc` + Σ u·x over 16 bytes in four i32 lanes, where every `u` is in 0..=127. With relaxed
/// SIMD this is `i32x4.relaxed_dot_i8x16_i7x16_add_s`, which x86 engines lower to
/// `pmaddubsw` + `pmaddwd` (no widening); its result is fixed, and exact, for such `u`: a pair
/// of products stays within i16 (2 · 128 · 127 < 2^15).
#[inline(always)]
pub(super) fn dot16_small(u: v128, x: v128, acc: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        i32x4_relaxed_dot_i8x16_i7x16_add(x, u, acc)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        i32x4_add(acc, dot16_lanes(u, x))
    }
}

#[inline(always)]
pub(super) fn hsum_i32(v: v128) -> i32 {
    let v = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let v = i32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
    i32x4_extract_lane::<0>(v)
}

/// Σ w·x over one 32-level block, in four i32 lanes.
#[inline(always)]
fn block_lanes(w: Levels, x: Levels) -> v128 {
    i32x4_add(dot16_lanes(w.0, x.0), dot16_lanes(w.1, x.1))
}

/// Σ w·x over one 32-level block.
#[inline(always)]
fn block_dot(w: Levels, x: Levels) -> i32 {
    hsum_i32(block_lanes(w, x))
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

/// A 32-level weight block of the legacy and table types, as the SIMD128 tiles read it: its
/// levels as signed bytes, its scale (and min) as the scalar dot converts them. Per block, the
/// scalar dot adds `(scale · d_x) · Σ levels·x`, plus `min · s_x` for the types with a min
/// (Q4_1, Q5_1), to a running sum; every tile here adds the same terms in the same order.
trait Legacy32: GgmlBlock<Dot: Act32> {
    const HAS_MIN: bool = false;
    /// For the types whose levels plus this offset lie in 0..=31 (every one but Q8_0 and the
    /// table types): `offset_levels` gives them so, and the relaxed-SIMD build multiplies
    /// them as bytes, then takes `offset · Σx` off.
    const OFFSET: Option<i32> = None;
    fn levels(&self) -> Levels;
    fn offset_levels(&self) -> Levels {
        self.levels()
    }
    fn scale(&self) -> f32;
    /// Four blocks' scales, one per lane.
    fn scales(b: [&Self; 4]) -> v128 {
        f32x4(b[0].scale(), b[1].scale(), b[2].scale(), b[3].scale())
    }
    fn min(&self) -> f32 {
        0.0
    }
    fn mins(b: [&Self; 4]) -> v128 {
        f32x4(b[0].min(), b[1].min(), b[2].min(), b[3].min())
    }
}

/// Q8_0 and Q8_1 activation blocks: levels, f16 scale and (Q8_1) f16 sum.
trait Act32 {
    fn qs(&self) -> &[i8; 32];
    fn d(&self) -> half::f16;
    fn s(&self) -> half::f16;
}

impl Act32 for BlockQ8_0 {
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
    fn d(&self) -> half::f16 {
        self.d
    }
    fn s(&self) -> half::f16 {
        unreachable!("Q8_0 carries no sum")
    }
}

impl Act32 for BlockQ8_1 {
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
    fn d(&self) -> half::f16 {
        self.d
    }
    fn s(&self) -> half::f16 {
        self.s
    }
}

/// x's 32 levels widened to i16 once, shared by every weight row of a decode tile.
#[inline(always)]
fn widen(x: Levels) -> [v128; 4] {
    [
        i16x8_extend_low_i8x16(x.0),
        i16x8_extend_high_i8x16(x.0),
        i16x8_extend_low_i8x16(x.1),
        i16x8_extend_high_i8x16(x.1),
    ]
}

/// Σ w·x over a block whose x is already widened, in four i32 lanes (exact).
#[inline(always)]
fn dot_widened(w: Levels, x: &[v128; 4]) -> v128 {
    let a = i32x4_dot_i16x8(i16x8_extend_low_i8x16(w.0), x[0]);
    let b = i32x4_dot_i16x8(i16x8_extend_high_i8x16(w.0), x[1]);
    let c = i32x4_dot_i16x8(i16x8_extend_low_i8x16(w.1), x[2]);
    let d = i32x4_dot_i16x8(i16x8_extend_high_i8x16(w.1), x[3]);
    i32x4_add(i32x4_add(a, b), i32x4_add(c, d))
}

/// Σ u·x over a block, `u` in 0..=127 (see `dot16_small`), in four i32 lanes.
#[inline(always)]
fn dot_small(u: Levels, x: Levels) -> v128 {
    dot16_small(u.1, x.1, dot16_small(u.0, x.0, i32x4_splat(0)))
}

/// Σ x over a block, in four i32 lanes (engines lower the pairwise sums to `pmaddubsw` and
/// `pmaddwd` with constant ones).
#[inline(always)]
fn sum_lanes(x: Levels) -> v128 {
    let pairs = i16x8_add(
        i16x8_extadd_pairwise_i8x16(x.0),
        i16x8_extadd_pairwise_i8x16(x.1),
    );
    i32x4_extadd_pairwise_i16x8(pairs)
}

/// The integer sums Σ level·x of four rows' blocks against one activation block, one per lane.
#[inline(always)]
fn rows_ints<B: Legacy32>(b: [&B; 4], x: Levels) -> v128 {
    if let (true, Some(offset)) = (cfg!(target_feature = "relaxed-simd"), B::OFFSET) {
        let ints = hsum4(b.map(|b| dot_small(b.offset_levels(), x)));
        if offset == 0 {
            return ints;
        }
        return i32x4_sub(ints, i32x4_splat(offset * hsum_i32(sum_lanes(x))));
    }
    let xw = widen(x);
    hsum4(b.map(|b| dot_widened(b.levels(), &xw)))
}

/// The integer sums Σ level·x of one block against four activation blocks, one per lane.
#[inline(always)]
fn columns_ints<B: Legacy32>(b: &B, x: [Levels; 4]) -> v128 {
    if let (true, Some(offset)) = (cfg!(target_feature = "relaxed-simd"), B::OFFSET) {
        let u = b.offset_levels();
        let ints = hsum4(x.map(|x| dot_small(u, x)));
        if offset == 0 {
            return ints;
        }
        let sums = hsum4(x.map(sum_lanes));
        return i32x4_sub(ints, i32x4_mul(i32x4_splat(offset), sums));
    }
    let q = b.levels();
    hsum4(x.map(|x| block_lanes(q, x)))
}

/// Four rows against one activation row, each row's running sum in one lane. The lanes are
/// rows, so the per-block terms (scales, mins, integer sums) are vectors across rows and the
/// one cross-lane step per block, `hsum4`, serves all four.
#[inline(always)]
fn four_rows<B: Legacy32>(w: [&[B]; 4], x: &[B::Dot]) -> v128 {
    let w = w.map(|w| &w[..x.len()]);
    let mut sums = f32x4_splat(0.0);
    for (i, xb) in x.iter().enumerate() {
        let b = [&w[0][i], &w[1][i], &w[2][i], &w[3][i]];
        let ints = f32x4_convert_i32x4(rows_ints(b, load_i8(xb.qs())));
        let scale = f32x4_mul(B::scales(b), f32x4_splat(f16_to_f32(xb.d())));
        let mut term = f32x4_mul(scale, ints);
        if B::HAS_MIN {
            let min = f32x4_mul(B::mins(b), f32x4_splat(f16_to_f32(xb.s())));
            term = f32x4_add(term, min);
        }
        sums = f32x4_add(sums, term);
    }
    sums
}

/// One row against four activation rows, each column's running sum in one lane (the prefill
/// tile's form of `four_rows`).
#[inline(always)]
fn four_columns<B: Legacy32>(w: &[B], x: [&[B::Dot]; 4]) -> v128 {
    let x = x.map(|x| &x[..w.len()]);
    let mut sums = f32x4_splat(0.0);
    for (i, b) in w.iter().enumerate() {
        let xb = [&x[0][i], &x[1][i], &x[2][i], &x[3][i]];
        let ints = f32x4_convert_i32x4(columns_ints(b, xb.map(|xb| load_i8(xb.qs()))));
        let xd = f16x4_to_f32(xb.map(|xb| xb.d()));
        let mut term = f32x4_mul(f32x4_mul(f32x4_splat(b.scale()), xd), ints);
        if B::HAS_MIN {
            let xs = f16x4_to_f32(xb.map(|xb| xb.s()));
            term = f32x4_add(term, f32x4_mul(f32x4_splat(b.min()), xs));
        }
        sums = f32x4_add(sums, term);
    }
    sums
}

fn lanes(v: v128) -> [f32; 4] {
    [
        f32x4_extract_lane::<0>(v),
        f32x4_extract_lane::<1>(v),
        f32x4_extract_lane::<2>(v),
        f32x4_extract_lane::<3>(v),
    ]
}

#[inline(always)]
fn legacy_tile<B: Legacy32, const R: usize, const C: usize>(
    w: [&[B]; R],
    x: [&[B::Dot]; C],
) -> [[f32; C]; R] {
    check_tile!(w, x);
    let mut acc = [[0f32; C]; R];
    if C == 1 && R.is_multiple_of(4) {
        for g in (0..R).step_by(4) {
            let sums = lanes(four_rows(std::array::from_fn(|k| w[g + k]), x[0]));
            for k in 0..4 {
                acc[g + k][0] = sums[k];
            }
        }
    } else if C == 4 {
        for r in 0..R {
            acc[r].copy_from_slice(&lanes(four_columns(w[r], std::array::from_fn(|c| x[c]))));
        }
    } else {
        for (r, acc) in acc.iter_mut().enumerate() {
            for (c, acc) in acc.iter_mut().enumerate() {
                for (b, xb) in w[r].iter().zip(x[c]) {
                    let s = block_dot(b.levels(), load_i8(xb.qs()));
                    let mut term = b.scale() * f16_to_f32(xb.d()) * s as f32;
                    if B::HAS_MIN {
                        term += b.min() * f16_to_f32(xb.s());
                    }
                    *acc += term;
                }
            }
        }
    }
    acc
}

/// A type whose scale is the f16 `d`: four of them convert in one vector.
macro_rules! f16_scale {
    () => {
        fn scale(&self) -> f32 {
            f16_to_f32(self.d)
        }
        fn scales(b: [&Self; 4]) -> v128 {
            f16x4_to_f32(b.map(|b| b.d))
        }
    };
}

/// A type with a min, the f16 `m` (Q4_1, Q5_1).
macro_rules! f16_min {
    () => {
        fn min(&self) -> f32 {
            f16_to_f32(self.m)
        }
        fn mins(b: [&Self; 4]) -> v128 {
            f16x4_to_f32(b.map(|b| b.m))
        }
    };
}

impl Legacy32 for BlockQ8_0 {
    fn levels(&self) -> Levels {
        load_i8(&self.qs)
    }
    f16_scale!();
}

impl Legacy32 for BlockIQ4NL {
    fn levels(&self) -> Levels {
        table_levels(&IQ4NL_VALUES, &self.qs)
    }
    f16_scale!();
}

impl Legacy32 for BlockMXFP4 {
    fn levels(&self) -> Levels {
        table_levels(&MXFP4_VALUES, &self.qs)
    }
    fn scale(&self) -> f32 {
        e8m0_half(self.e)
    }
}

impl Legacy32 for BlockQ4_0 {
    const OFFSET: Option<i32> = Some(8);
    fn levels(&self) -> Levels {
        let (lo, hi) = nibbles(&self.qs);
        let eight = i8x16_splat(8);
        (i8x16_sub(lo, eight), i8x16_sub(hi, eight))
    }
    fn offset_levels(&self) -> Levels {
        nibbles(&self.qs)
    }
    f16_scale!();
}

impl Legacy32 for BlockQ4_1 {
    const HAS_MIN: bool = true;
    const OFFSET: Option<i32> = Some(0);
    fn levels(&self) -> Levels {
        nibbles(&self.qs)
    }
    f16_scale!();
    f16_min!();
}

/// All ones in byte j where bit j of the 32-bit `qh` is set: levels 0..16, then 16..32.
#[inline(always)]
fn fifth_bits(qh: [u8; 4]) -> (v128, v128) {
    let v = u32x4_splat(u32::from_le_bytes(qh));
    let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    let lo = i8x16_shuffle::<0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1>(v, v);
    let hi = i8x16_shuffle::<2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3>(v, v);
    let set = |bytes| i8x16_eq(v128_and(bytes, bit), bit);
    (set(lo), set(hi))
}

/// The 5-bit levels (0..=31) of Q5_0/Q5_1 nibbles and fifth bits.
#[inline(always)]
fn five_bit_levels(qs: &[u8; 16], qh: [u8; 4]) -> Levels {
    let (lo, hi) = nibbles(qs);
    let (set_lo, set_hi) = fifth_bits(qh);
    let sixteen = u8x16_splat(0x10);
    (
        v128_or(lo, v128_and(set_lo, sixteen)),
        v128_or(hi, v128_and(set_hi, sixteen)),
    )
}

impl Legacy32 for BlockQ5_0 {
    const OFFSET: Option<i32> = Some(16);
    fn offset_levels(&self) -> Levels {
        five_bit_levels(&self.qs, self.qh)
    }
    fn levels(&self) -> Levels {
        let (lo, hi) = nibbles(&self.qs);
        let (set_lo, set_hi) = fifth_bits(self.qh);
        // level - 16 as a signed byte: the nibble where the bit is set, the nibble with 0xF0
        // or-ed in (minus 16) where it is not.
        let f0 = u8x16_splat(0xF0);
        (
            v128_or(lo, v128_andnot(f0, set_lo)),
            v128_or(hi, v128_andnot(f0, set_hi)),
        )
    }
    f16_scale!();
}

impl Legacy32 for BlockQ5_1 {
    const HAS_MIN: bool = true;
    const OFFSET: Option<i32> = Some(0);
    fn levels(&self) -> Levels {
        five_bit_levels(&self.qs, self.qh)
    }
    f16_scale!();
    f16_min!();
}

/// The 32 levels of 16 packed nibbles looked up in a 16-entry table.
#[inline(always)]
fn table_levels(table: &[i8; 16], qs: &[u8; 16]) -> Levels {
    let t = load16(table);
    let (lo, hi) = nibbles(qs);
    (i8x16_swizzle(t, lo), i8x16_swizzle(t, hi))
}

macro_rules! legacy_kernels {
    ($($tile:ident: $block:ty),*) => {$(
        /// # Safety
        /// None: SIMD128 is compiled in. `unsafe` to match the other kernel sets.
        pub unsafe fn $tile<const R: usize, const C: usize>(
            w: [&[$block]; R],
            x: [&[<$block as GgmlBlock>::Dot]; C],
        ) -> [[f32; C]; R] {
            legacy_tile(w, x)
        }
    )*};
}
legacy_kernels!(q8_0_tile: BlockQ8_0, iq4nl_tile: BlockIQ4NL, mxfp4_tile: BlockMXFP4,
    q4_0_tile: BlockQ4_0, q5_0_tile: BlockQ5_0, q4_1_tile: BlockQ4_1, q5_1_tile: BlockQ5_1);

/// One activation block quantized as ggml's reference does it (`quantize_q8`): the scale is the
/// largest magnitude over 127, and each value times the scale's reciprocal is rounded half
/// away from zero. Returns the scale and the 32 levels, or `None` where a value or the
/// reciprocal is not finite: there the reference's saturating casts decide the bytes.
#[inline(always)]
fn quantize_block(x: &[f32]) -> Option<(f32, [v128; 2])> {
    let x = &x[..32];
    let v: [v128; 8] = std::array::from_fn(|i| load16(&x[4 * i..]));
    // `f32x4.max` keeps a NaN, so a NaN anywhere fails the finiteness check below.
    let m = v
        .iter()
        .fold(f32x4_splat(0.0), |m, &v| f32x4_max(m, f32x4_abs(v)));
    if !i32x4_all_true(f32x4_lt(m, f32x4_splat(f32::INFINITY))) {
        return None;
    }
    let m = f32x4_max(m, i32x4_shuffle::<2, 3, 0, 1>(m, m));
    let m = f32x4_max(m, i32x4_shuffle::<1, 0, 3, 2>(m, m));
    let d = f32x4_extract_lane::<0>(m) / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    if !id.is_finite() {
        return None;
    }
    let id = f32x4_splat(id);
    let q = v.map(|v| {
        let v = f32x4_mul(v, id);
        // Half away from zero: the truncation, plus one step away from zero where the part
        // cut off is at least a half (both exact).
        let t = f32x4_trunc(v);
        let away = f32x4_ge(f32x4_abs(f32x4_sub(v, t)), f32x4_splat(0.5));
        let one = v128_or(v128_and(v, u32x4_splat(0x8000_0000)), f32x4_splat(1.0));
        i32x4_trunc_sat_f32x4(f32x4_add(t, v128_and(away, one)))
    });
    let pairs: [v128; 4] = std::array::from_fn(|i| i16x8_narrow_i32x4(q[2 * i], q[2 * i + 1]));
    Some((
        d,
        [
            i8x16_narrow_i16x8(pairs[0], pairs[1]),
            i8x16_narrow_i16x8(pairs[2], pairs[3]),
        ],
    ))
}

fn store_levels(qs: &mut [i8; 32], q: [v128; 2]) {
    // SAFETY: `qs` holds 32 bytes; v128_store has no alignment need.
    unsafe {
        v128_store(qs.as_mut_ptr().cast(), q[0]);
        v128_store(qs.as_mut_ptr().add(16).cast(), q[1]);
    }
}

/// `BlockQ8_0::quantize`, byte for byte.
pub fn quantize_q8_0(xs: &[f32], out: &mut [BlockQ8_0]) {
    for (x, b) in xs.chunks_exact(32).zip(out) {
        match quantize_block(x) {
            Some((d, q)) => {
                store_levels(&mut b.qs, q);
                b.d = half::f16::from_f32(d);
            }
            None => quantize_q8_0_ref(x, std::slice::from_mut(b)),
        }
    }
}

/// `BlockQ8_1::quantize`, byte for byte: Q8_0's levels and scale, and their sum times the scale.
pub fn quantize_q8_1(xs: &[f32], out: &mut [BlockQ8_1]) {
    for (x, b) in xs.chunks_exact(32).zip(out) {
        match quantize_block(x) {
            Some((d, q)) => {
                store_levels(&mut b.qs, q);
                let sum = hsum_i32(sum_lanes((q[0], q[1])));
                b.d = half::f16::from_f32(d);
                b.s = half::f16::from_f32(sum as f32 * d);
            }
            None => BlockQ8_1::quantize(x, std::slice::from_mut(b)),
        }
    }
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
                    let (p0, p1) = (dot_small(l0, x0), dot_small(l1, x1));
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

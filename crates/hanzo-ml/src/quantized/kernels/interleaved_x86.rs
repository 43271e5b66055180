//! x86 kernels over eight interleaved rows (see `quantized::format::interleaved`): each block's
//! levels load or expand into eight vectors, vector `t` holding levels `4t..4t + 4` of every
//! row, and one multiply-add of bytes against those 4 activation bytes broadcast advances all
//! eight rows. One driver (`dot_with`) serves every type; `RowSums` is the integer step: on
//! AVX2 each type's `maddubs` form (`BlockDot`; signed levels need the sign trick there), with
//! VNNI (`dot_avx512vnni`, `dot_avxvnni`) one `vpdpbusd` a step on every type's unsigned
//! levels. The VNNI form took the one-thread kernels from cache from 33–36 to 40–42 GB/s for
//! Q4_0/Q4_1/Q5_0, 51 to 55 for Q8_0 and 23 to 38 for IQ4_NL on a Zen 4 core
//! (`examples/decode_kernels.rs`).

use super::avx2::ByteDot;
use super::interleaved::Ahead;
use crate::quantized::format::interleaved::Interleave;
use crate::quantized::format::interleaved::{
    BlockIQ4NLx8, BlockMXFP4x8, BlockQ4_0x8, BlockQ4_1x8, BlockQ5_0x8, BlockQ5_1x8, BlockQ8_0x8,
    XRow, MXFP4_LEVELS, ROWS,
};
use crate::quantized::format::interleaved_iq4xs::IQ4XS_TABLE;
use crate::quantized::format::{BlockMXFP4, IQ4NL_VALUES};
use std::arch::x86_64::*;

/// A repacked block's eight steps of unsigned levels.
pub(super) trait Expand: bytemuck::Pod {
    const OFFSET: i32;
    /// # Safety
    /// AVX2 must be enabled in the caller.
    unsafe fn expand(&self) -> [__m256i; 8];
    /// The eight rows' scales.
    ///
    /// # Safety
    /// AVX2 and F16C must be enabled in the caller.
    unsafe fn scales(&self) -> __m256;
    /// The rows' mins, for the types that have them.
    fn mins(&self) -> Option<&[half::f16; ROWS]> {
        None
    }
}

/// Eight f16 values widened.
///
/// # Safety
/// F16C must be enabled in the caller.
#[inline(always)]
pub(super) unsafe fn halves(h: &[half::f16; ROWS]) -> __m256 {
    // SAFETY: the caller enables F16C; the load reads the 16 bytes of `h`.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i)) }
}

/// The low four bits of all eight steps: step `p` in the low nibbles of `qs[32p..]`, step
/// `p + 4` in the high ones.
///
/// # Safety
/// AVX2 must be enabled in the caller.
#[inline(always)]
pub(super) unsafe fn nibble_steps(qs: &[u8; 128]) -> [__m256i; 8] {
    // SAFETY: the caller enables AVX2; each load reads 32 of the 128 bytes.
    unsafe {
        let m15 = _mm256_set1_epi8(15);
        let raw: [__m256i; 4] =
            std::array::from_fn(|p| _mm256_loadu_si256(qs.as_ptr().add(32 * p) as *const __m256i));
        std::array::from_fn(|t| {
            if t < 4 {
                _mm256_and_si256(raw[t], m15)
            } else {
                _mm256_and_si256(_mm256_srli_epi16::<4>(raw[t - 4]), m15)
            }
        })
    }
}

/// The 5-bit values of all eight steps: the nibbles, and bit `t` of each `qh` byte as step
/// `t`'s fifth bit.
///
/// # Safety
/// AVX2 must be enabled in the caller.
#[inline(always)]
unsafe fn five_bit_steps(qs: &[u8; 128], qh: &[u8; 32]) -> [__m256i; 8] {
    // SAFETY: the caller enables AVX2; the load reads the 32 bytes of `qh`.
    unsafe {
        let mut u = nibble_steps(qs);
        let qh = _mm256_loadu_si256(qh.as_ptr() as *const __m256i);
        // Bit t of each byte is step t's fifth bit: move it to bit 4 (16-bit shifts of a
        // masked byte never carry into the next byte).
        let bit = |t: i32| _mm256_and_si256(qh, _mm256_set1_epi8(1 << t));
        let fifth = [
            _mm256_slli_epi16::<4>(bit(0)),
            _mm256_slli_epi16::<3>(bit(1)),
            _mm256_slli_epi16::<2>(bit(2)),
            _mm256_slli_epi16::<1>(bit(3)),
            bit(4),
            _mm256_srli_epi16::<1>(bit(5)),
            _mm256_srli_epi16::<2>(bit(6)),
            _mm256_srli_epi16::<3>(bit(7)),
        ];
        for (u, f) in u.iter_mut().zip(fifth) {
            *u = _mm256_or_si256(*u, f);
        }
        u
    }
}

/// `Expand` for the unsigned layouts with f16 scales: the steps `$steps` computes from the
/// block `$b`, the scales widened, and the mins where the layout has them (`$min`).
macro_rules! unsigned_expand {
    ($x8:ty, $offset:expr, $b:ident => $steps:expr $(, $min:ident)?) => {
        impl Expand for $x8 {
            const OFFSET: i32 = $offset;

            #[inline(always)]
            unsafe fn expand(&self) -> [__m256i; 8] {
                let $b = self;
                // SAFETY: forwarded from the caller.
                unsafe { $steps }
            }

            #[inline(always)]
            unsafe fn scales(&self) -> __m256 {
                // SAFETY: forwarded from the caller.
                unsafe { halves(&self.d) }
            }

            $(
                fn mins(&self) -> Option<&[half::f16; ROWS]> {
                    Some(&self.$min)
                }
            )?
        }
    };
}
unsigned_expand!(BlockQ4_0x8, 8, b => nibble_steps(&b.qs));
unsigned_expand!(BlockQ4_1x8, 0, b => nibble_steps(&b.qs), m);
unsigned_expand!(BlockQ5_0x8, 16, b => five_bit_steps(&b.qs, &b.qh));
unsigned_expand!(BlockQ5_1x8, 0, b => five_bit_steps(&b.qs, &b.qh), m);

impl Expand for BlockQ8_0x8 {
    const OFFSET: i32 = 128;

    /// The unsigned levels `q + 128`, for the GEMM panels (decode reads the signed bytes in
    /// `dot_q8_0`).
    #[inline(always)]
    unsafe fn expand(&self) -> [__m256i; 8] {
        // SAFETY: the caller enables AVX2; load `t` reads bytes `32t..32t + 32` of the 256.
        // (A loop, not a closure, which would not inherit the caller's target features.)
        unsafe {
            let flip = _mm256_set1_epi8(i8::MIN);
            let mut u = [_mm256_setzero_si256(); 8];
            for (t, u) in u.iter_mut().enumerate() {
                let q = _mm256_loadu_si256(self.qs.as_ptr().add(32 * t) as *const __m256i);
                *u = _mm256_xor_si256(q, flip);
            }
            u
        }
    }

    #[inline(always)]
    unsafe fn scales(&self) -> __m256 {
        // SAFETY: forwarded from the caller.
        unsafe { halves(&self.d) }
    }
}

/// A 16-byte lookup table in both 128-bit lanes, for `shuffle_epi8` lookups.
///
/// # Safety
/// AVX2 must be enabled in the caller.
#[inline(always)]
pub(super) unsafe fn lane_table(table: &[u8; 16]) -> __m256i {
    // SAFETY: the load reads the table's 16 bytes; the caller enables AVX2.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(table.as_ptr() as *const __m128i)) }
}

/// IQ4_NL's levels, signed, in both lanes.
///
/// # Safety
/// AVX2 must be enabled in the caller.
#[inline(always)]
pub(super) unsafe fn iq4nl_table() -> __m256i {
    // SAFETY: forwarded from the caller.
    unsafe { lane_table(bytemuck::cast_ref(&IQ4NL_VALUES)) }
}

impl Expand for BlockIQ4NLx8 {
    const OFFSET: i32 = 128;

    /// The table levels `+ 128`, for the GEMM panels (decode looks them up in `step`).
    #[inline(always)]
    unsafe fn expand(&self) -> [__m256i; 8] {
        // SAFETY: forwarded from the caller.
        unsafe {
            // IQ4_NL's levels + 128 (IQ4_XS's table is IQ4_NL's).
            let table = lane_table(&IQ4XS_TABLE.unsigned);
            let mut u = nibble_steps(&self.qs);
            for u in u.iter_mut() {
                *u = _mm256_shuffle_epi8(table, *u);
            }
            u
        }
    }

    #[inline(always)]
    unsafe fn scales(&self) -> __m256 {
        // SAFETY: forwarded from the caller.
        unsafe { halves(&self.d) }
    }
}

impl Expand for BlockMXFP4x8 {
    const OFFSET: i32 = <BlockMXFP4 as Interleave>::OFFSET;

    #[inline(always)]
    unsafe fn expand(&self) -> [__m256i; 8] {
        // SAFETY: forwarded from the caller.
        unsafe {
            let table = lane_table(&MXFP4_LEVELS);
            let mut u = nibble_steps(&self.qs);
            for u in u.iter_mut() {
                *u = _mm256_shuffle_epi8(table, *u);
            }
            u
        }
    }

    /// `e8m0_half` of each exponent, as bits: `(e − 1) << 23`, or the subnormals
    /// `0x200000 << e` for `e` < 2.
    #[inline(always)]
    unsafe fn scales(&self) -> __m256 {
        // SAFETY: the caller enables AVX2; the load reads the 8 bytes of `e`.
        unsafe {
            let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(self.e.as_ptr() as *const __m128i));
            let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
            let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
            let is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
            _mm256_castsi256_ps(_mm256_blendv_epi8(normal, small, is_small))
        }
    }
}

/// The eight steps stored one after the other (a GEMM panel's layout).
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn expand_into<B: Expand>(b: &B, out: &mut [u8; 256]) {
    // SAFETY: AVX2 is enabled; store `t` writes bytes `32t..32t + 32` of the 256.
    unsafe {
        for (t, v) in b.expand().into_iter().enumerate() {
            _mm256_storeu_si256(out.as_mut_ptr().add(32 * t) as *mut __m256i, v);
        }
    }
}

/// The integer part of the decode kernel for one block type: what it keeps of a block across
/// the activation rows, and that block's eight row sums `Σ level·x` with one activation block.
pub(super) trait BlockDot: Expand {
    type Levels;
    /// # Safety
    /// AVX2 must be enabled in the caller.
    unsafe fn levels(&self) -> Self::Levels;
    /// The exact sums, one per row lane. `x` points at the activation block's 32 levels,
    /// `sum` is their sum.
    ///
    /// # Safety
    /// AVX2 must be enabled in the caller; `x` is readable for 32 bytes.
    unsafe fn sums(levels: &Self::Levels, x: *const i8, sum: i32) -> __m256i;

    /// `sums` of this block with `C` activation blocks at once.
    ///
    /// # Safety
    /// As for `sums`, for every `x[c]`.
    #[inline(always)]
    unsafe fn sums_many<const C: usize>(&self, x: [*const i8; C], sum: [i32; C]) -> [__m256i; C] {
        // SAFETY: forwarded from the caller. (A loop, not `array::from_fn`: a closure would
        // not inherit the caller's target features, and the intrinsics in it would become
        // calls.)
        unsafe {
            let levels = self.levels();
            let mut s = [_mm256_setzero_si256(); C];
            for c in 0..C {
                s[c] = Self::sums(&levels, x[c], sum[c]);
            }
            s
        }
    }
}

/// 4 activation bytes at `x + 4t`, broadcast to every lane.
///
/// # Safety
/// AVX2 must be enabled in the caller; `x` is readable for `4t + 4` bytes.
#[inline(always)]
pub(super) unsafe fn x4(x: *const i8, t: usize) -> __m256i {
    // SAFETY: forwarded from the caller; the read is unaligned.
    unsafe { _mm256_set1_epi32((x.add(4 * t) as *const i32).read_unaligned()) }
}

/// Unsigned levels `u = level + OFFSET` (at most 31): `maddubs` straight against the
/// activation, four products summed per i16 lane (|u| ≤ 31, |x| ≤ 127: ≤ 31,496), then i32,
/// less `OFFSET · Σ x`.
#[inline(always)]
unsafe fn unsigned_sums<B: Expand>(u: &[__m256i; 8], x: *const i8, sum: i32) -> __m256i {
    // SAFETY: forwarded from the caller.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let p: [__m256i; 8] = std::array::from_fn(|t| _mm256_maddubs_epi16(u[t], x4(x, t)));
        let lo = _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
        let hi = _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7]));
        let s = _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
        _mm256_sub_epi32(s, _mm256_set1_epi32(B::OFFSET * sum))
    }
}

/// The types stored as unsigned levels: their expansion, then `unsigned_sums`.
macro_rules! unsigned_block_dot {
    ($($x8:ty),+) => {$(
        impl BlockDot for $x8 {
            type Levels = [__m256i; 8];

            #[inline(always)]
            unsafe fn levels(&self) -> Self::Levels {
                // SAFETY: forwarded from the caller.
                unsafe { self.expand() }
            }

            #[inline(always)]
            unsafe fn sums(u: &Self::Levels, x: *const i8, sum: i32) -> __m256i {
                // SAFETY: forwarded from the caller.
                unsafe { unsigned_sums::<Self>(u, x, sum) }
            }
        }
    )+};
}
unsigned_block_dot!(
    BlockQ4_0x8,
    BlockQ4_1x8,
    BlockQ5_0x8,
    BlockQ5_1x8,
    BlockMXFP4x8
);

/// A repacked block whose levels are signed bytes, step by step.
trait SignedSteps: Expand {
    /// The signed levels of step `t`.
    ///
    /// # Safety
    /// AVX2 must be enabled in the caller; `t < 8`.
    unsafe fn step(&self, t: usize) -> __m256i;
}

impl SignedSteps for BlockQ8_0x8 {
    #[inline(always)]
    unsafe fn step(&self, t: usize) -> __m256i {
        // SAFETY: the caller enables AVX2; the load reads bytes `32t..32t + 32` of the 256.
        unsafe { _mm256_loadu_si256(self.qs.as_ptr().add(32 * t) as *const __m256i) }
    }
}

impl SignedSteps for BlockIQ4NLx8 {
    #[inline(always)]
    unsafe fn step(&self, t: usize) -> __m256i {
        // SAFETY: forwarded from the caller.
        unsafe { iq4nl_step(&self.qs, t) }
    }
}

/// Step `t`'s signed IQ4_NL levels of nibble planes laid out as `BlockIQ4NLx8`'s.
///
/// # Safety
/// AVX2 must be enabled in the caller; `t < 8`.
#[inline(always)]
unsafe fn iq4nl_step(qs: &[u8; 128], t: usize) -> __m256i {
    // SAFETY: forwarded from the caller.
    unsafe { table_step(qs, t, iq4nl_table()) }
}

/// Step `t`'s levels from `table` (16 bytes in each lane) of nibble planes laid out as
/// `BlockIQ4NLx8`'s.
///
/// # Safety
/// AVX2 must be enabled in the caller; `t < 8`.
#[inline(always)]
pub(super) unsafe fn table_step(qs: &[u8; 128], t: usize, table: __m256i) -> __m256i {
    // SAFETY: the caller enables AVX2; the load reads bytes `32 (t % 4)..` + 32 of the 128.
    unsafe {
        let raw = _mm256_loadu_si256(qs.as_ptr().add(32 * (t % 4)) as *const __m256i);
        let nibble = if t < 4 {
            raw
        } else {
            _mm256_srli_epi16::<4>(raw)
        };
        _mm256_shuffle_epi8(table, _mm256_and_si256(nibble, _mm256_set1_epi8(15)))
    }
}

/// Signed levels (Q8_0's bytes, IQ4_NL's looked-up table values) stay signed: `u = q + 128`
/// would overflow `maddubs`' pair sums. `maddubs` takes `|q|` as its unsigned operand and the
/// broadcast activation bytes carrying `q`'s sign (`sign_epi8`), so every pair sum stays
/// within 2 · 128 · 127 (a level of -128 gives `|q|` = 0x80, read unsigned as 128; activation
/// levels are within ±127, so negating them is exact). The sums are `Σ q·x` itself, the
/// integers `dot_scalar` reaches through `Σ (q + 128)·x - 128 · Σ x`.
macro_rules! signed_block_dot {
    ($($x8:ty),+) => {$(
        impl BlockDot for $x8 {
            /// The signed levels and their absolute values, step by step.
            type Levels = ([__m256i; 8], [__m256i; 8]);

            #[inline(always)]
            unsafe fn levels(&self) -> Self::Levels {
                // SAFETY: forwarded from the caller.
                unsafe {
                    let mut q = [_mm256_setzero_si256(); 8];
                    for (t, q) in q.iter_mut().enumerate() {
                        *q = self.step(t);
                    }
                    (q, q.map(|q| _mm256_sign_epi8(q, q)))
                }
            }

            #[inline(always)]
            unsafe fn sums((q, q_abs): &Self::Levels, x: *const i8, _sum: i32) -> __m256i {
                // SAFETY: forwarded from the caller.
                unsafe {
                    let ones = _mm256_set1_epi16(1);
                    let mut s = _mm256_setzero_si256();
                    for t in 0..8 {
                        let pairs =
                            _mm256_maddubs_epi16(q_abs[t], _mm256_sign_epi8(x4(x, t), q[t]));
                        s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs, ones));
                    }
                    s
                }
            }

            /// Step by step across the activation rows: only one step's levels are live at a
            /// time, so the `C` sums and the levels fit the sixteen registers (all sixteen
            /// vectors of levels held across the rows spill).
            #[inline(always)]
            unsafe fn sums_many<const C: usize>(
                &self,
                x: [*const i8; C],
                _: [i32; C],
            ) -> [__m256i; C] {
                // SAFETY: the caller enables AVX2 and makes every `x[c]` readable for 32
                // bytes; `step` reads inside the block.
                unsafe {
                    let ones = _mm256_set1_epi16(1);
                    let mut s = [_mm256_setzero_si256(); C];
                    for t in 0..8 {
                        let q = self.step(t);
                        let q_abs = _mm256_sign_epi8(q, q);
                        for c in 0..C {
                            let pairs =
                                _mm256_maddubs_epi16(q_abs, _mm256_sign_epi8(x4(x[c], t), q));
                            s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(pairs, ones));
                        }
                    }
                    s
                }
            }
        }
    )+};
}
signed_block_dot!(BlockQ8_0x8, BlockIQ4NLx8);

/// How a block's eight integer row sums are formed against `C` activation blocks.
pub(super) trait RowSums<B: Expand> {
    /// # Safety
    /// The implementation's CPU features must be enabled in the caller; every `x[c]` is
    /// readable for 32 bytes and `sum[c]` is the sum of those 32 levels.
    unsafe fn sums<const C: usize>(b: &B, x: [*const i8; C], sum: [i32; C]) -> [__m256i; C];
}

/// AVX2: each type's `maddubs` form (`BlockDot`), which keeps every pair sum within i16.
pub(super) struct Maddubs;

impl<B: BlockDot> RowSums<B> for Maddubs {
    #[inline(always)]
    unsafe fn sums<const C: usize>(b: &B, x: [*const i8; C], sum: [i32; C]) -> [__m256i; C] {
        // SAFETY: forwarded from the caller.
        unsafe { b.sums_many::<C>(x, sum) }
    }
}

/// `vpdpbusd`: four u8 × i8 products summed straight into each i32 lane, so no pair sum can
/// saturate and every type takes its unsigned levels (`expand`, `level + OFFSET`, up to 255:
/// Q8_0's and IQ4_NL's too), less `OFFSET · Σ x` once per block. One instruction a step,
/// where the AVX2 forms take two to four.
pub(super) struct Dpbusd<D>(std::marker::PhantomData<D>);

impl<B: Expand, D: ByteDot> RowSums<B> for Dpbusd<D> {
    #[inline(always)]
    unsafe fn sums<const C: usize>(b: &B, x: [*const i8; C], sum: [i32; C]) -> [__m256i; C] {
        // SAFETY: the caller enables AVX2 and `D`'s features and makes every `x[c]` readable
        // for 32 bytes (`x4` reads 4 at `4t`, t < 8). Loops, not `array::from_fn` (see
        // `BlockDot::sums_many`).
        unsafe {
            let u = b.expand();
            let mut s = [_mm256_setzero_si256(); C];
            for c in 0..C {
                // Two chains, so one row's eight steps are not one dependency chain.
                let mut even = _mm256_set1_epi32(-B::OFFSET * sum[c]);
                let mut odd = _mm256_setzero_si256();
                for t in (0..8).step_by(2) {
                    even = D::dot(even, u[t], x4(x[c], t));
                    odd = D::dot(odd, u[t + 1], x4(x[c], t + 1));
                }
                s[c] = _mm256_add_epi32(even, odd);
            }
            s
        }
    }
}

/// `[c][r]` = row `r` times activation row `c`; the same floats as `dot_scalar` (the same
/// integer block sums, then one fused multiply-add per block and row).
///
/// # Safety
/// AVX2, FMA and F16C must be available; every `x[c]` has `w.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot<B: BlockDot, const C: usize>(
    w: &[B],
    x: &[XRow; C],
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    // SAFETY: forwarded from the caller, whose features this function enables.
    unsafe { dot_with::<Maddubs, B, C>(w, x, ahead) }
}

/// `dot` with `vpdpbusd` from AVX512-VNNI (256 bits wide, through AVX512-VL: CPUs with
/// AVX-512 need not have AVX-VNNI).
///
/// # Safety
/// As for `dot`, and AVX-512 F/BW/VL with AVX512-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn dot_avx512vnni<B: Expand, const C: usize>(
    w: &[B],
    x: &[XRow; C],
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    // SAFETY: forwarded from the caller, whose features this function enables.
    unsafe { dot_with::<Dpbusd<super::avx512::Vnni256>, B, C>(w, x, ahead) }
}

/// `dot` with AVX-VNNI's `vpdpbusd`.
///
/// # Safety
/// As for `dot`, and AVX-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn dot_avxvnni<B: Expand, const C: usize>(
    w: &[B],
    x: &[XRow; C],
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    // SAFETY: forwarded from the caller, whose features this function enables.
    unsafe { dot_with::<Dpbusd<super::vnni::AvxVnni>, B, C>(w, x, ahead) }
}

/// The decode driver: per block, the read-ahead, the eight row sums by `S`, and one fused
/// multiply-add per row (and one more for a min).
///
/// # Safety
/// AVX2, FMA, F16C and `S`'s features must be enabled in the caller.
#[inline(always)]
unsafe fn dot_with<S: RowSums<B>, B: Expand, const C: usize>(
    w: &[B],
    x: &[XRow; C],
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    assert!(x
        .iter()
        .all(|x| x.q.len() == w.len() && x.d.len() == w.len() && x.sum.len() == w.len()));
    // SAFETY: the caller enables the features; every activation block read is the 32 bytes
    // of a block's `qs`, and every block index is below `w.len()`, checked above.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); C];
        for (i, b) in w.iter().enumerate() {
            ahead.prefetch(b);
            let d = b.scales();
            let s = S::sums::<C>(
                b,
                std::array::from_fn(|c| x[c].q.get_unchecked(i).qs.as_ptr()),
                std::array::from_fn(|c| *x[c].sum.get_unchecked(i)),
            );
            for c in 0..C {
                let scale = _mm256_mul_ps(d, _mm256_set1_ps(*x[c].d.get_unchecked(i)));
                acc[c] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s[c]), acc[c]);
            }
            if let Some(m) = b.mins() {
                // The min times the activation block's sum, after the levels (as `dot_scalar`).
                let m = halves(m);
                for c in 0..C {
                    let dx = _mm256_set1_ps(*x[c].d.get_unchecked(i));
                    let sum = _mm256_set1_ps(*x[c].sum.get_unchecked(i) as f32);
                    acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(m, dx), sum, acc[c]);
                }
            }
        }
        acc.map(|a| {
            let mut out = [0f32; ROWS];
            _mm256_storeu_ps(out.as_mut_ptr(), a);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::features::test_kernels_at;
    use crate::quantized::format::e8m0_half;
    use crate::quantized::kernels::Isa;

    /// Every exponent, the two subnormal scales among them, widens to `e8m0_half`'s bits (in
    /// a dot product a wrong tiny scale would vanish into the other blocks' sums).
    #[test]
    fn mxfp4_scales_are_e8m0_half() {
        if !test_kernels_at(Isa::Avx2, "MXFP4 scales") {
            return;
        }
        for first in (0..=255u8).step_by(ROWS) {
            let b = BlockMXFP4x8 {
                e: std::array::from_fn(|r| first + r as u8),
                qs: [0; 128],
            };
            // SAFETY: `test_kernels_at` found AVX2 and F16C.
            let got = unsafe { widened(&b) };
            assert_eq!(got.map(f32::to_bits), b.e.map(|e| e8m0_half(e).to_bits()));
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn widened(b: &BlockMXFP4x8) -> [f32; ROWS] {
        let mut out = [0f32; ROWS];
        // SAFETY: the features are enabled; the store writes the eight floats of `out`.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), b.scales()) };
        out
    }
}

//! x86 decode kernels over IQ4_XS (and IQ3_S and IQ3_XXS transcoded) stored eight rows at a
//! time (`format::interleaved_iq4xs`): per group of 32, the eight row sums in i32 lanes as the
//! IQ4_NL interleaved kernel forms them (`maddubs` on AVX2, `vpdpbusd` with VNNI) from the
//! type's level table, times the eight rows' multipliers; per block, one multiply per row
//! lane. Every integer is the row kernel's, and so are the float steps, so the result is
//! `dot_scalar`'s bit for bit.

use super::avx2::ByteDot;
use super::interleaved::Ahead;
use super::interleaved_x86::{halves, lane_table, nibble_steps, table_step, x4};
use crate::quantized::format::interleaved::ROWS;
use crate::quantized::format::interleaved_iq4xs::{BlockIQ4XSx8, LevelTable, GROUPS};
use crate::quantized::format::BlockQ8K;
use std::arch::x86_64::*;

/// One group's eight row sums, times the rows' multipliers, added to each activation row's
/// block sums.
trait GroupSums {
    /// The form of `levels` `add` takes, in both lanes.
    ///
    /// # Safety
    /// AVX2 must be enabled in the caller.
    unsafe fn table(levels: &LevelTable) -> __m256i;

    /// `qs`: the group's nibble planes; `table`: `Self::table`; `mult`: the rows' multipliers
    /// (i32 lanes); `x[c]`: the 32 activation levels, `sum[c]` their sum.
    ///
    /// # Safety
    /// The implementation's features must be enabled in the caller; every `x[c]` is
    /// readable for 32 bytes.
    unsafe fn add<const C: usize>(
        qs: &[u8; 128],
        table: __m256i,
        mult: __m256i,
        x: [*const i8; C],
        sum: [i32; C],
        acc: &mut [__m256i; C],
    );
}

/// AVX2: IQ4_NL's signed form (`|q|` unsigned against the activations carrying `q`'s sign,
/// pair sums within 2 · 127 · 127), and `madd` by the multiplier in both i16 halves of each
/// row's lane.
struct Maddubs;

impl GroupSums for Maddubs {
    #[inline(always)]
    unsafe fn table(levels: &LevelTable) -> __m256i {
        // SAFETY: forwarded from the caller.
        unsafe { lane_table(bytemuck::cast_ref(&levels.signed)) }
    }

    #[inline(always)]
    unsafe fn add<const C: usize>(
        qs: &[u8; 128],
        table: __m256i,
        mult: __m256i,
        x: [*const i8; C],
        _: [i32; C],
        acc: &mut [__m256i; C],
    ) {
        // SAFETY: the caller enables AVX2 and makes every `x[c]` readable for 32 bytes.
        unsafe {
            let mult = _mm256_or_si256(
                _mm256_and_si256(mult, _mm256_set1_epi32(0xFFFF)),
                _mm256_slli_epi32::<16>(mult),
            );
            for t in 0..8 {
                let q = table_step(qs, t, table);
                let q_abs = _mm256_sign_epi8(q, q);
                for c in 0..C {
                    let pairs = _mm256_maddubs_epi16(q_abs, _mm256_sign_epi8(x4(x[c], t), q));
                    acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(pairs, mult));
                }
            }
        }
    }
}

/// `vpdpbusd` on the unsigned levels (table + 128, at most 241), less `128 · Σ x`, then one
/// `vpmulld` by the multipliers.
struct Dpbusd<D>(std::marker::PhantomData<D>);

impl<D: ByteDot> GroupSums for Dpbusd<D> {
    #[inline(always)]
    unsafe fn table(levels: &LevelTable) -> __m256i {
        // SAFETY: forwarded from the caller.
        unsafe { lane_table(&levels.unsigned) }
    }

    #[inline(always)]
    unsafe fn add<const C: usize>(
        qs: &[u8; 128],
        table: __m256i,
        mult: __m256i,
        x: [*const i8; C],
        sum: [i32; C],
        acc: &mut [__m256i; C],
    ) {
        // SAFETY: the caller enables AVX2 and `D`'s features and makes every `x[c]` readable
        // for 32 bytes (`x4` reads 4 at `4t`, t < 8).
        unsafe {
            let mut u = nibble_steps(qs);
            for u in u.iter_mut() {
                *u = _mm256_shuffle_epi8(table, *u);
            }
            for c in 0..C {
                // Two chains, so one row's eight steps are not one dependency chain.
                let mut even = _mm256_set1_epi32(-128 * sum[c]);
                let mut odd = _mm256_setzero_si256();
                for t in (0..8).step_by(2) {
                    even = D::dot(even, u[t], x4(x[c], t));
                    odd = D::dot(odd, u[t + 1], x4(x[c], t + 1));
                }
                let s = _mm256_add_epi32(even, odd);
                acc[c] = _mm256_add_epi32(acc[c], _mm256_mullo_epi32(s, mult));
            }
        }
    }
}

/// The eight rows' multipliers of group `g`, from `scales_h` widened to i32 lanes (`high`).
///
/// # Safety
/// AVX2 must be enabled in the caller; `g < 8`.
#[inline(always)]
unsafe fn group_mults(b: &BlockIQ4XSx8, high: __m256i, g: usize) -> __m256i {
    // SAFETY: the caller enables AVX2; the load reads 8 of the 32 bytes of `scales_l`.
    unsafe {
        let low = _mm_loadl_epi64(b.scales_l.as_ptr().add(ROWS * (g / 2)) as *const __m128i);
        let low = _mm256_srl_epi32(
            _mm256_cvtepu8_epi32(low),
            _mm_cvtsi32_si128(4 * (g % 2) as i32),
        );
        let high = _mm256_srl_epi32(high, _mm_cvtsi32_si128(2 * g as i32));
        let m = _mm256_or_si256(
            _mm256_and_si256(low, _mm256_set1_epi32(15)),
            _mm256_slli_epi32::<4>(_mm256_and_si256(high, _mm256_set1_epi32(3))),
        );
        _mm256_sub_epi32(m, _mm256_set1_epi32(32))
    }
}

/// `[c][r]` = row `r` times activation row `c`: per block, the groups' sums by `S`, then
/// `d · x.d · sum` added per row lane, unfused as the row kernel computes it, and the sums
/// times the table's factor.
///
/// # Safety
/// AVX2, FMA, F16C and `S`'s features must be enabled in the caller.
#[inline(always)]
unsafe fn dot_with<S: GroupSums, const C: usize>(
    w: &[BlockIQ4XSx8],
    x: &[&[BlockQ8K]; C],
    levels: &LevelTable,
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    assert!(x.iter().all(|x| x.len() == w.len()));
    // SAFETY: the caller enables the features; every activation read is 32 bytes of a
    // block's `qs`, and every block index is below `w.len()`, checked above.
    unsafe {
        let table = S::table(levels);
        let mut acc = [_mm256_setzero_ps(); C];
        for (i, b) in w.iter().enumerate() {
            ahead.prefetch(b);
            let xb: [&BlockQ8K; C] = std::array::from_fn(|c| x[c].get_unchecked(i));
            let high =
                _mm256_cvtepu16_epi32(_mm_loadu_si128(b.scales_h.as_ptr() as *const __m128i));
            let mut sums = [_mm256_setzero_si256(); C];
            for g in 0..GROUPS {
                let mut xs = [std::ptr::null(); C];
                let mut group_sum = [0i32; C];
                for c in 0..C {
                    xs[c] = xb[c].qs.as_ptr().add(32 * g);
                    group_sum[c] = xb[c].bsums[2 * g] as i32 + xb[c].bsums[2 * g + 1] as i32;
                }
                S::add::<C>(
                    b.group(g),
                    table,
                    group_mults(b, high, g),
                    xs,
                    group_sum,
                    &mut sums,
                );
            }
            let d = halves(&b.d);
            for c in 0..C {
                let scale = _mm256_mul_ps(d, _mm256_set1_ps(xb[c].d));
                let term = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(sums[c]));
                acc[c] = _mm256_add_ps(acc[c], term);
            }
        }
        let factor = _mm256_set1_ps(levels.factor);
        acc.map(|a| {
            let mut out = [0f32; ROWS];
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(factor, a));
            out
        })
    }
}

/// The `maddubs` kernel.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot<const C: usize>(
    w: &[BlockIQ4XSx8],
    x: &[&[BlockQ8K]; C],
    levels: &LevelTable,
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    // SAFETY: forwarded from the caller, whose features this function enables.
    unsafe { dot_with::<Maddubs, C>(w, x, levels, ahead) }
}

/// The `vpdpbusd` kernel from AVX512-VNNI (256 bits wide, through AVX512-VL).
///
/// # Safety
/// As for `dot`, and AVX-512 F/BW/VL with AVX512-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn dot_avx512vnni<const C: usize>(
    w: &[BlockIQ4XSx8],
    x: &[&[BlockQ8K]; C],
    levels: &LevelTable,
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    // SAFETY: forwarded from the caller, whose features this function enables.
    unsafe { dot_with::<Dpbusd<super::avx512::Vnni256>, C>(w, x, levels, ahead) }
}

/// The `vpdpbusd` kernel from AVX-VNNI.
///
/// # Safety
/// As for `dot`, and AVX-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn dot_avxvnni<const C: usize>(
    w: &[BlockIQ4XSx8],
    x: &[&[BlockQ8K]; C],
    levels: &LevelTable,
    ahead: Ahead,
) -> [[f32; ROWS]; C] {
    // SAFETY: forwarded from the caller, whose features this function enables.
    unsafe { dot_with::<Dpbusd<super::vnni::AvxVnni>, C>(w, x, levels, ahead) }
}

/// Group `g`'s panel levels (`LevelTable::panel`) as a GEMM panel block's 256 bytes.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn expand_group(qs: &[u8; 128], levels: &LevelTable, out: &mut [u8; 256]) {
    // SAFETY: AVX2 is enabled; store `t` writes bytes `32t..32t + 32` of the 256.
    unsafe {
        let table = lane_table(&levels.panel);
        for (t, u) in nibble_steps(qs).into_iter().enumerate() {
            let u = _mm256_shuffle_epi8(table, u);
            _mm256_storeu_si256(out.as_mut_ptr().add(32 * t) as *mut __m256i, u);
        }
    }
}

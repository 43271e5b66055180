//! The 256-element "k-quant" super-blocks: Q2_K..Q6_K and the Q8_K activation type.
//!
//! Levels are unpacked into element order by one function per type; dequantization, the
//! scalar dot products and the quantizers all go through those, so the bit layouts are
//! written down once.

// The layouts index several arrays by the same element number; explicit indices read closer
// to the format description than zipped iterators.
#![allow(clippy::needless_range_loop)]

use super::importance;
use super::search::{make_q3_quants, make_qkx2_quants, make_qx_quants, nearest_int, GROUP_MAX_EPS};
use super::GgmlDType;
use super::{by_runs, signed_absmax, GgmlBlock, Unpacking};
use half::f16;

pub const QK_K: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ2K {
    /// Low nibble: 4-bit scale of each 16-element sub-block; high nibble: its 4-bit min.
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales, biased by 32.
    pub scales: [u8; 12],
    pub d: f16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit mins (see `scale_min_k4`).
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

/// Activations for the k-quant dot products: 8-bit levels, an f32 scale, and the sum of each
/// 16-element group (so the mins of Q2_K/Q4_K/Q5_K cost one multiply per group).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

// ---------------------------------------------------------------- bit layouts

/// 2-bit fields shared by Q2_K and Q3_K: element `128n + 32j + i` (i < 32) is bits `2j..2j+2`
/// of `qs[32n + i]`.
fn unpack_2bit(qs: &[u8; 64]) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for (out, qs) in out.chunks_exact_mut(128).zip(qs.chunks_exact(32)) {
        let (a, rest) = out.split_at_mut(32);
        let (b, rest) = rest.split_at_mut(32);
        let (c, d) = rest.split_at_mut(32);
        for i in 0..32 {
            let q = qs[i];
            (a[i], b[i], c[i], d[i]) = (q & 3, (q >> 2) & 3, (q >> 4) & 3, q >> 6);
        }
    }
    out
}

pub(super) fn pack_2bit(l: &[u8; QK_K]) -> [u8; 64] {
    std::array::from_fn(|b| {
        let (n, i) = (b / 32, b % 32);
        let at = |j: usize| l[128 * n + 32 * j + i];
        at(0) | (at(1) << 2) | (at(2) << 4) | (at(3) << 6)
    })
}

/// Q4_K/Q5_K: scale and min of 32-element sub-block `j` (6 bits each, packed in 12 bytes).
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All eight scales and mins of `scale_min_k4` at once, worked on as three little-endian
/// words: the low six bits of bytes 0..8 for sub-blocks 0..4, and for 4..8 a nibble of bytes
/// 8..12 under the top two bits of bytes 0..8.
#[cfg(any(target_arch = "aarch64", test))]
#[inline(always)]
pub(crate) fn scales_mins_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const NIBBLE: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (a, b, c) = (word(0), word(1), word(2));
    let scales_high = (c & NIBBLE) | ((a >> 6) & TOP2) << 4;
    let mins_high = ((c >> 4) & NIBBLE) | ((b >> 6) & TOP2) << 4;
    let join = |lo: u32, hi: u32| {
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&lo.to_le_bytes());
        out[4..].copy_from_slice(&hi.to_le_bytes());
        out
    };
    (join(a & LOW6, scales_high), join(b & LOW6, mins_high))
}

fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
    q
}

/// Q3_K's sixteen 6-bit scales, with the bias of 32 removed.
pub(crate) fn q3k_scales(q: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let low = if j < 8 { q[j] & 0x0F } else { q[j - 8] >> 4 };
        let high = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// All sixteen of `q3k_scales` at once, worked on as three little-endian words: the low
/// nibbles of words 0 and 1 for scales 0..8, their high nibbles for 8..16, each under two
/// bits of word 2 (bits `2k..2k + 2` of its byte `j` for scale `4k + j`).
#[cfg(any(target_arch = "aarch64", test))]
#[inline(always)]
pub(crate) fn q3k_scales_by_words(q: &[u8; 12]) -> [i8; 16] {
    const NIBBLE: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (a, b, high) = (word(0), word(1), word(2));
    let words = [
        (a & NIBBLE) | (high & TOP2) << 4,
        (b & NIBBLE) | ((high >> 2) & TOP2) << 4,
        ((a >> 4) & NIBBLE) | ((high >> 4) & TOP2) << 4,
        ((b >> 4) & NIBBLE) | ((high >> 6) & TOP2) << 4,
    ];
    let mut out = [0i8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        for (o, byte) in o.iter_mut().zip(w.to_le_bytes()) {
            *o = byte as i8 - 32;
        }
    }
    out
}

/// Q3_K levels in [-4, 3]: two low bits as Q2_K, the third bit of element `128n + 32j + i` is
/// bit `4n + j` of `hmask[i]`, and a clear bit subtracts 4.
fn q3k_levels(b: &BlockQ3K) -> [i8; QK_K] {
    let low = unpack_2bit(&b.qs);
    // Run r = 4n + j takes bit r of hmask.
    by_runs(|r, i| {
        let high = (b.hmask[i] >> r) & 1;
        low[32 * r + i] as i8 - 4 + 4 * high as i8
    })
}

/// Q4_K levels in [0, 15]: element `64c + i` is the low nibble of `qs[32c + i]`, element
/// `64c + 32 + i` its high nibble.
fn q4k_levels(qs: &[u8; 128]) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for (out, qs) in out.chunks_exact_mut(64).zip(qs.chunks_exact(32)) {
        let (low, high) = out.split_at_mut(32);
        for ((l, h), &q) in low.iter_mut().zip(high).zip(qs) {
            (*l, *h) = (q & 0x0F, q >> 4);
        }
    }
    out
}

/// Q5_K levels in [0, 31]: Q4_K's nibbles plus bit `2c + h` of `qh[i]`.
fn q5k_levels(b: &BlockQ5K) -> [u8; QK_K] {
    let low = q4k_levels(&b.qs);
    // Run r = 2c + h takes bit r of qh.
    by_runs(|r, i| low[32 * r + i] | (((b.qh[i] >> r) & 1) << 4))
}

/// Q6_K levels in [-32, 31]: element `128n + 32k + i` takes nibble `k / 2` of
/// `ql[64n + 32(k % 2) + i]` and bits `2k..2k+2` of `qh[32n + i]`.
fn q6k_levels(b: &BlockQ6K) -> [i8; QK_K] {
    let mut out = [0i8; QK_K];
    let halves = out
        .chunks_exact_mut(128)
        .zip(b.ql.chunks_exact(64))
        .zip(b.qh.chunks_exact(32));
    for ((out, ql), qh) in halves {
        let (a, rest) = out.split_at_mut(32);
        let (b, rest) = rest.split_at_mut(32);
        let (c, d) = rest.split_at_mut(32);
        for i in 0..32 {
            let (l0, l1, h) = (ql[i], ql[32 + i], qh[i]);
            let level = |low: u8, high: u8| (low | (high & 3) << 4) as i8 - 32;
            a[i] = level(l0 & 0x0F, h);
            b[i] = level(l1 & 0x0F, h >> 2);
            c[i] = level(l0 >> 4, h >> 4);
            d[i] = level(l1 >> 4, h >> 6);
        }
    }
    out
}

fn group_dot(w: &[i8], x: &[i8]) -> i32 {
    super::dot_i8(w, x)
}

fn group_dot_u8(w: &[u8], x: &[i8]) -> i32 {
    w.iter().zip(x).map(|(&a, &b)| a as i32 * b as i32).sum()
}

// ---------------------------------------------------------------- Q2_K

/// Re-rounds every element against the scales as `b` stores them (a group whose scale is 0
/// keeps the levels of the search) and packs the levels.
pub(super) fn store_q2k_levels(b: &mut BlockQ2K, x: &[f32], l: &mut [u8; QK_K]) {
    for g in 0..16 {
        let d = b.d.to_f32() * (b.scales[g] & 0x0F) as f32;
        if d == 0.0 {
            continue;
        }
        let dm = b.dmin.to_f32() * (b.scales[g] >> 4) as f32;
        for i in 0..16 {
            l[16 * g + i] = nearest_int((x[16 * g + i] + dm) / d).clamp(0, 3) as u8;
        }
    }
    b.qs = pack_2bit(l);
}

impl GgmlBlock for BlockQ2K {
    const DTYPE: GgmlDType = GgmlDType::Q2K;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
            let l = unpack_2bit(&b.qs);
            for (g, o) in o.chunks_exact_mut(16).enumerate() {
                let sc = b.scales[g];
                let dl = d * (sc & 0x0F) as f32;
                let ml = min * (sc >> 4) as f32;
                for (o, &q) in o.iter_mut().zip(&l[16 * g..]) {
                    *o = dl * q as f32 - ml;
                }
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        const Q4SCALE: f32 = 15.0;
        for (x, b) in xs.chunks_exact(QK_K).zip(out) {
            let mut l = [0u8; QK_K];
            let mut scales = [0f32; 16];
            let mut mins = [0f32; 16];
            let (mut max_scale, mut max_min) = (0f32, 0f32);
            for g in 0..16 {
                let xg = &x[16 * g..16 * g + 16];
                let weights: [f32; 16] = std::array::from_fn(|i| xg[i].abs());
                let (s, m) = make_qkx2_quants(
                    xg,
                    &weights,
                    3,
                    &mut l[16 * g..16 * g + 16],
                    -0.5,
                    0.1,
                    15,
                    true,
                );
                scales[g] = s;
                mins[g] = m;
                max_scale = max_scale.max(s);
                max_min = max_min.max(m);
            }
            b.scales = [0; 16];
            if max_scale > 0.0 {
                let iscale = Q4SCALE / max_scale;
                for g in 0..16 {
                    b.scales[g] = nearest_int(iscale * scales[g]) as u8;
                }
                b.d = f16::from_f32(max_scale / Q4SCALE);
            } else {
                b.d = f16::ZERO;
            }
            if max_min > 0.0 {
                let iscale = Q4SCALE / max_min;
                for g in 0..16 {
                    b.scales[g] |= (nearest_int(iscale * mins[g]) as u8) << 4;
                }
                b.dmin = f16::from_f32(max_min / Q4SCALE);
            } else {
                b.dmin = f16::ZERO;
            }
            store_q2k_levels(b, x, &mut l);
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        importance::q2k(xs, qw, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let l = unpack_2bit(&w.qs);
                let (mut sum, mut sum_min) = (0i32, 0i32);
                for g in 0..16 {
                    let sc = w.scales[g];
                    sum +=
                        (sc & 0x0F) as i32 * group_dot_u8(&l[16 * g..16 * g + 16], &x.qs[16 * g..]);
                    sum_min += (sc >> 4) as i32 * x.bsums[g] as i32;
                }
                x.d * (w.d.to_f32() * sum as f32 - w.dmin.to_f32() * sum_min as f32)
            })
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: 16,
            max_level: 3,
            unpack: |b, u, s, m| {
                *u = unpack_2bit(&b.qs);
                let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
                for ((s, m), &sc) in s.iter_mut().zip(m.iter_mut()).zip(&b.scales) {
                    *s = d * (sc & 0x0F) as f32;
                    *m = dmin * (sc >> 4) as f32;
                }
            },
        })
    }
}

// ---------------------------------------------------------------- Q3_K

/// Sixteen 6-bit scales (biased by 32) in Q3_K's 12 bytes: low nibbles in bytes 0..8, the
/// top two bits of scale `j` in byte `8 + j % 4` at bit `2 (j / 4)`.
pub(super) fn pack_q3k_scales(biased: &[u8; 16]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for (j, &v) in biased.iter().enumerate() {
        if j < 8 {
            out[j] = v & 0x0F;
        } else {
            out[j - 8] |= (v & 0x0F) << 4;
        }
        out[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
    }
    out
}

/// Re-rounds every element against the scales as `b` stores them (a group whose scale is 0
/// keeps the levels of the search, biased by 4) and packs the levels.
pub(super) fn store_q3k_levels(b: &mut BlockQ3K, x: &[f32], l: &mut [i8; QK_K]) {
    let stored = q3k_scales(&b.scales);
    for g in 0..16 {
        let d = b.d.to_f32() * stored[g] as f32;
        if d == 0.0 {
            continue;
        }
        for i in 0..16 {
            l[16 * g + i] = (nearest_int(x[16 * g + i] / d).clamp(-4, 3) + 4) as i8;
        }
    }
    // Levels 4..7 set the high bit; the remaining two bits go to qs.
    b.hmask = [0; 32];
    let mut low = [0u8; QK_K];
    for e in 0..QK_K {
        let mut v = l[e] as u8;
        if v > 3 {
            let (n, j, i) = (e / 128, (e % 128) / 32, e % 32);
            b.hmask[i] |= 1 << (4 * n + j);
            v -= 4;
        }
        low[e] = v;
    }
    b.qs = pack_2bit(&low);
}

impl GgmlBlock for BlockQ3K {
    const DTYPE: GgmlDType = GgmlDType::Q3K;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = b.d.to_f32();
            let scales = q3k_scales(&b.scales);
            let l = q3k_levels(b);
            for (g, o) in o.chunks_exact_mut(16).enumerate() {
                let dl = d * scales[g] as f32;
                for (o, &q) in o.iter_mut().zip(&l[16 * g..]) {
                    *o = dl * q as f32;
                }
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK_K).zip(out) {
            let mut l = [0i8; QK_K];
            let mut scales = [0f32; 16];
            for g in 0..16 {
                scales[g] = make_q3_quants(&x[16 * g..16 * g + 16], 4, &mut l[16 * g..16 * g + 16]);
            }
            let max_scale = signed_absmax(&scales);
            let mut biased = [0u8; 16];
            if max_scale != 0.0 {
                let iscale = -32.0 / max_scale;
                for (v, &s) in biased.iter_mut().zip(&scales) {
                    *v = (nearest_int(iscale * s).clamp(-32, 31) + 32) as u8;
                }
                b.d = f16::from_f32(1.0 / iscale);
            } else {
                b.d = f16::ZERO;
            }
            b.scales = pack_q3k_scales(&biased);
            store_q3k_levels(b, x, &mut l);
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        importance::q3k(xs, qw, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let scales = q3k_scales(&w.scales);
                let l = q3k_levels(w);
                let sum: i32 = (0..16)
                    .map(|g| scales[g] as i32 * group_dot(&l[16 * g..16 * g + 16], &x.qs[16 * g..]))
                    .sum();
                x.d * w.d.to_f32() * sum as f32
            })
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: 16,
            max_level: 7,
            unpack: |b, u, s, m| {
                for (u, l) in u.iter_mut().zip(q3k_levels(b)) {
                    *u = (l + 4) as u8;
                }
                let d = b.d.to_f32();
                for ((s, m), sc) in s.iter_mut().zip(m.iter_mut()).zip(q3k_scales(&b.scales)) {
                    *s = d * sc as f32;
                    *m = 4.0 * *s;
                }
            },
        })
    }
}

// ---------------------------------------------------------------- Q4_K and Q5_K

/// A Q4_K/Q5_K block before its levels are packed: `d`, `dmin`, the packed 6-bit scales and
/// mins, and one level per element.
pub(super) type K4Parts = (f16, f16, [u8; 12], [u8; QK_K]);

/// The shared Q4_K/Q5_K quantizer: per 32-element sub-block an affine fit with weights
/// `rms + |x|`, then scales and mins quantized to 6 bits against the block maxima.
fn quantize_k4_family(x: &[f32], nmax: i32, rmin: f32, nstep: i32) -> K4Parts {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xj = &x[32 * j..32 * j + 32];
        let sum_x2: f32 = xj.iter().map(|v| v * v).sum();
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xj[i].abs());
        let (s, m) = make_qkx2_quants(
            xj,
            &weights,
            nmax,
            &mut l[32 * j..32 * j + 32],
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        max_scale = max_scale.max(s);
        max_min = max_min.max(m);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    requantize_k4_family(x, nmax, d, dmin, &ls, &lm, l)
}

/// Packs the 6-bit sub-block scales `ls` and mins `lm` and re-rounds every element against
/// them as stored (a sub-block whose scale is 0 keeps the levels `l` of the search).
pub(super) fn requantize_k4_family(
    x: &[f32],
    nmax: i32,
    d: f16,
    dmin: f16,
    ls: &[u8; 8],
    lm: &[u8; 8],
    mut l: [u8; QK_K],
) -> K4Parts {
    let packed = pack_scale_min_k4(ls, lm);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &packed);
        let dj = d.to_f32() * sc as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for i in 0..32 {
            l[32 * j + i] = nearest_int((x[32 * j + i] + dm) / dj).clamp(0, nmax) as u8;
        }
    }
    (d, dmin, packed, l)
}

fn dequantize_k4_family(d: f16, dmin: f16, scales: &[u8; 12], l: &[u8; QK_K], out: &mut [f32]) {
    let (d, min) = (d.to_f32(), dmin.to_f32());
    for (j, o) in out.chunks_exact_mut(32).enumerate() {
        let (sc, m) = scale_min_k4(j, scales);
        let (dj, mj) = (d * sc as f32, min * m as f32);
        for (o, &q) in o.iter_mut().zip(&l[32 * j..]) {
            *o = dj * q as f32 - mj;
        }
    }
}

/// Q4_K/Q5_K sub-block scales and mins as the dequantization applies them.
fn k4_family_scales(d: f16, dmin: f16, scales: &[u8; 12], s: &mut [f32], m: &mut [f32]) {
    let (d, min) = (d.to_f32(), dmin.to_f32());
    for (j, (s, m)) in s.iter_mut().zip(m.iter_mut()).enumerate() {
        let (sc, mn) = scale_min_k4(j, scales);
        (*s, *m) = (d * sc as f32, min * mn as f32);
    }
}

fn dot_k4_family(d: f16, dmin: f16, scales: &[u8; 12], l: &[u8; QK_K], x: &BlockQ8K) -> f32 {
    let (mut sum, mut sum_min) = (0i32, 0i32);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        sum += sc as i32 * group_dot_u8(&l[32 * j..32 * j + 32], &x.qs[32 * j..]);
        sum_min += m as i32 * (x.bsums[2 * j] as i32 + x.bsums[2 * j + 1] as i32);
    }
    x.d * (d.to_f32() * sum as f32 - dmin.to_f32() * sum_min as f32)
}

impl BlockQ4K {
    fn from_parts((d, dmin, scales, l): K4Parts) -> Self {
        Self {
            d,
            dmin,
            scales,
            qs: std::array::from_fn(|k| {
                let (c, i) = (k / 32, k % 32);
                l[64 * c + i] | (l[64 * c + 32 + i] << 4)
            }),
        }
    }
}

impl GgmlBlock for BlockQ4K {
    const DTYPE: GgmlDType = GgmlDType::Q4K;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            dequantize_k4_family(b.d, b.dmin, &b.scales, &q4k_levels(&b.qs), o);
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK_K).zip(out) {
            *b = BlockQ4K::from_parts(quantize_k4_family(x, 15, -1.0, 20));
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
            *b = BlockQ4K::from_parts(importance::k4_family(x, qw, 15));
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| dot_k4_family(w.d, w.dmin, &w.scales, &q4k_levels(&w.qs), x))
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: 32,
            max_level: 15,
            unpack: |b, u, s, m| {
                *u = q4k_levels(&b.qs);
                k4_family_scales(b.d, b.dmin, &b.scales, &mut s[..8], &mut m[..8]);
            },
        })
    }
}

impl BlockQ5K {
    fn from_parts((d, dmin, scales, l): K4Parts) -> Self {
        let mut qh = [0u8; 32];
        for e in 0..QK_K {
            let (c, h, i) = (e / 64, (e % 64) / 32, e % 32);
            qh[i] |= ((l[e] >> 4) & 1) << (2 * c + h);
        }
        Self {
            d,
            dmin,
            scales,
            qh,
            qs: std::array::from_fn(|k| {
                let (c, i) = (k / 32, k % 32);
                (l[64 * c + i] & 0x0F) | ((l[64 * c + 32 + i] & 0x0F) << 4)
            }),
        }
    }
}

impl GgmlBlock for BlockQ5K {
    const DTYPE: GgmlDType = GgmlDType::Q5K;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            dequantize_k4_family(b.d, b.dmin, &b.scales, &q5k_levels(b), o);
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK_K).zip(out) {
            *b = BlockQ5K::from_parts(quantize_k4_family(x, 31, -0.5, 15));
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
            *b = BlockQ5K::from_parts(importance::k4_family(x, qw, 31));
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| dot_k4_family(w.d, w.dmin, &w.scales, &q5k_levels(w), x))
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: 32,
            max_level: 31,
            unpack: |b, u, s, m| {
                *u = q5k_levels(b);
                k4_family_scales(b.d, b.dmin, &b.scales, &mut s[..8], &mut m[..8]);
            },
        })
    }
}

// ---------------------------------------------------------------- Q6_K

/// ggml's Q6_K quantizer: a signed scale search per group of 16 (x²-weighted, or under the
/// importance `qw`), the scales to 8 bits against the largest, every element re-rounded.
fn quantize_q6k_block(x: &[f32], qw: Option<&[f32]>) -> BlockQ6K {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    for g in 0..16 {
        let group = 16 * g..16 * g + 16;
        let qw = qw.map(|w| &w[group.clone()]);
        scales[g] = make_qx_quants(&x[group.clone()], 32, &mut l[group], 1, qw);
    }
    let max_scale = signed_absmax(&scales);
    let mut b: BlockQ6K = bytemuck::Zeroable::zeroed();
    if max_scale.abs() < GROUP_MAX_EPS {
        return b;
    }
    let iscale = -128.0 / max_scale;
    b.d = f16::from_f32(1.0 / iscale);
    for g in 0..16 {
        b.scales[g] = nearest_int(iscale * scales[g]).min(127) as i8;
    }
    for g in 0..16 {
        let d = b.d.to_f32() * b.scales[g] as f32;
        if d == 0.0 {
            continue;
        }
        for i in 0..16 {
            l[16 * g + i] = (nearest_int(x[16 * g + i] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    // Element 128n + 32k + i: low nibble into ql (k even: low half), 2 high bits
    // into qh[32n + i] at bit 2k.
    for e in 0..QK_K {
        let (n, k, i) = (e / 128, (e % 128) / 32, e % 32);
        let v = l[e] as u8;
        b.ql[64 * n + 32 * (k % 2) + i] |= (v & 0x0F) << (4 * (k / 2));
        b.qh[32 * n + i] |= (v >> 4) << (2 * k);
    }
    b
}

impl GgmlBlock for BlockQ6K {
    const DTYPE: GgmlDType = GgmlDType::Q6K;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = b.d.to_f32();
            let l = q6k_levels(b);
            for (g, o) in o.chunks_exact_mut(16).enumerate() {
                let dl = d * b.scales[g] as f32;
                for (o, &q) in o.iter_mut().zip(&l[16 * g..]) {
                    *o = dl * q as f32;
                }
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK_K).zip(out) {
            *b = quantize_q6k_block(x, None);
        }
    }

    /// ggml weighs each group's scale search by the importance alone (not the
    /// `√(σ² + x²)` factor of the other k-quants).
    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        for ((x, qw), b) in xs.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(out) {
            *b = quantize_q6k_block(x, Some(qw));
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let l = q6k_levels(w);
                let sum: i32 = (0..16)
                    .map(|g| {
                        w.scales[g] as i32 * group_dot(&l[16 * g..16 * g + 16], &x.qs[16 * g..])
                    })
                    .sum();
                x.d * w.d.to_f32() * sum as f32
            })
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: 16,
            max_level: 63,
            unpack: |b, u, s, m| {
                for (u, l) in u.iter_mut().zip(q6k_levels(b)) {
                    *u = (l + 32) as u8;
                }
                let d = b.d.to_f32();
                for ((s, m), &sc) in s.iter_mut().zip(m.iter_mut()).zip(&b.scales) {
                    *s = d * sc as f32;
                    *m = 32.0 * *s;
                }
            },
        })
    }
}

// ---------------------------------------------------------------- Q8_K

impl GgmlBlock for BlockQ8K {
    const DTYPE: GgmlDType = GgmlDType::Q8K;
    const BLOCK_SIZE: usize = QK_K;
    type Dot = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            for (o, &q) in o.iter_mut().zip(&b.qs) {
                *o = b.d * q as f32;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        quantize_q8k_ref(xs, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| w.d * x.d * group_dot(&w.qs, &x.qs) as f32)
            .sum()
    }
}

/// ggml's `quantize_row_q8_K_ref`; `BlockQ8K::quantize` runs a SIMD copy of it where it can.
pub fn quantize_q8k_ref(xs: &[f32], out: &mut [BlockQ8K]) {
    for (x, b) in xs.chunks_exact(QK_K).zip(out) {
        let max = signed_absmax(x);
        if max == 0.0 {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        // -127 (not -128) keeps every level within ±127.
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (g, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed 12-byte scale fields: random ones, then each byte swept through 0..=255 with
    /// the others fixed at `fill`.
    fn packed_scales(seed: u64, fill: u8) -> Vec<[u8; 12]> {
        let mut cases: Vec<[u8; 12]> = super::super::random_pod::<[u8; 12]>(64, seed);
        for at in 0..12 {
            for v in 0..=255u8 {
                let mut q = [fill; 12];
                q[at] = v;
                cases.push(q);
            }
        }
        cases
    }

    /// The word-parallel unpack gives `q3k_scales`' scales for every byte value in every
    /// position.
    #[test]
    fn word_parallel_q3k_scales_match_the_per_scale_unpack() {
        for q in packed_scales(29, 0xa5) {
            assert_eq!(q3k_scales_by_words(&q), q3k_scales(&q), "{q:?}");
        }
    }

    /// The word-parallel unpack gives `scale_min_k4`'s scales and mins for every byte value
    /// in every position.
    #[test]
    fn word_parallel_scales_and_mins_match_the_per_subblock_unpack() {
        for q in packed_scales(17, 0x5a) {
            let (scales, mins) = scales_mins_k4(&q);
            for j in 0..8 {
                assert_eq!(
                    (scales[j], mins[j]),
                    scale_min_k4(j, &q),
                    "{q:?} sub-block {j}"
                );
            }
        }
    }
}

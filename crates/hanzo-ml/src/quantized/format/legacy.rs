//! The 32-element "legacy" formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! In the 4/5-bit types element `j < 16` sits in the low nibble of `qs[j]` and element
//! `j + 16` in its high nibble; the 5th bits of Q5 live in the 32-bit `qh`, bit `j` for
//! element `j`.

use super::GgmlDType;
use super::{dot_i8, min_max, signed_absmax, GgmlBlock, Unpacking};
use half::f16;

pub const QK: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}

/// Q8_0 plus `s = d * Σ qs`, which lets Q4_1/Q5_1 fold their minimum in with one multiply.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

/// The 32 unsigned levels of a 4-bit block (no 5th bit).
#[inline]
pub(crate) fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
    }
    q
}

/// The 32 unsigned 5-bit levels.
#[inline]
pub(crate) fn nibbles_5(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let mut q = nibbles(qs);
    let h = u32::from_le_bytes(qh);
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((h >> j) & 1) as u8) << 4;
    }
    q
}

/// Packs 32 levels (< 32) into nibbles and a high-bit word.
#[inline]
pub(super) fn pack(levels: &[u8; 32]) -> ([u8; 16], [u8; 4]) {
    let mut qs = [0u8; 16];
    let mut qh = 0u32;
    for j in 0..16 {
        qs[j] = (levels[j] & 0x0F) | ((levels[j + 16] & 0x0F) << 4);
        qh |= ((levels[j] as u32 >> 4) & 1) << j;
        qh |= ((levels[j + 16] as u32 >> 4) & 1) << (j + 16);
    }
    (qs, qh.to_le_bytes())
}

/// Symmetric quantization, as ggml's Q4_0/Q5_0 reference: `d = max / -half`, levels
/// `trunc(x/d + half + 0.5)` clamped to `2*half - 1`.
fn quantize_symmetric(xs: &[f32], half: f32) -> (f16, [u8; 32]) {
    let max = signed_absmax(xs);
    let d = max / -half;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let top = (2.0 * half - 1.0) as u8;
    let mut l = [0u8; 32];
    for (o, &x) in l.iter_mut().zip(xs) {
        // ggml adds `half + 0.5` as one constant; splitting it would round differently.
        let bias = half + 0.5;
        *o = ((x * id + bias) as i8).clamp(0, top as i8) as u8;
    }
    (f16::from_f32(d), l)
}

/// Asymmetric quantization, as ggml's Q4_1/Q5_1 reference.
fn quantize_affine(xs: &[f32], nmax: f32) -> (f16, f16, [u8; 32]) {
    let (min, max) = min_max(xs);
    let d = (max - min) / nmax;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut l = [0u8; 32];
    for (o, &x) in l.iter_mut().zip(xs) {
        *o = (((x - min) * id + 0.5) as u8).min(nmax as u8);
    }
    (f16::from_f32(d), f16::from_f32(min), l)
}

fn quantize_q8(xs: &[f32]) -> (f32, [i8; 32]) {
    let amax = xs.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0i8; 32];
    for (o, &x) in q.iter_mut().zip(xs) {
        *o = (x * id).round() as i8;
    }
    (d, q)
}

/// ggml's `quantize_row_q8_0_ref`; `BlockQ8_0::quantize` runs a SIMD copy of it where it can.
pub fn quantize_q8_0_ref(xs: &[f32], out: &mut [BlockQ8_0]) {
    for (x, b) in xs.chunks_exact(QK).zip(out) {
        let (d, q) = quantize_q8(x);
        b.d = f16::from_f32(d);
        b.qs = q;
    }
}

fn as_i8(levels: &[u8; 32], offset: i8) -> [i8; 32] {
    levels.map(|l| l as i8 - offset)
}

impl GgmlBlock for BlockQ4_0 {
    const DTYPE: GgmlDType = GgmlDType::Q4_0;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = b.d.to_f32();
            for (o, q) in o.iter_mut().zip(nibbles(&b.qs)) {
                *o = (q as i8 - 8) as f32 * d;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK).zip(out) {
            let (d, l) = quantize_symmetric(x, 8.0);
            b.d = d;
            b.qs = std::array::from_fn(|j| l[j] | (l[j + 16] << 4));
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        super::importance::q4_0(xs, qw, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_0]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let s = dot_i8(&as_i8(&nibbles(&w.qs), 8), &x.qs);
                w.d.to_f32() * x.d.to_f32() * s as f32
            })
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: QK,
            max_level: 15,
            unpack: |b, u, s, m| {
                u[..QK].copy_from_slice(&nibbles(&b.qs));
                s[0] = b.d.to_f32();
                m[0] = 8.0 * s[0];
            },
        })
    }
}

impl GgmlBlock for BlockQ4_1 {
    const DTYPE: GgmlDType = GgmlDType::Q4_1;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_1;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let (d, m) = (b.d.to_f32(), b.m.to_f32());
            for (o, q) in o.iter_mut().zip(nibbles(&b.qs)) {
                *o = q as f32 * d + m;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK).zip(out) {
            let (d, m, l) = quantize_affine(x, 15.0);
            b.d = d;
            b.m = m;
            b.qs = std::array::from_fn(|j| l[j] | (l[j + 16] << 4));
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        super::importance::q4_1(xs, qw, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_1]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let s = dot_i8(&as_i8(&nibbles(&w.qs), 0), &x.qs);
                w.d.to_f32() * x.d.to_f32() * s as f32 + w.m.to_f32() * x.s.to_f32()
            })
            .sum()
    }

    /// Levels as stored, the block's `m` as a negated min (element = d·u + m).
    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: QK,
            max_level: 15,
            unpack: |b, u, s, m| {
                u[..QK].copy_from_slice(&nibbles(&b.qs));
                s[0] = b.d.to_f32();
                m[0] = -b.m.to_f32();
            },
        })
    }
}

impl GgmlBlock for BlockQ5_0 {
    const DTYPE: GgmlDType = GgmlDType::Q5_0;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = b.d.to_f32();
            for (o, q) in o.iter_mut().zip(nibbles_5(&b.qs, b.qh)) {
                *o = (q as i8 - 16) as f32 * d;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK).zip(out) {
            let (d, l) = quantize_symmetric(x, 16.0);
            (b.qs, b.qh) = pack(&l);
            b.d = d;
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        super::importance::q5_0(xs, qw, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_0]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let s = dot_i8(&as_i8(&nibbles_5(&w.qs, w.qh), 16), &x.qs);
                w.d.to_f32() * x.d.to_f32() * s as f32
            })
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: QK,
            max_level: 31,
            unpack: |b, u, s, m| {
                u[..QK].copy_from_slice(&nibbles_5(&b.qs, b.qh));
                s[0] = b.d.to_f32();
                m[0] = 16.0 * s[0];
            },
        })
    }
}

impl GgmlBlock for BlockQ5_1 {
    const DTYPE: GgmlDType = GgmlDType::Q5_1;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_1;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let (d, m) = (b.d.to_f32(), b.m.to_f32());
            for (o, q) in o.iter_mut().zip(nibbles_5(&b.qs, b.qh)) {
                *o = q as f32 * d + m;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK).zip(out) {
            let (d, m, l) = quantize_affine(x, 31.0);
            (b.qs, b.qh) = pack(&l);
            b.d = d;
            b.m = m;
        }
    }

    fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
        super::importance::q5_1(xs, qw, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_1]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| {
                let s = dot_i8(&as_i8(&nibbles_5(&w.qs, w.qh), 0), &x.qs);
                w.d.to_f32() * x.d.to_f32() * s as f32 + w.m.to_f32() * x.s.to_f32()
            })
            .sum()
    }

    /// As Q4_1's, with five-bit levels.
    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: QK,
            max_level: 31,
            unpack: |b, u, s, m| {
                u[..QK].copy_from_slice(&nibbles_5(&b.qs, b.qh));
                s[0] = b.d.to_f32();
                m[0] = -b.m.to_f32();
            },
        })
    }
}

impl GgmlBlock for BlockQ8_0 {
    const DTYPE: GgmlDType = GgmlDType::Q8_0;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = b.d.to_f32();
            for (o, &q) in o.iter_mut().zip(&b.qs) {
                *o = q as f32 * d;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        quantize_q8_0_ref(xs, out)
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_0]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| w.d.to_f32() * x.d.to_f32() * dot_i8(&w.qs, &x.qs) as f32)
            .sum()
    }

    fn unpacking() -> Option<Unpacking<Self>> {
        Some(Unpacking {
            group: QK,
            max_level: 255,
            unpack: |b, u, s, m| {
                for (u, &q) in u[..QK].iter_mut().zip(&b.qs) {
                    *u = (q as u8) ^ 0x80;
                }
                s[0] = b.d.to_f32();
                m[0] = 128.0 * s[0];
            },
        })
    }
}

impl GgmlBlock for BlockQ8_1 {
    const DTYPE: GgmlDType = GgmlDType::Q8_1;
    const BLOCK_SIZE: usize = QK;
    type Dot = BlockQ8_1;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = b.d.to_f32();
            for (o, &q) in o.iter_mut().zip(&b.qs) {
                *o = q as f32 * d;
            }
        }
    }

    fn quantize(xs: &[f32], out: &mut [Self]) {
        for (x, b) in xs.chunks_exact(QK).zip(out) {
            let (d, q) = quantize_q8(x);
            let sum: i32 = q.iter().map(|&v| v as i32).sum();
            b.d = f16::from_f32(d);
            b.s = f16::from_f32(sum as f32 * d);
            b.qs = q;
        }
    }

    fn vec_dot_scalar(w: &[Self], x: &[BlockQ8_1]) -> f32 {
        w.iter()
            .zip(x)
            .map(|(w, x)| w.d.to_f32() * x.d.to_f32() * dot_i8(&w.qs, &x.qs) as f32)
            .sum()
    }
}

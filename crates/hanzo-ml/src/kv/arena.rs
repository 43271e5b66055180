//! The memory behind the KV store's blocks: keys or values as f16 (llama.cpp's default
//! cache type), as Q8_0 (32 values share one f16 scale: 34 bytes for 32 values, 53% of
//! f16, llama.cpp's `--cache-type-k/v q8_0`) or as f32 (twice f16's bytes, no rounding: the
//! reference numerics). Everything outside this file addresses an arena by value index;
//! only here do the element types differ.

use crate::quantized::format::{BlockQ8_0, GgmlBlock, QK};
use half::{f16, slice::HalfFloatSliceExt};

/// How a KV store holds keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvDtype {
    #[default]
    F16,
    /// Blocks of 32 values, each an i8 times the block's f16 scale (max |x| / 127).
    Q8_0,
    /// Unrounded: what a float reference computes.
    F32,
}

impl KvDtype {
    /// Bytes of `n` values (`n` a multiple of 32 for Q8_0).
    pub fn bytes(self, n: usize) -> usize {
        match self {
            KvDtype::F16 => n * std::mem::size_of::<f16>(),
            KvDtype::Q8_0 => n / QK * std::mem::size_of::<BlockQ8_0>(),
            KvDtype::F32 => n * 4,
        }
    }

    /// Values a row must be a multiple of.
    pub fn granule(self) -> usize {
        match self {
            KvDtype::F16 | KvDtype::F32 => 1,
            KvDtype::Q8_0 => QK,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F16 => "f16",
            KvDtype::Q8_0 => "q8_0",
            KvDtype::F32 => "f32",
        }
    }
}

impl std::fmt::Display for KvDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(KvDtype::F16),
            "q8_0" | "q8" => Ok(KvDtype::Q8_0),
            "f32" => Ok(KvDtype::F32),
            _ => Err(format!("unknown KV cache type {s:?} (f16, q8_0 or f32)")),
        }
    }
}

/// One arena (the keys or the values of every block).
#[derive(Clone)]
pub(super) enum Arena {
    F16(Vec<f16>),
    Q8(Vec<BlockQ8_0>),
    F32(Vec<f32>),
}

impl Arena {
    /// An arena of `n` values, zeroed (untouched pages from the OS: a large pool costs
    /// resident memory only as blocks fill).
    pub fn zeroed(dtype: KvDtype, n: usize) -> Self {
        match dtype {
            KvDtype::F16 => Arena::F16(bytemuck::allocation::zeroed_vec(n)),
            KvDtype::Q8_0 => Arena::Q8(bytemuck::allocation::zeroed_vec(n / QK)),
            KvDtype::F32 => Arena::F32(bytemuck::allocation::zeroed_vec(n)),
        }
    }

    pub fn dtype(&self) -> KvDtype {
        match self {
            Arena::F16(_) => KvDtype::F16,
            Arena::Q8(_) => KvDtype::Q8_0,
            Arena::F32(_) => KvDtype::F32,
        }
    }

    /// The f16 values `at..at + len`, for the kernels that read the cache in place; `None`
    /// for the other types.
    #[inline]
    pub fn f16(&self, at: usize, len: usize) -> Option<&[f16]> {
        match self {
            Arena::F16(xs) => Some(&xs[at..at + len]),
            Arena::Q8(_) | Arena::F32(_) => None,
        }
    }

    /// Values `at..at + out.len()` as f32 (exact for f16; `q · scale` for Q8_0).
    pub fn read(&self, at: usize, out: &mut [f32]) {
        match self {
            Arena::F16(xs) => xs[at..at + out.len()].convert_to_f32_slice(out),
            Arena::F32(xs) => out.copy_from_slice(&xs[at..at + out.len()]),
            Arena::Q8(blocks) => {
                let mut done = 0;
                while done < out.len() {
                    let i = at + done;
                    let (blk, off) = (i / QK, i % QK);
                    let n = (QK - off).min(out.len() - done);
                    let mut tmp = [0f32; QK];
                    BlockQ8_0::dequantize(std::slice::from_ref(&blocks[blk]), &mut tmp);
                    out[done..done + n].copy_from_slice(&tmp[off..off + n]);
                    done += n;
                }
            }
        }
    }

    /// Stores `xs` at `at..` (rounded to f16, or quantized to Q8_0 a block at a time: `at`
    /// and `xs.len()` are then multiples of 32, which rows are).
    pub fn write(&mut self, at: usize, xs: &[f32]) {
        match self {
            Arena::F16(ys) => ys[at..at + xs.len()].convert_from_f32_slice(xs), // F16C, to nearest even
            Arena::F32(ys) => ys[at..at + xs.len()].copy_from_slice(xs),
            Arena::Q8(blocks) => {
                debug_assert!(
                    at.is_multiple_of(QK) && xs.len().is_multiple_of(QK),
                    "whole Q8_0 blocks"
                );
                let quantize = crate::quantized::kernels::pick_quantize_q8_0();
                quantize(xs, &mut blocks[at / QK..(at + xs.len()) / QK]);
            }
        }
    }

    /// Copies values `from..from + len` to `to..` (whole Q8_0 blocks).
    pub fn copy_within(&mut self, from: usize, len: usize, to: usize) {
        match self {
            Arena::F16(xs) => xs.copy_within(from..from + len, to),
            Arena::F32(xs) => xs.copy_within(from..from + len, to),
            Arena::Q8(b) => b.copy_within(from / QK..(from + len) / QK, to / QK),
        }
    }

    /// An empty arena of the same type with room for `n` values, for [`Self::push_from`].
    pub fn with_capacity(dtype: KvDtype, n: usize) -> Self {
        match dtype {
            KvDtype::F16 => Arena::F16(Vec::with_capacity(n)),
            KvDtype::Q8_0 => Arena::Q8(Vec::with_capacity(n / QK)),
            KvDtype::F32 => Arena::F32(Vec::with_capacity(n)),
        }
    }

    /// Appends `other`'s values `at..at + len` as stored (no rounding or requantizing).
    pub fn push_from(&mut self, other: &Arena, at: usize, len: usize) {
        match (self, other) {
            (Arena::F16(dst), Arena::F16(src)) => dst.extend_from_slice(&src[at..at + len]),
            (Arena::F32(dst), Arena::F32(src)) => dst.extend_from_slice(&src[at..at + len]),
            (Arena::Q8(dst), Arena::Q8(src)) => {
                dst.extend_from_slice(&src[at / QK..(at + len) / QK])
            }
            _ => unreachable!("arenas of one store share a type"),
        }
    }

    /// Writes `other`'s values `from..from + len` at `to..` of this arena, as stored.
    pub fn put(&mut self, to: usize, other: &Arena, from: usize, len: usize) {
        match (self, other) {
            (Arena::F16(dst), Arena::F16(src)) => {
                dst[to..to + len].copy_from_slice(&src[from..from + len])
            }
            (Arena::F32(dst), Arena::F32(src)) => {
                dst[to..to + len].copy_from_slice(&src[from..from + len])
            }
            (Arena::Q8(dst), Arena::Q8(src)) => {
                dst[to / QK..(to + len) / QK].copy_from_slice(&src[from / QK..(from + len) / QK])
            }
            _ => unreachable!("arenas of one store share a type"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_round_trip_is_within_half_a_step_of_each_block() {
        let xs: Vec<f32> = (0..96)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut a = Arena::zeroed(KvDtype::Q8_0, 128);
        a.write(32, &xs);
        let mut back = vec![0f32; 96];
        a.read(32, &mut back);
        for (blk, (x, y)) in xs.chunks(32).zip(back.chunks(32)).enumerate() {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            // The scale is amax / 127 rounded to f16; each value within half a step of it.
            let step = f16::from_f32(amax / 127.0).to_f32();
            for (a, b) in x.iter().zip(y) {
                assert!(
                    (a - b).abs() <= step * 0.5 + 1e-6,
                    "block {blk}: {a} vs {b}"
                );
            }
        }
        // A read that starts and ends inside blocks.
        let mut mid = vec![0f32; 40];
        a.read(32 + 10, &mut mid);
        assert_eq!(mid, back[10..50]);
        assert_eq!(KvDtype::Q8_0.bytes(64), 68);
        assert_eq!(KvDtype::F16.bytes(64), 128);
    }

    #[test]
    fn raw_copies_keep_the_stored_bytes() {
        let xs: Vec<f32> = (0..64).map(|i| (i as f32).sin()).collect();
        for dtype in [KvDtype::F16, KvDtype::Q8_0, KvDtype::F32] {
            let mut a = Arena::zeroed(dtype, 256);
            a.write(0, &xs);
            let mut side = Arena::with_capacity(dtype, 64);
            side.push_from(&a, 0, 64);
            a.put(128, &side, 0, 64);
            a.copy_within(0, 64, 192);
            let (mut first, mut moved, mut copied) =
                (vec![0f32; 64], vec![0f32; 64], vec![0f32; 64]);
            a.read(0, &mut first);
            a.read(128, &mut moved);
            a.read(192, &mut copied);
            assert_eq!(first, moved, "{dtype}");
            assert_eq!(first, copied, "{dtype}");
        }
        assert_eq!("Q8_0".parse::<KvDtype>(), Ok(KvDtype::Q8_0));
        assert!("q4".parse::<KvDtype>().is_err());
    }
}

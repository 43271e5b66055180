//! AFQ: MLX's affine quantization. A weight row is cut into groups of 32, 64 or 128
//! elements along the input dimension; each group has one scale and one bias (f16 or bf16,
//! the dtype of the weights MLX quantized) and `bits`-bit levels `q` (2, 3, 4, 5, 6 or 8), with
//! `w = scale · q + bias`. MLX stores three tensors: the levels as a little-endian bit stream
//! in `u32` words (`[out, in · bits / 32]`), `*.scales` and `*.biases` (`[out, in / group]`).
//!
//! Here one group is one block: its scale and bias (2 bytes each, as stored) then its levels'
//! bytes exactly as MLX packs them, so a tensor takes the bytes MLX's three take together
//! (4.5 bits a weight for 4 bits in groups of 64). `quantize` is MLX's algorithm
//! (`mlx.core.quantize`, computed in f32 the way its CPU backend does), so files written here
//! hold the same bits MLX would write.

use crate::{Error, Result};

/// The 16-bit float type of a tensor's scales and biases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfqScale {
    F16,
    BF16,
}

impl AfqScale {
    #[inline(always)]
    pub fn to_f32(self, bits: u16) -> f32 {
        match self {
            AfqScale::F16 => half::f16::from_bits(bits).to_f32(),
            AfqScale::BF16 => half::bf16::from_bits(bits).to_f32(),
        }
    }

    /// Round to nearest even, as MLX's `static_cast<T>(float)`.
    pub fn from_f32(self, v: f32) -> u16 {
        match self {
            AfqScale::F16 => half::f16::from_f32(v).to_bits(),
            AfqScale::BF16 => half::bf16::from_f32(v).to_bits(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AfqScale::F16 => "F16",
            AfqScale::BF16 => "BF16",
        }
    }
}

/// One AFQ layout: bits per level, elements per group and the scales' type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AfqType {
    bits: u8,
    group: u8,
    scale: AfqScale,
}

/// The bit widths MLX's affine mode takes (its 1-bit form is left out).
pub const AFQ_BITS: [usize; 6] = [2, 3, 4, 5, 6, 8];
/// The group sizes MLX takes.
pub const AFQ_GROUPS: [usize; 3] = [32, 64, 128];
/// MLX's default group size.
pub const AFQ_DEFAULT_GROUP: usize = 64;

impl AfqType {
    pub fn new(bits: usize, group: usize, scale: AfqScale) -> Result<Self> {
        if !AFQ_BITS.contains(&bits) {
            return Err(Error::invalid(
                "AFQ",
                format!(
                    "{bits}-bit levels: MLX's affine quantization takes 2, 3, 4, 5, 6 or 8 bits"
                ),
            ));
        }
        Self::check_group(group)?;
        Ok(Self {
            bits: bits as u8,
            group: group as u8,
            scale,
        })
    }

    /// A group size MLX takes (32, 64 or 128), or the error saying so.
    pub fn check_group(group: usize) -> Result<()> {
        if !AFQ_GROUPS.contains(&group) {
            return Err(Error::invalid(
                "AFQ",
                format!("group size {group}: MLX takes 32, 64 or 128"),
            ));
        }
        Ok(())
    }

    pub fn bits(self) -> usize {
        self.bits as usize
    }

    pub fn group(self) -> usize {
        self.group as usize
    }

    pub fn scale(self) -> AfqScale {
        self.scale
    }

    pub fn with_scale(self, scale: AfqScale) -> Self {
        Self { scale, ..self }
    }

    /// The largest level, `2^bits - 1`.
    pub fn max_level(self) -> u8 {
        ((1u32 << self.bits) - 1) as u8
    }

    /// Bytes of one group's levels.
    pub fn level_bytes(self) -> usize {
        self.group() * self.bits() / 8
    }

    /// Bytes of one block: scale, bias, levels.
    pub fn block_bytes(self) -> usize {
        4 + self.level_bytes()
    }

    /// `AFQ4_G64_BF16`.
    pub fn name(self) -> &'static str {
        let (b, g, s) = (
            AFQ_BITS.iter().position(|&b| b == self.bits()).unwrap(),
            AFQ_GROUPS.iter().position(|&g| g == self.group()).unwrap(),
            self.scale as usize,
        );
        NAMES[(b * AFQ_GROUPS.len() + g) * 2 + s]
    }

    /// `AFQ{bits}[_G{group}][_{F16|BF16}]`, case-insensitive; group 64 and f16 scales unless
    /// named. `None` for names of other types.
    pub fn parse(name: &str) -> Option<Result<Self>> {
        let upper = name.to_ascii_uppercase();
        let rest = upper.strip_prefix("AFQ")?;
        let mut parts = rest.split('_');
        let bits = parts.next().and_then(|b| b.parse::<usize>().ok());
        let (mut group, mut scale) = (AFQ_DEFAULT_GROUP, AfqScale::F16);
        let mut bad = bits.is_none();
        for p in parts {
            match p {
                "F16" => scale = AfqScale::F16,
                "BF16" => scale = AfqScale::BF16,
                _ => match p.strip_prefix('G').and_then(|g| g.parse().ok()) {
                    Some(g) => group = g,
                    None => bad = true,
                },
            }
        }
        if bad {
            return Some(Err(Error::invalid(
                "AFQ",
                format!(
                    "{name:?}: expected AFQ<bits>[_G<group>][_F16|_BF16], e.g. AFQ4 or AFQ8_G32"
                ),
            )));
        }
        Some(Self::new(bits.unwrap_or(0), group, scale))
    }

    /// A small id outside ggml's range, for tables keyed by type; never written to a file.
    pub fn code(self) -> u32 {
        0x4146_0000 | (self.bits as u32) << 8 | self.group as u32 | (self.scale as u32) << 15
    }

    /// Every layout, for tests.
    pub fn all() -> impl Iterator<Item = AfqType> {
        AFQ_BITS.into_iter().flat_map(|b| {
            AFQ_GROUPS.into_iter().flat_map(move |g| {
                [AfqScale::F16, AfqScale::BF16]
                    .into_iter()
                    .map(move |s| AfqType::new(b, g, s).unwrap())
            })
        })
    }
}

/// Every layout's name, bits-major then group then scale.
const NAMES: [&str; 36] = [
    "AFQ2_G32_F16",
    "AFQ2_G32_BF16",
    "AFQ2_G64_F16",
    "AFQ2_G64_BF16",
    "AFQ2_G128_F16",
    "AFQ2_G128_BF16",
    "AFQ3_G32_F16",
    "AFQ3_G32_BF16",
    "AFQ3_G64_F16",
    "AFQ3_G64_BF16",
    "AFQ3_G128_F16",
    "AFQ3_G128_BF16",
    "AFQ4_G32_F16",
    "AFQ4_G32_BF16",
    "AFQ4_G64_F16",
    "AFQ4_G64_BF16",
    "AFQ4_G128_F16",
    "AFQ4_G128_BF16",
    "AFQ5_G32_F16",
    "AFQ5_G32_BF16",
    "AFQ5_G64_F16",
    "AFQ5_G64_BF16",
    "AFQ5_G128_F16",
    "AFQ5_G128_BF16",
    "AFQ6_G32_F16",
    "AFQ6_G32_BF16",
    "AFQ6_G64_F16",
    "AFQ6_G64_BF16",
    "AFQ6_G128_F16",
    "AFQ6_G128_BF16",
    "AFQ8_G32_F16",
    "AFQ8_G32_BF16",
    "AFQ8_G64_F16",
    "AFQ8_G64_BF16",
    "AFQ8_G128_F16",
    "AFQ8_G128_BF16",
];

/// `with_block_type!`'s arm for the AFQ layouts, which are not ggml blocks: their products,
/// (de)quantization and GEMM go through this module and `cpu::afq`, and every caller of the
/// macro routes them there first.
#[track_caller]
pub fn not_a_block(t: AfqType) -> ! {
    panic!("{} is an AFQ layout, not a ggml block type", t.name())
}

/// Level `i` of a group's packed bytes: bits `i·bits ..` of the little-endian stream.
#[inline(always)]
pub fn level(bytes: &[u8], bits: usize, i: usize) -> u8 {
    let at = i * bits;
    let (byte, shift) = (at / 8, at % 8);
    let lo = bytes[byte] as u16;
    let hi = if shift + bits > 8 {
        bytes[byte + 1] as u16
    } else {
        0
    };
    (((lo | hi << 8) >> shift) & ((1 << bits) - 1)) as u8
}

/// One block's scale and bias as f32.
#[inline(always)]
pub fn scale_bias(t: AfqType, block: &[u8]) -> (f32, f32) {
    (
        t.scale.to_f32(u16::from_le_bytes([block[0], block[1]])),
        t.scale.to_f32(u16::from_le_bytes([block[2], block[3]])),
    )
}

/// `out.len()` elements from whole blocks of `t`.
pub fn dequantize(t: AfqType, data: &[u8], out: &mut [f32]) {
    let (g, bits) = (t.group(), t.bits());
    for (block, out) in data
        .chunks_exact(t.block_bytes())
        .zip(out.chunks_exact_mut(g))
    {
        let (scale, bias) = scale_bias(t, block);
        let levels = &block[4..];
        for (i, o) in out.iter_mut().enumerate() {
            *o = scale * level(levels, bits, i) as f32 + bias;
        }
    }
}

/// Quantizes `xs` (whole groups) into blocks of `t`, bit for bit as MLX's CPU backend does:
/// the range in f32, a scale whose level for the larger-magnitude edge is exact, levels
/// rounded half to even against the f32 scale and bias, which are then rounded to `t`'s
/// scale type.
pub fn quantize(t: AfqType, xs: &[f32], out: &mut [u8]) {
    let (g, bits) = (t.group(), t.bits());
    let n_bins = t.max_level() as f32;
    const EPS: f32 = 1e-7;
    for (x, block) in xs
        .chunks_exact(g)
        .zip(out.chunks_exact_mut(t.block_bytes()))
    {
        let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
        for &v in x {
            hi = hi.max(v);
            lo = lo.min(v);
        }
        let lower_edge = lo.abs() > hi.abs();
        let mut scale = ((hi - lo) / n_bins).max(EPS);
        if !lower_edge {
            scale = -scale;
        }
        let edge = if lower_edge { lo } else { hi };
        let q0 = (edge / scale).round_ties_even();
        let mut bias = 0.0;
        if q0 != 0.0 {
            scale = edge / q0;
            bias = edge;
        }
        block[..2].copy_from_slice(&t.scale.from_f32(scale).to_le_bytes());
        block[2..4].copy_from_slice(&t.scale.from_f32(bias).to_le_bytes());
        let levels = &mut block[4..];
        levels.fill(0);
        for (i, &v) in x.iter().enumerate() {
            let q = ((v - bias) / scale).round_ties_even().clamp(0.0, n_bins) as u32;
            let at = i * bits;
            let word = q << (at % 8);
            levels[at / 8] |= word as u8;
            if at % 8 + bits > 8 {
                levels[at / 8 + 1] |= (word >> 8) as u8;
            }
        }
    }
}

/// Blocks from MLX's three tensors of one `[n, k]` weight: `packed` the levels' bytes
/// (`n · k · bits / 8`), `scales` and `biases` the 16-bit values (`n · k / group` each).
pub fn from_mlx(t: AfqType, packed: &[u8], scales: &[u16], biases: &[u16]) -> Result<Vec<u8>> {
    let mut out = vec![0u8; scales.len() * t.block_bytes()];
    from_mlx_into(t, packed, scales, biases, &mut out)?;
    Ok(out)
}

/// [`from_mlx`] into `out`, which must hold `scales.len()` blocks.
pub fn from_mlx_into(
    t: AfqType,
    packed: &[u8],
    scales: &[u16],
    biases: &[u16],
    out: &mut [u8],
) -> Result<()> {
    let groups = scales.len();
    let lb = t.level_bytes();
    if biases.len() != groups || packed.len() != groups * lb {
        return Err(Error::format(
            "AFQ",
            format!(
                "{}: {} bytes of levels, {} scales and {} biases do not make whole groups of {} ({lb} bytes each)",
                t.name(),
                packed.len(),
                scales.len(),
                biases.len(),
                t.group()
            ),
        ));
    }
    if out.len() != groups * t.block_bytes() {
        return Err(Error::format(
            "AFQ",
            format!("{groups} blocks do not fill {} bytes", out.len()),
        ));
    }
    for (i, block) in out.chunks_exact_mut(t.block_bytes()).enumerate() {
        block[..2].copy_from_slice(&scales[i].to_le_bytes());
        block[2..4].copy_from_slice(&biases[i].to_le_bytes());
        block[4..].copy_from_slice(&packed[i * lb..(i + 1) * lb]);
    }
    Ok(())
}

/// MLX's three tensors' bytes (levels, scales, biases, little-endian) from blocks.
pub fn to_mlx(t: AfqType, data: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let blocks = data.len() / t.block_bytes();
    let (mut packed, mut scales, mut biases) = (
        Vec::with_capacity(blocks * t.level_bytes()),
        Vec::with_capacity(blocks * 2),
        Vec::with_capacity(blocks * 2),
    );
    for block in data.chunks_exact(t.block_bytes()) {
        scales.extend_from_slice(&block[..2]);
        biases.extend_from_slice(&block[2..4]);
        packed.extend_from_slice(&block[4..]);
    }
    (packed, scales, biases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for t in AfqType::all() {
            assert_eq!(AfqType::parse(t.name()).unwrap().unwrap(), t);
            assert_eq!(t.block_bytes(), 4 + t.group() * t.bits() / 8);
        }
        let t = AfqType::parse("afq4").unwrap().unwrap();
        assert_eq!((t.bits(), t.group(), t.scale()), (4, 64, AfqScale::F16));
        assert!(AfqType::parse("AFQ7").unwrap().is_err());
        assert!(AfqType::parse("AFQ4_G48").unwrap().is_err());
        assert!(AfqType::parse("Q4_0").is_none());
    }

    /// Levels read back as written, for every width, and a group's elements come back within
    /// a step (half a step of rounding, and MLX's zero point: the level of the larger edge is
    /// rounded to a whole one, ties to even, which can leave the other edge a step short).
    #[test]
    fn round_trip_within_a_step() {
        let xs: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 97.0)
            .collect();
        for t in AfqType::all() {
            let mut data = vec![0u8; xs.len() / t.group() * t.block_bytes()];
            quantize(t, &xs, &mut data);
            let mut back = vec![0f32; xs.len()];
            dequantize(t, &data, &mut back);
            for (blk, (x, y)) in data
                .chunks_exact(t.block_bytes())
                .zip(xs.chunks_exact(t.group()).zip(back.chunks_exact(t.group())))
            {
                let (scale, _) = scale_bias(t, blk);
                for (a, b) in x.iter().zip(y) {
                    // A step, plus the 16-bit rounding of scale and bias.
                    assert!(
                        (a - b).abs() <= scale.abs() * 1.01 + 0.002,
                        "{} {a} {b}",
                        t.name()
                    );
                }
            }
            let (p, s, b) = to_mlx(t, &data);
            let s16: Vec<u16> = s
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            let b16: Vec<u16> = b
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            assert_eq!(from_mlx(t, &p, &s16, &b16).unwrap(), data);
        }
    }
}

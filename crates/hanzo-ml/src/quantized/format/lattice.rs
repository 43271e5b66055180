//! What the IQ2/IQ3/IQ4_XS formats share: their lattices (ggml's byte tables, expanded once
//! from the packed constants of `iq_grids`), the sign table, and one decoded form of a block
//! — signed integer levels with an integer multiplier per group — through which each type's
//! dequantization and scalar dot product go, so the bit layouts are written down once per
//! type.

use super::iq_grids::*;
use super::kquants::{BlockQ8K, QK_K};
use std::sync::OnceLock;

fn expand<const E: usize>(packed: &[u8], bits: usize, levels: &[i8]) -> Box<[[i8; E]]> {
    packed
        .chunks_exact(E * bits / 8)
        .map(|entry| {
            std::array::from_fn(|e| {
                let bit = e * bits;
                levels[((entry[bit / 8] >> (bit % 8)) & ((1 << bits) - 1)) as usize]
            })
        })
        .collect()
}

/// A packed lattice's points as level indices rather than magnitudes (what the IQ3 searches
/// work in).
pub(crate) fn level_indices<const E: usize>(packed: &[u8], bits: usize) -> Box<[[i8; E]]> {
    let identity: Vec<i8> = (0..1 << bits).map(|i| i as i8).collect();
    expand::<E>(packed, bits, &identity)
}

// A fixed-length array, so the kernels' masked indices need no bounds checks.
macro_rules! grid {
    ($(#[$doc:meta])* $name:ident, $points:literal x $elems:literal, $packed:ident, $bits:ident,
     $levels:ident) => {
        $(#[$doc])*
        pub(crate) fn $name() -> &'static [[i8; $elems]; $points] {
            static GRID: OnceLock<Box<[[i8; $elems]; $points]>> = OnceLock::new();
            GRID.get_or_init(|| {
                expand::<$elems>(&$packed, $bits, &$levels)
                    .try_into()
                    .expect("the packed table holds every point")
            })
        }
    };
}

grid!(
    /// ggml's `iq2xxs_grid`: 256 points of 8 magnitudes.
    iq2xxs_grid, 256 x 8, IQ2XXS_PACKED, IQ2XXS_BITS, IQ2XXS_LEVELS
);
grid!(
    /// ggml's `iq2xs_grid`: 512 points of 8 magnitudes.
    iq2xs_grid, 512 x 8, IQ2XS_PACKED, IQ2XS_BITS, IQ2XS_LEVELS
);
grid!(
    /// ggml's `iq2s_grid`: 1024 points of 8 magnitudes.
    iq2s_grid, 1024 x 8, IQ2S_PACKED, IQ2S_BITS, IQ2S_LEVELS
);
grid!(
    /// ggml's `iq3xxs_grid`: 256 points of 4 magnitudes.
    iq3xxs_grid, 256 x 4, IQ3XXS_PACKED, IQ3XXS_BITS, IQ3XXS_LEVELS
);
grid!(
    /// ggml's `iq3s_grid`: 512 points of 4 magnitudes.
    iq3s_grid, 512 x 4, IQ3S_PACKED, IQ3S_BITS, IQ3S_LEVELS
);
grid!(
    /// ggml's `iq1s_grid`: 2048 points of 8 values in {-1, 0, 1}.
    iq1s_grid, 2048 x 8, IQ1S_PACKED, IQ1S_BITS, IQ1S_LEVELS
);

/// The eight signs of a 7-bit sign index (the eighth makes the count of minus signs even).
pub(crate) fn ksigns(index: u32) -> u8 {
    KSIGNS[(index & 127) as usize]
}

/// The 8 magnitudes of a lattice point with sign bit `j` of `signs` applied to element `j`,
/// in one 64-bit word: the bits spread to one byte each, and each marked byte negated as
/// `(p ^ 0xff) + 1`. The magnitudes of the IQ2 and IQ3 grids are 1 to 62, so no byte
/// carries into the next.
#[inline]
pub(crate) fn signed8(point: [i8; 8], signs: u8) -> [i8; 8] {
    const LOW: u64 = 0x0101_0101_0101_0101;
    let bits = (signs as u64 * LOW) & 0x8040_2010_0804_0201;
    // A byte holding its bit (1 to 0x80) reaches 0x80 when 0x7f is added; a zero does not.
    let ones = ((bits + 0x7f7f_7f7f_7f7f_7f7f) & 0x8080_8080_8080_8080) >> 7;
    let p = u64::from_le_bytes(point.map(|v| v as u8));
    ((p ^ (ones * 0xff)) + ones).to_le_bytes().map(|b| b as i8)
}

/// A block as `d · FACTOR · mult[g] · level[i]` for element `i` of group `g`
/// (`GROUP` elements each); the multipliers and levels are integers, so the dot product with
/// Q8_K is exact integer arithmetic until the two float scales.
pub(crate) struct Levels<const GROUP: usize> {
    pub d: f32,
    pub mult: [i32; 16],
    pub level: [i8; QK_K],
}

impl<const GROUP: usize> Levels<GROUP> {
    pub fn new(d: f32) -> Self {
        Levels {
            d,
            mult: [0; 16],
            level: [0; QK_K],
        }
    }

    /// Writes the block's 256 values; `factor` is a power of two, so `d · mult · factor`
    /// rounds once, as ggml's (and the `gguf` package's) dequantization does.
    pub fn dequantize(&self, factor: f32, out: &mut [f32]) {
        for (g, o) in out.chunks_exact_mut(GROUP).enumerate() {
            let dl = self.d * self.mult[g] as f32 * factor;
            for (o, &l) in o.iter_mut().zip(&self.level[GROUP * g..]) {
                *o = dl * l as f32;
            }
        }
    }

    /// The GEMM form (`Unpacking`): each level offset by `offset` into a byte, and per group
    /// the scale `d · mult · factor` with min `offset · scale`.
    pub fn unpack(
        &self,
        factor: f32,
        offset: u8,
        u: &mut [u8; 256],
        s: &mut [f32; 16],
        m: &mut [f32; 16],
    ) {
        for (u, &l) in u.iter_mut().zip(&self.level) {
            *u = (l as u8).wrapping_add(offset);
        }
        for g in 0..QK_K / GROUP {
            s[g] = self.d * self.mult[g] as f32 * factor;
            m[g] = offset as f32 * s[g];
        }
    }

    /// `Σ mult[g] · Σ level·q` over the block, in integers.
    pub fn dot(&self, x: &BlockQ8K) -> i32 {
        self.level
            .chunks_exact(GROUP)
            .zip(x.qs.chunks_exact(GROUP))
            .zip(self.mult)
            .map(|((l, q), m)| m * super::dot_i8(l, q))
            .sum()
    }
}

/// The factor of a type decoded into `Levels` (a power of two the block sums are multiplied
/// by at the end, `dot_levels`), for the kernels that compute its dot product their own way.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) trait LevelsFactor: super::GgmlBlock<Dot = BlockQ8K> {
    const FACTOR: f32;
}

/// `Σ d·x.d·factor·dot` over blocks: the dot product of any `Levels` type with Q8_K, the
/// factor applied once at the end as ggml does.
pub(crate) fn dot_levels<B, const GROUP: usize>(
    w: &[B],
    x: &[BlockQ8K],
    factor: f32,
    levels: impl Fn(&B) -> Levels<GROUP>,
) -> f32 {
    let sum: f32 = w
        .iter()
        .zip(x)
        .map(|(w, x)| {
            let l = levels(w);
            l.d * x.d * l.dot(x) as f32
        })
        .sum();
    factor * sum
}

/// The scale-group size of a levels function's type.
pub(crate) fn group_of<B, const GROUP: usize>(_: fn(&B) -> Levels<GROUP>) -> usize {
    GROUP
}

/// The unpacked form of levels within ±`limit`: offset by 64 where that keeps every byte
/// within 127 (the AVX2 panels' unsigned `maddubs` then cannot saturate), else by 128. Gives
/// (offset, largest byte).
pub(crate) const fn unpack_offset(limit: u8) -> (u8, u8) {
    if limit < 64 {
        (64, 64 + limit)
    } else {
        (128, 255)
    }
}

/// `GgmlBlock` for a type decoded by `$levels` into `Levels` with the factor `$factor` and
/// levels within ±`$limit`; the last arguments are its quantizers of whole rows (`quantize`
/// without importance, `weighted` with it), or, for a type written only under importance, the
/// message that says so and the weighted one.
macro_rules! lattice_block {
    ($block:ty, $dtype:expr, $levels:ident, $factor:expr, limit = $limit:expr,
     quantize = $quantize:path, weighted = $weighted:path) => {
        lattice_block!(@impl $block, $dtype, $levels, $factor, $limit, None, $quantize,
            $weighted);
    };
    ($block:ty, $dtype:expr, $levels:ident, $factor:expr, limit = $limit:expr,
     needs_importance = $why:expr, weighted = $weighted:path) => {
        lattice_block!(@impl $block, $dtype, $levels, $factor, $limit, Some($why),
            |_: &[f32], _: &mut [$block]| unreachable!("{}", $why), $weighted);
    };
    (@impl $block:ty, $dtype:expr, $levels:ident, $factor:expr, $limit:expr,
     $unsupported:expr, $quantize:expr, $weighted:expr) => {
        impl super::GgmlBlock for $block {
            const DTYPE: GgmlDType = $dtype;
            const BLOCK_SIZE: usize = QK_K;
            const QUANTIZE_UNSUPPORTED: Option<&'static str> = $unsupported;
            type Dot = BlockQ8K;

            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
                    $levels(b).dequantize($factor, o);
                }
            }

            fn quantize(xs: &[f32], out: &mut [Self]) {
                ($quantize)(xs, out)
            }

            fn quantize_row_weighted(xs: &[f32], qw: &[f32], out: &mut [Self]) {
                ($weighted)(xs, qw, out)
            }

            fn vec_dot_scalar(w: &[Self], x: &[BlockQ8K]) -> f32 {
                super::lattice::dot_levels(w, x, $factor, $levels)
            }

            fn unpacking() -> Option<super::Unpacking<Self>> {
                const OFFSET: (u8, u8) = super::lattice::unpack_offset($limit);
                Some(super::Unpacking {
                    group: super::lattice::group_of($levels),
                    max_level: OFFSET.1,
                    unpack: |b, u, s, m| $levels(b).unpack($factor, OFFSET.0, u, s, m),
                })
            }
        }

        impl super::lattice::LevelsFactor for $block {
            const FACTOR: f32 = $factor;
        }
    };
}
pub(crate) use lattice_block;

#[cfg(test)]
mod tests {
    use super::*;

    /// `signed8`'s premise: no magnitude of a signed grid is 0 or past 62.
    #[test]
    fn signed_grids_hold_magnitudes_from_1_to_62() {
        let points = [
            iq2xxs_grid().as_flattened(),
            iq2xs_grid().as_flattened(),
            iq2s_grid().as_flattened(),
            iq3xxs_grid().as_flattened(),
            iq3s_grid().as_flattened(),
        ];
        for (g, grid) in points.iter().enumerate() {
            assert!(grid.iter().all(|v| (1..=62).contains(v)), "grid {g}");
        }
    }

    #[test]
    fn signed8_negates_the_marked_elements() {
        for signs in 0..=255u8 {
            for start in [1i8, 8, 25, 43, 55] {
                let point: [i8; 8] = std::array::from_fn(|j| start + j as i8);
                let want: [i8; 8] = std::array::from_fn(|j| {
                    if signs >> j & 1 == 1 {
                        -point[j]
                    } else {
                        point[j]
                    }
                });
                assert_eq!(signed8(point, signs), want, "signs {signs:#010b}");
            }
        }
    }

    #[test]
    fn grids_expand_to_ggmls_first_and_last_points() {
        // The first and last entries of ggml's tables, as the C source writes them (u64 /
        // u32 little-endian byte values).
        let bytes = |p: &[i8]| p.iter().map(|&b| b as u8).collect::<Vec<_>>();
        assert_eq!(bytes(&iq2xxs_grid()[0]), [0x08; 8]);
        assert_eq!(
            bytes(&iq2xxs_grid()[1]),
            [0x2b, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08]
        );
        assert_eq!(bytes(&iq2s_grid()[1023]), [0x2b; 8]);
        assert_eq!(bytes(&iq3xxs_grid()[0]), [0x04; 4]);
        assert_eq!(iq1s_grid()[0], [-1; 8]);
        assert_eq!(
            (iq2xxs_grid().len(), iq2xs_grid().len(), iq2s_grid().len()),
            (256, 512, 1024)
        );
        assert_eq!((iq3xxs_grid().len(), iq3s_grid().len()), (256, 512));
        assert_eq!(iq1s_grid().len(), 2048);
    }

    #[test]
    fn sign_table_has_even_parity() {
        for i in 0..128u32 {
            let s = ksigns(i);
            assert_eq!(s & 127, i as u8);
            assert_eq!(s.count_ones() % 2, 0);
        }
    }
}

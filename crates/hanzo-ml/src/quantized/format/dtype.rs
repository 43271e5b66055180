//! ggml's tensor types: the on-disk ids (append-only, never renumbered) and each type's block
//! geometry. This is the one table a new type is added to.

use super::afq::AfqType;
use crate::{Error, Result};

/// A tensor type: ggml's block types (their GGUF ids are in `TABLE`), and MLX's affine
/// layouts (`Afq`), which GGUF files cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlDType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    IQ2XXS,
    IQ2XS,
    IQ3XXS,
    IQ1S,
    IQ4NL,
    IQ3S,
    IQ2S,
    IQ4XS,
    IQ1M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    /// MLX's affine quantization (`afq`): read from and written to safetensors only.
    Afq(AfqType),
}

/// (type, GGUF id (append-only, never renumbered), name, elements per block, bytes per block)
const TABLE: &[(GgmlDType, u32, &str, usize, usize)] = &[
    (GgmlDType::F32, 0, "F32", 1, 4),
    (GgmlDType::F16, 1, "F16", 1, 2),
    (GgmlDType::Q4_0, 2, "Q4_0", 32, 18),
    (GgmlDType::Q4_1, 3, "Q4_1", 32, 20),
    (GgmlDType::Q5_0, 6, "Q5_0", 32, 22),
    (GgmlDType::Q5_1, 7, "Q5_1", 32, 24),
    (GgmlDType::Q8_0, 8, "Q8_0", 32, 34),
    (GgmlDType::Q8_1, 9, "Q8_1", 32, 36),
    (GgmlDType::Q2K, 10, "Q2_K", 256, 84),
    (GgmlDType::Q3K, 11, "Q3_K", 256, 110),
    (GgmlDType::Q4K, 12, "Q4_K", 256, 144),
    (GgmlDType::Q5K, 13, "Q5_K", 256, 176),
    (GgmlDType::Q6K, 14, "Q6_K", 256, 210),
    (GgmlDType::Q8K, 15, "Q8_K", 256, 292),
    (GgmlDType::IQ2XXS, 16, "IQ2_XXS", 256, 66),
    (GgmlDType::IQ2XS, 17, "IQ2_XS", 256, 74),
    (GgmlDType::IQ3XXS, 18, "IQ3_XXS", 256, 98),
    (GgmlDType::IQ1S, 19, "IQ1_S", 256, 50),
    (GgmlDType::IQ4NL, 20, "IQ4_NL", 32, 18),
    (GgmlDType::IQ3S, 21, "IQ3_S", 256, 110),
    (GgmlDType::IQ2S, 22, "IQ2_S", 256, 82),
    (GgmlDType::IQ4XS, 23, "IQ4_XS", 256, 136),
    (GgmlDType::IQ1M, 29, "IQ1_M", 256, 56),
    (GgmlDType::BF16, 30, "BF16", 1, 2),
    (GgmlDType::TQ1_0, 34, "TQ1_0", 256, 54),
    (GgmlDType::TQ2_0, 35, "TQ2_0", 256, 66),
    (GgmlDType::MXFP4, 39, "MXFP4", 32, 17),
];

/// Ids ggml knows but we do not decode as weights (its integer and f64 tensors, its newest
/// NVFP4 and Q1_0), named so an unsupported file gets a useful message.
const KNOWN_UNSUPPORTED: &[(u32, &str)] = &[
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (40, "NVFP4"),
    (41, "Q1_0"),
];

impl GgmlDType {
    pub const ALL: [GgmlDType; 27] = [
        GgmlDType::F32,
        GgmlDType::F16,
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q8_1,
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
        GgmlDType::Q8K,
        GgmlDType::IQ4NL,
        GgmlDType::BF16,
        GgmlDType::IQ2XXS,
        GgmlDType::IQ2XS,
        GgmlDType::IQ2S,
        GgmlDType::IQ3XXS,
        GgmlDType::IQ3S,
        GgmlDType::IQ1S,
        GgmlDType::IQ1M,
        GgmlDType::IQ4XS,
        GgmlDType::TQ1_0,
        GgmlDType::TQ2_0,
        GgmlDType::MXFP4,
    ];

    /// This type's row; `None` for the AFQ layouts, which are not ggml's.
    fn row(self) -> Option<&'static (GgmlDType, u32, &'static str, usize, usize)> {
        TABLE.iter().find(|r| r.0 == self)
    }

    pub fn from_u32(id: u32) -> Result<Self> {
        if let Some(r) = TABLE.iter().find(|r| r.1 == id) {
            return Ok(r.0);
        }
        match KNOWN_UNSUPPORTED.iter().find(|(i, _)| *i == id) {
            Some((_, name)) => Err(Error::format(
                "ggml type",
                format!("tensor type {name} (id {id}) is not supported"),
            )),
            None => Err(Error::format(
                "ggml type",
                format!("unknown tensor type id {id}"),
            )),
        }
    }

    /// The id GGUF files store; the AFQ layouts, which GGUF cannot hold, answer with a code
    /// outside ggml's range (`GgufWriter` refuses them).
    pub fn id(self) -> u32 {
        match (self, self.row()) {
            (_, Some(r)) => r.1,
            (GgmlDType::Afq(t), None) => t.code(),
            _ => unreachable!("every ggml type has a table row"),
        }
    }

    /// The AFQ layout, for MLX's types.
    pub fn afq(self) -> Option<AfqType> {
        match self {
            GgmlDType::Afq(t) => Some(t),
            _ => None,
        }
    }

    /// ggml's name, e.g. `Q4_K`.
    pub fn name(self) -> &'static str {
        match (self, self.row()) {
            (_, Some(r)) => r.2,
            (GgmlDType::Afq(t), None) => t.name(),
            _ => unreachable!("every ggml type has a table row"),
        }
    }

    /// Parses a type name as llama.cpp writes it (case-insensitive), or an AFQ layout
    /// (`AFQ4`, `AFQ8_G32`, `AFQ4_G64_BF16`: see `AfqType::parse`).
    pub fn from_name(name: &str) -> Result<Self> {
        if let Some(t) = AfqType::parse(name) {
            return t.map(GgmlDType::Afq);
        }
        TABLE
            .iter()
            .find(|r| r.2.eq_ignore_ascii_case(name))
            .map(|r| r.0)
            .ok_or_else(|| {
                let known: Vec<&str> = TABLE.iter().map(|r| r.2).collect();
                Error::invalid(
                    "ggml type",
                    format!(
                        "unknown type {name:?}; known: {}, AFQ<bits>[_G<group>]",
                        known.join(", ")
                    ),
                )
            })
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match (self, self.row()) {
            (_, Some(r)) => r.3,
            (GgmlDType::Afq(t), None) => t.group(),
            _ => unreachable!("every ggml type has a table row"),
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match (self, self.row()) {
            (_, Some(r)) => r.4,
            (GgmlDType::Afq(t), None) => t.block_bytes(),
            _ => unreachable!("every ggml type has a table row"),
        }
    }

    pub fn is_quantized(self) -> bool {
        !matches!(self, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
    }

    /// Bytes taken by `n` elements, or an error when `n` is not a whole number of blocks or
    /// the size overflows.
    pub fn bytes_for(self, n: usize) -> Result<usize> {
        let bs = self.block_size();
        if !n.is_multiple_of(bs) {
            return Err(Error::invalid(
                "ggml type",
                format!(
                    "{n} elements is not a multiple of the {} block size {bs}",
                    self.name()
                ),
            ));
        }
        (n / bs)
            .checked_mul(self.type_size())
            .ok_or_else(|| Error::invalid("ggml type", format!("{n} elements overflow")))
    }
}

impl std::fmt::Display for GgmlDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for GgmlDType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::from_name(s)
    }
}

//! ggml's tensor types: the on-disk ids (append-only, never renumbered) and each type's block
//! geometry. This is the one table a new type is added to.

use crate::{Error, Result};

/// A ggml tensor type. The discriminant is the id GGUF files store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlDType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    IQ2XXS = 16,
    IQ2XS = 17,
    IQ3XXS = 18,
    IQ1S = 19,
    IQ4NL = 20,
    IQ3S = 21,
    IQ2S = 22,
    IQ4XS = 23,
    IQ1M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
}

/// (type, name, elements per block, bytes per block)
const TABLE: &[(GgmlDType, &str, usize, usize)] = &[
    (GgmlDType::F32, "F32", 1, 4),
    (GgmlDType::F16, "F16", 1, 2),
    (GgmlDType::Q4_0, "Q4_0", 32, 18),
    (GgmlDType::Q4_1, "Q4_1", 32, 20),
    (GgmlDType::Q5_0, "Q5_0", 32, 22),
    (GgmlDType::Q5_1, "Q5_1", 32, 24),
    (GgmlDType::Q8_0, "Q8_0", 32, 34),
    (GgmlDType::Q8_1, "Q8_1", 32, 36),
    (GgmlDType::Q2K, "Q2_K", 256, 84),
    (GgmlDType::Q3K, "Q3_K", 256, 110),
    (GgmlDType::Q4K, "Q4_K", 256, 144),
    (GgmlDType::Q5K, "Q5_K", 256, 176),
    (GgmlDType::Q6K, "Q6_K", 256, 210),
    (GgmlDType::Q8K, "Q8_K", 256, 292),
    (GgmlDType::IQ2XXS, "IQ2_XXS", 256, 66),
    (GgmlDType::IQ2XS, "IQ2_XS", 256, 74),
    (GgmlDType::IQ3XXS, "IQ3_XXS", 256, 98),
    (GgmlDType::IQ1S, "IQ1_S", 256, 50),
    (GgmlDType::IQ4NL, "IQ4_NL", 32, 18),
    (GgmlDType::IQ3S, "IQ3_S", 256, 110),
    (GgmlDType::IQ2S, "IQ2_S", 256, 82),
    (GgmlDType::IQ4XS, "IQ4_XS", 256, 136),
    (GgmlDType::IQ1M, "IQ1_M", 256, 56),
    (GgmlDType::BF16, "BF16", 1, 2),
    (GgmlDType::TQ1_0, "TQ1_0", 256, 54),
    (GgmlDType::TQ2_0, "TQ2_0", 256, 66),
    (GgmlDType::MXFP4, "MXFP4", 32, 17),
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

    fn row(self) -> &'static (GgmlDType, &'static str, usize, usize) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every GgmlDType has a table row")
    }

    pub fn from_u32(id: u32) -> Result<Self> {
        if let Some(r) = TABLE.iter().find(|r| r.0 as u32 == id) {
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

    pub fn id(self) -> u32 {
        self as u32
    }

    /// ggml's name, e.g. `Q4_K`.
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// Parses a type name as llama.cpp writes it (case-insensitive).
    pub fn from_name(name: &str) -> Result<Self> {
        TABLE
            .iter()
            .find(|r| r.1.eq_ignore_ascii_case(name))
            .map(|r| r.0)
            .ok_or_else(|| {
                let known: Vec<&str> = TABLE.iter().map(|r| r.1).collect();
                Error::invalid(
                    "ggml type",
                    format!("unknown type {name:?}; known: {}", known.join(", ")),
                )
            })
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        self.row().2
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.row().3
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

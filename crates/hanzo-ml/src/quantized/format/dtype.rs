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
    IQ4NL = 20,
    BF16 = 30,
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
    (GgmlDType::IQ4NL, "IQ4_NL", 32, 18),
    (GgmlDType::BF16, "BF16", 1, 2),
];

/// Ids ggml knows but we do not decode (IQ2/IQ3/IQ1, TQ, MXFP4, integer types), named so an
/// unsupported file gets a useful message.
const KNOWN_UNSUPPORTED: &[(u32, &str)] = &[
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (39, "MXFP4"),
];

impl GgmlDType {
    pub const ALL: [GgmlDType; 16] = [
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

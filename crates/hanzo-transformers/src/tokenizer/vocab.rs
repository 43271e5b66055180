//! The vocabulary as GGUF stores it (`tokenizer.ggml.*`): token texts, scores, kinds, the
//! special ids and the add-BOS/EOS flags, with a text → id index.

use crate::{Error, Result};
use hanzo_ml::quantized::gguf::{GgufFile, Value};

/// `tokenizer.ggml.token_type` values (SentencePiece's piece types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenKind {
    fn from_gguf(v: i64) -> Self {
        match v {
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Normal,
        }
    }

    /// Tokens matched in raw text before the model's own segmentation.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
        )
    }
}

#[derive(Clone, Debug, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End of turn, when the model has a token distinct from EOS (Gemma `<end_of_turn>`).
    pub eot: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// SentencePiece's "add dummy prefix": a space before the first piece of text.
    pub add_space_prefix: bool,
}

/// Token texts in one buffer with an open-addressing text → id table: building it for a
/// 262k-token vocabulary takes two allocations instead of half a million, which is most of a
/// cold start.
struct Texts {
    buf: String,
    /// `ends[i]` is where token i's text ends in `buf` (it starts at `ends[i - 1]`).
    ends: Vec<u32>,
    /// Power-of-two table of token ids (`EMPTY` = free), probed linearly.
    slots: Vec<u32>,
}

const EMPTY: u32 = u32::MAX;

fn hash(s: &[u8]) -> u64 {
    // FNV-1a folded 8 bytes at a time: fast and good enough for token texts.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        h = (h ^ u64::from_le_bytes(c.try_into().expect("8 bytes"))).wrapping_mul(0x0100_0000_01b3);
        h ^= h >> 29;
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 32)
}

impl Texts {
    fn new(tokens: &[String]) -> Result<Self> {
        let total: usize = tokens.iter().map(String::len).sum();
        if total > u32::MAX as usize {
            return Err(Error::Tokenizer("token texts exceed 4 GiB".into()));
        }
        let mut buf = String::with_capacity(total);
        let mut ends = Vec::with_capacity(tokens.len());
        for t in tokens {
            buf.push_str(t);
            ends.push(buf.len() as u32);
        }
        let size = (tokens.len() * 2).next_power_of_two();
        let mut texts = Self {
            buf,
            ends,
            slots: vec![EMPTY; size],
        };
        for id in 0..tokens.len() as u32 {
            let mask = texts.slots.len() - 1;
            let text = texts.get(id).as_bytes();
            let mut i = hash(text) as usize & mask;
            loop {
                match texts.slots[i] {
                    // The first id wins when a text repeats, as in llama.cpp.
                    EMPTY => {
                        texts.slots[i] = id;
                        break;
                    }
                    other if texts.get(other).as_bytes() == text => break,
                    _ => i = (i + 1) & mask,
                }
            }
        }
        Ok(texts)
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.buf[start..self.ends[i] as usize]
    }

    fn find(&self, text: &str) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = hash(text.as_bytes()) as usize & mask;
        loop {
            match self.slots[i] {
                EMPTY => return None,
                id if self.get(id) == text => return Some(id),
                _ => i = (i + 1) & mask,
            }
        }
    }
}

pub struct Vocab {
    texts: Texts,
    scores: Vec<f32>,
    kinds: Vec<TokenKind>,
    pub special: SpecialIds,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vocab({} tokens, {:?})", self.len(), self.special)
    }
}

impl Vocab {
    pub fn new(
        tokens: &[String],
        scores: Vec<f32>,
        kinds: Vec<TokenKind>,
        special: SpecialIds,
    ) -> Result<Self> {
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(Error::Tokenizer(format!("vocabulary of {n} tokens")));
        }
        if scores.len() != n || kinds.len() != n {
            return Err(Error::Tokenizer(format!(
                "{n} tokens but {} scores and {} token types",
                scores.len(),
                kinds.len()
            )));
        }
        for (name, id) in [
            ("bos", special.bos),
            ("eos", special.eos),
            ("eot", special.eot),
            ("unk", special.unk),
            ("pad", special.pad),
        ] {
            if let Some(id) = id {
                if id as usize >= n {
                    return Err(Error::Tokenizer(format!(
                        "{name} token id {id} is outside the vocabulary of {n}"
                    )));
                }
            }
        }
        Ok(Self {
            texts: Texts::new(tokens)?,
            scores,
            kinds,
            special,
        })
    }

    /// Reads `tokenizer.ggml.{tokens,scores,token_type}` and the special-token keys.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let tokens = f
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .and_then(|a| a.as_strings())
            .ok_or_else(|| Error::Tokenizer("GGUF has no tokenizer.ggml.tokens".into()))?;
        let n = tokens.len();
        let scores = match f.get("tokenizer.ggml.scores").and_then(Value::as_array) {
            Some(a) => a
                .as_f32s()
                .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.scores is not f32".into()))?
                .to_vec(),
            None => vec![0.0; n],
        };
        let kinds = match f.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            Some(a) => a
                .to_i64s()
                .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.token_type is not integer".into()))?
                .into_iter()
                .map(TokenKind::from_gguf)
                .collect(),
            None => vec![TokenKind::Normal; n],
        };
        let id = |key: &str| -> Option<u32> {
            f.get(&format!("tokenizer.ggml.{key}"))
                .and_then(Value::to_i64)
                .and_then(|v| u32::try_from(v).ok())
        };
        let flag = |key: &str, default: bool| -> bool {
            f.get(&format!("tokenizer.ggml.{key}"))
                .and_then(Value::as_bool)
                .unwrap_or(default)
        };
        let model = f
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .unwrap_or("llama");
        let spm = model == "llama";
        let special = SpecialIds {
            bos: id("bos_token_id"),
            eos: id("eos_token_id"),
            eot: id("eot_token_id"),
            unk: id("unknown_token_id"),
            pad: id("padding_token_id"),
            // llama.cpp's defaults per tokenizer model when the flag is absent.
            add_bos: flag("add_bos_token", spm),
            add_eos: flag("add_eos_token", false),
            add_space_prefix: flag("add_space_prefix", spm),
        };
        let mut vocab = Self::new(tokens, scores, kinds, special)?;
        if vocab.special.eot.is_none() {
            // Chat models mark the end of a turn with a token of their template's own.
            vocab.special.eot = ["<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>"]
                .iter()
                .find_map(|t| vocab.id(t));
        }
        Ok(vocab)
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.len() == 0
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.texts.find(text)
    }

    pub fn text(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.len()).then(|| self.texts.get(id))
    }

    pub fn score(&self, id: u32) -> f32 {
        self.scores
            .get(id as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY)
    }

    pub fn kind(&self, id: u32) -> TokenKind {
        self.kinds
            .get(id as usize)
            .copied()
            .unwrap_or(TokenKind::Unused)
    }

    /// Ids of the special tokens (control, user-defined, unknown).
    pub fn special_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| k.is_special())
            .map(|(i, _)| i as u32)
    }

    /// True for tokens that end generation (EOS, end of turn).
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        Some(id) == self.special.eos || Some(id) == self.special.eot
    }
}

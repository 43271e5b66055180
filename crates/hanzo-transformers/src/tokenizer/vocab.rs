//! The vocabulary as GGUF stores it (`tokenizer.ggml.*`): token texts, scores, kinds, the
//! special ids and the add-BOS/EOS flags, with a text → id index.

use crate::{Error, Result};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use std::collections::HashMap;

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

#[derive(Debug)]
pub struct Vocab {
    tokens: Vec<String>,
    scores: Vec<f32>,
    kinds: Vec<TokenKind>,
    index: HashMap<String, u32>,
    pub special: SpecialIds,
}

impl Vocab {
    pub fn new(
        tokens: Vec<String>,
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
        let mut index = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            // The first id wins when a text repeats, as in llama.cpp.
            index.entry(t.clone()).or_insert(i as u32);
        }
        Ok(Self {
            tokens,
            scores,
            kinds,
            index,
            special,
        })
    }

    /// Reads `tokenizer.ggml.{tokens,scores,token_type}` and the special-token keys.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let tokens = f
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .and_then(|a| a.as_strings())
            .ok_or_else(|| Error::Tokenizer("GGUF has no tokenizer.ggml.tokens".into()))?
            .to_vec();
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
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.index.get(text).copied()
    }

    pub fn text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
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

    pub fn tokens(&self) -> &[String] {
        &self.tokens
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

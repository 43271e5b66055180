//! Tokenizers built from GGUF metadata alone: SentencePiece-style (`llama`) and byte-level
//! BPE (`gpt2`), with special-token parsing, add-BOS/EOS flags and UTF-8-safe streaming.

mod bpe;
pub mod hf;
mod specials;
mod spm;
mod stream;
mod vocab;

pub use bpe::Pretokenizer;
pub use specials::Fragment;
pub use stream::StreamDecoder;
pub use vocab::{SpecialIds, TokenKind, Vocab};

use crate::{Error, Result};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use specials::SpecialMatcher;

enum Model {
    /// SentencePiece scores with byte fallback.
    Spm { bytes: Vec<Option<u32>> },
    /// Byte-level BPE with ranked merges.
    Bpe(Box<bpe::Bpe>),
}

pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    specials: SpecialMatcher,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.model {
            Model::Spm { .. } => "spm",
            Model::Bpe(_) => "bpe",
        };
        write!(f, "Tokenizer({kind}, {} tokens)", self.vocab.len())
    }
}

impl Tokenizer {
    /// The tokenizer a GGUF file describes (`tokenizer.ggml.model`: `llama` or `gpt2`).
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let kind = f
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Tokenizer("GGUF has no tokenizer.ggml.model".into()))?;
        let vocab = Vocab::from_gguf(f)?;
        let model = match kind {
            "llama" => Model::Spm {
                bytes: spm::byte_tokens(&vocab),
            },
            "gpt2" => {
                let merges = f
                    .get("tokenizer.ggml.merges")
                    .and_then(Value::as_array)
                    .and_then(|a| a.as_strings())
                    .ok_or_else(|| {
                        Error::Tokenizer("BPE GGUF has no tokenizer.ggml.merges".into())
                    })?;
                let pre = f
                    .get("tokenizer.ggml.pre")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                Model::Bpe(Box::new(bpe::Bpe::new(
                    &vocab,
                    merges,
                    Pretokenizer::from_name(pre)?,
                )?))
            }
            other => {
                return Err(Error::Tokenizer(format!(
                    "tokenizer model {other:?} is not supported (supported: llama, gpt2)"
                )))
            }
        };
        let specials = SpecialMatcher::new(&vocab);
        Ok(Self {
            vocab,
            model,
            specials,
        })
    }

    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    pub fn special(&self) -> &SpecialIds {
        &self.vocab.special
    }

    /// Token ids of `text`. `add_special` adds BOS/EOS as the model's flags say;
    /// `parse_special` turns control-token texts such as `<start_of_turn>` into their ids
    /// (user-defined tokens are always recognised, as in llama.cpp).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let sp = &self.vocab.special;
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && sp.add_bos {
            out.extend(sp.bos);
        }
        let mut prev_special = true;
        for frag in self.specials.split(text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    match &self.model {
                        Model::Spm { bytes } => {
                            if sp.add_space_prefix && prev_special {
                                spm::encode(&self.vocab, bytes, &format!(" {t}"), &mut out);
                            } else {
                                spm::encode(&self.vocab, bytes, t, &mut out);
                            }
                        }
                        Model::Bpe(b) => b.encode(&self.vocab, t, &mut out),
                    }
                    prev_special = false;
                }
            }
        }
        if add_special && sp.add_eos {
            out.extend(sp.eos);
        }
        out
    }

    /// The bytes token `id` stands for. Control tokens give nothing unless `special`.
    pub fn token_bytes(&self, id: u32, special: bool) -> Vec<u8> {
        let Some(text) = self.vocab.text(id) else {
            return Vec::new();
        };
        match self.vocab.kind(id) {
            TokenKind::Control => {
                if special {
                    text.as_bytes().to_vec()
                } else {
                    Vec::new()
                }
            }
            TokenKind::Unused => Vec::new(),
            TokenKind::UserDefined => text.as_bytes().to_vec(),
            TokenKind::Unknown => match self.model {
                Model::Spm { .. } => "\u{2585}".as_bytes().to_vec(),
                Model::Bpe(_) => text.as_bytes().to_vec(),
            },
            TokenKind::Byte => parse_byte_token(text).map(|b| vec![b]).unwrap_or_default(),
            TokenKind::Normal => match &self.model {
                Model::Spm { .. } => text.replace(spm::SPACE, " ").into_bytes(),
                Model::Bpe(_) => bpe::decode_bytes(text),
            },
        }
    }

    /// The text of `ids` (invalid UTF-8 from split byte tokens becomes U+FFFD).
    pub fn decode(&self, ids: &[u32], special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(self.token_bytes(id, special));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The display form of one token for listings (`tokenize --show`), e.g. `▁the` as ` the`.
    pub fn piece(&self, id: u32) -> String {
        String::from_utf8_lossy(&self.token_bytes(id, true)).into_owned()
    }
}

fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

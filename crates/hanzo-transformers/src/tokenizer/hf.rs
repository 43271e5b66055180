//! Byte-level BPE tokenizers from a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`
//! and `config.json` for the BOS/EOS tokens and flags), run by the same BPE code as GGUF
//! tokenizers.
//!
//! The pre-tokenizer is rebuilt as a regex cascade: `Split` patterns as written, `Digits`
//! as `\p{N}` (one digit per piece) or `\p{N}+`, and a `ByteLevel` step with `use_regex` as the
//! GPT-2 regex. SentencePiece-style files (`Metaspace`, byte fallback) and WordPiece / Unigram
//! models are refused with an error naming them.

use super::bpe::{Bpe, Pretokenizer};
use super::specials::SpecialMatcher;
use super::vocab::{SpecialIds, TokenKind, Vocab};
use super::{Model, Tokenizer};
use crate::{Error, Result};
use hanzo_ml::quantized::gguf::{Array, Value};
use serde_json::Value as Json;
use std::path::Path;

fn read_json(path: &Path) -> Result<Option<Json>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Tokenizer(format!("{}: {e}", path.display()))),
    }
}

/// The regexes one pre-tokenizer node stands for (`Sequence` flattened).
fn pre_regexes(node: &Json, out: &mut Vec<String>) -> Result<()> {
    match node["type"].as_str() {
        None => Ok(()),
        Some("Sequence") => {
            for p in node["pretokenizers"].as_array().into_iter().flatten() {
                pre_regexes(p, out)?;
            }
            Ok(())
        }
        Some("Split") => {
            let pattern = node["pattern"]["Regex"]
                .as_str()
                .map(str::to_string)
                .or_else(|| {
                    node["pattern"]["String"]
                        .as_str()
                        .map(fancy_regex::escape)
                        .map(|s| s.into_owned())
                })
                .ok_or_else(|| Error::Tokenizer("Split pre-tokenizer without a pattern".into()))?;
            match node["behavior"].as_str() {
                Some("Isolated") | None => {}
                Some(b) => {
                    return Err(Error::Tokenizer(format!(
                        "Split behavior {b:?} is not supported (only Isolated)"
                    )))
                }
            }
            if node["invert"].as_bool() == Some(true) {
                return Err(Error::Tokenizer("inverted Split is not supported".into()));
            }
            out.push(pattern);
            Ok(())
        }
        Some("Digits") => {
            let one = node["individual_digits"].as_bool().unwrap_or(false);
            out.push(if one { r"\p{N}" } else { r"\p{N}+" }.to_string());
            Ok(())
        }
        Some("ByteLevel") => {
            if node["add_prefix_space"].as_bool() == Some(true) {
                return Err(Error::Tokenizer(
                    "ByteLevel add_prefix_space is not supported".into(),
                ));
            }
            if node["use_regex"].as_bool().unwrap_or(true) {
                out.push(Pretokenizer::GPT2.to_string());
            }
            Ok(())
        }
        Some(other) => Err(Error::Tokenizer(format!(
            "pre-tokenizer {other:?} is not supported (byte-level BPE only: Split, Digits, \
             ByteLevel)"
        ))),
    }
}

/// A special token's text from tokenizer_config.json (`"<s>"` or `{"content": "<s>"}`).
fn token_text(v: &Json) -> Option<&str> {
    v.as_str().or_else(|| v["content"].as_str())
}

/// What a directory's tokenizer files say: the vocabulary by id with each token's kind, the
/// merges, the pre-tokenizer's regexes, and the special tokens.
struct Parts {
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    merges: Vec<String>,
    regexes: Vec<String>,
    ignore_merges: bool,
    special: SpecialIds,
}

impl Tokenizer {
    /// The tokenizer of a Hugging Face model directory (`tokenizer.json`, byte-level BPE).
    pub fn from_hf_dir(dir: &Path) -> Result<Self> {
        let p = read_parts(dir)?;
        let n = p.tokens.len();
        let pre = Pretokenizer::from_regexes(&p.regexes, p.ignore_merges)?;
        let mut vocab = Vocab::new(&p.tokens, vec![0.0; n], p.kinds, p.special)?;
        vocab.special.eot = ["<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>"]
            .iter()
            .find_map(|t| vocab.id(t))
            .filter(|&t| Some(t) != vocab.special.eos);
        let bpe = Bpe::new(&vocab, &p.merges, pre)?;
        let specials = SpecialMatcher::new(&vocab);
        Ok(Self {
            vocab,
            model: Model::Bpe(Box::new(bpe)),
            specials,
        })
    }
}

/// The `tokenizer.*` keys of a GGUF file holding the tokenizer of model directory `dir`, as
/// llama.cpp's converter writes them for byte-level BPE (`tokenizer.ggml.model = "gpt2"`):
/// the tokens with their types, the merges, the pre-tokenizer by the name whose regexes
/// split text as `tokenizer.json`'s do, the special tokens and flags, and the chat template.
pub fn gguf_keys(dir: &Path) -> Result<Vec<(String, Value)>> {
    let p = read_parts(dir)?;
    let pre = Pretokenizer::from_regexes(&p.regexes, p.ignore_merges)?;
    let name = Pretokenizer::NAMES
        .iter()
        .find(|n| Pretokenizer::from_name(n).is_ok_and(|q| q.splits_as(&pre)))
        .ok_or_else(|| {
            Error::Tokenizer(format!(
                "tokenizer.json's pre-tokenizer ({}) splits text as none GGUF names ({}) does",
                p.regexes.join(" then "),
                Pretokenizer::NAMES.join(", ")
            ))
        })?;
    let kind = |k: &TokenKind| match k {
        TokenKind::Normal => 1,
        TokenKind::Unknown => 2,
        TokenKind::Control => 3,
        TokenKind::UserDefined => 4,
        TokenKind::Unused => 5,
        TokenKind::Byte => 6,
    };
    let mut keys = vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String(name.to_string())),
        (
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(p.kinds.iter().map(kind).collect())),
        ),
        (
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(p.tokens)),
        ),
        (
            "tokenizer.ggml.merges",
            Value::Array(Array::String(p.merges)),
        ),
        (
            "tokenizer.ggml.add_bos_token",
            Value::Bool(p.special.add_bos),
        ),
        (
            "tokenizer.ggml.add_eos_token",
            Value::Bool(p.special.add_eos),
        ),
        ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
    ];
    for (key, id) in [
        ("tokenizer.ggml.bos_token_id", p.special.bos),
        ("tokenizer.ggml.eos_token_id", p.special.eos),
        ("tokenizer.ggml.unknown_token_id", p.special.unk),
        ("tokenizer.ggml.padding_token_id", p.special.pad),
    ] {
        if let Some(id) = id {
            keys.push((key, Value::U32(id)));
        }
    }
    if let Some(t) = chat_template(dir)? {
        keys.push(("tokenizer.chat_template", Value::String(t)));
    }
    Ok(keys.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn read_parts(dir: &Path) -> Result<Parts> {
    let path = dir.join("tokenizer.json");
    let tj = read_json(&path)?
        .ok_or_else(|| Error::Tokenizer(format!("{} not found", path.display())))?;
    let cfg = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Json::Null);
    let model_cfg = read_json(&dir.join("config.json"))?.unwrap_or(Json::Null);
    let m = &tj["model"];
    match m["type"].as_str() {
        Some("BPE") => {}
        other => {
            return Err(Error::Tokenizer(format!(
                "tokenizer.json model {other:?} is not supported for generation (BPE only)"
            )))
        }
    }
    if m["byte_fallback"].as_bool() == Some(true) {
        return Err(Error::Tokenizer(
            "SentencePiece-style tokenizer.json (byte_fallback) is not supported yet; use \
                 the model's GGUF file"
                .into(),
        ));
    }

    // Vocabulary: model.vocab plus added tokens, indexed by id.
    let vocab_map = m["vocab"]
        .as_object()
        .ok_or_else(|| Error::Tokenizer("tokenizer.json has no model.vocab".into()))?;
    let added = tj["added_tokens"].as_array().cloned().unwrap_or_default();
    let max_id = vocab_map
        .values()
        .filter_map(Json::as_u64)
        .chain(added.iter().filter_map(|t| t["id"].as_u64()))
        .max()
        .ok_or_else(|| Error::Tokenizer("empty vocabulary".into()))?;
    if max_id >= u32::MAX as u64 || max_id > 16 * vocab_map.len() as u64 + 65_536 {
        return Err(Error::Tokenizer(format!(
            "token id {max_id} is implausible"
        )));
    }
    let n = max_id as usize + 1;
    let mut tokens = vec![String::new(); n];
    let mut kinds = vec![TokenKind::Unused; n];
    for (text, id) in vocab_map {
        let id = id
            .as_u64()
            .ok_or_else(|| Error::Tokenizer(format!("token {text:?} has no integer id")))?;
        tokens[id as usize] = text.clone();
        kinds[id as usize] = TokenKind::Normal;
    }
    for t in &added {
        let (Some(id), Some(text)) = (t["id"].as_u64(), t["content"].as_str()) else {
            return Err(Error::Tokenizer("added token without id/content".into()));
        };
        tokens[id as usize] = text.to_string();
        kinds[id as usize] = if t["special"].as_bool().unwrap_or(false) {
            TokenKind::Control
        } else {
            TokenKind::UserDefined
        };
    }
    // Holes in the id space get unique placeholder texts.
    for (i, (t, k)) in tokens.iter_mut().zip(&kinds).enumerate() {
        if *k == TokenKind::Unused {
            *t = format!("[unused id {i}]");
        }
    }

    let merges: Vec<String> = m["merges"]
        .as_array()
        .ok_or_else(|| Error::Tokenizer("tokenizer.json has no model.merges".into()))?
        .iter()
        .map(|x| match x {
            Json::String(s) => Ok(s.clone()),
            Json::Array(p) if p.len() == 2 => Ok(format!(
                "{} {}",
                p[0].as_str().unwrap_or_default(),
                p[1].as_str().unwrap_or_default()
            )),
            _ => Err(Error::Tokenizer(format!("merge {x} is malformed"))),
        })
        .collect::<Result<_>>()?;

    let mut regexes = Vec::new();
    pre_regexes(&tj["pre_tokenizer"], &mut regexes)?;

    let find = |name: &str| -> Option<u32> {
        let text = token_text(&cfg[name])?;
        tokens.iter().position(|t| t == text).map(|i| i as u32)
    };
    let config_id = |name: &str| -> Option<u32> {
        let v = &model_cfg[name];
        v.as_u64()
            .or_else(|| v.as_array().and_then(|a| a.first()).and_then(Json::as_u64))
            .map(|x| x as u32)
    };
    let bos = find("bos_token").or_else(|| config_id("bos_token_id"));
    let eos = find("eos_token").or_else(|| config_id("eos_token_id"));
    // add_bos: the config's flag, else whether the post-processor template starts with BOS.
    let post_adds_bos = tj["post_processor"]["single"]
        .as_array()
        .and_then(|s| s.first())
        .and_then(|f| f["SpecialToken"]["id"].as_str())
        .is_some_and(|t| bos.is_some_and(|b| tokens[b as usize] == t));
    let special = SpecialIds {
        bos,
        eos,
        eot: None,
        unk: find("unk_token"),
        pad: find("pad_token"),
        add_bos: cfg["add_bos_token"].as_bool().unwrap_or(post_adds_bos),
        add_eos: cfg["add_eos_token"].as_bool().unwrap_or(false),
        add_space_prefix: false,
    };
    Ok(Parts {
        tokens,
        kinds,
        merges,
        regexes,
        ignore_merges: m["ignore_merges"].as_bool() == Some(true),
        special,
    })
}

/// The chat template of a directory: `chat_template.jinja`, else tokenizer_config.json's
/// `chat_template` (a string, or a list of named templates of which `default` is used).
pub fn chat_template(dir: &Path) -> Result<Option<String>> {
    if let Ok(t) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
        return Ok(Some(t));
    }
    let cfg = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Json::Null);
    Ok(match &cfg["chat_template"] {
        Json::String(s) => Some(s.clone()),
        Json::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .and_then(|t| t["template"].as_str())
            .map(str::to_string),
        _ => None,
    })
}

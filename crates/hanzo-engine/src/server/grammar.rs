//! Constrained decoding with `llguidance`: a JSON schema (or "any JSON object") becomes a
//! token mask at every step, so the reply always parses and validates.
//!
//! Each language model gets one parser factory (a token trie over its vocabulary, built once
//! when the first constrained request arrives); each constrained choice gets a `Matcher`.
//! Whitespace between JSON tokens is not free (`whitespace_flexible: false`), so a small
//! model cannot wander into endless blank lines; an unsupported schema keyword is an error
//! from the compiler, which the handler returns as a 400.

use super::scheduler::Constraint;
use hanzo_transformers::tokenizer::TokenKind;
use hanzo_transformers::TextGeneration;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};

/// The tokenizer as llguidance sees it: every token's bytes (control tokens marked special).
struct Env {
    trie: TokTrie,
    pipeline: Arc<TextGeneration>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.pipeline
            .tokenizer
            .encode(&String::from_utf8_lossy(s), false, false)
    }
}

/// A model's parser factory, made on first use.
#[derive(Default)]
pub struct Grammars {
    factory: OnceLock<Result<Arc<ParserFactory>, String>>,
}

fn factory(p: &Arc<TextGeneration>) -> Result<Arc<ParserFactory>, String> {
    let tok = &p.tokenizer;
    let vocab = tok.vocab();
    let n = p.model.info().vocab_size;
    let words: Vec<Vec<u8>> = (0..n as u32)
        .map(|id| match vocab.kind(id) {
            TokenKind::Control | TokenKind::UserDefined if (id as usize) < vocab.len() => {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend(vocab.text(id).unwrap_or_default().as_bytes());
                w
            }
            _ if (id as usize) < vocab.len() => tok.token_bytes(id, false),
            _ => Vec::new(),
        })
        .collect();
    let sp = tok.special();
    let eos = sp
        .eot
        .or(sp.eos)
        .ok_or("the model has no end-of-sequence token")?;
    let info = TokRxInfo {
        vocab_size: n as u32,
        tok_eos: eos,
        tok_bos: sp.bos,
        tok_pad: sp.pad,
        tok_unk: sp.unk,
        tok_end_of_turn: sp.eot,
    };
    let env: TokEnv = Arc::new(Env {
        trie: TokTrie::from(&info, &words),
        pipeline: p.clone(),
    });
    let mut f = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
    f.quiet();
    Ok(Arc::new(f))
}

/// A JSON schema's matcher, as a choice's constraint.
struct Schema(Matcher);

impl Constraint for Schema {
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        let allowed = self.0.compute_mask().map_err(|e| e.to_string())?;
        for (i, l) in logits.iter_mut().enumerate() {
            if !allowed.is_allowed(i as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    fn consume(&mut self, token: u32) -> Result<(), String> {
        self.0.consume_token(token).map_err(|e| e.to_string())
    }

    fn is_done(&self) -> bool {
        self.0.is_stopped()
    }
}

impl Grammars {
    /// `n` matchers for a JSON schema (`None`: any JSON object). An invalid or unsupported
    /// schema is an `Err` with the compiler's message.
    pub fn json(
        &self,
        p: &Arc<TextGeneration>,
        schema: Option<&Value>,
        n: usize,
    ) -> Result<Vec<Box<dyn Constraint>>, String> {
        let f = self.factory.get_or_init(|| factory(p)).clone()?;
        let mut schema = schema.cloned().unwrap_or_else(|| json!({"type": "object"}));
        let Some(obj) = schema.as_object_mut() else {
            return Err("the schema must be a JSON object".into());
        };
        obj.insert("x-guidance".into(), json_layout());
        (0..n)
            .map(|_| Ok(Box::new(Schema(matcher(&f, &schema)?)) as Box<dyn Constraint>))
            .collect()
    }
}

/// JSON as the grammars write it: `{"a": 1, "b": [1, 2]}`, no other whitespace.
fn json_layout() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

/// A fresh matcher for a JSON schema; an unsupported schema is an `Err`.
fn matcher(f: &ParserFactory, schema: &Value) -> Result<Matcher, String> {
    let parser = f
        .create_parser(TopLevelGrammar::from_json_schema(schema.clone()))
        .map_err(|e| e.to_string())?;
    let m = Matcher::new(Ok(parser));
    match m.get_error() {
        Some(e) => Err(e),
        None => Ok(m),
    }
}

/// A tool call's body under its grammar: done as soon as the JSON object is complete (the
/// end marker after it is written by the caller, `tools.rs`).
struct CallBody {
    matcher: Schema,
    complete: bool,
}

impl Constraint for CallBody {
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        self.matcher.mask(logits)
    }

    fn consume(&mut self, token: u32) -> Result<(), String> {
        self.matcher.consume(token)?;
        self.complete = self.matcher.0.is_accepting().map_err(|e| e.to_string())?;
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.complete
    }
}

impl Grammars {
    /// The grammar of one tool call's body, after its start marker and newline:
    /// `{"name": "f", "arguments": {...}}` for one of `functions`, its arguments under that
    /// function's parameter schema. The arguments' key may also be `"parameters"`, the one
    /// Llama 3's template teaches; the model picks the key it was trained on. Checked once
    /// here (an unsupported schema keyword is an `Err`); the returned function makes a fresh
    /// matcher for each call.
    pub fn tool_call(
        &self,
        p: &Arc<TextGeneration>,
        functions: &[&(String, Value)],
    ) -> Result<super::tools::ArgsGrammar, String> {
        let f = self.factory.get_or_init(|| factory(p)).clone()?;
        let calls: Vec<Value> = functions
            .iter()
            .flat_map(|(name, params)| {
                ["arguments", "parameters"].map(|key| {
                    json!({
                        "type": "object",
                        "properties": {"name": {"const": name}, key: params},
                        "required": ["name", key],
                        "additionalProperties": false,
                    })
                })
            })
            .collect();
        let schema = json!({"anyOf": calls, "x-guidance": json_layout()});
        let make: super::tools::ArgsGrammar = Arc::new(move || {
            Ok(Box::new(CallBody {
                matcher: Schema(matcher(&f, &schema)?),
                complete: false,
            }) as Box<dyn Constraint>)
        });
        make()?;
        Ok(make)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture_path::fixture;

    /// Whether `text`, token by token, is a complete call body under the grammar.
    fn accepts(make: &super::super::tools::ArgsGrammar, p: &TextGeneration, text: &str) -> bool {
        let mut body = make().unwrap();
        for t in p.tokenizer.encode(text, false, false) {
            if body.consume(t).is_err() {
                return false;
            }
        }
        body.is_done()
    }

    #[test]
    fn tool_calls_take_either_key_for_their_arguments() {
        let p = Arc::new(TextGeneration::from_gguf(fixture("qwen2")).unwrap());
        let weather = (
            "get_weather".to_string(),
            json!({"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": false}),
        );
        let make = Grammars::default().tool_call(&p, &[&weather]).unwrap();
        for key in ["arguments", "parameters"] {
            let call = format!(r#"{{"name": "get_weather", "{key}": {{"city": "Paris"}}}}"#);
            assert!(accepts(&make, &p, &call), "{call}");
        }
        for bad in [
            r#"{"name": "get_weather", "args": {"city": "Paris"}}"#,
            r#"{"name": "get_time", "arguments": {"city": "Paris"}}"#,
            r#"{"name": "get_weather", "arguments": {"town": "Paris"}}"#,
        ] {
            assert!(!accepts(&make, &p, bad), "{bad}");
        }
    }
}

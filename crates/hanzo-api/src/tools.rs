//! Tool calling: a request's `tools`, `tool_choice` and `parallel_tool_calls` checked, and
//! the constraint that holds the model to them while it generates.
//!
//! The model writes calls in [`TOOL_CALL_TAGS`] (see `hanzo_transformers::tools`). The
//! [`ToolGate`] on each choice:
//! - forces the opening of a call when one is required (`"required"`, or a named function),
//! - once a call opens, hands the logits to a grammar for `{"name": …, "arguments": …}` over
//!   the declared functions, each with its own parameter schema (the `structured-output`
//!   feature, on by default; in the lean build the call is read as written),
//! - closes the call, and after it allows only the end of the turn unless parallel calls
//!   are allowed.

use crate::error::{ApiError, ApiResult};
use crate::events::Constraint;
use hanzo_transformers::tools::TOOL_CALL_TAGS;
use serde_json::{json, Value};
use std::sync::Arc;

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    Named(String),
}

/// A request's tools, checked.
#[derive(Clone, Debug)]
pub struct ToolPlan {
    /// The `tools` entries as the chat template takes them.
    pub tools: Vec<Value>,
    /// Each function's name and parameter schema, in order (what the grammar holds calls to).
    pub functions: Vec<(String, Value)>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ToolPlan {
    /// `None` when the model is not to call tools (none declared, or `tool_choice: "none"`).
    pub fn from_request(
        tools: Option<&[Value]>,
        choice: Option<&Value>,
        parallel: Option<bool>,
    ) -> ApiResult<Option<Self>> {
        let tools = tools.unwrap_or_default();
        let choice = match choice {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => return Ok(None),
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        format!("`tool_choice` must be none, auto, required or a function, got {other:?}"),
                    ))
                }
            },
            Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
                Some(name) if v.get("type").and_then(Value::as_str) == Some("function") => {
                    ToolChoice::Named(name.to_string())
                }
                _ => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        "`tool_choice` must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    ))
                }
            },
        };
        if tools.is_empty() {
            return match choice {
                ToolChoice::Auto => Ok(None),
                _ => Err(ApiError::invalid(
                    "tool_choice",
                    "`tool_choice` asks for a tool call but `tools` declares none",
                )),
            };
        }
        if tools.len() > 128 {
            return Err(ApiError::invalid(
                "tools",
                "`tools` takes at most 128 functions",
            ));
        }
        let mut functions: Vec<(String, Value)> = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            let param = format!("tools[{i}]");
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::invalid(
                    &param,
                    format!("`{param}.type` must be \"function\""),
                ));
            }
            let f = t.get("function").filter(|f| f.is_object()).ok_or_else(|| {
                ApiError::invalid(&param, format!("`{param}.function` must be an object"))
            })?;
            let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
            if !valid_name(name) {
                return Err(ApiError::invalid(
                    &format!("{param}.function.name"),
                    format!("function names are 1 to 64 letters, digits, _ or -; got {name:?}"),
                ));
            }
            if functions.iter().any(|(n, _)| n == name) {
                return Err(ApiError::invalid(
                    &format!("{param}.function.name"),
                    format!("the function name {name:?} is declared twice"),
                ));
            }
            let params = match f.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                Some(p) if p.is_object() => p.clone(),
                Some(_) => {
                    return Err(ApiError::invalid(
                        &format!("{param}.function.parameters"),
                        "`parameters` must be a JSON schema object",
                    ))
                }
            };
            functions.push((name.to_string(), params));
        }
        if let ToolChoice::Named(name) = &choice {
            if !functions.iter().any(|(n, _)| n == name) {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("`tool_choice` names {name:?}, which `tools` does not declare"),
                ));
            }
        }
        Ok(Some(Self {
            tools: tools.to_vec(),
            functions,
            choice,
            parallel: parallel.unwrap_or(true),
        }))
    }

    /// The functions a call may name: all, or the one `tool_choice` names.
    pub fn callable(&self) -> Vec<&(String, Value)> {
        match &self.choice {
            ToolChoice::Named(n) => self.functions.iter().filter(|(f, _)| f == n).collect(),
            _ => self.functions.iter().collect(),
        }
    }
}

/// Every token's text as bytes (control tokens: none), and which tokens end a turn; made
/// once per model.
pub struct TokenBytes {
    pub bytes: Vec<Vec<u8>>,
    pub ends: Vec<u32>,
}

impl TokenBytes {
    pub fn new(p: &hanzo_transformers::TextGeneration) -> Self {
        let vocab = p.tokenizer.vocab();
        let n = p.model.info().vocab_size.min(vocab.len());
        let ids = 0..n as u32;
        Self {
            bytes: ids
                .clone()
                .map(|id| p.tokenizer.token_bytes(id, false))
                .collect(),
            ends: ids.filter(|&id| vocab.is_end_of_generation(id)).collect(),
        }
    }
}

/// Makes the grammar of one call's body (after the start marker): compiled once per request,
/// shared by its choices, a fresh matcher for each call.
pub type ArgsGrammar = Arc<dyn Fn() -> Result<Box<dyn Constraint>, String> + Send + Sync>;

enum Gate {
    /// Anything goes; watching for a call to open.
    Free,
    /// Only tokens that spell out these bytes; then `then`.
    Force(Vec<u8>, After),
    /// Inside a call, under its grammar; `bare` when it opened without the start marker
    /// (then its `}` closes it, no end marker follows).
    Call {
        body: Box<dyn Constraint>,
        bare: bool,
    },
    /// Only the end of the turn.
    EndOnly,
}

#[derive(Clone, Copy)]
enum After {
    /// The start marker was written: a newline, then the call's body.
    Opened,
    /// The newline after the start marker was written: the body follows.
    Body,
    /// The end marker was written: the call is done.
    Closed,
}

/// The per-choice constraint (see the module docs).
pub struct ToolGate {
    tokens: Arc<TokenBytes>,
    grammar: Option<ArgsGrammar>,
    gate: Gate,
    parallel: bool,
    /// The last bytes generated, to see a marker written token by token.
    recent: Vec<u8>,
    /// The reply's text and tokens while it may still open a call without the marker, as
    /// a bare `{"name": ...` (small models often leave the markers out); `None` after.
    opening: Option<(Vec<u8>, Vec<u32>)>,
}

/// How a call without markers starts.
const BARE_CALL: &[u8] = b"{\"name\"";

impl ToolGate {
    pub fn new(plan: &ToolPlan, tokens: Arc<TokenBytes>, grammar: Option<ArgsGrammar>) -> Self {
        let start = TOOL_CALL_TAGS.start.as_bytes().to_vec();
        let gate = match (&plan.choice, grammar.is_some()) {
            (ToolChoice::Auto, _) => Gate::Free,
            (ToolChoice::Required, true) | (ToolChoice::Named(_), true) => {
                Gate::Force(start, After::Opened)
            }
            // No grammar to hold the body: write as much of the call as is known, so that
            // the model only has to fill in the name (and arguments).
            (ToolChoice::Required, false) => {
                let head = format!("{}\n{{\"name\": \"", TOOL_CALL_TAGS.start);
                Gate::Force(head.into_bytes(), After::Opened)
            }
            (ToolChoice::Named(name), false) => {
                let head = format!(
                    "{}\n{{\"name\": \"{name}\", \"arguments\":",
                    TOOL_CALL_TAGS.start
                );
                Gate::Force(head.into_bytes(), After::Opened)
            }
        };
        Self {
            tokens,
            grammar,
            gate,
            parallel: plan.parallel,
            recent: Vec::new(),
            opening: Some(Default::default()),
        }
    }

    /// Follows the start of the reply: once it reads `{"name"` (after whitespace), the
    /// grammar takes over, replaying the reply's tokens; when it cannot be such a call,
    /// watching stops.
    fn watch_opening(&mut self, token: u32, bytes: &[u8]) -> Result<(), String> {
        let Some((text, tokens)) = &mut self.opening else {
            return Ok(());
        };
        text.extend_from_slice(bytes);
        tokens.push(token);
        let lead = text.iter().take_while(|b| b.is_ascii_whitespace()).count();
        let body = &text[lead..];
        if BARE_CALL.starts_with(body) {
            return Ok(());
        }
        let (text, tokens) = self.opening.take().expect("watching");
        let Some(make) = self
            .grammar
            .as_ref()
            .filter(|_| text[lead..].starts_with(BARE_CALL))
        else {
            return Ok(());
        };
        // The grammar reads the object from its `{`: replay the tokens after the leading
        // whitespace (a token that mixes the two leaves the call unconstrained).
        let mut body = make()?;
        let mut skipped = 0;
        for &t in &tokens {
            let b = self
                .tokens
                .bytes
                .get(t as usize)
                .map_or(&[][..], |b| &b[..]);
            if skipped < lead {
                skipped += b.len();
                if skipped > lead {
                    return Ok(());
                }
                continue;
            }
            if body.consume(t).is_err() {
                return Ok(());
            }
        }
        self.gate = Gate::Call { body, bare: true };
        Ok(())
    }

    fn after(&mut self, what: After) -> Result<(), String> {
        self.recent.clear();
        if !matches!(what, After::Closed) {
            self.opening = None;
        }
        self.gate = match what {
            After::Opened if self.grammar.is_some() => Gate::Force(b"\n".to_vec(), After::Body),
            After::Opened => Gate::Free,
            After::Body => match &self.grammar {
                Some(make) => Gate::Call {
                    body: make()?,
                    bare: false,
                },
                None => Gate::Free,
            },
            After::Closed if self.parallel => {
                self.opening = Some(Default::default());
                Gate::Free
            }
            After::Closed => Gate::EndOnly,
        };
        Ok(())
    }
}

impl Constraint for ToolGate {
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        match &mut self.gate {
            Gate::Free => Ok(()),
            Gate::Call { body, .. } => body.mask(logits),
            Gate::EndOnly => {
                let ends = &self.tokens.ends;
                for (id, l) in logits.iter_mut().enumerate() {
                    if !ends.contains(&(id as u32)) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                Ok(())
            }
            Gate::Force(left, _) => {
                let spells = |b: &Vec<u8>| !b.is_empty() && left.starts_with(b);
                let bytes = &self.tokens.bytes;
                if !bytes.iter().any(spells) {
                    return Err("no token spells the tool-call syntax".into());
                }
                for (id, l) in logits.iter_mut().enumerate() {
                    if !bytes.get(id).is_some_and(spells) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                Ok(())
            }
        }
    }

    fn consume(&mut self, token: u32) -> Result<(), String> {
        let tokens = self.tokens.clone();
        let bytes = tokens.bytes.get(token as usize).map_or(&[][..], |b| &b[..]);
        match &mut self.gate {
            Gate::Free => {
                self.watch_opening(token, bytes)?;
                if !matches!(self.gate, Gate::Free) {
                    return Ok(());
                }
                self.recent.extend_from_slice(bytes);
                let (start, end) = (
                    TOOL_CALL_TAGS.start.as_bytes(),
                    TOOL_CALL_TAGS.end.as_bytes(),
                );
                if self.recent.ends_with(start) {
                    return self.after(After::Opened);
                }
                // Without a grammar the call's body is free text: its end marker closes it.
                if self.recent.ends_with(end) {
                    return self.after(After::Closed);
                }
                let keep = self.recent.len().saturating_sub(end.len().max(start.len()));
                self.recent.drain(..keep);
                Ok(())
            }
            Gate::Force(left, then) => {
                let then = *then;
                left.drain(..bytes.len().min(left.len()));
                if left.is_empty() {
                    self.after(then)?;
                }
                Ok(())
            }
            Gate::Call { body, bare } => {
                body.consume(token)?;
                match (body.is_done(), *bare) {
                    (false, _) => {}
                    (true, true) => self.after(After::Closed)?,
                    (true, false) => {
                        let close = format!("\n{}", TOOL_CALL_TAGS.end).into_bytes();
                        self.gate = Gate::Force(close, After::Closed);
                    }
                }
                Ok(())
            }
            Gate::EndOnly => Ok(()),
        }
    }

    fn is_done(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(tools: Value, choice: Option<Value>) -> ApiResult<Option<ToolPlan>> {
        let tools: Vec<Value> = serde_json::from_value(tools).unwrap();
        ToolPlan::from_request(Some(&tools), choice.as_ref(), None)
    }

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
    }

    #[test]
    fn requests_are_checked() {
        assert!(plan(weather(), Some(json!("none"))).unwrap().is_none());
        let p = plan(weather(), None).unwrap().unwrap();
        assert_eq!(p.choice, ToolChoice::Auto);
        assert!(p.parallel);
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        assert_eq!(
            plan(weather(), Some(named)).unwrap().unwrap().choice,
            ToolChoice::Named("get_weather".into())
        );
        let unknown = json!({"type": "function", "function": {"name": "nope"}});
        assert_eq!(
            plan(weather(), Some(unknown)).unwrap_err().param.as_deref(),
            Some("tool_choice")
        );
        assert!(plan(weather(), Some(json!("sometimes"))).is_err());
        assert!(plan(
            json!([{"type": "function", "function": {"name": "a b"}}]),
            None
        )
        .is_err());
        assert!(plan(json!([{"type": "retrieval"}]), None).is_err());
        let twice = json!([{"type": "function", "function": {"name": "f"}},
                           {"type": "function", "function": {"name": "f"}}]);
        assert!(plan(twice, None).is_err());
        assert!(ToolPlan::from_request(None, Some(&json!("required")), None).is_err());
        assert!(ToolPlan::from_request(None, None, None).unwrap().is_none());
    }

    /// A vocabulary of single bytes plus a few longer tokens; token 0 ends the turn.
    fn tokens() -> Arc<TokenBytes> {
        let mut bytes: Vec<Vec<u8>> = vec![Vec::new()];
        bytes.extend((1..=255u8).map(|b| vec![b]));
        bytes.push(b"<tool_call>".to_vec()); // 256
        bytes.push(b"</tool_call>".to_vec()); // 257
        bytes.push(b"<tool".to_vec()); // 258
        Arc::new(TokenBytes {
            bytes,
            ends: vec![0],
        })
    }

    fn allowed(g: &mut ToolGate) -> Vec<usize> {
        let mut logits = vec![0.0; 259];
        g.mask(&mut logits).unwrap();
        (0..259).filter(|&i| logits[i] == 0.0).collect()
    }

    #[test]
    fn required_forces_the_opening_then_frees_the_name() {
        let p = plan(weather(), Some(json!("required"))).unwrap().unwrap();
        let mut g = ToolGate::new(&p, tokens(), None);
        // "<" alone, "<tool" or the whole marker.
        assert_eq!(allowed(&mut g), vec![b'<' as usize, 256, 258]);
        g.consume(258).unwrap();
        assert_eq!(allowed(&mut g), vec![b'_' as usize]);
        for b in b"_call>\n{\"name\": \"" {
            g.consume(*b as u32).unwrap();
        }
        assert_eq!(allowed(&mut g).len(), 259);
    }

    #[test]
    fn one_call_only_ends_the_turn_after_it() {
        let mut p = plan(weather(), None).unwrap().unwrap();
        p.parallel = false;
        let mut g = ToolGate::new(&p, tokens(), None);
        for t in [b'H' as u32, 256, b'{' as u32, b'}' as u32] {
            g.consume(t).unwrap();
            assert_eq!(allowed(&mut g).len(), 259);
        }
        g.consume(257).unwrap();
        assert_eq!(allowed(&mut g), vec![0]);
    }

    #[test]
    fn a_named_function_without_grammar_writes_its_name() {
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let p = plan(weather(), Some(named)).unwrap().unwrap();
        let mut g = ToolGate::new(&p, tokens(), None);
        g.consume(256).unwrap();
        let mut spelled = Vec::new();
        loop {
            let a = allowed(&mut g);
            if a.len() == 259 {
                break;
            }
            assert_eq!(a.len(), 1);
            spelled.push(a[0] as u8);
            g.consume(a[0] as u32).unwrap();
        }
        assert_eq!(spelled, b"\n{\"name\": \"get_weather\", \"arguments\":");
    }
}

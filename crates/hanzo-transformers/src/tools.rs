//! Function calling: how a model is told about tools, and how its calls are read back out of
//! the text it generates.
//!
//! Every model here writes a call as a JSON object between two markers,
//! `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`: Qwen2.5's own format
//! (its template lays the tools out itself), which Llama 3's `{"name", "parameters"}` JSON
//! also parses as. Models whose template knows no tools (SmolLM2, Gemma 3) get the tools
//! described in the system turn ([`describe`]), and earlier calls and results written into
//! the chat as text ([`lower`]).
//!
//! [`ToolCallParser`] reads the generated text as it streams: ordinary text passes through,
//! a call yields its name as soon as the name is complete and then its arguments piece by
//! piece, so a client sees the call form while the model writes it.

use crate::chat_template::{to_python_json, Message, ToolCall};
use serde_json::Value;

/// The markers around one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolSyntax {
    pub start: &'static str,
    pub end: &'static str,
}

/// `<tool_call> ... </tool_call>` (Qwen2.5 and the Hermes fine-tunes).
pub const TOOL_CALL_TAGS: ToolSyntax = ToolSyntax {
    start: "<tool_call>",
    end: "</tool_call>",
};

/// The system text that tells a model without tool support in its template which functions
/// it has and how to call them.
pub fn describe(tools: &[Value]) -> String {
    let mut s = String::from(
        "You can call functions to answer. Their signatures, one JSON object per line:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&to_python_json(t));
    }
    s.push_str(
        "\n</tools>\n\nTo call a function, write a JSON object with its name and arguments \
         between <tool_call> and </tool_call>, one call per pair:\n<tool_call>\n{\"name\": \
         \"the_function\", \"arguments\": {\"a_parameter\": \"a value\"}}\n</tool_call>\nEach \
         result comes back between <tool_response> and </tool_response>.",
    );
    s
}

/// The call as the model writes it: `{"name": "f", "arguments": {...}}`.
fn call_text(c: &ToolCall) -> String {
    format!(
        "{{\"name\": {}, \"arguments\": {}}}",
        to_python_json(&Value::from(c.function.name.as_str())),
        to_python_json(&c.function.arguments)
    )
}

/// A chat rewritten for a template that knows no tools: the tools described in the system
/// turn (a new one first if there is none), an assistant's calls written into its text in
/// the call syntax, and consecutive tool results merged into one user turn.
pub fn lower(messages: &[Message], tools: &[Value], syntax: ToolSyntax) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len() + 1);
    if !tools.is_empty() {
        match messages.first() {
            Some(m) if m.role == "system" => {}
            _ => out.push(Message::new("system", &describe(tools))),
        }
    }
    for (i, m) in messages.iter().enumerate() {
        match m.role.as_str() {
            "system" if i == 0 && !tools.is_empty() => {
                let text = format!("{}\n\n{}", m.content, describe(tools));
                out.push(Message::new("system", &text));
            }
            "assistant" if !m.tool_calls.is_empty() => {
                let mut text = m.content.clone();
                for c in &m.tool_calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "{}\n{}\n{}",
                        syntax.start,
                        call_text(c),
                        syntax.end
                    ));
                }
                out.push(Message::new("assistant", &text));
            }
            "tool" => {
                let result = format!("<tool_response>\n{}\n</tool_response>", m.content);
                match out.last_mut() {
                    Some(prev)
                        if prev.role == "user" && i > 0 && messages[i - 1].role == "tool" =>
                    {
                        prev.content.push('\n');
                        prev.content.push_str(&result);
                    }
                    _ => out.push(Message::new("user", &result)),
                }
            }
            _ => out.push(Message::new(&m.role, &m.content)),
        }
    }
    out
}

/// What the parser found in a piece of generated text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolDelta {
    /// Ordinary reply text.
    Content(String),
    /// Call `index` has begun; its name is complete.
    Call { index: usize, name: String },
    /// More of call `index`'s arguments (JSON text; all of a call's pieces concatenated are
    /// its arguments).
    Arguments { index: usize, text: String },
}

#[derive(Debug)]
enum State {
    /// Ordinary text, watching for the start marker.
    Text,
    /// Inside a call, before its arguments: `{"name": "f", "arguments": `.
    Head,
    /// Inside the arguments value.
    Arguments(JsonScan),
    /// After the arguments, until the end marker.
    Tail,
    /// A call that does not start the usual way: kept whole until its end marker, then
    /// parsed (or given back as text).
    Whole,
}

/// How the current call was opened, which says how it closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opening {
    /// The start marker: closed by the end marker.
    Tagged,
    /// A bare `{"name": ...}` object at the start of the reply: closed by its `}`.
    Bare,
    /// The same in a Markdown code block: closed by the fence.
    Fenced,
}

/// Reads calls out of streamed text (see the module docs).
#[derive(Debug)]
pub struct ToolCallParser {
    syntax: ToolSyntax,
    state: State,
    /// Text not yet accounted for.
    buf: String,
    calls: usize,
    opening: Opening,
    /// Nothing but whitespace and calls so far: a bare or fenced call may still open here
    /// (small models often leave the markers out).
    at_start: bool,
}

impl ToolCallParser {
    pub fn new(syntax: ToolSyntax) -> Self {
        Self {
            syntax,
            state: State::Text,
            buf: String::new(),
            calls: 0,
            opening: Opening::Tagged,
            at_start: true,
        }
    }

    /// How many calls have begun.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Takes the next piece of text.
    pub fn push(&mut self, text: &str) -> Vec<ToolDelta> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out, false) {}
        out
    }

    /// The end of the text: whatever was held back.
    pub fn finish(&mut self) -> Vec<ToolDelta> {
        let mut out = Vec::new();
        while self.step(&mut out, true) {}
        out
    }

    /// One move of the state machine; `false` when it needs more text.
    fn step(&mut self, out: &mut Vec<ToolDelta>, end: bool) -> bool {
        let ToolSyntax { start, end: stop } = self.syntax;
        match &mut self.state {
            State::Text if self.at_start => {
                let text = self.buf.trim_start();
                let ws = self.buf.len() - text.len();
                match opening(text) {
                    Open::Call { skip, fenced } => {
                        self.buf.drain(..ws + skip);
                        self.opening = if fenced {
                            Opening::Fenced
                        } else {
                            Opening::Bare
                        };
                        self.at_start = false;
                        self.state = State::Head;
                        true
                    }
                    Open::Maybe if !end => false,
                    _ => {
                        self.at_start = false;
                        true
                    }
                }
            }
            State::Text => {
                if let Some(at) = self.buf.find(start) {
                    push_content(out, &self.buf[..at]);
                    self.buf.drain(..at + start.len());
                    self.opening = Opening::Tagged;
                    self.state = State::Head;
                    return true;
                }
                // Hold back what could be the start of the marker.
                let keep = if end {
                    0
                } else {
                    partial_suffix(&self.buf, start)
                };
                let emit = self.buf.len() - keep;
                push_content(out, &self.buf[..emit]);
                self.buf.drain(..emit);
                false
            }
            State::Head => match parse_head(&self.buf) {
                Head::Done { name, used } => {
                    out.push(ToolDelta::Call {
                        index: self.calls,
                        name,
                    });
                    self.calls += 1;
                    self.buf.drain(..used);
                    self.state = State::Arguments(JsonScan::default());
                    true
                }
                Head::More if !end => false,
                _ => {
                    self.state = State::Whole;
                    true
                }
            },
            State::Arguments(scan) => {
                // Whitespace before the value is not part of the arguments.
                let (skip, len) = scan.feed(&self.buf);
                if len > 0 {
                    out.push(ToolDelta::Arguments {
                        index: self.calls - 1,
                        text: self.buf[skip..skip + len].to_string(),
                    });
                }
                let done = scan.done;
                self.buf.drain(..skip + len);
                if done {
                    self.state = State::Tail;
                    return true;
                }
                if end {
                    self.buf.clear();
                }
                false
            }
            State::Tail => {
                let close = match self.opening {
                    Opening::Tagged => stop,
                    Opening::Bare => "}",
                    Opening::Fenced => "```",
                };
                if let Some(at) = self.buf.find(close) {
                    self.buf.drain(..at + close.len());
                    // After a call written without markers, another may follow the same way.
                    self.at_start = self.opening != Opening::Tagged;
                    self.state = State::Text;
                    return true;
                }
                if end {
                    self.buf.clear();
                }
                false
            }
            State::Whole => {
                let found = self.buf.find(stop);
                if found.is_none() && !end {
                    return false;
                }
                let body = found.map_or(&self.buf[..], |at| &self.buf[..at]);
                match parse_call(body) {
                    Some((name, args)) => {
                        out.push(ToolDelta::Call {
                            index: self.calls,
                            name,
                        });
                        out.push(ToolDelta::Arguments {
                            index: self.calls,
                            text: args,
                        });
                        self.calls += 1;
                    }
                    // Not a call after all: the text is the reply.
                    None => {
                        let text = match found {
                            Some(_) => format!("{start}{body}{stop}"),
                            None => format!("{start}{body}"),
                        };
                        push_content(out, &text);
                    }
                }
                let used = found.map_or(self.buf.len(), |at| at + stop.len());
                self.buf.drain(..used);
                self.state = State::Text;
                true
            }
        }
    }
}

fn push_content(out: &mut Vec<ToolDelta>, text: &str) {
    if text.is_empty() {
        return;
    }
    if let Some(ToolDelta::Content(prev)) = out.last_mut() {
        prev.push_str(text);
    } else {
        out.push(ToolDelta::Content(text.to_string()));
    }
}

/// The length of the longest end of `text` that `marker` starts with (a marker maybe cut in
/// two by a token boundary), on a character boundary.
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

enum Open {
    /// A call begins `skip` bytes in (after a code fence).
    Call { skip: usize, fenced: bool },
    /// Could still become one.
    Maybe,
    /// Is not one.
    No,
}

/// Whether text at the start of a reply opens a call without markers: `{"name": "f",
/// "arguments": ` bare or after a ```` ```json ```` fence.
fn opening(text: &str) -> Open {
    let (skip, fenced) = match text.strip_prefix("```") {
        Some(after) => {
            let after_lang = after.strip_prefix("json").unwrap_or(after);
            if after.len() < 4 && "json".starts_with(after) {
                return Open::Maybe;
            }
            let body = after_lang.trim_start();
            (text.len() - body.len(), true)
        }
        None if "```".starts_with(text) => return Open::Maybe,
        None => (0, false),
    };
    let body = &text[skip..];
    if body.is_empty() {
        return Open::Maybe;
    }
    if !body.starts_with('{') {
        return Open::No;
    }
    match parse_head(body) {
        Head::Done { .. } => Open::Call { skip, fenced },
        Head::More => Open::Maybe,
        Head::Other => Open::No,
    }
}

enum Head {
    /// Name complete; `used` bytes up to where the arguments value begins.
    Done { name: String, used: usize },
    /// Could still become a head.
    More,
    /// Will not.
    Other,
}

/// Matches `\s* { \s* "name" \s* : \s* "<name>" \s* , \s* "arguments"|"parameters" \s* : `.
fn parse_head(s: &str) -> Head {
    let mut rest = s;
    let need = |lit: &str, rest: &mut &str| -> Option<bool> {
        *rest = rest.trim_start();
        if rest.starts_with(lit) {
            *rest = &rest[lit.len()..];
            Some(true)
        } else if lit.starts_with(*rest) {
            None
        } else {
            Some(false)
        }
    };
    for lit in ["{", "\"name\"", ":"] {
        match need(lit, &mut rest) {
            Some(true) => {}
            Some(false) => return Head::Other,
            None => return Head::More,
        }
    }
    rest = rest.trim_start();
    if rest.is_empty() {
        return Head::More;
    }
    if !rest.starts_with('"') {
        return Head::Other;
    }
    let mut scan = JsonScan::default();
    let (_, len) = scan.feed(rest);
    if !scan.done {
        return Head::More;
    }
    let Ok(name) = serde_json::from_str::<String>(&rest[..len]) else {
        return Head::Other;
    };
    rest = &rest[len..];
    match need(",", &mut rest) {
        Some(true) => {}
        Some(false) => return Head::Other,
        None => return Head::More,
    }
    rest = rest.trim_start();
    let key = ["\"arguments\"", "\"parameters\""]
        .into_iter()
        .find(|k| rest.starts_with(k));
    match key {
        Some(k) => rest = &rest[k.len()..],
        None if ["\"arguments\"", "\"parameters\""]
            .iter()
            .any(|k| k.starts_with(rest)) =>
        {
            return Head::More
        }
        None => return Head::Other,
    }
    match need(":", &mut rest) {
        Some(true) => Head::Done {
            name,
            used: s.len() - rest.len(),
        },
        Some(false) => Head::Other,
        None => Head::More,
    }
}

/// A whole call `{"name": "f", "arguments"|"parameters": {...}}`, its arguments as compact
/// JSON text.
fn parse_call(body: &str) -> Option<(String, String)> {
    let v: Value = serde_json::from_str(body.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    // Some models write the arguments as a string of JSON.
    let args = match args {
        Value::String(s) if serde_json::from_str::<Value>(&s).is_ok() => s,
        a => a.to_string(),
    };
    Some((name, args))
}

/// Finds where one JSON value ends in streamed text: depth of brackets outside strings.
#[derive(Debug, Default)]
struct JsonScan {
    started: bool,
    depth: usize,
    in_string: bool,
    escaped: bool,
    done: bool,
}

impl JsonScan {
    /// Reads `s` until the value ends. Returns the whitespace skipped before the value starts
    /// and the length of the value's text after it, in bytes.
    fn feed(&mut self, s: &str) -> (usize, usize) {
        let mut skip = 0;
        let mut end = 0;
        for (i, ch) in s.char_indices() {
            if self.done {
                break;
            }
            let after = i + ch.len_utf8();
            if !self.started {
                if ch.is_whitespace() {
                    skip = after;
                    continue;
                }
                self.started = true;
            }
            if self.in_string {
                match (self.escaped, ch) {
                    (true, _) => self.escaped = false,
                    (false, '\\') => self.escaped = true,
                    (false, '"') => {
                        self.in_string = false;
                        self.done = self.depth == 0;
                    }
                    _ => {}
                }
                end = after;
                continue;
            }
            match ch {
                // A bare scalar (number, true, null) at the top ends before a delimiter.
                ',' | '}' | ']' | ' ' | '\n' if self.depth == 0 => {
                    self.done = true;
                    break;
                }
                '"' => self.in_string = true,
                '{' | '[' => self.depth += 1,
                '}' | ']' => {
                    self.depth -= 1;
                    self.done = self.depth == 0;
                }
                _ => {}
            }
            end = after;
        }
        (skip, end.saturating_sub(skip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat_template::FunctionCall;

    fn run(pieces: &[&str]) -> Vec<ToolDelta> {
        let mut p = ToolCallParser::new(TOOL_CALL_TAGS);
        let mut out = Vec::new();
        for s in pieces {
            out.extend(p.push(s));
        }
        out.extend(p.finish());
        out
    }

    /// Joins consecutive pieces of the same kind, as a client assembling the stream would.
    fn assembled(d: Vec<ToolDelta>) -> (String, Vec<(String, String)>) {
        let mut text = String::new();
        let mut calls: Vec<(String, String)> = Vec::new();
        for x in d {
            match x {
                ToolDelta::Content(t) => text.push_str(&t),
                ToolDelta::Call { index, name } => {
                    assert_eq!(index, calls.len());
                    calls.push((name, String::new()));
                }
                ToolDelta::Arguments { index, text } => calls[index].1.push_str(&text),
            }
        }
        (text, calls)
    }

    const REPLY: &str = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris \\\"FR\\\" {x}\", \"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

    #[test]
    fn calls_come_out_whole_however_the_text_is_cut() {
        let want_args = "{\"city\": \"Paris \\\"FR\\\" {x}\", \"days\": [1, 2]}";
        // Every cut of the reply into two pieces, and one character at a time.
        let chars: Vec<String> = REPLY.chars().map(String::from).collect();
        let one_by_one: Vec<&str> = chars.iter().map(String::as_str).collect();
        let mut cuts = vec![one_by_one];
        for at in (0..REPLY.len()).filter(|&i| REPLY.is_char_boundary(i)) {
            cuts.push(vec![&REPLY[..at], &REPLY[at..]]);
        }
        for pieces in cuts {
            let (text, calls) = assembled(run(&pieces));
            assert_eq!(text, "Let me check.\n\n", "{pieces:?}");
            assert_eq!(calls.len(), 2, "{pieces:?}");
            assert_eq!(calls[0], ("get_weather".into(), want_args.into()));
            assert_eq!(calls[1], ("now".into(), "{}".into()));
        }
    }

    #[test]
    fn the_name_comes_before_the_arguments_are_complete() {
        let mut p = ToolCallParser::new(TOOL_CALL_TAGS);
        assert_eq!(p.push("<tool_call>\n{\"name\": \"f"), vec![]);
        assert_eq!(
            p.push("\", \"arguments\": {\"a\""),
            vec![
                ToolDelta::Call {
                    index: 0,
                    name: "f".into()
                },
                ToolDelta::Arguments {
                    index: 0,
                    text: "{\"a\"".into()
                }
            ]
        );
        assert_eq!(
            p.push(": 1}}\n</tool_call>"),
            vec![ToolDelta::Arguments {
                index: 0,
                text: ": 1}".into()
            }]
        );
        assert_eq!(p.calls(), 1);
    }

    #[test]
    fn other_shapes_and_plain_text() {
        // Arguments before the name, and Llama 3's "parameters": parsed at the end marker.
        let (_, calls) = assembled(run(&[
            "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>",
        ]));
        assert_eq!(calls, vec![("f".into(), "{\"x\":1}".into())]);
        let (_, calls) = assembled(run(&[
            "<tool_call>{\"name\": \"g\", \"parameters\": {\"y\": [2]}}",
        ]));
        assert_eq!(calls, vec![("g".into(), "{\"y\": [2]}".into())]);
        // Not JSON: the text is the reply, markers and all.
        let (text, calls) = assembled(run(&["a <tool_call>not json</tool_call> b"]));
        assert_eq!(text, "a <tool_call>not json</tool_call> b");
        assert!(calls.is_empty());
        // A "<" that is not a marker is released at the end.
        let (text, _) = assembled(run(&["1 <", " 2 <tool"]));
        assert_eq!(text, "1 < 2 <tool");
    }

    #[test]
    fn calls_without_markers_at_the_start_of_the_reply() {
        let bare =
            "{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n{\"name\": \"g\", \"arguments\": {}}";
        let fenced =
            "\n```json\n{\n  \"name\": \"f\",\n  \"arguments\": {\n    \"a\": 1\n  }\n}\n```";
        for reply in [bare, fenced] {
            let chars: Vec<String> = reply.chars().map(String::from).collect();
            for pieces in [vec![reply.to_string()], chars] {
                let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
                let (text, calls) = assembled(run(&pieces));
                assert_eq!(text.trim(), "", "{reply:?}");
                assert_eq!(calls[0].0, "f");
                let args: Value = serde_json::from_str(&calls[0].1).unwrap();
                assert_eq!(args, serde_json::json!({"a": 1}));
            }
        }
        assert_eq!(assembled(run(&[bare])).1.len(), 2);
        // JSON that is not a call, code, and calls after other text stay text.
        for reply in [
            "{\"city\": \"Paris\"}",
            "```python\nprint(1)\n```",
            "Sure: {\"name\": \"f\", \"arguments\": {}}",
            "`x` is",
        ] {
            let (text, calls) = assembled(run(&[reply]));
            assert_eq!(text, reply);
            assert!(calls.is_empty());
        }
    }

    #[test]
    fn chats_for_templates_without_tools() {
        let tools = vec![serde_json::json!({"type": "function", "function": {"name": "f"}})];
        let mut call = Message::new("assistant", "");
        call.tool_calls.push(ToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "f".into(),
                arguments: serde_json::json!({"q": "x"}),
            },
        });
        let chat = [
            Message::new("user", "hi"),
            call,
            Message::new("tool", "1"),
            Message::new("tool", "2"),
        ];
        let out = lower(&chat, &tools, TOOL_CALL_TAGS);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].role, "system");
        assert!(out[0].content.contains(&to_python_json(&tools[0])));
        assert_eq!(
            out[2].content,
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>"
        );
        assert_eq!(
            out[3],
            Message::new(
                "user",
                "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
            )
        );
    }
}

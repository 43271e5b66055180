//! Chat templates: the Jinja template a model ships (`tokenizer.chat_template` in GGUF, or
//! `chat_template` in tokenizer_config.json) rendered with minijinja, or a built-in one per
//! architecture when the file has none.

use crate::{Error, Result};
use minijinja::{context, Environment, ErrorKind};
use serde::{Deserialize, Serialize};

/// One turn of a chat. Templates see `tool_calls` and `tool_call_id` only when they are set
/// (an assistant's calls; a tool result's reference to the call it answers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A function call an assistant made, in the shape Hugging Face chat templates read:
/// `{"id", "type": "function", "function": {"name", "arguments": {...}}}` with the arguments
/// as a JSON value (the OpenAI API sends them as a string; callers parse it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

/// Gemma's format: no system role (a system message is prepended to the first user turn),
/// `assistant` is called `model`.
const GEMMA: &str = r#"{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = "" -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}{%- endif -%}{%- if message['role'] == 'assistant' -%}{%- set role = "model" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"#;

/// ChatML (Qwen, SmolLM and many fine-tunes).
const CHATML: &str = r#"{%- for message in messages -%}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"#;

/// Llama 3 instruct.
const LLAMA3: &str = r#"{{ bos_token }}{%- for message in messages -%}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif -%}"#;

/// The built-in template for an architecture whose file carries none.
pub fn builtin_for(architecture: &str) -> &'static str {
    match architecture {
        "gemma" | "gemma2" | "gemma3" => GEMMA,
        "llama" => LLAMA3,
        _ => CHATML,
    }
}

pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    tools: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChatTemplate")
    }
}

impl ChatTemplate {
    /// `bos` / `eos` are the token texts templates refer to as `bos_token` / `eos_token`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        // Templates were written against Python's `json.dumps` (", " and ": " separators, no
        // HTML escaping); minijinja's own `tojson` differs, and the model saw the former.
        env.add_filter("tojson", python_json);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::Template(format!("cannot parse: {e}")))?;
        Ok(Self {
            env,
            bos: bos.into(),
            eos: eos.into(),
            tools: source.contains("tools"),
        })
    }

    /// Whether the template lays out `tools` itself (otherwise the caller describes them, see
    /// `crate::tools`).
    pub fn handles_tools(&self) -> bool {
        self.tools
    }

    /// The prompt text for `messages`, ending with the assistant's turn header when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with_tools(messages, &[], add_generation_prompt)
    }

    /// As [`render`](Self::render), with the functions the model may call (OpenAI's `tools`
    /// entries, `{"type": "function", "function": {...}}`) in the template's `tools`.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(e.to_string()))?;
        tmpl.render(context! {
            messages => messages,
            tools => (!tools.is_empty()).then_some(tools),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos,
            eos_token => self.eos,
        })
        .map_err(|e| Error::Template(format!("{e}")))
    }
}

/// `json.dumps` as Python writes it: `{"a": 1, "b": [1, 2]}` (Jinja's optional `indent`
/// pretty-prints instead).
fn python_json(
    value: minijinja::Value,
    indent: Option<usize>,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    let value = serde_json::to_value(&value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let text = match indent {
        None => to_python_json(&value),
        Some(n) => {
            let pad = vec![b' '; n];
            let mut out = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(&pad);
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            serde::Serialize::serialize(&value, &mut ser).expect("a JSON value serializes");
            String::from_utf8(out).expect("serde_json writes UTF-8")
        }
    };
    Ok(minijinja::Value::from_safe_string(text))
}

/// serde_json's compact output with Python's separators.
pub struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        python_separator(w, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        python_separator(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// `, ` before every item but the first.
fn python_separator<W: ?Sized + std::io::Write>(w: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        w.write_all(b", ")
    }
}

/// A JSON value as Python's `json.dumps` writes it.
pub fn to_python_json(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    serde::Serialize::serialize(value, &mut ser).expect("a JSON value serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_fallback_renders_the_documented_format() {
        let t = ChatTemplate::new(builtin_for("gemma3"), "<bos>", "<eos>").unwrap();
        let out = t
            .render(
                &[
                    Message::new("system", "Be brief."),
                    Message::new("user", " Hi "),
                    Message::new("assistant", "Hello."),
                    Message::new("user", "Bye"),
                ],
                true,
            )
            .unwrap();
        assert_eq!(
            out,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        let err = t
            .render(&[Message::new("assistant", "x")], true)
            .unwrap_err();
        assert!(err.to_string().contains("alternate"), "{err}");
    }

    #[test]
    fn chatml_and_python_methods() {
        let t = ChatTemplate::new(CHATML, "", "").unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "hi")], true).unwrap(),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        // Templates from the Hub call Python string methods.
        let t = ChatTemplate::new(
            "{{ messages[0]['content'].strip().upper() }}{{ bos_token }}",
            "<s>",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&[Message::new("user", " x ")], false).unwrap(),
            "X<s>"
        );
        assert!(ChatTemplate::new("{% for %}", "", "").is_err());
    }
}

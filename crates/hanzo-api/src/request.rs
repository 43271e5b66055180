//! Request bodies of the OpenAI endpoints, and their checks. Fields this server does not know
//! are ignored, as the OpenAI API does; fields it knows but cannot honour are a 400, never
//! silently dropped.

use crate::error::{ApiError, ApiResult};
use crate::tools::ToolPlan;
use hanzo_transformers::{FunctionCall, Message, SamplingParams, ToolCall};
use serde::Deserialize;
use std::collections::HashMap;

/// Parses a JSON body, turning serde's complaint into a 400.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    if body.is_empty() {
        return Err(ApiError::bad_json(
            "The request body is empty; send a JSON object.",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_json(format!("The request body is not valid: {e}")))
}

/// A string or a list of strings (`stop`, `input`).
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// The sampling and length fields chat and text completions share.
#[derive(Deserialize, Debug, Default)]
pub struct GenFields {
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u64>,
    pub min_p: Option<f32>,
    pub n: Option<u64>,
    pub stop: Option<OneOrMany>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// llama.cpp / vLLM's multiplicative penalty (1 = off).
    pub repetition_penalty: Option<f32>,
    pub logit_bias: Option<HashMap<String, f32>>,
}

/// What the scheduler needs besides the prompt, checked.
#[derive(Debug)]
pub struct GenSettings {
    pub n: usize,
    /// `None`: up to the context's end.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
}

/// Most choices one request may ask for.
pub const MAX_N: u64 = 16;

fn range(param: &str, v: Option<f32>, lo: f32, hi: f32) -> ApiResult<Option<f32>> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::invalid(
            param,
            format!("`{param}` must be between {lo} and {hi}, got {x}"),
        )),
        v => Ok(v),
    }
}

impl GenFields {
    pub fn settings(&self, vocab: usize) -> ApiResult<GenSettings> {
        let n = self.n.unwrap_or(1);
        if !(1..=MAX_N).contains(&n) {
            return Err(ApiError::invalid(
                "n",
                format!("`n` must be between 1 and {MAX_N}, got {n}"),
            ));
        }
        let max_tokens = match (self.max_completion_tokens, self.max_tokens) {
            (Some(0), _) | (None, Some(0)) => {
                return Err(ApiError::invalid(
                    "max_tokens",
                    "`max_tokens` must be at least 1",
                ))
            }
            (Some(m), _) | (None, Some(m)) => Some(m.min(usize::MAX as u64) as usize),
            (None, None) => None,
        };
        let temperature = range("temperature", self.temperature, 0.0, 2.0)?.unwrap_or(1.0);
        let top_p = range("top_p", self.top_p, 0.0, 1.0)?.unwrap_or(1.0);
        let min_p = range("min_p", self.min_p, 0.0, 1.0)?.unwrap_or(0.0);
        let presence = range("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        let frequency = range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        let repetition = range("repetition_penalty", self.repetition_penalty, 0.01, 10.0)?;
        let mut logit_bias = Vec::new();
        for (k, &b) in self.logit_bias.iter().flatten() {
            let id: u32 = k
                .parse()
                .ok()
                .filter(|&id: &u32| (id as usize) < vocab)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "logit_bias",
                        format!("`logit_bias` key {k:?} is not a token id below {vocab}"),
                    )
                })?;
            if !(-100.0..=100.0).contains(&b) {
                return Err(ApiError::invalid(
                    "logit_bias",
                    format!("`logit_bias` values must be between -100 and 100, got {b}"),
                ));
            }
            logit_bias.push((id, b));
        }
        logit_bias.sort_by_key(|&(id, _)| id);
        let stop: Vec<String> = self
            .stop
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if stop.len() > 16 {
            return Err(ApiError::invalid("stop", "`stop` takes at most 16 strings"));
        }
        let seed = match self.seed {
            Some(s) => s as u64,
            None => rand::random(),
        };
        Ok(GenSettings {
            n: n as usize,
            max_tokens,
            sampling: SamplingParams {
                temperature,
                top_k: self.top_k.unwrap_or(0).min(usize::MAX as u64) as usize,
                top_p,
                min_p,
                repeat_penalty: repetition.unwrap_or(1.0),
                repeat_last_n: 0,
                presence_penalty: presence.unwrap_or(0.0),
                frequency_penalty: frequency.unwrap_or(0.0),
                logit_bias,
                seed,
            },
            stop,
        })
    }
}

#[derive(Deserialize, Debug, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Message content: a string, or a list of parts of which this server reads the text ones.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Deserialize, Debug)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Deserialize, Debug)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
    /// An assistant's earlier calls.
    pub tool_calls: Option<Vec<InToolCall>>,
    /// A tool result: the call it answers.
    pub tool_call_id: Option<String>,
}

/// A call in the history: `{"id", "type": "function", "function": {"name", "arguments"}}`,
/// the arguments a string of JSON.
#[derive(Deserialize, Debug)]
pub struct InToolCall {
    pub id: String,
    pub function: InFunctionCall,
}

#[derive(Deserialize, Debug)]
pub struct InFunctionCall {
    pub name: String,
    pub arguments: String,
}

#[derive(Deserialize, Debug)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub gen: GenFields,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u64>,
    pub response_format: Option<serde_json::Value>,
    pub tools: Option<Vec<serde_json::Value>>,
    pub tool_choice: Option<serde_json::Value>,
    pub parallel_tool_calls: Option<bool>,
}

impl ChatRequest {
    /// The messages as the chat template takes them.
    pub fn messages(&self) -> ApiResult<Vec<Message>> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid(
                "messages",
                "`messages` must hold at least one message",
            ));
        }
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                if !matches!(
                    m.role.as_str(),
                    "system" | "developer" | "user" | "assistant" | "tool"
                ) {
                    return Err(ApiError::invalid(
                        &format!("messages[{i}].role"),
                        format!(
                            "unknown role {:?}: use system, developer, user, assistant or tool",
                            m.role
                        ),
                    ));
                }
                let text = match &m.content {
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(parts)) => {
                        let mut text = String::new();
                        for (j, p) in parts.iter().enumerate() {
                            match (p.kind.as_str(), &p.text) {
                                ("text", Some(t)) => text.push_str(t),
                                (kind, _) => {
                                    return Err(ApiError::invalid(
                                        &format!("messages[{i}].content[{j}]"),
                                        format!(
                                            "content parts of type {kind:?} are not supported \
                                             (text only)"
                                        ),
                                    ))
                                }
                            }
                        }
                        text
                    }
                };
                // The templates know `system`; `developer` is OpenAI's newer name for it.
                let role = if m.role == "developer" {
                    "system"
                } else {
                    &m.role
                };
                let mut msg = Message::new(role, &text);
                msg.tool_call_id = m.tool_call_id.clone();
                let calls = m.tool_calls.as_deref().unwrap_or_default();
                if !calls.is_empty() && m.role != "assistant" {
                    return Err(ApiError::invalid(
                        &format!("messages[{i}].tool_calls[0]"),
                        "only assistant messages carry tool calls",
                    ));
                }
                for c in calls {
                    // Templates take the arguments as an object; a model that wrote
                    // something else gets it back as the string it was.
                    let arguments = serde_json::from_str(&c.function.arguments)
                        .unwrap_or_else(|_| c.function.arguments.clone().into());
                    msg.tool_calls.push(ToolCall {
                        id: c.id.clone(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: c.function.name.clone(),
                            arguments,
                        },
                    });
                }
                Ok(msg)
            })
            .collect()
    }

    /// The JSON schema `response_format` asks for: `None` for free text, `Some(None)` for any
    /// JSON object, `Some(Some(schema))` for a schema.
    pub fn json_format(&self) -> ApiResult<Option<Option<&serde_json::Value>>> {
        let Some(f) = &self.response_format else {
            return Ok(None);
        };
        match f.get("type").and_then(|t| t.as_str()) {
            Some("text") => Ok(None),
            Some("json_object") => Ok(Some(None)),
            Some("json_schema") => match f.pointer("/json_schema/schema") {
                Some(s) if s.is_object() => Ok(Some(Some(s))),
                _ => Err(ApiError::invalid(
                    "response_format",
                    "`response_format.json_schema.schema` must be a JSON schema object",
                )),
            },
            other => Err(ApiError::invalid(
                "response_format",
                format!("`response_format.type` must be text, json_object or json_schema, got {other:?}"),
            )),
        }
    }

    /// The functions the model may call, checked; `None` when it is not to call any.
    pub fn tool_plan(&self) -> ApiResult<Option<ToolPlan>> {
        let plan = ToolPlan::from_request(
            self.tools.as_deref(),
            self.tool_choice.as_ref(),
            self.parallel_tool_calls,
        )?;
        if plan.is_some()
            && self
                .response_format
                .as_ref()
                .is_some_and(|f| f["type"] != "text")
        {
            return Err(ApiError::invalid(
                "response_format",
                "`response_format` and tool calls cannot be combined; set `tool_choice` to \"none\"",
            ));
        }
        Ok(plan)
    }

    /// `Some(k)` when log-probabilities are asked for, `k` alternatives each.
    pub fn logprobs(&self) -> ApiResult<Option<usize>> {
        match (self.logprobs.unwrap_or(false), self.top_logprobs) {
            (_, Some(k)) if k > 20 => Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` must be between 0 and 20",
            )),
            (false, Some(_)) => Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            )),
            (true, k) => Ok(Some(k.unwrap_or(0) as usize)),
            (false, None) => Ok(None),
        }
    }
}

/// A prompt: text, or token ids.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize, Debug)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub gen: GenFields,
    /// The legacy API's alternatives per token (0..=5).
    pub logprobs: Option<u64>,
    #[serde(default)]
    pub echo: bool,
    pub suffix: Option<String>,
    pub best_of: Option<u64>,
}

impl CompletionRequest {
    pub fn check_unsupported(&self) -> ApiResult<()> {
        if self.echo {
            return Err(ApiError::invalid(
                "echo",
                "`echo` is not supported by this server",
            ));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid(
                "suffix",
                "`suffix` is not supported by this server",
            ));
        }
        if self.best_of.is_some_and(|b| b > 1) {
            return Err(ApiError::invalid(
                "best_of",
                "`best_of` is not supported by this server",
            ));
        }
        if self.logprobs.is_some_and(|k| k > 5) {
            return Err(ApiError::invalid(
                "logprobs",
                "`logprobs` must be between 0 and 5",
            ));
        }
        Ok(())
    }
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
}

#[derive(Deserialize, Debug)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: EmbeddingInput,
    pub encoding_format: Option<String>,
    pub dimensions: Option<u64>,
}

/// A document to rerank: a string, or an object with its text (Cohere/Jina shapes).
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum RerankDocument {
    Text(String),
    Object { text: String },
}

impl RerankDocument {
    pub fn text(&self) -> &str {
        match self {
            RerankDocument::Text(t) | RerankDocument::Object { text: t } => t,
        }
    }
}

#[derive(Deserialize, Debug)]
pub struct RerankRequest {
    pub model: String,
    pub query: String,
    pub documents: Vec<RerankDocument>,
    pub top_n: Option<u64>,
    pub return_documents: Option<bool>,
}

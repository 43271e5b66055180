//! The answer to a chat or text completion: the events of a generation turned into one
//! OpenAI-shaped JSON response or into server-sent events, tool calls read out of the text.
//! The engine (many sequences through its scheduler) and the edge runtime (one conversation)
//! both answer through it.

use crate::error::{ApiError, ApiResult};
use crate::events::{Event, FinishReason, TokenLogprob};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hanzo_transformers::tools::{ToolCallParser, ToolDelta, TOOL_CALL_TAGS};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// Which API shape the answer takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Text,
}

/// A submitted request: its events, and what the response needs to say.
pub struct Job {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    /// The server's `system_fingerprint`.
    fingerprint: &'static str,
    n: usize,
    pub prompt_tokens: usize,
    logprobs: Option<usize>,
    /// Whether the model may call tools (its text is read for calls), and how many calls
    /// one choice may make.
    pub tools: Option<usize>,
    events: UnboundedReceiver<Event>,
    /// `Event::Extra`'s fields, once received.
    extra: Option<Value>,
}

/// Seconds since the Unix epoch (the `created` of responses and models).
pub fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Kind {
    /// The `object` of a whole answer, or of one streamed chunk.
    fn object(self, chunk: bool) -> &'static str {
        match (self, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }
}

impl Job {
    /// The answer to a request of `kind` for `model` whose `n` choices arrive on `events`;
    /// `logprobs`: the alternatives per token asked for, if any.
    pub fn new(
        kind: Kind,
        model: &str,
        fingerprint: &'static str,
        n: usize,
        prompt_tokens: usize,
        logprobs: Option<usize>,
        events: UnboundedReceiver<Event>,
    ) -> Self {
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Text => "cmpl",
        };
        Self {
            kind,
            id: format!("{prefix}-{:032x}", rand::random::<u128>()),
            model: model.to_string(),
            created: unix_time(),
            fingerprint,
            n,
            prompt_tokens,
            logprobs,
            tools: None,
            events,
            extra: None,
        }
    }

    /// The fields every answer and chunk carries around its `choices`.
    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.kind.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        })
    }

    /// `body` with the `Event::Extra` fields at its top level.
    fn with_extra(&self, mut body: Value) -> Value {
        if let (Some(Value::Object(extra)), Some(b)) = (&self.extra, body.as_object_mut()) {
            for (k, v) in extra {
                b.insert(k.clone(), v.clone());
            }
        }
        body
    }

    /// Streams the job as server-sent events, or waits for it and answers in one body.
    pub async fn respond(self, stream: bool, include_usage: bool) -> ApiResult<Response> {
        if stream {
            Ok(self::stream(self, include_usage))
        } else {
            collect(self).await
        }
    }
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// One choice's answer so far.
#[derive(Default)]
pub struct ChoiceAcc {
    pub text: String,
    logprobs: Vec<TokenLogprob>,
    pub finish: Option<FinishReason>,
    pub tokens: usize,
    /// Reads tool calls out of the text, when the request declared tools.
    parser: Option<ToolCallParser>,
    /// `(id, name, arguments)` of each call.
    calls: Vec<(String, String, String)>,
    /// Calls past this many are dropped (`parallel_tool_calls: false` allows one; the
    /// grammar, where there is one, already ends the turn after it).
    max_calls: usize,
}

impl ChoiceAcc {
    /// `tools`: the most calls the choice may make, when it may make any.
    fn new(tools: Option<usize>) -> Self {
        Self {
            parser: tools.map(|_| ToolCallParser::new(TOOL_CALL_TAGS)),
            max_calls: tools.unwrap_or(0),
            ..Default::default()
        }
    }

    /// Text as the model wrote it, split into reply text and tool calls where tools are on.
    fn read(&mut self, text: &str, last: bool) -> Vec<ToolDelta> {
        let mut deltas = match &mut self.parser {
            None if text.is_empty() => Vec::new(),
            None => vec![ToolDelta::Content(text.to_string())],
            Some(p) => {
                let mut deltas = p.push(text);
                if last {
                    deltas.extend(p.finish());
                }
                deltas
            }
        };
        deltas.retain(|d| match d {
            ToolDelta::Call { index, .. } | ToolDelta::Arguments { index, .. } => {
                *index < self.max_calls
            }
            ToolDelta::Content(_) => true,
        });
        for d in &deltas {
            match d {
                ToolDelta::Content(t) => self.text.push_str(t),
                ToolDelta::Call { name, .. } => {
                    self.calls.push((call_id(), name.clone(), String::new()))
                }
                ToolDelta::Arguments { index, text } => self.calls[*index].2.push_str(text),
            }
        }
        deltas
    }

    /// `finish_reason`: a turn that ended after calling tools ends for them.
    fn finish_reason(&self) -> Option<&'static str> {
        match self.finish {
            Some(FinishReason::Stop) if !self.calls.is_empty() => Some("tool_calls"),
            f => f.map(FinishReason::as_str),
        }
    }
}

/// A tool call's id, as OpenAI's look: `call_` and 24 random characters.
fn call_id() -> String {
    format!("call_{:024x}", rand::random::<u128>() >> 32)
}

/// The chat message of a finished choice: its text (null when it only called tools) and its
/// tool calls.
fn chat_message(c: &ChoiceAcc) -> Value {
    if c.calls.is_empty() {
        return json!({"role": "assistant", "content": c.text, "refusal": null});
    }
    let text = c.text.trim();
    let calls: Vec<Value> = c
        .calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
        })
        .collect();
    json!({
        "role": "assistant",
        "content": (!text.is_empty()).then_some(text),
        "refusal": null,
        "tool_calls": calls,
    })
}

/// Chat logprobs: `{"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}`.
fn chat_logprobs(lps: &[TokenLogprob]) -> Value {
    let entry = |t: &str, b: &[u8], l: f32| json!({"token": t, "logprob": l, "bytes": b});
    json!({
        "content": lps.iter().map(|lp| {
            let mut e = entry(&lp.token, &lp.bytes, lp.logprob);
            e["top_logprobs"] = lp.top.iter().map(|(t, b, l)| entry(t, b, *l)).collect();
            e
        }).collect::<Vec<_>>(),
        "refusal": null,
    })
}

/// The legacy completions shape: parallel arrays, alternatives as `{token: logprob}` maps,
/// offsets into the choice's text starting at `offset`.
fn text_logprobs(lps: &[TokenLogprob], mut offset: usize) -> Value {
    let mut text_offset = Vec::new();
    for lp in lps {
        text_offset.push(offset);
        offset += lp.token.len();
    }
    json!({
        "tokens": lps.iter().map(|l| l.token.as_str()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|l| {
            l.top.iter().map(|(t, _, p)| (t.clone(), json!(p))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

/// Every choice of a job, once all have finished.
pub async fn gather(job: &mut Job) -> ApiResult<Vec<ChoiceAcc>> {
    let mut choices: Vec<ChoiceAcc> = (0..job.n).map(|_| ChoiceAcc::new(job.tools)).collect();
    let mut done = 0;
    while done < job.n {
        match job.events.recv().await {
            Some(Event::Text {
                choice,
                text,
                logprobs,
            }) => {
                choices[choice].read(&text, false);
                choices[choice].logprobs.extend(logprobs);
            }
            Some(Event::Finish {
                choice,
                reason,
                tokens,
            }) => {
                choices[choice].read("", true);
                choices[choice].finish = Some(reason);
                choices[choice].tokens = tokens;
                done += 1;
            }
            Some(Event::Error(e)) => return Err(ApiError::internal(e)),
            Some(Event::Scores(_)) => {}
            Some(Event::Extra(v)) => job.extra = Some(v),
            None => return Err(ApiError::internal("the scheduler dropped the request")),
        }
    }
    Ok(choices)
}

async fn collect(mut job: Job) -> ApiResult<Response> {
    let choices = gather(&mut job).await?;
    let completion: usize = choices.iter().map(|c| c.tokens).sum();
    let choices: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let finish = c.finish_reason();
            match job.kind {
                Kind::Chat => json!({
                    "index": i,
                    "message": chat_message(c),
                    "logprobs": job.logprobs.map(|_| chat_logprobs(&c.logprobs)),
                    "finish_reason": finish,
                }),
                Kind::Text => json!({
                    "index": i,
                    "text": c.text,
                    "logprobs": job.logprobs.map(|_| text_logprobs(&c.logprobs, 0)),
                    "finish_reason": finish,
                }),
            }
        })
        .collect();
    let mut body = job.envelope(false, choices.into());
    body["usage"] = usage(job.prompt_tokens, completion);
    Ok(Json(job.with_extra(body)).into_response())
}

/// The state a streamed answer carries from one event to the next.
struct Streaming {
    job: Job,
    include_usage: bool,
    /// Chunks ready to go out, in order.
    ready: std::collections::VecDeque<String>,
    done: usize,
    completion_tokens: usize,
    /// Each choice so far (its tool calls, for their ids and the finish reason).
    choices: Vec<ChoiceAcc>,
    /// Bytes of text sent per choice (the legacy logprobs' offsets).
    sent: Vec<usize>,
    ended: bool,
}

impl Streaming {
    fn chunk(&self, choices: Value) -> String {
        self.chunk_value(choices).to_string()
    }

    fn chunk_value(&self, choices: Value) -> Value {
        let mut c = self.job.envelope(true, choices);
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        c
    }

    fn logprobs(&self, index: usize, lps: &[TokenLogprob]) -> Value {
        match (self.job.logprobs, lps.is_empty()) {
            (Some(_), false) => match self.job.kind {
                Kind::Chat => chat_logprobs(lps),
                Kind::Text => text_logprobs(lps, self.sent[index]),
            },
            _ => Value::Null,
        }
    }

    /// One choice's entry in a chunk: a chat `delta` (text, or a piece of a tool call) or a
    /// completion's text.
    fn choice(
        &self,
        index: usize,
        delta: Option<&ToolDelta>,
        lps: &[TokenLogprob],
        finish: Option<&str>,
    ) -> Value {
        let logprobs = self.logprobs(index, lps);
        match self.job.kind {
            Kind::Chat => {
                let delta = match delta {
                    None => json!({}),
                    Some(ToolDelta::Content(t)) => json!({"content": t}),
                    // The first piece of a call names it; later ones add to its arguments.
                    Some(ToolDelta::Call { index: k, name }) => json!({"tool_calls": [{
                        "index": k,
                        "id": self.choices[index].calls[*k].0,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }]}),
                    Some(ToolDelta::Arguments { index: k, text }) => {
                        json!({"tool_calls": [{"index": k, "function": {"arguments": text}}]})
                    }
                };
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            Kind::Text => json!({
                "index": index,
                "text": match delta {
                    Some(ToolDelta::Content(t)) => t.as_str(),
                    _ => "",
                },
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
        }
    }

    /// Queues a chunk for each piece of a choice's new text, the log-probabilities on the
    /// first.
    fn queue(&mut self, index: usize, text: &str, last: bool, lps: &[TokenLogprob]) {
        let mut deltas = self.choices[index].read(text, last);
        if deltas.is_empty() && !lps.is_empty() {
            deltas.push(ToolDelta::Content(String::new()));
        }
        let mut lps = lps;
        for d in &deltas {
            let chunk = self.chunk(json!([self.choice(index, Some(d), lps, None)]));
            self.ready.push_back(chunk);
            lps = &[];
        }
        self.sent[index] += text.len();
    }

    /// Waits for the next event and turns it into chunks; `false` at the end.
    async fn advance(&mut self) -> bool {
        if self.ended {
            return false;
        }
        if self.done == self.job.n {
            if self.include_usage {
                let mut c = self.chunk_value(json!([]));
                c["usage"] = usage(self.job.prompt_tokens, self.completion_tokens);
                self.ready.push_back(self.job.with_extra(c).to_string());
            }
            self.ready.push_back("[DONE]".into());
            self.ended = true;
            return true;
        }
        match self.job.events.recv().await {
            Some(Event::Text {
                choice,
                text,
                logprobs,
            }) => self.queue(choice, &text, false, &logprobs),
            Some(Event::Finish {
                choice,
                reason,
                tokens,
            }) => {
                self.done += 1;
                self.completion_tokens += tokens;
                self.queue(choice, "", true, &[]);
                self.choices[choice].finish = Some(reason);
                let finish = self.choices[choice].finish_reason();
                let c = self.choice(choice, None, &[], finish);
                let chunk = self.job.with_extra(self.chunk_value(json!([c])));
                self.ready.push_back(chunk.to_string());
            }
            Some(Event::Scores(_)) => {}
            Some(Event::Extra(v)) => self.job.extra = Some(v),
            Some(Event::Error(e)) => {
                self.ready
                    .push_back(ApiError::internal(e).body().to_string());
                self.ended = true;
            }
            None => {
                let e = ApiError::internal("the scheduler dropped the request");
                self.ready.push_back(e.body().to_string());
                self.ended = true;
            }
        }
        true
    }
}

fn stream(job: Job, include_usage: bool) -> Response {
    let (n, tools) = (job.n, job.tools);
    let mut s = Streaming {
        job,
        include_usage,
        ready: Default::default(),
        done: 0,
        completion_tokens: 0,
        choices: (0..n).map(|_| ChoiceAcc::new(tools)).collect(),
        sent: vec![0; n],
        ended: false,
    };
    // Chat streams open every choice with the assistant's role, as OpenAI's do.
    if s.job.kind == Kind::Chat {
        for i in 0..n {
            let c = json!({
                "index": i,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": null,
                "finish_reason": null,
            });
            let chunk = s.chunk(json!([c]));
            s.ready.push_back(chunk);
        }
    }
    let events = futures_util::stream::unfold(s, |mut s| async move {
        loop {
            if let Some(data) = s.ready.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), s));
            }
            if !s.advance().await {
                return None;
            }
        }
    });
    // A comment line now and then while nothing else is sent (a long prefill in a full
    // batch): writing it is how a dropped connection is noticed and its sequence freed.
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_millis(500)))
        .into_response()
}

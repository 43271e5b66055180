//! `POST /v1/chat/completions` and `POST /v1/completions`: a prompt goes to the model's
//! scheduler, and its events come back as one JSON response or as server-sent events.

use super::api::{self, ChatRequest, CompletionRequest, GenSettings, Prompt};
use super::error::{ApiError, ApiResult};
use super::models::ChatModel;
use super::scheduler::{Event, FinishReason, GenRequest, TokenLogprob};
use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// Which API shape the answer takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Text,
}

/// A submitted request: its events, and what the response needs to say.
struct Job {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    n: usize,
    prompt_tokens: usize,
    logprobs: Option<usize>,
    events: UnboundedReceiver<Event>,
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
    /// The fields every answer and chunk carries around its `choices`.
    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.kind.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": super::FINGERPRINT,
            "choices": choices,
        })
    }

    /// Streams the job as server-sent events, or waits for it and answers in one body.
    async fn respond(self, stream: bool, include_usage: bool) -> ApiResult<Response> {
        if stream {
            Ok(self::stream(self, include_usage))
        } else {
            collect(self).await
        }
    }
}

pub async fn chat(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: ChatRequest = api::parse(&body)?;
    let model = app.models.chat(&req.model)?;
    req.check_unsupported()?;
    let prompt = model.chat_prompt(&req.messages()?)?;
    let settings = req.gen.settings(model.vocab())?;
    let constraints = match req.json_format()? {
        None => Vec::new(),
        Some(schema) => model.json_constraints(schema, settings.n)?,
    };
    let job = submit(
        model,
        Kind::Chat,
        prompt,
        settings,
        req.logprobs()?,
        constraints,
    )?;
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    job.respond(req.stream, usage).await
}

pub async fn completions(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: CompletionRequest = api::parse(&body)?;
    let model = app.models.chat(&req.model)?;
    req.check_unsupported()?;
    let prompt = match req.prompt {
        Prompt::Text(t) => model.pipeline.text_tokens(&t),
        Prompt::Texts(mut v) if v.len() == 1 => model.pipeline.text_tokens(&v.remove(0)),
        Prompt::Tokens(ids) => ids,
        Prompt::TokenLists(mut v) if v.len() == 1 => v.remove(0),
        _ => {
            return Err(ApiError::invalid(
                "prompt",
                "one prompt per request: batches of prompts are not supported (send them \
                 concurrently; they run in one batch)",
            ))
        }
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt is empty"));
    }
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= model.vocab()) {
        return Err(ApiError::invalid(
            "prompt",
            format!("token id {bad} is outside the vocabulary"),
        ));
    }
    let settings = req.gen.settings(model.vocab())?;
    let logprobs = req.logprobs.map(|k| k as usize);
    let job = submit(model, Kind::Text, prompt, settings, logprobs, Vec::new())?;
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    job.respond(req.stream, usage).await
}

fn submit(
    model: &ChatModel,
    kind: Kind,
    prompt: Vec<u32>,
    s: GenSettings,
    logprobs: Option<usize>,
    constraints: Vec<Box<dyn super::scheduler::Constraint>>,
) -> ApiResult<Job> {
    let ctx = model.ctx_size;
    let room = ctx.saturating_sub(prompt.len());
    if room == 0 {
        return Err(ApiError::context(format!(
            "This model's maximum context length is {ctx} tokens. However, your prompt has {} \
             tokens.",
            prompt.len()
        )));
    }
    let max_tokens = match s.max_tokens {
        Some(m) if m > room => {
            return Err(ApiError::context(format!(
                "This model's maximum context length is {ctx} tokens. However, you requested \
                 {} tokens ({} in the prompt, {m} for the completion).",
                prompt.len() + m,
                prompt.len()
            )))
        }
        Some(m) => m,
        None => room,
    };
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let prompt_tokens = prompt.len();
    model.scheduler.submit(GenRequest {
        prompt,
        n: s.n,
        max_tokens,
        sampling: s.sampling,
        stop: s.stop,
        logprobs,
        score: None,
        constraints,
        events: tx,
    })?;
    let prefix = match kind {
        Kind::Chat => "chatcmpl",
        Kind::Text => "cmpl",
    };
    Ok(Job {
        kind,
        id: format!("{prefix}-{:032x}", rand::random::<u128>()),
        model: model.name.clone(),
        created: super::unix_time(),
        n: s.n,
        prompt_tokens,
        logprobs,
        events,
    })
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
struct ChoiceAcc {
    text: String,
    logprobs: Vec<TokenLogprob>,
    finish: Option<FinishReason>,
    tokens: usize,
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

/// Generates a chat reply for `messages` (for tools such as MCP): the text, the finish
/// reason, and the prompt and completion token counts.
#[cfg(feature = "mcp")]
pub async fn chat_text(
    model: &ChatModel,
    messages: &[hanzo_transformers::Message],
    settings: GenSettings,
) -> ApiResult<(String, &'static str, usize, usize)> {
    let prompt = model.chat_prompt(messages)?;
    let mut job = submit(model, Kind::Chat, prompt, settings, None, Vec::new())?;
    let prompt_tokens = job.prompt_tokens;
    let c = gather(&mut job).await?.swap_remove(0);
    let finish = c.finish.map_or("stop", FinishReason::as_str);
    Ok((c.text, finish, prompt_tokens, c.tokens))
}

/// Every choice of a job, once all have finished.
async fn gather(job: &mut Job) -> ApiResult<Vec<ChoiceAcc>> {
    let mut choices: Vec<ChoiceAcc> = (0..job.n).map(|_| ChoiceAcc::default()).collect();
    let mut done = 0;
    while done < job.n {
        match job.events.recv().await {
            Some(Event::Text {
                choice,
                text,
                logprobs,
            }) => {
                choices[choice].text.push_str(&text);
                choices[choice].logprobs.extend(logprobs);
            }
            Some(Event::Finish {
                choice,
                reason,
                tokens,
            }) => {
                choices[choice].finish = Some(reason);
                choices[choice].tokens = tokens;
                done += 1;
            }
            Some(Event::Error(e)) => return Err(ApiError::internal(e)),
            Some(Event::Scores(_)) => {}
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
            let finish = c.finish.map(FinishReason::as_str);
            match job.kind {
                Kind::Chat => json!({
                    "index": i,
                    "message": {"role": "assistant", "content": c.text, "refusal": null},
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
    Ok(Json(body).into_response())
}

/// The state a streamed answer carries from one event to the next.
struct Streaming {
    job: Job,
    include_usage: bool,
    /// Chunks ready to go out, in order.
    ready: std::collections::VecDeque<String>,
    done: usize,
    completion_tokens: usize,
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

    fn choice(
        &self,
        index: usize,
        text: Option<&str>,
        lps: &[TokenLogprob],
        finish: Option<FinishReason>,
    ) -> Value {
        let logprobs = match (self.job.logprobs, lps.is_empty()) {
            (Some(_), false) => match self.job.kind {
                Kind::Chat => chat_logprobs(lps),
                Kind::Text => text_logprobs(lps, self.sent[index]),
            },
            _ => Value::Null,
        };
        let finish = finish.map(FinishReason::as_str);
        match self.job.kind {
            Kind::Chat => {
                let delta = match text {
                    Some(t) => json!({"content": t}),
                    None => json!({}),
                };
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            Kind::Text => json!({
                "index": index,
                "text": text.unwrap_or(""),
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
        }
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
                self.ready.push_back(c.to_string());
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
            }) => {
                let c = self.choice(choice, Some(&text), &logprobs, None);
                self.sent[choice] += text.len();
                let chunk = self.chunk(json!([c]));
                self.ready.push_back(chunk);
            }
            Some(Event::Finish {
                choice,
                reason,
                tokens,
            }) => {
                self.done += 1;
                self.completion_tokens += tokens;
                let c = self.choice(choice, None, &[], Some(reason));
                let chunk = self.chunk(json!([c]));
                self.ready.push_back(chunk);
            }
            Some(Event::Scores(_)) => {}
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
    let n = job.n;
    let mut s = Streaming {
        job,
        include_usage,
        ready: Default::default(),
        done: 0,
        completion_tokens: 0,
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

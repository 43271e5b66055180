//! `POST /v1/chat/completions` and `POST /v1/completions` on the device: the request is
//! checked as the engine checks it (`hanzo_api::request`), the conversation continues on a
//! blocking thread, and its pieces come back through `hanzo_api::response`.

use super::{AppState, FINGERPRINT};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use hanzo_api::error::{ApiError, ApiResult};
use hanzo_api::events::{Event as ApiEvent, FinishReason};
use hanzo_api::request::{self, ChatRequest, CompletionRequest, GenSettings, Prompt};
use hanzo_api::response::{Job, Kind};
use hanzo_edge::{Edge, EdgeError, Event, Summary, TokenStream};
use hanzo_transformers::{Finish, GenerateOptions, Message};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// What to generate from.
enum Input {
    Chat {
        messages: Vec<Message>,
        tools: Vec<Value>,
        /// The request named the cloud's model.
        to_cloud: bool,
        /// The request chose its seed (a sampled answer is cached only then).
        seeded: bool,
    },
    Text(String),
    Tokens(Vec<u32>),
}

pub async fn chat(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: ChatRequest = request::parse(&body)?;
    let to_cloud = app.cloud_model.as_deref() == Some(req.model.as_str());
    if !to_cloud {
        check_model(&app, &req.model)?;
    }
    if req.json_format()?.is_some() {
        return Err(ApiError::invalid(
            "response_format",
            "hanzo-edge has no grammar engine: json_object and json_schema are served by hanzo-engine",
        ));
    }
    if req.logprobs()?.is_some() {
        return Err(ApiError::invalid(
            "logprobs",
            "hanzo-edge does not report log-probabilities",
        ));
    }
    let tools = req.tool_plan()?;
    let input = Input::Chat {
        messages: req.messages()?,
        tools: tools.as_ref().map(|t| t.tools.clone()).unwrap_or_default(),
        to_cloud,
        seeded: req.gen.seed.is_some(),
    };
    let settings = req.gen.settings(vocab(&app))?;
    let mut job = start(&app, Kind::Chat, input, settings).await?;
    job.tools = tools.map(|t| if t.parallel { usize::MAX } else { 1 });
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    job.respond(req.stream, usage).await
}

pub async fn completions(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: CompletionRequest = request::parse(&body)?;
    if app.cloud_model.as_deref() == Some(req.model.as_str()) {
        return Err(ApiError::invalid(
            "model",
            format!(
                "{} is the cloud fallback's model, asked through /v1/chat/completions only",
                req.model
            ),
        ));
    }
    check_model(&app, &req.model)?;
    req.check_unsupported()?;
    if req.logprobs.is_some() {
        return Err(ApiError::invalid(
            "logprobs",
            "hanzo-edge does not report log-probabilities",
        ));
    }
    let input = match req.prompt {
        Prompt::Text(t) => Input::Text(t),
        Prompt::Texts(mut v) if v.len() == 1 => Input::Text(v.remove(0)),
        Prompt::Tokens(ids) => Input::Tokens(ids),
        Prompt::TokenLists(mut v) if v.len() == 1 => Input::Tokens(v.remove(0)),
        _ => {
            return Err(ApiError::invalid(
                "prompt",
                "one prompt per request: hanzo-edge runs one conversation at a time",
            ))
        }
    };
    if let Input::Tokens(ids) = &input {
        let v = vocab(&app);
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= v) {
            return Err(ApiError::invalid(
                "prompt",
                format!("token id {bad} is outside the vocabulary"),
            ));
        }
    }
    let settings = req.gen.settings(vocab(&app))?;
    let job = start(&app, Kind::Text, input, settings).await?;
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    job.respond(req.stream, usage).await
}

pub(super) fn check_model(app: &AppState, model: &str) -> ApiResult<()> {
    if model != app.name {
        let mut known = vec![app.name.clone()];
        known.extend(app.cloud_model.clone());
        return Err(ApiError::model_not_found(model, &known));
    }
    Ok(())
}

fn vocab(app: &AppState) -> usize {
    app.vocab
}

/// Waits for the slot, then starts the generation on a blocking thread; answers once the
/// prompt has been read (an error before then is the response's status).
async fn start(app: &Arc<AppState>, kind: Kind, input: Input, s: GenSettings) -> ApiResult<Job> {
    if s.n != 1 {
        return Err(ApiError::invalid(
            "n",
            "hanzo-edge generates one choice per request",
        ));
    }
    let permit = app.slot().await?;
    let max_context = app.max_context;
    let opts = GenerateOptions {
        // Without a limit, the reply may run for as long as a context holds.
        max_tokens: s.max_tokens.unwrap_or(max_context),
        sampling: s.sampling,
        stop: s.stop,
        ..GenerateOptions::default()
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let state = app.clone();
    let work: super::Work = Box::new(move |edge: &mut Edge| {
        let stream = match begin(edge, input, &opts) {
            Ok(s) => s,
            Err(e) => {
                let _ = started_tx.send(Err(api_error(e)));
                return;
            }
        };
        let _ = started_tx.send(Ok(stream.prompt_tokens()));
        // Before the client hears the end: its next request finds the slot free (the
        // worker thread still runs one request at a time) and the metrics counted.
        pump(stream, &tx, |summary| {
            state.metrics.finished(summary);
            drop(permit);
        });
        state.metrics.threads(edge.threads());
    });
    app.submit(work)?;
    let prompt_tokens = started
        .await
        .map_err(|_| ApiError::internal("the generation thread ended"))??;
    Ok(Job::new(
        kind,
        &app.name,
        FINGERPRINT,
        1,
        prompt_tokens,
        None,
        rx,
    ))
}

fn begin<'a>(
    edge: &'a mut Edge,
    input: Input,
    opts: &GenerateOptions,
) -> Result<TokenStream<'a>, EdgeError> {
    match input {
        Input::Chat {
            messages,
            tools,
            to_cloud,
            seeded,
        } => edge.chat_routed(&messages, &tools, opts, seeded, to_cloud),
        Input::Text(t) => edge.complete(&t, opts),
        Input::Tokens(ids) => {
            let keep = edge.config().keep_tokens;
            edge.complete_tokens(ids, keep, opts)
        }
    }
}

/// Sends the stream's pieces to the response until it ends or the client has gone (then the
/// stream is dropped, which ends the generation); a finished reply's summary goes to
/// `finished` just before the response's last event.
fn pump(stream: TokenStream, tx: &UnboundedSender<ApiEvent>, finished: impl FnOnce(&Summary)) {
    for event in stream {
        let sent = match event {
            Ok(Event::Text(text)) => tx.send(ApiEvent::Text {
                choice: 0,
                text,
                logprobs: Vec::new(),
            }),
            Ok(Event::Done(s)) => {
                finished(&s);
                let _ = tx.send(ApiEvent::Extra(extra(&s)));
                let flagged = s.guard.as_ref().is_some_and(|g| g.flagged.is_some());
                let reason = match s.finish {
                    _ if flagged => FinishReason::ContentFilter,
                    Finish::Length => FinishReason::Length,
                    _ => FinishReason::Stop,
                };
                let _ = tx.send(ApiEvent::Finish {
                    choice: 0,
                    reason,
                    tokens: s.completion_tokens,
                });
                return;
            }
            Err(e) => {
                let _ = tx.send(ApiEvent::Error(e.to_string()));
                return;
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The reply's figures beyond OpenAI's, under `hanzo_edge` in the answer and in the stream's
/// finishing chunk.
fn extra(s: &Summary) -> Value {
    json!({"hanzo_edge": {
        "source": s.source.as_str(),
        "fallback_reason": s.fallback_reason,
        "cloud_error": s.cloud_error,
        "cached": s.cached,
        "evicted_tokens": s.evicted_tokens,
        "evictions": s.evictions,
        "kept_tokens": s.kept_tokens,
        "context_tokens": s.context_tokens,
        "max_context_tokens": s.max_context_tokens,
        "computed_prompt_tokens": s.computed_prompt_tokens,
        "time_to_first_token_s": s.time_to_first_token_s,
        "tokens_per_second": s.tokens_per_second,
        "drafted_tokens": s.drafted_tokens,
        "accepted_tokens": s.accepted_tokens,
        "guard": s.guard.as_ref().map(guard_json),
    }})
}

/// What the safety guard found and cost, for the answer.
fn guard_json(g: &hanzo_edge::guard::GuardReport) -> Value {
    json!({
        "flagged": g.flagged.as_ref().map(|(c, _)| c),
        "stage": g.flagged.as_ref().map(|(_, s)| s.as_str()),
        "max_score": g.max_score,
        "tokens": g.tokens,
        "seconds": g.seconds,
        "tokens_per_second": g.tokens_per_second(),
        "first_token_seconds": g.first_token_seconds,
    })
}

fn api_error(e: EdgeError) -> ApiError {
    match e {
        EdgeError::ContextFull(m) => ApiError::context(m),
        EdgeError::Request(m) => ApiError::invalid("messages", m),
        EdgeError::Model(hanzo_transformers::Error::Invalid(m)) => ApiError::invalid("messages", m),
        EdgeError::Model(hanzo_transformers::Error::ContextFull { needed, limit }) => {
            ApiError::context(format!(
                "This model's maximum context length is {limit} tokens. However, your messages need {needed}."
            ))
        }
        other => ApiError::internal(other.to_string()),
    }
}

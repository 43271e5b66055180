//! `POST /v1/chat/completions` and `POST /v1/completions`: a prompt goes to the model's
//! scheduler, and its events come back as one JSON response or as server-sent events
//! (`hanzo_api::response`).

use super::api::{self, ChatRequest, CompletionRequest, GenSettings, Prompt};
use super::error::{ApiError, ApiResult};
#[cfg(feature = "mcp")]
use super::models::ChatModel;
use super::models::Served;
use super::scheduler::GenRequest;
use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use hanzo_api::response::{Job, Kind};
use std::sync::Arc;

pub async fn chat(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: ChatRequest = api::parse(&body)?;
    let served = app.models.chat_as(&req.model)?;
    let model = served.model;
    let tools = req.tool_plan()?;
    let prompt = model.chat_prompt(&req.messages()?, tools.as_ref())?;
    let settings = req.gen.settings(model.vocab())?;
    let constraints = match (&tools, req.json_format()?) {
        (Some(plan), _) => model.tool_constraints(plan, settings.n)?,
        (None, None) => Vec::new(),
        (None, Some(schema)) => model.json_constraints(schema, settings.n)?,
    };
    let mut job = submit(
        served,
        Kind::Chat,
        prompt,
        settings,
        req.logprobs()?,
        constraints,
    )?;
    job.tools = tools.map(|t| if t.parallel { usize::MAX } else { 1 });
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    job.respond(req.stream, usage).await
}

pub async fn completions(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: CompletionRequest = api::parse(&body)?;
    let served = app.models.chat_as(&req.model)?;
    let model = served.model;
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
    let job = submit(served, Kind::Text, prompt, settings, logprobs, Vec::new())?;
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    job.respond(req.stream, usage).await
}

fn submit(
    served: Served,
    kind: Kind,
    prompt: Vec<u32>,
    s: GenSettings,
    logprobs: Option<usize>,
    constraints: Vec<Box<dyn super::scheduler::Constraint>>,
) -> ApiResult<Job> {
    let model = served.model;
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
        lora: served.lora,
        events: tx,
    })?;
    Ok(Job::new(
        kind,
        served.name,
        super::FINGERPRINT,
        s.n,
        prompt_tokens,
        logprobs,
        events,
    ))
}

/// Generates a chat reply for `messages` (for tools such as MCP): the text, the finish
/// reason, and the prompt and completion token counts.
#[cfg(feature = "mcp")]
pub async fn chat_text(
    model: &ChatModel,
    messages: &[hanzo_transformers::Message],
    settings: GenSettings,
) -> ApiResult<(String, &'static str, usize, usize)> {
    let prompt = model.chat_prompt(messages, None)?;
    let mut job = submit(
        Served::base(model),
        Kind::Chat,
        prompt,
        settings,
        None,
        Vec::new(),
    )?;
    let prompt_tokens = job.prompt_tokens;
    let c = hanzo_api::response::gather(&mut job).await?.swap_remove(0);
    let finish = c
        .finish
        .map_or("stop", hanzo_api::events::FinishReason::as_str);
    Ok((c.text, finish, prompt_tokens, c.tokens))
}

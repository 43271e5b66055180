//! `hanzo-engine serve`: the OpenAI-compatible HTTP server.
//!
//! Each language model gets a scheduler thread (continuous batching over its paged KV
//! cache, `scheduler.rs`); the HTTP side (axum on a small tokio runtime) parses requests,
//! submits them and turns the scheduler's events into JSON or server-sent events. Model
//! compute runs on the rayon pool (`-t`), never on the async runtime.

mod completions;
mod embeddings;
#[cfg(feature = "structured-output")]
mod grammar;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(feature = "mcp")]
pub use mcp::{run_mcp, McpArgs};
mod metrics;
mod models;
mod rerank;
mod scheduler;

// The OpenAI API's types, errors and response assembly, shared with hanzo-edge.
use hanzo_api::request as api;
use hanzo_api::{error, tools};

use anyhow::{bail, Context, Result};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args as ClapArgs;
use error::ApiError;
use metrics::Metrics;
use models::{LoraSpec, Models, Sizing};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

pub use hanzo_api::response::unix_time;

/// Reported as `system_fingerprint`: the build that answered.
pub const FINGERPRINT: &str = concat!("hanzo-engine-", env!("CARGO_PKG_VERSION"));

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub set: ModelSet,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (the log says which).
    #[arg(long, default_value_t = 36900)]
    pub port: u16,
    #[command(flatten)]
    pub mcp: McpPort,
    /// Require `Authorization: Bearer KEY` on /v1, /metrics and /mcp (default:
    /// $HANZO_API_KEY).
    #[arg(long)]
    pub api_key: Option<String>,
}

/// The MCP endpoint of `serve`: off unless asked for, so `serve` alone opens one port.
#[derive(ClapArgs, Debug)]
pub struct McpPort {
    /// Also serve MCP (streamable HTTP at /mcp on --host) on this port; 0 picks a free one.
    #[arg(long, value_name = "PORT")]
    pub mcp_port: Option<u16>,
    /// Also serve MCP on its default port, 3691 (what `--mcp-port 3691` does).
    #[arg(long)]
    pub mcp_enabled: bool,
}

/// The port MCP clients expect a local server on.
pub const DEFAULT_MCP_PORT: u16 = 3691;

impl McpPort {
    /// The port to serve MCP on, if any; an error in a build without MCP.
    fn port(&self) -> Result<Option<u16>> {
        let port = self
            .mcp_port
            .or(self.mcp_enabled.then_some(DEFAULT_MCP_PORT));
        if port.is_some() && !cfg!(feature = "mcp") {
            bail!(
                "this build leaves out MCP (--no-default-features); build hanzo-engine with its \
                 default features or `--features mcp` for --mcp-port / --mcp-enabled"
            );
        }
        Ok(port)
    }
}

/// The models to load and how to size them (serve and mcp).
#[derive(ClapArgs, Debug)]
pub struct ModelSet {
    /// A model to serve: a store name (see `list`), a GGUF file or a model directory,
    /// optionally named `NAME=PATH` (default name: the store name, or the file name without
    /// its extension). Repeat for several models; BERT-family directories serve
    /// /v1/embeddings.
    #[arg(short, long = "model", required = true, value_name = "[NAME=]PATH")]
    pub models: Vec<String>,
    /// Sequences one model runs together at most.
    #[arg(long, default_value_t = 16)]
    pub max_seqs: usize,
    /// Requests that may wait for a place before new ones get 429.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// KV cache per language model, in bytes (suffixes K, M, G: powers of 1024).
    #[arg(long, default_value = "512M", value_parser = parse_bytes)]
    pub kv_budget: usize,
    /// Positions one sequence may hold (default: the model's context length).
    #[arg(long)]
    pub ctx_size: Option<usize>,
    /// Quantize float weights to this type while loading, e.g. q8_0.
    #[arg(long, value_name = "TYPE")]
    pub isq: Option<String>,
    /// Speculative decoding by prompt lookup for every sequence (without a grammar): each
    /// decode step also checks what followed the last earlier match of the newest N tokens
    /// (N down to 1). Greedy output is unchanged; it pays where replies repeat their input.
    #[arg(long, value_name = "N")]
    pub lookup: Option<usize>,
    /// Speculative decoding with a draft model for every sequence (without a grammar): a
    /// smaller model with the language model's vocabulary proposes tokens, one decode step
    /// each (its steps batched over the sequences), which the model checks in its next
    /// pass. `MODEL=FILE` gives it to language model MODEL (default: the first).
    #[arg(long, value_name = "[MODEL=]FILE", conflicts_with = "lookup")]
    pub draft_model: Option<String>,
    /// Tokens drafted at most per step (with --lookup or --draft-model), shared by the
    /// sequences decoding in that step.
    #[arg(long, default_value_t = 8)]
    pub draft_k: usize,
    /// A LoRA adapter (GGUF or PEFT directory) loaded once and chosen per request with
    /// `"model": "MODEL+NAME"`: for language model MODEL (default: the first), named NAME
    /// (default: its file or directory name), its update times SCALE. Repeat for several;
    /// requests with different adapters run in one batch.
    #[arg(long, value_name = "[MODEL+][NAME=]FILE[:SCALE]")]
    pub lora: Vec<String>,
}

/// `512M`, `2G`, `65536` (`hanzo_api::sizes`).
fn parse_bytes(s: &str) -> Result<usize, String> {
    hanzo_api::sizes::parse_bytes(s).map(|b| b as usize)
}

pub struct AppState {
    models: Models,
    metrics: Arc<Metrics>,
    api_key: Option<String>,
}

impl ModelSet {
    fn load(&self, api_key: Option<String>) -> Result<Arc<AppState>> {
        if self.max_seqs == 0 {
            bail!("--max-seqs must be at least 1");
        }
        let mode = crate::commands::weight_mode(self.isq.as_deref(), false)?;
        let metrics = Arc::new(Metrics::new().context("cannot set up metrics")?);
        let sizing = Sizing {
            mode,
            kv_budget: self.kv_budget,
            ctx_size: self.ctx_size,
            max_seqs: self.max_seqs,
            max_queue: self.max_queue,
            lookup: match (self.lookup, self.draft_k) {
                (Some(0), _) => bail!("--lookup: an n-gram of at least 1 token"),
                (Some(_), 0) => bail!("--draft-k: at least 1 token"),
                (Some(n), k) => Some(hanzo_transformers::PromptLookup::new(n, k)),
                (None, _) => None,
            },
            draft_k: self.draft_k,
        };
        if self.draft_model.is_some() && self.draft_k == 0 {
            bail!("--draft-k: at least 1 token");
        }
        let draft = self
            .draft_model
            .as_deref()
            .map(|s| match s.split_once('=') {
                Some((model, file)) if !model.is_empty() && !model.contains('/') => {
                    (Some(model.to_string()), PathBuf::from(file))
                }
                _ => (None, PathBuf::from(s)),
            });
        let loras: Vec<LoraSpec> = self.lora.iter().map(|s| LoraSpec::parse(s)).collect();
        let mut models = Models::default();
        for spec in &self.models {
            models.load(spec, sizing, &metrics, &loras, draft.as_ref())?;
        }
        if let Some((Some(target), _)) = &draft {
            if !models.chat.iter().any(|m| m.name == *target) {
                bail!("--draft-model: no language model named {target}");
            }
        }
        for l in &loras {
            let target = l.model.as_deref();
            let found = models
                .chat
                .iter()
                .any(|m| target.is_none_or(|t| t == m.name));
            if !found {
                bail!(
                    "--lora {}: no language model named {}",
                    l.file,
                    target.unwrap_or("(none is served)")
                );
            }
        }
        Ok(Arc::new(AppState {
            models,
            metrics,
            api_key,
        }))
    }
}

/// Two workers are plenty for parsing and streaming; compute is on the rayon pool.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http")
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn run(a: Args) -> Result<()> {
    let api_key = a
        .api_key
        .clone()
        .or_else(|| std::env::var("HANZO_API_KEY").ok())
        .filter(|k| !k.is_empty());
    let mcp_port = a.mcp.port()?;
    let state = a.set.load(api_key)?;
    runtime()?.block_on(serve(state, &a.host, a.port, mcp_port))
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(completions::chat))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(one_model))
        .route("/metrics", get(render_metrics))
        .route("/health", get(health))
        .fallback(|req: Request| async move { ApiError::not_found(req.uri().path()) })
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

async fn serve(state: Arc<AppState>, host: &str, port: u16, mcp_port: Option<u16>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .with_context(|| format!("cannot listen on {host}:{port}"))?;
    // The MCP endpoint runs until the process ends (its sessions hold streams open).
    let mcp_task: Option<tokio::task::JoinHandle<std::io::Result<()>>> = match mcp_port {
        #[cfg(feature = "mcp")]
        Some(p) => Some(mcp::spawn_http(state.clone(), host, p).await?),
        _ => None,
    };
    let addr = listener.local_addr()?;
    tracing::info!(
        "listening on http://{addr} (models: {})",
        state.models.names().join(", ")
    );
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down");
        })
        .await
        .context("server failed")?;
    if let Some(t) = mcp_task {
        t.abort();
    }
    Ok(())
}

/// `Authorization: Bearer KEY` on everything but /health, when a key is set.
pub(crate) async fn authorize(
    State(app): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(key) = &app.api_key else {
        return next.run(req).await;
    };
    if req.uri().path() == "/health" {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(k) if constant_time_eq(k.trim().as_bytes(), key.as_bytes()) => next.run(req).await,
        Some(_) => ApiError::unauthorized("Incorrect API key provided.").into_response(),
        None => ApiError::unauthorized("Missing API key: send it as `Authorization: Bearer KEY`.")
            .into_response(),
    }
}

/// Compares keys without leaking where they first differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Counts requests by route and status.
async fn count(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", |p| p.as_str())
        .to_string();
    let resp = next.run(req).await;
    app.metrics.http(&endpoint, resp.status().as_u16());
    resp
}

fn model_entry(id: &str, created: u64) -> serde_json::Value {
    json!({"id": id, "object": "model", "created": created, "owned_by": "hanzo"})
}

async fn list_models(State(app): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let m = &app.models;
    let data: Vec<_> = m
        .chat
        .iter()
        .flat_map(|c| {
            std::iter::once(model_entry(&c.name, c.created)).chain(
                c.adapters
                    .iter()
                    .map(|(a, _)| model_entry(&format!("{}+{a}", c.name), c.created)),
            )
        })
        .chain(m.embed.iter().map(|e| model_entry(&e.name, e.created)))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn one_model(
    State(app): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let m = &app.models;
    let created = m
        .chat_as(&id)
        .ok()
        .map(|s| s.model.created)
        .or_else(|| m.embed.iter().find(|e| e.name == id).map(|e| e.created));
    match created {
        Some(c) => Json(model_entry(&id, c)).into_response(),
        None => ApiError::model_not_found(&id, &m.names()).into_response(),
    }
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn render_metrics(State(app): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secrets"));
    }
}

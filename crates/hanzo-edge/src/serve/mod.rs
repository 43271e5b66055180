//! `hanzo-edge serve`: the local OpenAI-compatible API, on this device only.
//!
//! One conversation runs at a time: a request waits in a bounded queue while another is
//! generating (`--max-queue`; past it, 429), and is never interleaved into the same KV
//! cache. Generation runs on a blocking thread that sends its pieces to the response through
//! `hanzo_api::response` (the engine's JSON and SSE assembly); a client that goes away ends
//! its generation at the next token and frees the slot.

mod chat;
mod embeddings;
mod metrics;

use crate::cli::ModelArgs;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use hanzo_api::error::ApiError;
use hanzo_edge::{Budget, Edge};
use metrics::Metrics;
use serde_json::json;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Reported as `system_fingerprint`.
pub const FINGERPRINT: &str = concat!("hanzo-edge-", env!("CARGO_PKG_VERSION"));

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Loopback only: 127.0.0.1, ::1 or localhost.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8090)]
    port: u16,
    /// The name clients use for the model (default: the file's name without `.gguf`).
    #[arg(long)]
    name: Option<String>,
    /// Requests that may wait while one is generating; more are answered 429.
    #[arg(long, default_value_t = 4)]
    max_queue: usize,
}

/// The address to bind: loopback only, anything else is refused.
pub fn loopback(host: &str) -> Result<IpAddr, String> {
    let ip = match host.trim_matches(|c| c == '[' || c == ']') {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h
            .parse::<IpAddr>()
            .map_err(|_| format!("--host {host:?} is not an IP address or localhost"))?,
    };
    if !ip.is_loopback() {
        return Err(format!(
            "hanzo-edge serves this device only: --host must be 127.0.0.1, ::1 or localhost, not {host} \
             (put hanzo-engine serve behind a network)"
        ));
    }
    Ok(ip)
}

/// Work for the generation thread, which owns the [`Edge`].
pub type Work = Box<dyn FnOnce(&mut Edge) + Send>;

pub struct AppState {
    /// To the one thread that generates: the process's main thread. Not tokio's blocking
    /// pool, nor a thread of its own: glibc's allocator gives other threads heaps of their
    /// own, and there the first decode step's repacking peaked 27 MiB higher than in the
    /// main heap (SmolLM2, measured), past the budget.
    pub worker: Mutex<std::sync::mpsc::Sender<Work>>,
    pub name: String,
    /// The cloud fallback's model (`--cloud-model`): asking for it by name sends the request
    /// there.
    pub cloud_model: Option<String>,
    pub vocab: usize,
    /// Dimensions of the model's embeddings (its hidden size).
    pub width: usize,
    pub metrics: Metrics,
    /// Copies of the figures `/health` reports, so that it answers during a generation.
    budget: Budget,
    limit: u64,
    max_context: usize,
    kv_dtype: hanzo_ml::kv::KvDtype,
    pub context_used: AtomicUsize,
    slot: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_queue: usize,
}

/// A place in the queue, given back when dropped (a client that leaves while waiting).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AppState {
    /// Hands `work` to the generation thread; the context in use is noted after it.
    pub fn submit(self: &Arc<Self>, work: Work) -> Result<(), ApiError> {
        let state = self.clone();
        let work: Work = Box::new(move |edge: &mut Edge| {
            work(edge);
            state
                .context_used
                .store(edge.context_used(), Ordering::SeqCst);
        });
        match self.worker.lock().is_ok_and(|w| w.send(work).is_ok()) {
            true => Ok(()),
            false => Err(ApiError::unavailable("the generation thread has stopped")),
        }
    }

    /// The right to generate: now, after the requests ahead in the queue, or 429.
    pub async fn slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(p) = self.slot.clone().try_acquire_owned() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::busy());
        }
        let _place = Waiting(&self.waiting);
        self.slot
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::unavailable("the server is shutting down"))
    }
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let ip = loopback(&a.host).map_err(anyhow::Error::msg)?;
    let metrics = Metrics::new()?;
    let mut edge = Edge::new(a.model.config()?)?;
    metrics.loaded(edge.load_seconds());
    metrics.threads(edge.threads());
    let name = a.name.clone().unwrap_or_else(|| a.model.display_name());
    let (worker, work) = std::sync::mpsc::channel::<Work>();
    let state = Arc::new(AppState {
        budget: edge.budget().clone(),
        limit: edge.config().max_memory_bytes,
        max_context: edge.config().max_context_tokens,
        kv_dtype: edge.config().kv_dtype,
        context_used: AtomicUsize::new(0),
        vocab: edge.pipeline().model.info().vocab_size,
        width: edge.pipeline().model.info().hidden_size,
        worker: Mutex::new(worker),
        cloud_model: edge.config().cloud.as_ref().map(|c| c.model.clone()),
        name,
        metrics,
        slot: Arc::new(Semaphore::new(1)),
        waiting: AtomicUsize::new(0),
        max_queue: a.max_queue,
    });
    let listener = std::net::TcpListener::bind((ip, a.port))?;
    listener.set_nonblocking(true)?;
    eprintln!(
        "hanzo-edge serving {} on http://{} (OpenAI API under /v1)",
        state.name,
        listener.local_addr()?
    );
    // HTTP on a thread of its own; generation here, one request at a time, until the
    // server stops and its state (holding the last sender) goes.
    let http = std::thread::Builder::new()
        .name("hanzo-edge-http".into())
        .spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                axum::serve(listener, router(state))
                    .with_graceful_shutdown(async {
                        let _ = tokio::signal::ctrl_c().await;
                    })
                    .await?;
                Ok(())
            })
        })?;
    for job in work {
        job(&mut edge);
    }
    http.join()
        .map_err(|_| anyhow::anyhow!("the HTTP thread panicked"))?
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat))
        .route("/v1/completions", post(chat::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::not_found("this path") })
        .with_state(state)
}

async fn models(State(app): State<Arc<AppState>>) -> Response {
    let model = |id: &str, owner: &str| {
        json!({
            "id": id,
            "object": "model",
            "created": hanzo_api::response::unix_time(),
            "owned_by": owner,
        })
    };
    let mut data = vec![model(&app.name, "hanzo-edge")];
    if let Some(cloud) = &app.cloud_model {
        data.push(model(cloud, "cloud"));
    }
    Json(json!({"object": "list", "data": data})).into_response()
}

/// The model, its budget, the memory in use now and the context in use (as of the last
/// finished request); answers during a generation too.
async fn health(State(app): State<Arc<AppState>>) -> Response {
    let memory = hanzo_ml::memory::process_memory();
    let b = &app.budget.breakdown;
    Json(json!({
        "status": "ok",
        "model": app.name,
        "busy": app.slot.available_permits() == 0,
        "waiting": app.waiting.load(Ordering::SeqCst),
        "memory": {
            "used_bytes": memory.map(|m| m.resident),
            "peak_bytes": memory.map(|m| m.peak),
            "budget_bytes": app.budget.total(),
            "limit_bytes": app.limit,
            "budget": {
                "weights": b.weights,
                "kv_cache": b.kv_cache,
                "activations": b.activations,
                "tokenizer": b.tokenizer,
                "runtime": b.runtime,
            },
        },
        "context": {
            "used_tokens": app.context_used.load(Ordering::SeqCst),
            "max_tokens": app.max_context,
            "kv_dtype": app.kv_dtype.name(),
        },
    }))
    .into_response()
}

async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

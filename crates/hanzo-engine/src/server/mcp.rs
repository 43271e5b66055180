//! The Model Context Protocol face of the server (the official `rmcp` crate): the tools
//! `hanzo_infer`, `hanzo_embed` and `hanzo_list_models` over the same models and schedulers
//! as the HTTP API, served on stdio (`hanzo-engine mcp`) or as streamable HTTP at `/mcp` on
//! `--mcp-port`.

use super::api::GenFields;
use super::error::ApiError;
use super::{AppState, ModelSet};
use anyhow::{Context, Result};
use axum::{middleware, Router};
use clap::Args as ClapArgs;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde_json::json;
use std::sync::Arc;

/// `hanzo-engine mcp`: the same models, as MCP tools over stdio.
#[derive(ClapArgs, Debug)]
pub struct McpArgs {
    #[command(flatten)]
    pub set: ModelSet,
}

/// `hanzo-engine mcp`: MCP over stdin/stdout (logs stay on stderr).
pub fn run_mcp(a: McpArgs) -> Result<()> {
    let state = a.set.load(None)?;
    super::runtime()?.block_on(async move {
        use rmcp::ServiceExt;
        let service = HanzoTools::new(state)
            .serve(rmcp::transport::stdio())
            .await
            .context("MCP handshake on stdio failed")?;
        service.waiting().await.context("MCP session failed")?;
        Ok(())
    })
}

/// Starts the streamable-HTTP endpoint at `/mcp` on `host:port`, behind the same API key.
/// Bound to a loopback address it answers only loopback `Host` names (rmcp's guard against
/// DNS rebinding); bound elsewhere it takes any, as the OpenAI API on `--host` does.
pub async fn spawn_http(
    state: Arc<AppState>,
    host: &str,
    port: u16,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    use rmcp::transport::streamable_http_server::{
        session::never::NeverSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    };
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .with_context(|| format!("cannot listen on {host}:{port} for MCP (--mcp-port)"))?;
    tracing::info!("MCP on http://{}/mcp", listener.local_addr()?);
    let tools_state = state.clone();
    // Stateless: every POST is answered on its own, as a JSON body. The tools need no
    // session (nothing is pushed to the client between calls), and leaving rmcp's session
    // worker out takes 281 KB off the binary.
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    if !listener.local_addr()?.ip().is_loopback() {
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(HanzoTools::new(tools_state.clone())),
        NeverSessionManager::default().into(),
        config,
    );
    let app = Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            super::authorize,
        ))
        .with_state(state);
    Ok(tokio::spawn(
        async move { axum::serve(listener, app).await },
    ))
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct InferArgs {
    /// The user's message.
    pub prompt: String,
    /// Which language model answers (default: the first one the server loaded).
    pub model: Option<String>,
    /// A system message to put before the prompt.
    pub system: Option<String>,
    /// The most tokens to generate (default 512).
    pub max_tokens: Option<u64>,
    /// Sampling temperature, 0 to 2 (default 0: greedy, reproducible).
    pub temperature: Option<f32>,
    /// Seed for sampling at a temperature above 0.
    pub seed: Option<i64>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EmbedArgs {
    /// The texts to embed.
    pub input: Vec<String>,
    /// Which model (default: the first embedding model the server loaded). A language model
    /// embeds by last-token pooling.
    pub model: Option<String>,
}

/// The tools; `#[tool_handler]` routes calls through `Self::tool_router()`.
#[derive(Clone)]
pub struct HanzoTools {
    app: Arc<AppState>,
}

/// A failed call is a tool result with `isError` set, carrying the API's message, so the
/// calling model can read what went wrong.
fn failed(e: ApiError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.message)])
}

fn first<'a>(names: impl Iterator<Item = &'a String>, what: &str) -> Result<String, ApiError> {
    names.into_iter().next().cloned().ok_or_else(|| {
        ApiError::invalid("model", format!("this server has no {what} model loaded"))
    })
}

#[tool_router]
impl HanzoTools {
    pub fn new(app: Arc<AppState>) -> Self {
        Self { app }
    }

    #[tool(
        description = "Generate a reply with a local language model: the prompt is the user's \
                       message (the model's chat template is applied). Returns the reply text."
    )]
    async fn hanzo_infer(
        &self,
        Parameters(a): Parameters<InferArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self.infer(a).await.unwrap_or_else(failed))
    }

    #[tool(
        description = "Embed texts with a local embedding model. Returns a JSON object with one \
                       vector per input (L2-normalised where the model is)."
    )]
    async fn hanzo_embed(
        &self,
        Parameters(a): Parameters<EmbedArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self.embed(a).await.unwrap_or_else(failed))
    }

    #[tool(description = "List the models this server holds, with their kind and context size.")]
    async fn hanzo_list_models(&self) -> Result<CallToolResult, ErrorData> {
        let m = &self.app.models;
        let models: Vec<_> = m
            .chat
            .iter()
            .map(|c| json!({"id": c.name, "kind": "chat", "context": c.ctx_size}))
            .chain(m.embed.iter().map(|e| {
                json!({
                    "id": e.name,
                    "kind": "embedding",
                    "dimensions": e.embedder.model.config.hidden_size,
                })
            }))
            .collect();
        Ok(CallToolResult::success(vec![ContentBlock::text(
            json!({ "models": models }).to_string(),
        )]))
    }
}

impl HanzoTools {
    async fn infer(&self, a: InferArgs) -> Result<CallToolResult, ApiError> {
        let m = &self.app.models;
        let name = match a.model {
            Some(n) => n,
            None => first(m.chat.iter().map(|c| &c.name), "language")?,
        };
        let model = m.chat(&name)?;
        let mut messages = Vec::new();
        if let Some(s) = &a.system {
            messages.push(hanzo_transformers::Message::new("system", s));
        }
        messages.push(hanzo_transformers::Message::new("user", &a.prompt));
        let fields = GenFields {
            max_tokens: Some(a.max_tokens.unwrap_or(512)),
            temperature: Some(a.temperature.unwrap_or(0.0)),
            seed: a.seed,
            ..GenFields::default()
        };
        let settings = fields.settings(model.vocab())?;
        let (text, finish, prompt, completion) =
            super::completions::chat_text(model, &messages, settings).await?;
        tracing::debug!("mcp hanzo_infer: {prompt} + {completion} tokens, finish {finish}");
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    async fn embed(&self, a: EmbedArgs) -> Result<CallToolResult, ApiError> {
        let m = &self.app.models;
        let name = match a.model {
            Some(n) => n,
            None => first(m.embed.iter().map(|e| &e.name), "embedding")?,
        };
        let model = m.embedder(&name)?;
        if a.input.is_empty() {
            return Err(ApiError::invalid("input", "`input` holds no text"));
        }
        let out = super::embeddings::embed(model, a.input).await?;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            json!({"model": name, "embeddings": out.vectors}).to_string(),
        )]))
    }
}

#[tool_handler]
impl ServerHandler for HanzoTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "hanzo-engine",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Local models served by Hanzo Engine. hanzo_list_models names them; \
                 hanzo_infer generates text with a language model; hanzo_embed embeds texts.",
            )
    }
}

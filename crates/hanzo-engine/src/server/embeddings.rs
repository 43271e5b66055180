//! `POST /v1/embeddings` (the request's checks and the answer's shape are
//! `hanzo_api::embeddings`'). An embedding model
//! embeds as sentence-transformers configures it; a language model by last-token pooling
//! (the final-normed hidden state of each text's last token, L2-normalized).

use super::api::{self, EmbeddingRequest};
use super::error::{ApiError, ApiResult};
use super::models::Embedding;
use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hanzo_transformers::{EmbedOptions, Embeddings, Error as ModelError};
use std::sync::Arc;

/// Most tokens of one input to a language model: its KV store is allocated beside the
/// pool for the pass.
const MAX_DECODER_INPUT: usize = 8192;

pub async fn embeddings(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: EmbeddingRequest = api::parse(&body)?;
    let model = app.models.embedder(&req.model)?;
    let job = hanzo_api::embeddings::check(req, model.width(), model.name())?;
    let name = model.name().to_string();
    let out = embed(model, job.texts).await?;
    let tokens = out.tokens.iter().sum();
    Ok(Json(hanzo_api::embeddings::respond(
        &out.vectors,
        tokens,
        &name,
        job.base64,
    ))
    .into_response())
}

/// Embeds `texts` off the async runtime; an input longer than the model takes is a 400.
pub async fn embed(model: Embedding<'_>, texts: Vec<String>) -> ApiResult<Embeddings> {
    let opts = EmbedOptions { truncate: false };
    let run = match model {
        Embedding::Encoder(m) => {
            let e = m.embedder.clone();
            tokio::task::spawn_blocking(move || {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                e.embed_with(&refs, opts)
            })
        }
        Embedding::Decoder(m) => {
            let pass = m.embedding_pass.clone().acquire_owned().await;
            let p = m.pipeline.clone();
            let limit = m.ctx_size.min(MAX_DECODER_INPUT);
            tokio::task::spawn_blocking(move || {
                let _pass = pass;
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                p.embed_last_token(&refs, limit, opts)
            })
        }
    };
    run.await
        .map_err(|e| ApiError::internal(format!("the embedding task failed: {e}")))?
        .map_err(|e| match e {
            ModelError::TooLong { index, .. } => {
                ApiError::invalid(&format!("input[{index}]"), e.to_string())
            }
            ModelError::Invalid(m) => ApiError::invalid("input", m),
            e => ApiError::internal(e.to_string()),
        })
}

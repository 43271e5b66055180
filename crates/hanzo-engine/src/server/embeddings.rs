//! `POST /v1/embeddings`: a string or a list of strings, vectors as floats or as base64 of
//! little-endian f32 (what the `openai` package asks for by default). An embedding model
//! embeds as sentence-transformers configures it; a language model by last-token pooling
//! (the final-normed hidden state of each text's last token, L2-normalized).

use super::api::{self, EmbeddingInput, EmbeddingRequest};
use super::error::{ApiError, ApiResult};
use super::models::Embedding;
use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use hanzo_transformers::{EmbedOptions, Embeddings, Error as ModelError};
use serde_json::{json, Value};
use std::sync::Arc;

/// Most inputs in one request (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// Most tokens of one input to a language model: its KV store is allocated beside the
/// pool for the pass.
const MAX_DECODER_INPUT: usize = 8192;

pub async fn embeddings(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: EmbeddingRequest = api::parse(&body)?;
    let model = app.models.embedder(&req.model)?;
    let texts = match req.input {
        EmbeddingInput::Text(t) => vec![t],
        EmbeddingInput::Texts(v) => v,
    };
    if texts.is_empty() || texts.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            "input",
            format!("`input` must hold 1 to {MAX_INPUTS} strings"),
        ));
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("`encoding_format` must be \"float\" or \"base64\", got {other:?}"),
            ))
        }
    };
    let width = model.width();
    if let Some(d) = req.dimensions {
        if d as usize != width {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "`{}` gives {width}-dimensional vectors and cannot shorten them",
                    model.name()
                ),
            ));
        }
    }
    let out = embed(model, texts).await?;
    let data: Vec<Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let tokens: usize = out.tokens.iter().sum();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": model.name(),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
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

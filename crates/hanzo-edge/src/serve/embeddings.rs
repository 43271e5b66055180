//! `POST /v1/embeddings` on the device: the loaded model embeds by last-token pooling
//! (`Edge::embed`), in the one generation slot like any other request; the request's checks
//! and the answer's shape are the engine's (`hanzo_api::embeddings`).

use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hanzo_api::error::{ApiError, ApiResult};
use hanzo_api::request::{self, EmbeddingRequest};
use hanzo_edge::{Edge, EdgeError};
use std::sync::Arc;

pub async fn embeddings(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: EmbeddingRequest = request::parse(&body)?;
    super::chat::check_model(&app, &req.model)?;
    let job = hanzo_api::embeddings::check(req, app.width, &app.name)?;
    let permit = app.slot().await?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let texts = job.texts;
    app.submit(Box::new(move |edge: &mut Edge| {
        let _permit = permit;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let _ = tx.send(edge.embed(&refs));
    }))?;
    let out = rx
        .await
        .map_err(|_| ApiError::internal("the generation thread ended"))?
        .map_err(|e| match e {
            EdgeError::Request(m) => ApiError::invalid("input", m),
            e => ApiError::internal(e.to_string()),
        })?;
    let tokens = out.tokens.iter().sum();
    let body = hanzo_api::embeddings::respond(&out.vectors, tokens, &app.name, job.base64);
    Ok(Json(body).into_response())
}

//! `POST /v1/rerank` (Cohere/Jina shape): a language model judges each document against the
//! query and the score is its probability of answering "yes" rather than "no", read from the
//! logits of its first answer token (the way decoder rerankers such as Qwen3-Reranker score).
//! Every document is one scoring sequence in the model's scheduler, batched with the rest;
//! the judge (prompt, answer tokens, score) is `hanzo_transformers::rerank`.

use super::api::{self, RerankRequest};
use super::error::{ApiError, ApiResult};
use super::scheduler::{Event, GenRequest};
use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hanzo_transformers::rerank::Judge;
use hanzo_transformers::SamplingParams;
use serde_json::json;
use std::sync::Arc;

/// Most documents in one request.
const MAX_DOCUMENTS: usize = 1000;

pub async fn rerank(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let req: RerankRequest = api::parse(&body)?;
    let model = app.models.chat(&req.model).map_err(|e| {
        if app.models.embedder(&req.model).is_ok() {
            ApiError::invalid(
                "model",
                format!(
                    "`{}` is an embedding model; reranking needs a language model",
                    req.model
                ),
            )
        } else {
            e
        }
    })?;
    if req.documents.is_empty() || req.documents.len() > MAX_DOCUMENTS {
        return Err(ApiError::invalid(
            "documents",
            format!("`documents` must hold 1 to {MAX_DOCUMENTS} documents"),
        ));
    }
    let judge = Judge::new(&model.pipeline)
        .map_err(|e| ApiError::invalid("model", format!("`{}`: {e}", req.model)))?;
    let ids = judge.ids();
    let mut receivers = Vec::new();
    let mut total_tokens = 0;
    for (i, doc) in req.documents.iter().enumerate() {
        let prompt = judge
            .prompt(&model.pipeline, &req.query, doc.text())
            .map_err(|e| ApiError::invalid("documents", e.to_string()))?;
        if prompt.len() >= model.ctx_size {
            return Err(ApiError::invalid(
                &format!("documents[{i}]"),
                format!(
                    "the query and document {i} take {} tokens; the context holds {}",
                    prompt.len(),
                    model.ctx_size
                ),
            ));
        }
        total_tokens += prompt.len();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        model.scheduler.submit(GenRequest {
            prompt,
            n: 1,
            max_tokens: 1,
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            logprobs: None,
            score: Some(ids.clone()),
            constraints: Vec::new(),
            lora: None,
            events: tx,
        })?;
        receivers.push(rx);
    }
    let mut scores = Vec::with_capacity(receivers.len());
    for mut rx in receivers {
        let lp = loop {
            match rx.recv().await {
                Some(Event::Scores(lp)) => break lp,
                Some(Event::Error(e)) => return Err(ApiError::internal(e)),
                Some(_) => {}
                None => return Err(ApiError::internal("the scheduler dropped the request")),
            }
        };
        scores.push(judge.relevance(&lp));
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let top = req
        .top_n
        .map_or(order.len(), |n| (n as usize).min(order.len()));
    let with_docs = req.return_documents.unwrap_or(true);
    let results: Vec<_> = order[..top]
        .iter()
        .map(|&i| {
            let mut r = json!({"index": i, "relevance_score": scores[i]});
            if with_docs {
                r["document"] = json!({"text": req.documents[i].text()});
            }
            r
        })
        .collect();
    Ok(Json(json!({
        "id": format!("rerank-{:032x}", rand::random::<u128>()),
        "object": "list",
        "model": model.name,
        "results": results,
        "usage": {"prompt_tokens": total_tokens, "total_tokens": total_tokens},
    }))
    .into_response())
}

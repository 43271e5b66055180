//! `POST /v1/rerank` (Cohere/Jina shape): a language model judges each document against the
//! query and the score is its probability of answering "yes" rather than "no", read from the
//! logits of its first answer token (the way decoder rerankers such as Qwen3-Reranker score).
//! Every document is one scoring sequence in the model's scheduler, batched with the rest.

use super::api::{self, RerankRequest};
use super::error::{ApiError, ApiResult};
use super::models::ChatModel;
use super::scheduler::{Event, GenRequest};
use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hanzo_transformers::{Message, SamplingParams};
use serde_json::json;
use std::sync::Arc;

const JUDGE: &str = "Judge whether the Document meets the requirements based on the Query. \
                     Note that the answer can only be \"yes\" or \"no\".";

/// Most documents in one request.
const MAX_DOCUMENTS: usize = 1000;

/// The ids of a word's spellings that are one token each ("yes", "Yes").
fn answer_ids(model: &ChatModel, words: &[&str]) -> Vec<u32> {
    words
        .iter()
        .filter_map(
            |w| match model.pipeline.tokenizer.encode(w, false, false)[..] {
                [id] => Some(id),
                _ => None,
            },
        )
        .collect()
}

fn log_sum_exp(xs: &[f32]) -> f64 {
    let m = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + xs.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
}

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
    let (yes, no) = (
        answer_ids(model, &["yes", "Yes"]),
        answer_ids(model, &["no", "No"]),
    );
    if yes.is_empty() || no.is_empty() {
        return Err(ApiError::invalid(
            "model",
            format!(
                "`{}` has no single-token \"yes\"/\"no\" to score with",
                req.model
            ),
        ));
    }
    let ids: Vec<u32> = yes.iter().chain(&no).copied().collect();
    let mut receivers = Vec::new();
    let mut total_tokens = 0;
    for (i, doc) in req.documents.iter().enumerate() {
        let messages = [
            Message::new("system", JUDGE),
            Message::new(
                "user",
                &format!("<Query>: {}\n<Document>: {}", req.query, doc.text()),
            ),
        ];
        let prompt = model
            .pipeline
            .chat_tokens(&messages)
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
        let (y, n) = (log_sum_exp(&lp[..yes.len()]), log_sum_exp(&lp[yes.len()..]));
        // P(yes) among the two answers.
        scores.push(1.0 / (1.0 + (n - y).exp()));
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

#[cfg(test)]
mod tests {
    use super::log_sum_exp;

    #[test]
    fn log_sum_exp_is_stable() {
        assert!((log_sum_exp(&[0.0, 0.0]) - 2f64.ln()).abs() < 1e-12);
        assert!((log_sum_exp(&[-1000.0, -1000.0]) - (-1000.0 + 2f64.ln())).abs() < 1e-9);
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY]), f64::NEG_INFINITY);
    }
}

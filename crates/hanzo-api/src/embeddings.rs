//! `POST /v1/embeddings` apart from the model: the request checked (one string or a list,
//! `encoding_format`, `dimensions`) and the answer built, vectors as floats or as base64 of
//! little-endian f32 (what the `openai` package asks for by default).

use crate::error::{ApiError, ApiResult};
use crate::request::{EmbeddingInput, EmbeddingRequest};
use base64::Engine as _;
use serde_json::{json, Value};

/// Most inputs in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// A checked request: the texts to embed and how to send the vectors back.
#[derive(Debug)]
pub struct EmbeddingJob {
    pub texts: Vec<String>,
    pub base64: bool,
}

/// Checks `req` for a model named `model` that gives `width`-dimensional vectors.
pub fn check(req: EmbeddingRequest, width: usize, model: &str) -> ApiResult<EmbeddingJob> {
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
    if let Some(d) = req.dimensions {
        if d as usize != width {
            return Err(ApiError::invalid(
                "dimensions",
                format!("`{model}` gives {width}-dimensional vectors and cannot shorten them"),
            ));
        }
    }
    Ok(EmbeddingJob { texts, base64 })
}

/// The answer: one entry per vector in input order, and the tokens embedded.
pub fn respond(vectors: &[Vec<f32>], tokens: usize, model: &str, base64: bool) -> Value {
    let data: Vec<Value> = vectors
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
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> EmbeddingRequest {
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn base64_vectors_are_little_endian_f32() {
        let out = respond(&[vec![1.0, -0.5]], 3, "m", true);
        let b64 = out["data"][0]["embedding"].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(bytes, [0, 0, 128, 63, 0, 0, 0, 191]);
        assert_eq!(out["usage"]["total_tokens"], 3);
        let floats = respond(&[vec![0.25]], 1, "m", false);
        assert_eq!(floats["data"][0]["embedding"], json!([0.25]));
    }

    #[test]
    fn bad_requests_name_their_parameter() {
        let e = check(request(r#"{"model":"m","input":[]}"#), 4, "m").unwrap_err();
        assert!(format!("{e:?}").contains("input"), "{e:?}");
        let e = check(
            request(r#"{"model":"m","input":"a","encoding_format":"int8"}"#),
            4,
            "m",
        );
        assert!(format!("{:?}", e.unwrap_err()).contains("encoding_format"));
        let e = check(
            request(r#"{"model":"m","input":"a","dimensions":2}"#),
            4,
            "m",
        );
        assert!(format!("{:?}", e.unwrap_err()).contains("dimensions"));
        let ok = check(
            request(r#"{"model":"m","input":"a","dimensions":4}"#),
            4,
            "m",
        )
        .unwrap();
        assert_eq!((ok.texts, ok.base64), (vec!["a".to_string()], false));
    }
}

//! Reranking with a language model as the judge: the model reads a query and a document
//! under an instruction to answer "yes" or "no", and the document's relevance is the
//! probability of "yes" against "no" at its first answer token (the way decoder rerankers
//! such as Qwen3-Reranker score). The server's `/v1/rerank` and the Python `Reranker` share
//! it; they differ only in how they batch the prompts.

use crate::{Error, Message, Result, TextGeneration};

/// The judge's instruction (the system turn).
pub const JUDGE: &str = "Judge whether the Document meets the requirements based on the Query. \
                         Note that the answer can only be \"yes\" or \"no\".";

/// A model's answer tokens: the single-token spellings of "yes" and of "no".
pub struct Judge {
    yes: Vec<u32>,
    no: Vec<u32>,
}

impl Judge {
    /// The judge for `p`; an error when its vocabulary spells "yes" or "no" in no single
    /// token (it cannot score then).
    pub fn new(p: &TextGeneration) -> Result<Self> {
        let single = |words: &[&str]| -> Vec<u32> {
            words
                .iter()
                .filter_map(|w| match p.tokenizer.encode(w, false, false)[..] {
                    [id] => Some(id),
                    _ => None,
                })
                .collect()
        };
        let (yes, no) = (single(&["yes", "Yes"]), single(&["no", "No"]));
        if yes.is_empty() || no.is_empty() {
            return Err(Error::Invalid(
                "the model has no single-token \"yes\"/\"no\" to score with".into(),
            ));
        }
        Ok(Self { yes, no })
    }

    /// The tokens whose log-probabilities [`relevance`](Self::relevance) takes, in order.
    pub fn ids(&self) -> Vec<u32> {
        self.yes.iter().chain(&self.no).copied().collect()
    }

    /// The prompt that asks `p` to judge `document` against `query`.
    pub fn prompt(&self, p: &TextGeneration, query: &str, document: &str) -> Result<Vec<u32>> {
        p.chat_tokens(&[
            Message::new("system", JUDGE),
            Message::new("user", &format!("<Query>: {query}\n<Document>: {document}")),
        ])
    }

    /// P("yes") among the two answers, from the log-probabilities of [`ids`](Self::ids).
    pub fn relevance(&self, logprobs: &[f32]) -> f64 {
        let (y, n) = logprobs.split_at(self.yes.len().min(logprobs.len()));
        1.0 / (1.0 + (log_sum_exp(n) - log_sum_exp(y)).exp())
    }
}

/// log Σ exp(x), stable for large and -inf inputs.
pub fn log_sum_exp(xs: &[f32]) -> f64 {
    let m = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + xs.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
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

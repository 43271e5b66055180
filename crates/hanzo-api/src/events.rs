//! What a generation sends back to the HTTP layer, choice by choice, and the grammar
//! interface constrained decoding plugs into sampling.

/// A grammar a choice's tokens must follow (constrained decoding; see `grammar.rs`).
pub trait Constraint: Send {
    /// Sets the logits of every token the grammar does not allow next to -inf.
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), String>;
    /// Advances past the sampled token.
    fn consume(&mut self, token: u32) -> Result<(), String>;
    /// Whether the grammar is complete and allows nothing more.
    fn is_done(&self) -> bool;
}

/// A token's log-probability, as the OpenAI API reports it.
#[derive(Clone, Debug)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<(String, Vec<u8>, f32)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    /// A safety filter replaced the reply (OpenAI's `content_filter`).
    ContentFilter,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
        }
    }
}

/// What a generation sends back, per choice (the engine's scheduler, the edge runtime).
#[derive(Debug)]
pub enum Event {
    /// Text that is final (never half a character, never part of a stop string), with the
    /// log-probabilities of the tokens sampled since the last event when asked for.
    Text {
        choice: usize,
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    Finish {
        choice: usize,
        reason: FinishReason,
        tokens: usize,
    },
    /// A scoring request's log-probabilities, in the order of `GenRequest::score`.
    Scores(Vec<f32>),
    /// The request failed; no more events follow.
    Error(String),
    /// Fields beyond OpenAI's that the server reports about the whole request (a JSON
    /// object, sent before the last `Finish`): they join the top level of the answer, and of
    /// the stream's finishing chunks (the edge runtime's evictions and context use).
    Extra(serde_json::Value),
}

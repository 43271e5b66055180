//! One error type for the crate: what went wrong, phrased for the person who ran the model.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Ml(#[from] hanzo_ml::Error),
    /// The KV store could not take the work (`OutOfBlocks`: preempt a sequence and retry).
    #[error(transparent)]
    Kv(#[from] hanzo_ml::kv::KvError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The file is readable but lacks something a model of its kind must have.
    #[error("{context}: {msg}")]
    Model { context: String, msg: String },
    #[error("unsupported architecture {0:?} (supported: {1})")]
    UnsupportedArchitecture(String, &'static str),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    /// The prompt plus the requested tokens do not fit the context window.
    #[error("context full: {needed} tokens needed, the context holds {limit}")]
    ContextFull { needed: usize, limit: usize },
    /// An input longer than the model takes, where the caller did not ask for truncation.
    #[error("input {index} has {tokens} tokens, the model takes at most {limit} (ask for truncation to cut it)")]
    TooLong {
        index: usize,
        tokens: usize,
        limit: usize,
    },
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub fn model(context: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Model {
            context: context.into(),
            msg: msg.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

use crate::budget::Breakdown;

/// What the runtime could not do.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// The model does not fit the memory budget; nothing large was read or allocated.
    #[error("the model needs {needed} bytes ({}), over the limit of {limit} bytes ({}): {breakdown}", mib(*needed), mib(*limit))]
    OverBudget {
        needed: u64,
        limit: u64,
        breakdown: Breakdown,
    },
    /// A configuration that cannot work (named field and why).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A request that cannot be served as asked (the conversation is unchanged).
    #[error("{0}")]
    Request(String),
    /// The conversation does not fit the context, eviction or not.
    #[error("{0}")]
    ContextFull(String),
    #[error(transparent)]
    Model(#[from] hanzo_transformers::Error),
    #[error(transparent)]
    Core(#[from] hanzo_ml::Error),
    /// A sealed model that could not be opened: no key, the wrong key, or a damaged chunk.
    #[cfg(feature = "seal")]
    #[error(transparent)]
    Sealed(#[from] crate::seal::SealError),
}

impl From<hanzo_ml::kv::KvError> for EdgeError {
    fn from(e: hanzo_ml::kv::KvError) -> Self {
        EdgeError::Model(e.into())
    }
}

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

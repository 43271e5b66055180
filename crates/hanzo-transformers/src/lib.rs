//! Tokenizers, chat templates, transformer models, sampling and the text-generation and
//! embedding pipelines that the engine and the edge runtime share.
//!
//! Data flow of one generation: chat template → tokenizer → model forward (with its KV
//! cache) → logits → sampler → streaming detokenizer.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod batch;
pub mod chat_template;
pub mod embedding;
mod error;
mod last_token;
pub mod lora;
pub mod models;
pub mod perplexity;
pub mod pipeline;
pub mod rerank;
pub mod sampler;
pub mod speculative;
pub mod stop;
pub mod tokenizer;
pub mod tools;

pub use batch::Batch;
pub use chat_template::{ChatTemplate, FunctionCall, Message, ToolCall};
pub use embedding::{l2_normalize, EmbedOptions, Embedder, Embeddings, EncoderFiles, Pooling};
pub use error::{Error, Result};
pub use lora::{Adapter, LoraId};
pub use models::{
    describe_gguf, hf::ModelDir, load_dir, load_gguf, load_gguf_with, Cache, Decoder,
    LanguageModel, Logits, ModelInfo, SeqChunk, WeightMode,
};
pub use pipeline::{Finish, GenerateOptions, Generated, Generation, TextGeneration};
pub use sampler::{Sampler, SamplingParams};
pub use speculative::{ModelDraft, PromptLookup, SpeculationStats};
pub use stop::StopFilter;
pub use tokenizer::Tokenizer;

//! # hanzo-edge
//!
//! The on-device runtime: one model and one conversation at a time inside a memory budget
//! the host fixes in advance.
//!
//! - [`Edge::new`] computes what the model will take ([`Budget`]: weights as they sit in
//!   memory, the KV cache for `max_context_tokens`, activations, tokenizer, runtime) before
//!   anything large is read or allocated, and refuses a budget that does not hold it with
//!   [`EdgeError::OverBudget`]. The KV cache is allocated once, there.
//! - [`Edge::chat`] and [`Edge::complete`] stream the reply ([`TokenStream`], an iterator;
//!   dropping it cancels). A conversation longer than the context goes on: the oldest
//!   tokens after the kept prefix (the system prompt) are evicted ([`Eviction`]).
//!
//! ```no_run
//! use hanzo_edge::{Edge, EdgeConfig, Event};
//! use hanzo_transformers::{GenerateOptions, Message};
//! let mut edge = Edge::new(EdgeConfig::new("model.gguf", 2048, 600 << 20))?;
//! let messages = [Message::new("user", "Hello!")];
//! for event in edge.chat(&messages, &GenerateOptions::default())? {
//!     match event? {
//!         Event::Text(piece) => print!("{piece}"),
//!         Event::Done(summary) => eprintln!("\n{} tokens", summary.completion_tokens),
//!     }
//! }
//! # Ok::<(), hanzo_edge::EdgeError>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

mod budget;
#[cfg(feature = "cloud")]
pub mod cloud;
mod config;
mod conversation;
mod draft;
mod edge;
mod error;
pub mod guard;
#[cfg(feature = "seal")]
pub mod seal;
mod source;
mod stream;
pub mod thermal;
pub mod tools;

pub use budget::{Breakdown, Budget};
pub use config::{EdgeConfig, Eviction};
pub use draft::DraftModel;
pub use edge::Edge;
pub use error::EdgeError;
pub use hanzo_ml::kv::KvDtype;
pub use source::ModelFiles;
pub use stream::{Event, Reply, Source, Summary, TokenStream};

//! The model store: `pull`, `list`, `show`, `rm`, and the names `--model` accepts. The
//! store itself (layout, manifests, names) is `hanzo-store`, shared with `hanzo-edge`; the
//! sources a model is pulled from are here.

mod download;
mod hf;
pub mod info;
mod ollama;
mod pull;
mod source;

/// The HTTP client (`hanzo-http`, shared with hanzo-edge's cloud fallback).
use hanzo_http as http;

pub use download::human_bytes;
pub use hanzo_store::*;
pub use pull::{pull, PullArgs};
pub use source::Source;

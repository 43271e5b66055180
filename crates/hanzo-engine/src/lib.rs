//! Hanzo Engine: the model tools and the OpenAI-compatible server, as a library so tests and
//! other front ends can call them; `main.rs` is the command line.

pub mod commands;
pub mod progress;
pub mod quantize;
pub mod server;
pub mod store;

/// Fixture paths for the unit tests that load a model (the grammar's, with the
/// `structured-output` feature); the integration tests include the same file.
#[cfg(all(test, feature = "structured-output"))]
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

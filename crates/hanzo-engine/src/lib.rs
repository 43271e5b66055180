//! Hanzo Engine: the model tools and the OpenAI-compatible server, as a library so tests and
//! other front ends can call them; `main.rs` is the command line.

pub mod commands;
pub mod progress;
pub mod quantize;
pub mod server;
pub mod store;

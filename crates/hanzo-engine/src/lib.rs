//! Hanzo Engine: the model tools and (in later issues) the server, as a library so tests and
//! other front ends can call them; `main.rs` is the command line.

pub mod commands;
pub mod quantize;

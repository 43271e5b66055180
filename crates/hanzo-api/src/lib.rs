//! # hanzo-api
//!
//! The OpenAI-compatible HTTP layer, one copy for both servers (`hanzo-engine serve`, many
//! sequences through a scheduler; `hanzo-edge serve`, one conversation on a device):
//!
//! - [`request`]: the request bodies of `/v1/chat/completions`, `/v1/completions`,
//!   `/v1/embeddings` and `/v1/rerank`, and their checks;
//! - [`error`]: OpenAI-shaped error objects with their HTTP statuses;
//! - [`tools`]: `tools` / `tool_choice` checked, and the constraint that holds the model to them;
//! - [`events`]: what a generation sends back, choice by choice;
//! - [`response`]: those events as one JSON answer or as server-sent events;
//! - [`embeddings`]: `/v1/embeddings` requests checked and answers built;
//! - [`sizes`]: byte sizes on command lines.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod embeddings;
pub mod error;
pub mod events;
pub mod request;
pub mod response;
pub mod sizes;
pub mod tools;

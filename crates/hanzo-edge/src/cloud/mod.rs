//! Cloud fallback: the same request answered by an OpenAI-compatible server (a Hanzo Engine,
//! or any other) when the device should not answer it, with the answer streamed back piece by
//! piece and, where it is deterministic, kept on disk to be served offline.
//!
//! Why a request goes to the cloud ([`Reason`]) is the caller's to configure ([`Cloud`]), and
//! every reply says where it came from (`Summary::source`). When the cloud cannot answer
//! (no network, a 5xx, no answer within the timeout) the device answers after all and the
//! failure is reported (`Summary::cloud_error`), never raised.

mod cache;
mod client;
pub(crate) mod route;

pub(crate) use cache::Cache;
pub(crate) use route::Route;

use hanzo_transformers::{GenerateOptions, Message};
use serde_json::{json, Value};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// An OpenAI-compatible server to fall back on, and when to.
#[derive(Clone)]
pub struct Cloud {
    /// The server's address, with or without `/v1` (`http://127.0.0.1:8080`,
    /// `https://api.example.com/v1`).
    pub base_url: String,
    /// The model asked for there.
    pub model: String,
    /// Sent as a bearer token, only to `base_url`'s host; never logged.
    pub api_key: Option<String>,
    /// Longest wait for the connection, the first answer, and each later piece of it.
    pub timeout: Duration,
    /// Where deterministic answers are kept (none: no cache).
    pub cache_dir: Option<PathBuf>,
    /// The cache's size limit; the least recently used answers go first.
    pub cache_max_bytes: u64,
    /// A prompt longer than the context goes to the cloud instead of being evicted from;
    /// and so does one the device cannot hold at all (eviction off, or the kept prefix
    /// alone too long).
    pub on_context: bool,
    /// Low confidence: when the mean entropy (nats) of the local reply's first
    /// `entropy_window` tokens is above this, the local draft (held back meanwhile) is
    /// dropped and the request goes to the cloud.
    pub fallback_entropy: Option<f32>,
    pub entropy_window: usize,
    /// Above this thermal state (0 to 3) requests go to the cloud.
    pub thermal_level: Option<u8>,
}

impl Cloud {
    /// `model` at `base_url`: falls back when the prompt does not fit, waits 30 s at most,
    /// caches nothing.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(30),
            cache_dir: None,
            cache_max_bytes: 64 << 20,
            on_context: true,
            fallback_entropy: None,
            entropy_window: 16,
            thermal_level: None,
        }
    }

    /// The chat completions endpoint.
    pub(crate) fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match base.ends_with("/v1") {
            true => format!("{base}/chat/completions"),
            false => format!("{base}/v1/chat/completions"),
        }
    }
}

impl fmt::Debug for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cloud")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .field("cache_dir", &self.cache_dir)
            .field("on_context", &self.on_context)
            .field("fallback_entropy", &self.fallback_entropy)
            .field("thermal_level", &self.thermal_level)
            .finish()
    }
}

/// Why a request went to the cloud.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The prompt does not fit the device's context.
    Context,
    /// The local draft's tokens were too uncertain.
    Entropy,
    /// The caller asked for the cloud's model.
    Requested,
    /// The device is too hot.
    Thermal,
}

impl Reason {
    pub const ALL: [Reason; 4] = [
        Reason::Context,
        Reason::Entropy,
        Reason::Requested,
        Reason::Thermal,
    ];

    /// The metric label and response field.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Context => "context",
            Reason::Entropy => "entropy",
            Reason::Requested => "model",
            Reason::Thermal => "thermal",
        }
    }
}

/// A request as the cloud gets it: also its cache key, when it is deterministic.
#[derive(Clone, Debug)]
pub(crate) struct CloudRequest {
    pub body: Value,
    /// Greedy, or seeded: the same request gets the same answer, so it may be cached.
    pub deterministic: bool,
}

impl CloudRequest {
    /// `seeded`: the caller chose the seed (the SDK's is always chosen; an HTTP request's
    /// only when it sends one). A sampled request without one is never cached.
    pub fn new(
        cloud: &Cloud,
        messages: &[Message],
        tools: &[Value],
        opts: &GenerateOptions,
        seeded: bool,
    ) -> Self {
        let s = &opts.sampling;
        let mut body = json!({
            "model": cloud.model,
            "messages": messages,
            "max_tokens": opts.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "stream": true,
        });
        let extra = body.as_object_mut().expect("an object");
        if s.top_k > 0 {
            extra.insert("top_k".into(), json!(s.top_k));
        }
        if s.min_p > 0.0 {
            extra.insert("min_p".into(), json!(s.min_p));
        }
        if !opts.stop.is_empty() {
            extra.insert("stop".into(), json!(opts.stop));
        }
        if !tools.is_empty() {
            extra.insert("tools".into(), json!(tools));
        }
        let seeded = s.temperature > 0.0 && seeded;
        if seeded {
            extra.insert("seed".into(), json!(s.seed));
        }
        Self {
            body,
            deterministic: s.temperature == 0.0 || seeded,
        }
    }
}

//! One streamed chat completion from the cloud, read on a thread of its own (the SDK is
//! synchronous) and handed over piece by piece.

use super::{Cloud, CloudRequest};
use serde_json::Value;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::Duration;

/// What the cloud sent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CloudEvent {
    Text(String),
    /// The answer is complete: how it finished (`stop`, `length`, ...) and its length.
    Done {
        finish: String,
        completion_tokens: usize,
    },
    /// No answer, or none to its end: why (an unreachable server, a status, a timeout).
    Error(String),
}

/// A request in flight; dropping it abandons the request.
pub(crate) struct CloudStream {
    rx: Receiver<CloudEvent>,
    /// The longest wait for the next event: the request's own timeouts, and a margin.
    wait: Duration,
    ended: bool,
}

impl CloudStream {
    pub fn start(cloud: &Cloud, request: &CloudRequest) -> Self {
        let (tx, rx) = channel();
        let failed = tx.clone();
        let url = cloud.endpoint();
        let body = request.body.to_string().into_bytes();
        let key = cloud.api_key.clone();
        let timeout = cloud.timeout;
        let spawned = std::thread::Builder::new()
            .name("hanzo-edge-cloud".into())
            .spawn(move || {
                let send = |e| tx.send(e).is_ok();
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        send(CloudEvent::Error(format!("no async runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async {
                    if let Err(e) = exchange(&url, body, key.as_deref(), timeout, &send).await {
                        send(CloudEvent::Error(format!("{e:#}")));
                    }
                });
            });
        if let Err(e) = spawned {
            let _ = failed.send(CloudEvent::Error(format!("cannot start a thread: {e}")));
        }
        Self {
            rx,
            // The request's own timeouts bound each wait; the margin is for the thread.
            wait: timeout + Duration::from_secs(2),
            ended: false,
        }
    }

    /// The next event; `None` after the last (a `Done` or an `Error`).
    pub fn next(&mut self) -> Option<CloudEvent> {
        if self.ended {
            return None;
        }
        let event = match self.rx.recv_timeout(self.wait) {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => {
                CloudEvent::Error(format!("no answer in {:.1}s", self.wait.as_secs_f64()))
            }
            Err(RecvTimeoutError::Disconnected) => {
                CloudEvent::Error("the answer ended without finishing".into())
            }
        };
        self.ended = !matches!(event, CloudEvent::Text(_));
        Some(event)
    }
}

/// Sends the request and passes the streamed answer on; `Err` for a failure before or
/// during it.
async fn exchange(
    url: &str,
    body: Vec<u8>,
    key: Option<&str>,
    timeout: Duration,
    send: &impl Fn(CloudEvent) -> bool,
) -> anyhow::Result<()> {
    let mut resp = hanzo_http::post_json(url, body, key, timeout)
        .await?
        .ok()
        .await?;
    let mut buf = String::new();
    let mut raw = Vec::new();
    let (mut finish, mut tokens, mut pieces) = (None::<String>, None::<usize>, 0usize);
    while let Some(chunk) = resp.chunk().await? {
        raw.extend_from_slice(&chunk);
        // Whole characters only; a split one waits for the next chunk.
        let upto = match std::str::from_utf8(&raw) {
            Ok(_) => raw.len(),
            Err(e) => e.valid_up_to(),
        };
        buf.push_str(std::str::from_utf8(&raw[..upto]).expect("checked"));
        raw.drain(..upto);
        while let Some(nl) = buf.find('\n') {
            let line: String = buf.drain(..=nl).collect();
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                let finish = finish.unwrap_or_else(|| "stop".into());
                send(CloudEvent::Done {
                    finish,
                    completion_tokens: tokens.unwrap_or(pieces),
                });
                return Ok(());
            }
            let v: Value = serde_json::from_str(data)
                .map_err(|e| anyhow::anyhow!("{url}: an event that is not JSON ({e})"))?;
            if let Some(err) = v.get("error") {
                anyhow::bail!("{url}: {}", err["message"].as_str().unwrap_or("error"));
            }
            let choice = &v["choices"][0];
            if let Some(t) = choice["delta"]["content"]
                .as_str()
                .filter(|t| !t.is_empty())
            {
                pieces += 1;
                if !send(CloudEvent::Text(t.to_string())) {
                    return Ok(()); // the caller has gone
                }
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                tokens = Some(n as usize);
            }
        }
    }
    match finish {
        // Some servers end the stream without `[DONE]` once they have said how it ended.
        Some(finish) => {
            send(CloudEvent::Done {
                finish,
                completion_tokens: tokens.unwrap_or(pieces),
            });
            Ok(())
        }
        None => anyhow::bail!("{url}: the answer ended without finishing"),
    }
}

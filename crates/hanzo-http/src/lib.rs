//! A small HTTP/1.1 client: hyper over tokio, TLS by rustls with the system's certificate
//! store. Hanzo Engine downloads models with it ([`get`]: redirects followed by hand so the
//! caller sees the headers of every hop, as Hugging Face puts a file's sha256 on the
//! redirect, and credentials never travel to another host) and Hanzo Edge asks its cloud
//! ([`post_json`]: one request to one address, its body streamed back).

use anyhow::{anyhow, bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, HeaderValue, LOCATION};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpStream;

pub use hyper::header::HeaderMap as Headers;

/// How long connecting, or waiting for the next piece of a body, may take (for [`get`]).
const TIMEOUT: Duration = Duration::from_secs(30);
const MAX_REDIRECTS: usize = 10;
const USER_AGENT: &str = concat!("hanzo/", env!("CARGO_PKG_VERSION"));

/// A response whose body has not been read yet.
pub struct Response {
    pub status: StatusCode,
    /// The headers of the final response.
    pub headers: HeaderMap,
    /// The headers of every response on the way, redirects first.
    pub hops: Vec<HeaderMap>,
    /// The address that answered.
    pub url: String,
    body: Incoming,
    /// How long the next piece of the body may take.
    idle: Duration,
}

impl Response {
    /// The next piece of the body, `None` at its end; a stalled or dropped connection is an
    /// error.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>> {
        loop {
            let frame = tokio::time::timeout(self.idle, self.body.frame())
                .await
                .map_err(|_| {
                    anyhow!(
                        "no data from {} for {:.1}s",
                        self.url,
                        self.idle.as_secs_f64()
                    )
                })?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(anyhow!("reading from {}: {e}", self.url)),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    /// The whole body (for small JSON documents), at most `limit` bytes.
    pub async fn bytes(mut self, limit: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(c) = self.chunk().await? {
            if out.len() + c.len() > limit {
                bail!("{}: the response is larger than {limit} bytes", self.url);
            }
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    /// A header of the final response, or of the first hop that has it.
    pub fn header_anywhere(&self, name: &str) -> Option<String> {
        std::iter::once(&self.headers)
            .chain(self.hops.iter())
            .find_map(|h| h.get(name)?.to_str().ok().map(str::to_string))
    }

    /// Fails with the status line (and the start of an error body) unless the status is 2xx.
    pub async fn ok(self) -> Result<Self> {
        if self.status.is_success() {
            return Ok(self);
        }
        let (status, url) = (self.status, self.url.clone());
        let body = self.bytes(4096).await.unwrap_or_default();
        let detail = String::from_utf8_lossy(&body);
        let detail = detail.trim();
        if detail.is_empty() || detail.starts_with('<') {
            bail!("{url}: {status}");
        }
        bail!(
            "{url}: {status}: {}",
            detail.chars().take(200).collect::<String>()
        );
    }
}

/// `GET url` with extra headers, following redirects. `auth` (a bearer token) is sent only
/// to the host of `url`.
pub async fn get(url: &str, headers: &[(&str, String)], auth: Option<&str>) -> Result<Response> {
    let first: Uri = url.parse().with_context(|| format!("bad URL {url}"))?;
    let auth_host = first.authority().map(|a| a.to_string());
    let mut uri = first;
    let mut hops = Vec::new();
    for _ in 0..=MAX_REDIRECTS {
        let same_host = uri.authority().map(|a| a.to_string()) == auth_host;
        let mut req = Request::get(uri.clone()).header("user-agent", USER_AGENT);
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        if let (Some(token), true) = (auth, same_host) {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let resp = send(&uri, req, Bytes::new(), TIMEOUT).await?;
        if resp.status().is_redirection() {
            if let Some(loc) = resp.headers().get(LOCATION) {
                let next = resolve(&uri, loc)?;
                hops.push(resp.headers().clone());
                uri = next;
                continue;
            }
        }
        let (parts, body) = resp.into_parts();
        return Ok(Response {
            status: parts.status,
            headers: parts.headers,
            hops,
            url: uri.to_string(),
            body,
            idle: TIMEOUT,
        });
    }
    bail!("{url}: more than {MAX_REDIRECTS} redirects")
}

/// `POST url` with a JSON `body`, no redirect followed; `auth` (a bearer token) goes to
/// `url`'s host only, as it is the only one asked. Connecting and the response's headers
/// must come within `timeout`, and each later piece of the body within it too.
pub async fn post_json(
    url: &str,
    body: Vec<u8>,
    auth: Option<&str>,
    timeout: Duration,
) -> Result<Response> {
    let uri: Uri = url.parse().with_context(|| format!("bad URL {url}"))?;
    let mut req = Request::post(uri.clone())
        .header("user-agent", USER_AGENT)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(token) = auth {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let resp = send(&uri, req, Bytes::from(body), timeout).await?;
    let (parts, body) = resp.into_parts();
    Ok(Response {
        status: parts.status,
        headers: parts.headers,
        hops: Vec::new(),
        url: url.to_string(),
        body,
        idle: timeout,
    })
}

/// One request on a fresh connection (downloads are few and long, cloud calls rare; no pool
/// needed), connected and answered within `timeout`.
async fn send(
    uri: &Uri,
    req: hyper::http::request::Builder,
    body: Bytes,
    timeout: Duration,
) -> Result<hyper::Response<Incoming>> {
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => bail!("{uri}: only http:// and https:// are supported"),
    };
    let host = uri.host().ok_or_else(|| anyhow!("{uri}: no host"))?;
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare_host = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::time::timeout(timeout, TcpStream::connect((bare_host, port)))
        .await
        .map_err(|_| anyhow!("cannot connect to {host}:{port}: timed out"))?
        .with_context(|| format!("cannot connect to {host}:{port}"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let host_header = match uri.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let req = req
        .uri(path)
        .header("host", host_header)
        .body(Full::new(body))?;
    let exchange = async {
        if https {
            let name = rustls::pki_types::ServerName::try_from(bare_host.to_string())
                .with_context(|| format!("bad TLS server name {bare_host}"))?;
            let tls = tokio_rustls::TlsConnector::from(tls_config()?)
                .connect(name, tcp)
                .await
                .with_context(|| format!("TLS with {host}:{port}"))?;
            request(TokioIo::new(tls), req).await
        } else {
            request(TokioIo::new(tcp), req).await
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| anyhow!("{uri}: no response in {:.1}s", timeout.as_secs_f64()))?
        .with_context(|| format!("requesting {uri}"))
}

async fn request<T>(io: T, req: Request<Full<Bytes>>) -> Result<hyper::Response<Incoming>>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        // The connection ends with the body or with an error the body read reports.
        let _ = conn.await;
    });
    Ok(sender.send_request(req).await?)
}

fn resolve(base: &Uri, loc: &HeaderValue) -> Result<Uri> {
    let loc = loc.to_str().context("a redirect to a non-ASCII address")?;
    if loc.starts_with("http://") || loc.starts_with("https://") {
        return loc.parse().with_context(|| format!("bad redirect {loc}"));
    }
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map_or("", |a| a.as_str());
    let path = if loc.starts_with('/') {
        loc.to_string()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{loc}")
    };
    format!("{scheme}://{authority}{path}")
        .parse()
        .with_context(|| format!("bad redirect {loc}"))
}

/// The TLS client configuration: the system's root certificates (`SSL_CERT_FILE` and
/// `SSL_CERT_DIR` are honoured), loaded once.
fn tls_config() -> Result<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<std::result::Result<Arc<rustls::ClientConfig>, String>> =
        OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err("no trusted root certificates found on this system (install the ca-certificates package, or point SSL_CERT_FILE at a PEM bundle)".into());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_redirects() {
        let base: Uri = "http://h:8/a/b/c?x=1".parse().unwrap();
        let r = |l: &str| resolve(&base, &HeaderValue::from_str(l).unwrap()).unwrap();
        assert_eq!(r("/z").to_string(), "http://h:8/z");
        assert_eq!(r("d").to_string(), "http://h:8/a/b/d");
        assert_eq!(r("https://cdn/x").to_string(), "https://cdn/x");
    }
}

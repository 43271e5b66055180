//! Ollama-compatible registries: a manifest names the model's layers by digest (the GGUF,
//! its prompt template, default parameters, system prompt, licence), each fetched as a blob.

use super::download::Remote;
use super::http;
use anyhow::{bail, Context, Result};
use serde::Deserialize;

const MANIFEST_TYPES: &str = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json";

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Deserialize)]
struct Layer {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    #[serde(default)]
    size: Option<u64>,
}

/// `OLLAMA_REGISTRY` (a host, or a URL with its scheme), default Ollama's registry.
pub fn registry() -> String {
    let r = std::env::var("OLLAMA_REGISTRY")
        .ok()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "registry.ollama.ai".into());
    let r = r.trim_end_matches('/');
    if r.starts_with("http://") || r.starts_with("https://") {
        r.to_string()
    } else {
        format!("https://{r}")
    }
}

/// The layers of `namespace/name:tag` to fetch, with their file names in the model folder.
pub async fn plan(namespace: &str, name: &str, tag: &str) -> Result<(Vec<Remote>, String)> {
    let base = registry();
    let url = format!("{base}/v2/{namespace}/{name}/manifests/{tag}");
    let resp = http::get(&url, &[("accept", MANIFEST_TYPES.into())], None).await?;
    if resp.status.as_u16() == 404 {
        bail!(
            "{namespace}/{name}:{tag}: no such model at {base} ({})",
            resp.status
        );
    }
    let body = resp.ok().await?.bytes(4 << 20).await?;
    let manifest: Manifest =
        serde_json::from_slice(&body).with_context(|| format!("{url}: not an image manifest"))?;
    let mut files = Vec::new();
    for layer in &manifest.layers {
        let kind = layer
            .media_type
            .strip_prefix("application/vnd.ollama.image.")
            .unwrap_or(&layer.media_type);
        let file = match kind {
            "model" => "model.gguf",
            "template" => "template",
            "params" => "params.json",
            "system" => "system",
            "license" => "license",
            "messages" => "messages.json",
            other => {
                eprintln!("{name}:{tag}: skipping a `{other}` layer (not used by hanzo-engine)");
                continue;
            }
        };
        let Some(hex) = layer.digest.strip_prefix("sha256:") else {
            bail!("{url}: layer digest `{}` is not sha256", layer.digest);
        };
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("{url}: bad layer digest `{}`", layer.digest);
        }
        if files.iter().any(|f: &Remote| f.name == file) {
            if file == "license" {
                continue; // several licences: keep the first
            }
            bail!("{url}: more than one `{kind}` layer");
        }
        files.push(Remote {
            name: file.into(),
            url: format!("{base}/v2/{namespace}/{name}/blobs/{}", layer.digest),
            sha256: Some(hex.to_ascii_lowercase()),
            size: layer.size,
            digest_in_headers: false,
            auth: None,
        });
    }
    if !files.iter().any(|f| f.name == "model.gguf") {
        bail!("{namespace}/{name}:{tag}: the manifest has no model layer");
    }
    Ok((files, "model.gguf".into()))
}

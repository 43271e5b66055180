//! Hugging Face repositories: the model-info listing says which files exist (with their LFS
//! sha256 when asked for `blobs`), `resolve` URLs serve them.

use super::download::Remote;
use super::http;
use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The files a safetensors model needs besides its weights (those present are fetched).
const SAFETENSORS_COMPANIONS: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "model.safetensors.index.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
];

/// The default quantization of a GGUF repository.
pub const DEFAULT_QUANT: &str = "Q4_K_M";

#[derive(Deserialize)]
struct ModelInfo {
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    sha256: String,
    #[serde(default)]
    size: Option<u64>,
}

/// `HF_ENDPOINT`, default the Hugging Face hub.
pub fn endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "https://huggingface.co".into())
        .trim_end_matches('/')
        .to_string()
}

fn token() -> Option<String> {
    std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty())
}

/// The files to fetch for `repo` (one named file, the GGUF of a quantization, or a
/// safetensors model with its companions), and the entry `--model` loads.
pub async fn plan(
    repo: &str,
    file: Option<&str>,
    quant: Option<&str>,
) -> Result<(Vec<Remote>, String)> {
    let base = endpoint();
    let auth = token();
    let url = format!("{base}/api/models/{repo}?blobs=true");
    let resp = http::get(
        &url,
        &[("accept", "application/json".into())],
        auth.as_deref(),
    )
    .await?;
    if resp.status.as_u16() == 404 || resp.status.as_u16() == 401 {
        bail!(
            "{repo}: no such repository at {base} ({}){}",
            resp.status,
            if auth.is_none() {
                " (if it is private or gated, set HF_TOKEN)"
            } else {
                ""
            }
        );
    }
    let body = resp.ok().await?.bytes(64 << 20).await?;
    let info: ModelInfo = serde_json::from_slice(&body)
        .with_context(|| format!("{url}: not a model-info document"))?;
    let remote = |s: &Sibling| Remote {
        name: s.rfilename.clone(),
        url: format!("{base}/{repo}/resolve/main/{}", s.rfilename),
        sha256: s.lfs.as_ref().map(|l| l.sha256.to_ascii_lowercase()),
        size: s.lfs.as_ref().and_then(|l| l.size).or(s.size),
        digest_in_headers: true,
        auth: auth.clone(),
    };
    let names: Vec<&str> = info.siblings.iter().map(|s| s.rfilename.as_str()).collect();

    if let Some(file) = file {
        let s = info
            .siblings
            .iter()
            .find(|s| s.rfilename == file)
            .with_context(|| format!("{repo} has no file {file} (it has: {})", names.join(", ")))?;
        let mut r = remote(s);
        // The model folder holds the file under its base name.
        r.name = file.rsplit('/').next().unwrap_or(file).to_string();
        let entry = r.name.clone();
        if entry.ends_with(".gguf") {
            return Ok((vec![r], entry));
        }
        return Ok((vec![r], ".".into()));
    }

    let ggufs: Vec<&Sibling> = info
        .siblings
        .iter()
        .filter(|s| s.rfilename.ends_with(".gguf") && !s.rfilename.contains("mmproj"))
        .collect();
    if !ggufs.is_empty() {
        let want = quant.unwrap_or(DEFAULT_QUANT);
        let picked: Vec<&&Sibling> = ggufs
            .iter()
            .filter(|s| has_quant(&s.rfilename, want))
            .collect();
        match picked.as_slice() {
            [one] => {
                let mut r = remote(one);
                r.name = r.name.rsplit('/').next().unwrap_or(&r.name).to_string();
                let entry = r.name.clone();
                return Ok((vec![r], entry));
            }
            [] => {
                let quants: Vec<String> = ggufs
                    .iter()
                    .filter_map(|s| quant_of(&s.rfilename))
                    .collect();
                bail!(
                    "{repo} has no {want} GGUF; pick one of: {} (as {repo}:QUANT)",
                    if quants.is_empty() {
                        names.join(", ")
                    } else {
                        quants.join(", ")
                    }
                );
            }
            many => {
                let files: Vec<&str> = many.iter().map(|s| s.rfilename.as_str()).collect();
                if files.iter().any(|f| f.contains("-of-")) {
                    bail!("{repo}: the {want} model is split into several GGUF files ({}); split GGUF files are not supported yet", files.join(", "));
                }
                bail!(
                    "{repo}: several files are {want} ({}); name one as hf://{repo}/FILE",
                    files.join(", ")
                );
            }
        }
    }
    if quant.is_some() {
        bail!("{repo} has no GGUF files, so no quantization to pick (pull it as {repo})");
    }
    let weights: Vec<&Sibling> = info
        .siblings
        .iter()
        .filter(|s| s.rfilename.ends_with(".safetensors") && !s.rfilename.contains('/'))
        .collect();
    if weights.is_empty() {
        bail!(
            "{repo} has neither GGUF nor safetensors weights (it has: {})",
            names.join(", ")
        );
    }
    let mut files: Vec<Remote> = weights.iter().map(|s| remote(s)).collect();
    for c in SAFETENSORS_COMPANIONS {
        if let Some(s) = info.siblings.iter().find(|s| s.rfilename == *c) {
            files.push(remote(s));
        }
    }
    if !files.iter().any(|f| f.name == "config.json") {
        bail!("{repo} has safetensors weights but no config.json");
    }
    Ok((files, ".".into()))
}

/// Whether `file` is of quantization `q`: the name holds `q` as a whole token
/// (`Q4_K` is not `Q4_K_M`), in any case.
fn has_quant(file: &str, q: &str) -> bool {
    let f = file.to_ascii_uppercase();
    let q = q.to_ascii_uppercase();
    let is_word = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
    f.match_indices(&q).any(|(i, _)| {
        is_word(f[..i].chars().next_back()) && is_word(f[i + q.len()..].chars().next())
    })
}

/// The quantization a GGUF file name states, for the error that lists the choices.
fn quant_of(file: &str) -> Option<String> {
    let stem = file.rsplit('/').next()?.strip_suffix(".gguf")?;
    let last = stem.rsplit(['-', '.']).next()?;
    let up = last.to_ascii_uppercase();
    let known = ["Q", "IQ", "F16", "BF16", "F32", "TQ", "MXFP4"];
    known.iter().any(|k| up.starts_with(k)).then_some(up)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quant_tokens() {
        assert!(has_quant("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", "q4_k_m"));
        assert!(has_quant("smollm2-135m.Q8_0.gguf", "Q8_0"));
        assert!(!has_quant("model-Q4_K_M.gguf", "Q4_K"));
        assert!(!has_quant("model-IQ4_NL.gguf", "Q4_NL"));
        assert_eq!(quant_of("a/model-Q5_K_S.gguf").as_deref(), Some("Q5_K_S"));
        assert_eq!(quant_of("model.f16.gguf").as_deref(), Some("F16"));
    }
}

//! What `hanzo-engine pull SOURCE` names: a local path, a URL, a Hugging Face repository or
//! an Ollama registry model.

use anyhow::{bail, Result};
use std::path::PathBuf;

/// A parsed `pull` source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file or directory on this machine.
    Local(PathBuf),
    /// An `http://` or `https://` URL of one file.
    Url(String),
    /// `hf://ORG/REPO[/FILE]` or `ORG/REPO[:QUANT]`; `mlx://[ORG/]REPO` (MLX's quantized
    /// repositories, `mlx-community` when no organisation is named) is one too.
    HuggingFace {
        repo: String,
        /// One file of the repository, when named.
        file: Option<String>,
        /// The quantization to pick among a GGUF repository's files (default Q4_K_M).
        quant: Option<String>,
    },
    /// `ollama://[NAMESPACE/]NAME[:TAG]`.
    Ollama {
        namespace: String,
        name: String,
        tag: String,
    },
}

impl Source {
    /// Reads SOURCE. A string that names an existing path is always local, so a directory
    /// `org/repo` in the working directory wins over the Hugging Face short form.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.is_empty() {
            bail!("empty source");
        }
        if let Some(rest) = s.strip_prefix("hf://") {
            let mut parts = rest.splitn(3, '/');
            let (org, repo) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if !valid_repo_part(org) || !valid_repo_part(repo) {
                bail!("{s}: expected hf://ORG/REPO or hf://ORG/REPO/FILE");
            }
            let file = parts.next().filter(|f| !f.is_empty()).map(str::to_string);
            if let Some(f) = &file {
                if f.split('/').any(|c| c == ".." || c == ".") {
                    bail!("{s}: the file path may not contain `.` or `..`");
                }
            }
            return Ok(Source::HuggingFace {
                repo: format!("{org}/{repo}"),
                file,
                quant: None,
            });
        }
        if let Some(rest) = s.strip_prefix("mlx://") {
            // A Hugging Face repository in MLX's layout: its safetensors directory, which
            // loads as AFQ weights (`config.json`'s `quantization`).
            let (org, repo) = rest.split_once('/').unwrap_or(("mlx-community", rest));
            if !valid_repo_part(org) || !valid_repo_part(repo) {
                bail!("{s}: expected mlx://ORG/REPO or mlx://REPO (an mlx-community model)");
            }
            return Ok(Source::HuggingFace {
                repo: format!("{org}/{repo}"),
                file: None,
                quant: None,
            });
        }
        if let Some(rest) = s.strip_prefix("ollama://") {
            let (path, tag) = match rest.rsplit_once(':') {
                Some((p, t)) => (p, t),
                None => (rest, "latest"),
            };
            let (namespace, name) = match path.split_once('/') {
                Some((ns, n)) => (ns, n),
                None => ("library", path),
            };
            if !valid_ollama_part(namespace) || !valid_ollama_part(name) || !valid_ollama_part(tag)
            {
                bail!("{s}: expected ollama://NAME[:TAG] or ollama://NAMESPACE/NAME[:TAG]");
            }
            return Ok(Source::Ollama {
                namespace: namespace.into(),
                name: name.into(),
                tag: tag.into(),
            });
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            return Ok(Source::Url(s.to_string()));
        }
        if let Some(scheme) = s.split_once("://").map(|(a, _)| a) {
            bail!("{s}: unknown scheme `{scheme}://` (use a path, http(s)://, hf://, mlx:// or ollama://)");
        }
        let path = PathBuf::from(s);
        if path.exists() {
            return Ok(Source::Local(path));
        }
        // ORG/REPO[:QUANT]: exactly one slash, no path-like pieces.
        let (repo, quant) = match s.rsplit_once(':') {
            Some((r, q)) => (r, Some(q)),
            None => (s, None),
        };
        if let Some((org, name)) = repo.split_once('/') {
            if valid_repo_part(org)
                && valid_repo_part(name)
                && quant.is_none_or(|q| !q.is_empty() && q.chars().all(is_quant_char))
            {
                return Ok(Source::HuggingFace {
                    repo: repo.to_string(),
                    file: None,
                    quant: quant.map(str::to_string),
                });
            }
        }
        bail!("{s}: no such file or directory, and not a URL, hf://ORG/REPO, ORG/REPO[:QUANT] or ollama://NAME[:TAG]")
    }

    /// The store name a pull gets when `--name` is not given.
    pub fn default_name(&self) -> String {
        let name = match self {
            Source::Local(p) => file_stem(&p.to_string_lossy()),
            Source::Url(u) => {
                let path = u.split(['?', '#']).next().unwrap_or(u);
                file_stem(path.trim_end_matches('/'))
            }
            Source::HuggingFace { file: Some(f), .. } => file_stem(f),
            Source::HuggingFace { repo, quant, .. } => {
                let base = repo.rsplit('/').next().unwrap_or(repo);
                let base = base
                    .strip_suffix("-GGUF")
                    .or_else(|| base.strip_suffix("-gguf"))
                    .unwrap_or(base);
                match quant {
                    Some(q) => format!("{base}:{q}"),
                    None => base.to_string(),
                }
            }
            Source::Ollama {
                namespace,
                name,
                tag,
            } if namespace == "library" => format!("{name}:{tag}"),
            Source::Ollama {
                namespace,
                name,
                tag,
            } => format!("{namespace}-{name}:{tag}"),
        };
        name.to_lowercase()
    }
}

fn file_stem(path: &str) -> String {
    let last = path.rsplit(['/', '\\']).next().unwrap_or(path);
    for ext in [".gguf", ".safetensors", ".bin"] {
        if let Some(stem) = last.strip_suffix(ext) {
            return stem.to_string();
        }
    }
    last.to_string()
}

fn valid_repo_part(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn valid_ollama_part(s: &str) -> bool {
    valid_repo_part(s)
}

fn is_quant_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hf(repo: &str, file: Option<&str>, quant: Option<&str>) -> Source {
        Source::HuggingFace {
            repo: repo.into(),
            file: file.map(Into::into),
            quant: quant.map(Into::into),
        }
    }

    #[test]
    fn parses_each_kind() {
        assert_eq!(
            Source::parse("hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF").unwrap(),
            hf("Qwen/Qwen2.5-0.5B-Instruct-GGUF", None, None)
        );
        assert_eq!(
            Source::parse("hf://org/repo/sub/model.Q8_0.gguf").unwrap(),
            hf("org/repo", Some("sub/model.Q8_0.gguf"), None)
        );
        assert_eq!(
            Source::parse("bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0").unwrap(),
            hf("bartowski/SmolLM2-135M-Instruct-GGUF", None, Some("Q8_0"))
        );
        assert_eq!(
            Source::parse("ollama://smollm2:135m").unwrap(),
            Source::Ollama {
                namespace: "library".into(),
                name: "smollm2".into(),
                tag: "135m".into()
            }
        );
        assert_eq!(
            Source::parse("ollama://me/tiny").unwrap(),
            Source::Ollama {
                namespace: "me".into(),
                name: "tiny".into(),
                tag: "latest".into()
            }
        );
        assert_eq!(
            Source::parse("mlx://mlx-community/Qwen2.5-0.5B-Instruct-4bit").unwrap(),
            hf("mlx-community/Qwen2.5-0.5B-Instruct-4bit", None, None)
        );
        assert_eq!(
            Source::parse("mlx://SmolLM2-135M-Instruct-8bit").unwrap(),
            hf("mlx-community/SmolLM2-135M-Instruct-8bit", None, None)
        );
        assert_eq!(
            Source::parse("https://example.com/a/b.gguf?download=1").unwrap(),
            Source::Url("https://example.com/a/b.gguf?download=1".into())
        );
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        for bad in [
            "",
            "ftp://x/y",
            "hf://only-org",
            "hf://org/repo/../../etc/passwd",
            "mlx://",
            "mlx://a/b/c",
            "mlx://../x",
            "ollama://",
            "ollama://a/b/c",
            "no/such/path/here",
            "org/repo:Q4 K",
        ] {
            assert!(Source::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn default_names() {
        let name = |s: &str| Source::parse(s).unwrap().default_name();
        assert_eq!(
            name("https://h/x/Gemma-3-270M.Q4_K_M.gguf?x=1"),
            "gemma-3-270m.q4_k_m"
        );
        assert_eq!(name("org/SmolLM2-GGUF:Q8_0"), "smollm2:q8_0");
        assert_eq!(name("hf://org/all-MiniLM-L6-v2"), "all-minilm-l6-v2");
        assert_eq!(name("ollama://smollm2:135m"), "smollm2:135m");
        assert_eq!(name("ollama://me/tiny"), "me-tiny:latest");
    }
}

//! # hanzo-store
//!
//! The model store on disk, the part every binary that takes `--model NAME` shares: its
//! layout, the manifests, finding a model by name (with near matches for a typo), and
//! committing or removing a model folder. Fetching (`hanzo-engine pull`: Hugging Face,
//! Ollama, URLs) lives in the engine, which writes through [`Store::adopt`] and
//! [`Store::commit`].
//!
//! Layout of the store directory (`--model-dir`, `HANZO_MODELS_DIR`, or `~/.hanzo/models`):
//!
//! ```text
//! blobs/sha256-HEX        every file once, named by its content
//! partial/KEY.partial     transfers in progress (resumed by the next pull)
//! models/NAME/            one folder per model: its files (hard links to the blobs) and
//!   manifest.json           the source, files, sizes, digests and the time of the pull
//! ```
//!
//! A model folder is assembled under a temporary name and renamed into place, so `list` never
//! sees half a model; a blob is deleted when no manifest names it any more.

#![deny(unsafe_op_in_unsafe_fn)]

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const MANIFEST: &str = "manifest.json";

/// The store directory and its parts.
pub struct Store {
    root: PathBuf,
}

/// A file in `blobs/`.
#[derive(Debug, Clone)]
pub struct Blob {
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    /// Checked against a digest the source published (not only computed here).
    pub verified: bool,
}

/// `models/NAME/manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    /// The SOURCE given to `pull`.
    pub source: String,
    /// `gguf` or `safetensors`.
    pub format: String,
    /// What `--model NAME` loads, relative to the folder: the GGUF file, or `.` for a
    /// safetensors directory.
    pub entry: String,
    pub files: Vec<ManifestFile>,
    /// RFC 3339, UTC.
    pub pulled_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ManifestFile {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    /// The digest was published by the source and matched (else only recorded).
    pub verified: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub url: Option<String>,
}

/// A model in the store.
#[derive(Debug, Clone)]
pub struct Entry {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Entry {
    /// The path `--model NAME` loads.
    pub fn model_path(&self) -> PathBuf {
        match self.manifest.entry.as_str() {
            "." | "" => self.dir.clone(),
            e => self.dir.join(e),
        }
    }

    pub fn size(&self) -> u64 {
        self.manifest.files.iter().map(|f| f.size).sum()
    }
}

impl Store {
    /// The store at `dir`, else `HANZO_MODELS_DIR`, else `~/.hanzo/models`. Nothing is
    /// created until something is written.
    pub fn open(dir: Option<&Path>) -> Result<Self> {
        let root = match dir {
            Some(d) => d.to_path_buf(),
            None => match std::env::var_os("HANZO_MODELS_DIR").filter(|v| !v.is_empty()) {
                Some(d) => PathBuf::from(d),
                None => home_dir()
                    .context(
                        "cannot find the home directory; set HANZO_MODELS_DIR or pass --model-dir",
                    )?
                    .join(".hanzo")
                    .join("models"),
            },
        };
        Ok(Store { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `ROOT/name`, created if missing.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.root.join(name);
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        Ok(d)
    }

    /// Where transfers in progress are kept.
    pub fn partial_dir(&self) -> Result<PathBuf> {
        self.dir("partial")
    }

    /// Where the blob with this digest lies (whether or not it is there).
    pub fn blob_path(&self, sha256: &str) -> PathBuf {
        self.root
            .join("blobs")
            .join(format!("sha256-{}", sha256.to_ascii_lowercase()))
    }

    /// The blob with this digest, if the store has it.
    pub fn blob(&self, sha256: &str) -> Option<Blob> {
        let path = self.blob_path(sha256);
        let size = std::fs::metadata(&path).ok()?.len();
        Some(Blob {
            path,
            sha256: sha256.to_ascii_lowercase(),
            size,
            verified: true,
        })
    }

    /// Moves a finished, checked file into `blobs/` (or drops it when the blob exists).
    pub fn adopt(&self, file: &Path, sha256: &str, size: u64, verified: bool) -> Result<Blob> {
        self.dir("blobs")?;
        let path = self.blob_path(sha256);
        if path.exists() {
            let _ = std::fs::remove_file(file);
        } else {
            std::fs::rename(file, &path)
                .with_context(|| format!("cannot move {} into the store", file.display()))?;
        }
        Ok(Blob {
            path,
            sha256: sha256.into(),
            size,
            verified,
        })
    }

    /// Every model, sorted by name. Folders without a readable manifest are skipped.
    pub fn list(&self) -> Result<Vec<Entry>> {
        let models = self.root.join("models");
        let rd = match std::fs::read_dir(&models) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", models.display())),
        };
        let mut out = Vec::new();
        for d in rd.flatten() {
            let dir = d.path();
            if d.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if let Ok(m) = read_manifest(&dir) {
                out.push(Entry { dir, manifest: m });
            }
        }
        out.sort_by(|a, b| a.manifest.name.cmp(&b.manifest.name));
        Ok(out)
    }

    /// The model called `name`; an unknown name lists the near matches.
    pub fn find(&self, name: &str) -> Result<Entry> {
        let all = self.list()?;
        if let Some(e) = all.iter().find(|e| e.manifest.name == name) {
            return Ok(e.clone());
        }
        // `NAME` finds `NAME:latest`, as in Ollama.
        let latest = format!("{name}:latest");
        if let Some(e) = all.iter().find(|e| e.manifest.name == latest) {
            return Ok(e.clone());
        }
        let names: Vec<&str> = all.iter().map(|e| e.manifest.name.as_str()).collect();
        let near = near_matches(name, &names);
        if near.is_empty() {
            bail!(
                "no model named `{name}` in the store {} ({})",
                self.root.display(),
                if names.is_empty() {
                    "it is empty; add one with `hanzo-engine pull`".to_string()
                } else {
                    format!("it has: {}", names.join(", "))
                }
            );
        }
        bail!(
            "no model named `{name}` in the store {}; did you mean {}?",
            self.root.display(),
            near.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        )
    }

    /// Writes a model folder for `blobs` atomically (replacing a model of the same name) and
    /// returns it.
    pub fn commit(&self, manifest: Manifest, blobs: &[Blob]) -> Result<Entry> {
        check_name(&manifest.name)?;
        let models = self.dir("models")?;
        let tmp = models.join(format!(".tmp-{}-{}", std::process::id(), manifest.name));
        let _ = std::fs::remove_dir_all(&tmp);
        let result = (|| -> Result<PathBuf> {
            std::fs::create_dir_all(&tmp)?;
            for (f, b) in manifest.files.iter().zip(blobs) {
                let dst = tmp.join(&f.name);
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                link_or_copy(&b.path, &dst)?;
            }
            let json = serde_json::to_vec_pretty(&manifest)?;
            std::fs::write(tmp.join(MANIFEST), json)?;
            let dst = models.join(&manifest.name);
            if dst.exists() {
                let old = models.join(format!(".old-{}-{}", std::process::id(), manifest.name));
                std::fs::rename(&dst, &old)?;
                std::fs::rename(&tmp, &dst)?;
                std::fs::remove_dir_all(&old)?;
            } else {
                std::fs::rename(&tmp, &dst)?;
            }
            Ok(dst)
        })();
        match result {
            Ok(dir) => {
                self.collect_garbage()?;
                Ok(Entry { dir, manifest })
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                Err(e.context(format!(
                    "cannot write the model folder in {}",
                    models.display()
                )))
            }
        }
    }

    /// Removes a model, then the blobs no other model uses.
    pub fn remove(&self, name: &str) -> Result<Entry> {
        let entry = self.find(name)?;
        let doomed = entry.dir.with_file_name(format!(
            ".rm-{}-{}",
            std::process::id(),
            entry.manifest.name
        ));
        std::fs::rename(&entry.dir, &doomed)
            .with_context(|| format!("cannot remove {}", entry.dir.display()))?;
        std::fs::remove_dir_all(&doomed)
            .with_context(|| format!("cannot remove {}", doomed.display()))?;
        self.collect_garbage()?;
        Ok(entry)
    }

    /// Deletes the blobs no manifest names; returns the bytes freed.
    pub fn collect_garbage(&self) -> Result<u64> {
        let used: std::collections::HashSet<String> = self
            .list()?
            .iter()
            .flat_map(|e| {
                e.manifest
                    .files
                    .iter()
                    .map(|f| f.sha256.to_ascii_lowercase())
            })
            .collect();
        let Ok(rd) = std::fs::read_dir(self.root.join("blobs")) else {
            return Ok(0);
        };
        let mut freed = 0;
        for b in rd.flatten() {
            let name = b.file_name().to_string_lossy().into_owned();
            let Some(digest) = name.strip_prefix("sha256-") else {
                continue;
            };
            if !used.contains(digest) {
                freed += b.metadata().map(|m| m.len()).unwrap_or(0);
                let _ = std::fs::remove_file(b.path());
            }
        }
        Ok(freed)
    }
}

/// `--model` for every command: an existing path as it is, else a store name.
pub fn resolve_model(spec: &Path) -> Result<PathBuf> {
    if spec.exists() {
        return Ok(spec.to_path_buf());
    }
    let name = spec.to_string_lossy();
    let store = Store::open(None)?;
    let entry = store
        .find(&name)
        .with_context(|| format!("`{name}` is neither a file nor a directory"))?;
    Ok(entry.model_path())
}

/// Names: letters, digits, `.`, `_`, `-` and `:`, not starting with a dot.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 128
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
    {
        bail!("bad model name `{name}`: use letters, digits, `.`, `_`, `-` and `:` (not first `.`), at most 128 characters");
    }
    Ok(())
}

fn read_manifest(dir: &Path) -> Result<Manifest> {
    let bytes = std::fs::read(dir.join(MANIFEST))?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// A hard link (the blob is stored once); a copy where the filesystem has none.
fn link_or_copy(src: &Path, dst: &Path) -> Result<()> {
    if std::fs::hard_link(src, dst).is_err() {
        std::fs::copy(src, dst)
            .with_context(|| format!("cannot copy {} to {}", src.display(), dst.display()))?;
    }
    Ok(())
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// Names within a small edit distance of `name`, or containing it, closest first.
fn near_matches<'a>(name: &str, names: &[&'a str]) -> Vec<&'a str> {
    let q = name.to_lowercase();
    let mut scored: Vec<(usize, &str)> = names
        .iter()
        .filter_map(|&n| {
            let l = n.to_lowercase();
            let d = edit_distance(&q, &l);
            let close = d <= (q.len() / 3).max(2) || l.contains(&q) || q.contains(&l);
            close.then_some((d, n))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Seconds since 1970 as RFC 3339 UTC (days to civil date: Howard Hinnant's algorithm).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_652_383), "2026-11-26T00:19:43Z");
    }

    #[test]
    fn near() {
        let names = ["gemma-3-270m", "smollm2:135m", "qwen2.5-coder"];
        assert_eq!(near_matches("gemma-3-270", &names), vec!["gemma-3-270m"]);
        assert_eq!(near_matches("smollm2", &names), vec!["smollm2:135m"]);
        assert!(near_matches("llama", &names).is_empty());
    }

    #[test]
    fn names() {
        assert!(check_name("smollm2:135m").is_ok());
        assert!(check_name("../x").is_err());
        assert!(check_name(".hidden").is_err());
        assert!(check_name("a/b").is_err());
    }
}

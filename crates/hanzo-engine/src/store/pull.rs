//! `hanzo-engine pull SOURCE [--name NAME]`: resolve the source to files, fetch each into
//! the blobs (resuming, verifying), check the model reads, then publish its folder.

use super::download::{self, Remote};
use super::{hf, human_bytes, ollama, rfc3339, Blob, Manifest, ManifestFile, Source, Store};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct PullArgs {
    /// A local file or directory, an http(s):// URL, hf://ORG/REPO[/FILE], ORG/REPO[:QUANT]
    /// (a GGUF repository's Q4_K_M file by default), or ollama://NAME[:TAG].
    pub source: String,
    /// The name in the store (default: from the source).
    #[arg(long)]
    pub name: Option<String>,
    /// The store directory (default: HANZO_MODELS_DIR, else ~/.hanzo/models).
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
}

pub fn pull(args: PullArgs) -> Result<()> {
    let t0 = Instant::now();
    let source = Source::parse(&args.source)?;
    let name = args.name.clone().unwrap_or_else(|| source.default_name());
    super::check_name(&name)?;
    let store = Store::open(args.model_dir.as_deref())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (blobs, files, entry) = rt.block_on(fetch_all(&store, &source))?;
    let format = if entry.ends_with(".gguf") {
        "gguf"
    } else {
        "safetensors"
    };
    let manifest = Manifest {
        name: name.clone(),
        source: args.source.clone(),
        format: format.into(),
        entry,
        files,
        pulled_at: rfc3339(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        ),
    };
    if let Err(e) = check_readable(&manifest, &blobs) {
        store.collect_garbage()?;
        return Err(e);
    }
    let e = store.commit(manifest, &blobs)?;
    eprintln!(
        "pulled {name}: {} file{}, {} in {:.1} s -> {}",
        e.manifest.files.len(),
        if e.manifest.files.len() == 1 { "" } else { "s" },
        human_bytes(e.size()),
        t0.elapsed().as_secs_f64(),
        e.model_path().display()
    );
    Ok(())
}

type Fetched = (Vec<Blob>, Vec<ManifestFile>, String);

async fn fetch_all(store: &Store, source: &Source) -> Result<Fetched> {
    let (remotes, entry) = match source {
        Source::Local(path) => return copy_local(store, path),
        Source::Url(url) => {
            let name = url
                .split(['?', '#'])
                .next()
                .unwrap_or(url)
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty())
                .unwrap_or("model.gguf")
                .to_string();
            if !name.ends_with(".gguf") {
                bail!("{url}: expected a .gguf file (a safetensors model is a directory: pull it from hf:// or a local path)");
            }
            let entry = name.clone();
            let r = Remote {
                name,
                url: url.clone(),
                sha256: None,
                size: None,
                digest_in_headers: true,
                auth: None,
            };
            (vec![r], entry)
        }
        Source::HuggingFace { repo, file, quant } => {
            hf::plan(repo, file.as_deref(), quant.as_deref()).await?
        }
        Source::Ollama {
            namespace,
            name,
            tag,
        } => ollama::plan(namespace, name, tag).await?,
    };
    let mut blobs = Vec::new();
    let mut files = Vec::new();
    for r in &remotes {
        let b = download::fetch(store, r).await?;
        files.push(ManifestFile {
            name: r.name.clone(),
            size: b.size,
            sha256: b.sha256.clone(),
            verified: b.verified,
            url: Some(r.url.clone()),
        });
        blobs.push(b);
    }
    Ok((blobs, files, entry))
}

/// A local file is copied in as it is; from a directory, a GGUF file or the files of a
/// safetensors model.
fn copy_local(store: &Store, path: &Path) -> Result<Fetched> {
    let mut picked: Vec<(String, PathBuf)> = Vec::new();
    let entry;
    if path.is_file() {
        let name = path
            .file_name()
            .context("a file without a name")?
            .to_string_lossy()
            .into_owned();
        entry = if name.ends_with(".safetensors") {
            ".".to_string()
        } else {
            name.clone()
        };
        picked.push((name, path.to_path_buf()));
    } else {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let ggufs: Vec<&String> = names.iter().filter(|n| n.ends_with(".gguf")).collect();
        let has_config = names.iter().any(|n| n == "config.json");
        if !has_config && ggufs.len() == 1 {
            entry = ggufs[0].clone();
            picked.push((entry.clone(), path.join(&entry)));
        } else if has_config {
            for n in &names {
                let keep = n.ends_with(".safetensors")
                    || (n.ends_with(".json") && !n.starts_with('.'))
                    || n == "vocab.txt";
                if keep {
                    picked.push((n.clone(), path.join(n)));
                }
            }
            let pooling = path.join("1_Pooling").join("config.json");
            if pooling.is_file() {
                picked.push(("1_Pooling/config.json".into(), pooling));
            }
            entry = ".".into();
        } else {
            bail!(
                "{}: expected one .gguf file, or a safetensors model (config.json and *.safetensors)",
                path.display()
            );
        }
    }
    let mut blobs = Vec::new();
    let mut files = Vec::new();
    for (name, p) in picked {
        let b = download::copy_local(store, &name, &p)?;
        files.push(ManifestFile {
            name,
            size: b.size,
            sha256: b.sha256.clone(),
            verified: false,
            url: None,
        });
        blobs.push(b);
    }
    Ok((blobs, files, entry))
}

/// The model's header must read before the model is published under its name.
fn check_readable(m: &Manifest, blobs: &[Blob]) -> Result<()> {
    let blob_of = |name: &str| {
        m.files
            .iter()
            .position(|f| f.name == name)
            .map(|i| &blobs[i].path)
    };
    if m.format == "gguf" {
        let path = blob_of(&m.entry).context("the manifest's entry is not among its files")?;
        if let Err(e) = hanzo_ml::quantized::gguf::GgufFile::open(path) {
            // The error names the blob's path; the entry's name is the one the user knows.
            let why = e.to_string();
            let why = why.rsplit(": ").next().unwrap_or(&why);
            bail!(
                "{} is not a readable GGUF file ({why}); nothing was stored",
                m.entry
            );
        }
    } else {
        let path = blob_of("config.json")
            .with_context(|| format!("{}: a safetensors model needs a config.json", m.source))?;
        let bytes = std::fs::read(path)?;
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .context("config.json is not JSON; nothing was stored")?;
    }
    Ok(())
}

//! Resumable, verified transfers into the store's blobs: bytes go to `partial/KEY.partial`,
//! an interrupted transfer continues from where it stopped (an HTTP `Range` request), the
//! sha256 is computed on the way and checked against the published one, and only a
//! complete, verified file is renamed into `blobs/`.

use super::{http, Blob, Store};
use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;
use ring::digest::{digest, Context as Sha256, SHA256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One file to fetch.
pub struct Remote {
    /// Its name inside the model folder.
    pub name: String,
    pub url: String,
    /// The sha256 the source publishes, when it publishes one before the transfer.
    pub sha256: Option<String>,
    pub size: Option<u64>,
    /// Read the sha256 from the response headers (Hugging Face's `X-Linked-Etag`).
    pub digest_in_headers: bool,
    /// A bearer token for the source's own host.
    pub auth: Option<String>,
}

/// Fetches `r` into the store's blobs (nothing to do when a blob with its published digest
/// is there already). A transfer that fails leaves the store as it was, except for a partial
/// file that holds bytes worth resuming after a transient failure (a dropped connection, a
/// timeout, a 5xx).
pub async fn fetch(store: &Store, r: &Remote) -> Result<Blob> {
    if let Some(blob) = r.sha256.as_deref().and_then(|d| store.blob(d)) {
        eprintln!("{}: already in the store", r.name);
        return Ok(blob);
    }
    let key = match &r.sha256 {
        Some(d) => format!("sha256-{d}"),
        None => format!(
            "url-{}",
            &hex(digest(&SHA256, r.url.as_bytes()).as_ref())[..32]
        ),
    };
    let mut partial = Partial::find(store, &key, &r.name)?;
    let result = transfer(store, r, &mut partial).await;
    if result.is_err() {
        partial.clean_up();
    }
    result
}

async fn transfer(store: &Store, r: &Remote, partial: &mut Partial) -> Result<Blob> {
    let mut have = partial.len();
    let mut hasher = Sha256::new(&SHA256);
    if let Some(file) = partial.file.as_mut() {
        hash_prefix(file, have, &mut hasher)?;
    }
    // The first response's ETag (or Last-Modified), sent back as `If-Range` on a resume: a
    // file that changed on the server in between comes back whole instead of spliced.
    let mut headers = vec![("accept", "*/*".to_string())];
    if have > 0 {
        headers.push(("range", format!("bytes={have}-")));
        if let Ok(v) = std::fs::read_to_string(partial.validator()) {
            headers.push(("if-range", v));
        }
    }
    let mut resp = http::get(&r.url, &headers, r.auth.as_deref()).await?;
    let status = resp.status.as_u16();
    let complete = r.size.or_else(|| range_total(&resp.headers)) == Some(have);
    if status == 416 && complete {
        // The partial file is already complete: only the check is left.
        let expected = r.sha256.clone();
        return finish(store, r, partial, hasher, expected);
    }
    // The file is gone, or the partial one is longer than it: nothing here is worth keeping.
    partial.discard = matches!(status, 404 | 410 | 416);
    resp = resp.ok().await?;
    let validator = ["etag", "last-modified"]
        .iter()
        .find_map(|h| resp.headers.get(*h)?.to_str().ok().map(str::to_string));
    if have > 0 && status == 206 {
        let start = content_range_start(&resp.headers);
        if start != Some(have) {
            bail!(
                "{}: asked for bytes from {have}, the server sent a range starting at {}",
                r.url,
                start.map_or("an unknown offset".into(), |s| s.to_string())
            );
        }
        eprintln!("{}: resuming at {}", r.name, human_bytes(have));
    } else if have > 0 {
        // The server ignored the range: start over, with this response's validator.
        partial.truncate()?;
        if let Some(v) = &validator {
            let _ = std::fs::write(partial.validator(), v);
        }
        have = 0;
        hasher = Sha256::new(&SHA256);
    }
    let expected = published_digest(r, &resp);
    if let Some(blob) = expected.as_deref().and_then(|d| store.blob(d)) {
        partial.discard = true;
        partial.clean_up();
        eprintln!("{}: already in the store", r.name);
        return Ok(blob);
    }
    let total = resp
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map(|n| n + have)
        .or(r.size);
    let mut progress = Progress::new(&r.name, total, have);
    while let Some(chunk) = resp.chunk().await.map_err(|e| {
        progress.abandon();
        e.context(format!(
            "the transfer of {} stopped after {} of {}; run the same pull again to resume",
            r.name,
            human_bytes(progress.done),
            total.map_or("?".into(), human_bytes)
        ))
    })? {
        partial.append(&chunk, validator.as_deref())?;
        hasher.update(&chunk);
        progress.add(chunk.len() as u64);
    }
    progress.finish();
    if let Some(t) = total {
        if progress.done != t {
            bail!(
                "the transfer of {} ended after {} of {} bytes; run the same pull again to resume",
                r.name,
                progress.done,
                t
            );
        }
    }
    finish(store, r, partial, hasher, expected)
}

/// The partial file of one transfer, `partial/KEY.partial`, locked while this pull holds it.
/// It is made when the first bytes arrive, so a pull that receives nothing leaves the store
/// as it was; `clean_up` after a failure removes it when it holds nothing or when `discard`
/// says its bytes are worth nothing, along with the folders this transfer made.
struct Partial {
    path: PathBuf,
    file: Option<File>,
    /// Folders this transfer created (the store's root, `partial/`), innermost last.
    made_dirs: Vec<PathBuf>,
    /// The failure was definite (the source answered 404, 410 or an impossible range, or the
    /// bytes did not hash to the published digest): resuming would not help.
    discard: bool,
    /// For the "another pull" message.
    name: String,
}

impl Partial {
    /// The partial file of `key`, opened and locked if an earlier transfer left one.
    fn find(store: &Store, key: &str, name: &str) -> Result<Self> {
        let path = store.root().join("partial").join(format!("{key}.partial"));
        let mut p = Partial {
            path,
            file: None,
            made_dirs: Vec::new(),
            discard: false,
            name: name.to_string(),
        };
        if p.path.exists() {
            p.open()?;
        }
        Ok(p)
    }

    fn open(&mut self) -> Result<()> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&self.path)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        // Two pulls appending to one partial file would corrupt it; the lock ends with the
        // process.
        if file.try_lock().is_err() {
            bail!(
                "{}: another pull is downloading this file right now ({})",
                self.name,
                self.path.display()
            );
        }
        self.file = Some(file);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len())
    }

    /// Where the first response's validator (ETag or Last-Modified) is kept for `If-Range`.
    fn validator(&self) -> PathBuf {
        self.path.with_extension("validator")
    }

    /// Appends bytes at the end, making the file (and its folders) first if need be.
    fn append(&mut self, bytes: &[u8], validator: Option<&str>) -> Result<()> {
        if self.file.is_none() {
            let mut missing = Vec::new();
            let mut dir = self.path.parent();
            while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                missing.push(d.to_path_buf());
                dir = d.parent();
            }
            for d in missing.iter().rev() {
                std::fs::create_dir(d).with_context(|| format!("cannot create {}", d.display()))?;
                self.made_dirs.push(d.clone());
            }
            self.open()?;
            if let Some(v) = validator {
                let _ = std::fs::write(self.validator(), v);
            }
        }
        let path = &self.path;
        let file = self.file.as_mut().context("the partial file is not open")?;
        file.seek(SeekFrom::End(0))
            .and_then(|_| file.write_all(bytes))
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Empties the file for a transfer that starts over.
    fn truncate(&mut self) -> Result<()> {
        if let Some(f) = &self.file {
            f.set_len(0)
                .with_context(|| format!("cannot write {}", self.path.display()))?;
        }
        Ok(())
    }

    /// After a failure: keeps a file worth resuming, removes anything else this transfer made.
    fn clean_up(&mut self) {
        if let Some(file) = self.file.take() {
            let empty = file.metadata().map_or(true, |m| m.len() == 0);
            drop(file);
            if empty || self.discard {
                let _ = std::fs::remove_file(&self.path);
                let _ = std::fs::remove_file(self.validator());
            }
        }
        // Only folders left empty go (remove_dir refuses any other).
        for d in self.made_dirs.drain(..).rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Checks the digest and moves the finished partial file into `blobs/`.
fn finish(
    store: &Store,
    r: &Remote,
    partial: &mut Partial,
    hasher: Sha256,
    expected: Option<String>,
) -> Result<Blob> {
    if partial.file.is_none() {
        // An empty body: the file holding it is made here.
        partial.append(&[], None)?;
    }
    let file = partial
        .file
        .as_ref()
        .context("the partial file is not open")?;
    file.sync_all()
        .with_context(|| format!("cannot write {}", partial.path.display()))?;
    let size = file.metadata()?.len();
    let digest = hex(hasher.finish().as_ref());
    if let Some(want) = &expected {
        if !want.eq_ignore_ascii_case(&digest) {
            // `fetch` removes the file, its validator and the folders this pull made.
            partial.discard = true;
            bail!(
                "{}: checksum mismatch: the source publishes sha256 {want}, the {} downloaded hash to {digest}; nothing was stored",
                r.name,
                human_bytes(size)
            );
        }
    }
    // Closed (and unlocked) before it moves into `blobs/`.
    partial.file = None;
    let _ = std::fs::remove_file(partial.validator());
    store.adopt(&partial.path, &digest, size, expected.is_some())
}

/// A copy of a local file into the blobs, hashed on the way (same checks as a download).
pub fn copy_local(store: &Store, name: &str, path: &Path) -> Result<Blob> {
    let mut src = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let total = src.metadata()?.len();
    let tmp = store.partial_dir()?.join(format!(
        "copy-{}-{}.partial",
        std::process::id(),
        name.replace('/', "_")
    ));
    let result = (|| -> Result<Blob> {
        let mut dst =
            File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        let mut hasher = Sha256::new(&SHA256);
        let mut progress = Progress::new(name, Some(total), 0);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = src
                .read(&mut buf)
                .with_context(|| format!("cannot read {}", path.display()))?;
            if n == 0 {
                break;
            }
            dst.write_all(&buf[..n])
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            hasher.update(&buf[..n]);
            progress.add(n as u64);
        }
        progress.finish();
        dst.sync_all()?;
        let digest = hex(hasher.finish().as_ref());
        store.adopt(&tmp, &digest, progress.done, false)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The sha256 the source publishes for this response, if any.
fn published_digest(r: &Remote, resp: &http::Response) -> Option<String> {
    if r.sha256.is_some() || !r.digest_in_headers {
        return r.sha256.clone();
    }
    ["x-linked-etag", "etag"].iter().find_map(|h| {
        let v = resp.header_anywhere(h)?;
        let v = v
            .trim_start_matches("W/")
            .trim_matches('"')
            .to_ascii_lowercase();
        (v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit())).then_some(v)
    })
}

/// `N` of `Content-Range: bytes */N` (the answer to a range past the end).
fn range_total(h: &http::Headers) -> Option<u64> {
    let v = h.get("content-range")?.to_str().ok()?;
    v.strip_prefix("bytes */")?.trim().parse().ok()
}

fn content_range_start(h: &http::Headers) -> Option<u64> {
    let v = h.get("content-range")?.to_str().ok()?;
    let range = v.strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

fn hash_prefix(file: &mut File, len: u64, hasher: &mut Sha256) -> Result<()> {
    file.seek(SeekFrom::Start(0))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = file.read(&mut buf[..left.min(1 << 20) as usize])?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A byte progress bar on a terminal (bytes, speed, ETA); a log line every few seconds
/// otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    name: String,
    total: Option<u64>,
    done: u64,
    start: Instant,
    start_bytes: u64,
    last_line: Instant,
}

impl Progress {
    fn new(name: &str, total: Option<u64>, done: u64) -> Self {
        let bar = crate::progress::bytes(total, name);
        match &bar {
            Some(b) => b.set_position(done),
            None => eprintln!(
                "pulling {name}: {}",
                total.map_or("size unknown".into(), human_bytes)
            ),
        }
        let now = Instant::now();
        Progress {
            bar,
            name: name.to_string(),
            total,
            done,
            start: now,
            start_bytes: done,
            last_line: now,
        }
    }

    fn add(&mut self, n: u64) {
        self.done += n;
        match &self.bar {
            Some(b) => b.set_position(self.done),
            None if self.last_line.elapsed() >= Duration::from_secs(5) => {
                self.last_line = Instant::now();
                eprintln!("{}", self.line());
            }
            None => {}
        }
    }

    fn line(&self) -> String {
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        let speed = (self.done - self.start_bytes) as f64 / secs;
        let pct = self.total.filter(|&t| t > 0).map_or(String::new(), |t| {
            format!("{:.0}% ", 100.0 * self.done as f64 / t as f64)
        });
        format!(
            "pulling {}: {pct}{} at {}/s",
            self.name,
            human_bytes(self.done),
            human_bytes(speed as u64)
        )
    }

    fn finish(&mut self) {
        match self.bar.take() {
            Some(b) => b.finish_and_clear(),
            None => eprintln!("{}", self.line()),
        }
    }

    fn abandon(&mut self) {
        if let Some(b) = self.bar.take() {
            b.abandon();
        }
    }
}

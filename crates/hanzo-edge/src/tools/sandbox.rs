//! The file tools' sandbox: one directory the host names, and nothing outside it.
//!
//! A path is checked as text first (relative, no `..` or a look-alike of it, no NUL, control
//! or invisible characters, bounded lengths), then walked from the sandbox's root one
//! component at a time without following links: every directory on the way must be a real
//! directory (not a symbolic link), and the file itself a regular file with no other hard
//! link (a hard link is how a file outside would otherwise appear inside). The file is then
//! opened with `O_NOFOLLOW` and checked again by its handle, so a link swapped in between the
//! check and the open is refused too. Writes go to a temporary file beside the target and are
//! renamed over it when complete.

use serde_json::{json, Value};
use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Longest path a tool takes, in bytes, and longest component (Linux's `NAME_MAX`).
const MAX_PATH: usize = 1024;
const MAX_NAME: usize = 255;

/// Characters that render as a dot or dots: a name made only of them reads as `..` (or `.`)
/// to a person, and is refused.
const DOT_LIKE: &[char] = &[
    '.',
    '\u{2024}',
    '\u{2025}',
    '\u{2026}',
    '\u{FE52}',
    '\u{FF0E}',
    '\u{3002}',
    '\u{FF61}',
    '\u{0701}',
    '\u{0702}',
    '\u{A4F8}',
    '\u{10A50}',
    '\u{00B7}',
    '\u{2E31}',
    '\u{2027}',
    '\u{0660}',
    '\u{06F0}',
];

/// Characters that do not show: zero-width spaces and joiners, direction overrides, the byte
/// order mark. A name holding one is not what it looks like.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}' | '\u{034F}' | '\u{180E}')
}

/// A directory the file tools are confined to, with size caps.
#[derive(Clone, Debug)]
pub struct Sandbox {
    root: PathBuf,
    /// Largest file `file_read` returns.
    pub max_read_bytes: u64,
    /// Largest content `file_write` writes.
    pub max_write_bytes: u64,
    /// Most entries `file_list` returns.
    pub max_entries: usize,
}

impl Sandbox {
    /// The directory `root` (which must exist); caps of 1 MiB read, 1 MiB written, 1000
    /// entries listed.
    pub fn new(root: impl AsRef<Path>) -> std::io::Result<Self> {
        let root = root.as_ref().canonicalize()?;
        if !root.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        Ok(Self {
            root,
            max_read_bytes: 1 << 20,
            max_write_bytes: 1 << 20,
            max_entries: 1000,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The text of the file at `path`.
    pub fn read(&self, path: &str) -> Result<String, String> {
        let names = components(path, false)?;
        let (dir, name) = self.walk(&names, false)?;
        let target = dir.join(name);
        let meta = lstat(&target, path)?.ok_or_else(|| format!("{path:?}: no such file"))?;
        regular_single(&meta, path)?;
        if meta.len() > self.max_read_bytes {
            return Err(format!(
                "{path:?}: {} bytes, over the {}-byte read limit",
                meta.len(),
                self.max_read_bytes
            ));
        }
        let mut file = open_nofollow(&target, false).map_err(|e| format!("{path:?}: {e}"))?;
        let opened = file.metadata().map_err(|e| format!("{path:?}: {e}"))?;
        same_file(&meta, &opened, path)?;
        regular_single(&opened, path)?;
        let mut bytes = Vec::new();
        (&mut file)
            .take(self.max_read_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{path:?}: {e}"))?;
        if bytes.len() as u64 > self.max_read_bytes {
            return Err(format!(
                "{path:?}: over the {}-byte read limit",
                self.max_read_bytes
            ));
        }
        String::from_utf8(bytes).map_err(|_| format!("{path:?}: not UTF-8 text"))
    }

    /// Writes `content` to `path` whole (a temporary file renamed over it); directories on
    /// the way that do not exist are made. Returns the bytes written.
    pub fn write(&self, path: &str, content: &str) -> Result<u64, String> {
        if content.len() as u64 > self.max_write_bytes {
            return Err(format!(
                "{path:?}: {} bytes, over the {}-byte write limit",
                content.len(),
                self.max_write_bytes
            ));
        }
        let names = components(path, false)?;
        let (dir, name) = self.walk(&names, true)?;
        let target = dir.join(name);
        if let Some(meta) = lstat(&target, path)? {
            regular_single(&meta, path)?;
        }
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".{name}.hanzo-tmp-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = open_nofollow(&tmp, true)?;
            file.write_all(content.as_bytes())?;
            file.sync_all()?;
            // `rename` replaces whatever is at the target's name (a link put there since the
            // check included) and never writes through it.
            std::fs::rename(&tmp, &target)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("{path:?}: {e}"));
        }
        Ok(content.len() as u64)
    }

    /// The entries of the directory at `path` (`""` or `"."`: the sandbox itself), by name:
    /// `{"name", "type": "file" | "dir" | "symlink" | "other", "bytes"}`.
    pub fn list(&self, path: &str) -> Result<Value, String> {
        let names = components(path, true)?;
        let dir = match names.split_last() {
            None => self.root.clone(),
            Some(_) => {
                let (parent, name) = self.walk(&names, false)?;
                let dir = parent.join(name);
                let meta =
                    lstat(&dir, path)?.ok_or_else(|| format!("{path:?}: no such directory"))?;
                if !meta.file_type().is_dir() {
                    return Err(format!("{path:?}: not a directory"));
                }
                dir
            }
        };
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{path:?}: {e}"))? {
            let entry = entry.map_err(|e| format!("{path:?}: {e}"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".hanzo-tmp-") {
                continue;
            }
            let meta = entry.metadata().map_err(|e| format!("{path:?}: {e}"))?; // not followed
            let t = meta.file_type();
            let kind = if t.is_symlink() {
                "symlink"
            } else if t.is_dir() {
                "dir"
            } else if t.is_file() {
                "file"
            } else {
                "other"
            };
            entries.push((name, kind, if t.is_file() { meta.len() } else { 0 }));
        }
        entries.sort();
        let truncated = entries.len() > self.max_entries;
        entries.truncate(self.max_entries);
        let entries: Vec<Value> = entries
            .into_iter()
            .map(|(name, kind, bytes)| json!({"name": name, "type": kind, "bytes": bytes}))
            .collect();
        Ok(
            json!({"path": if path.is_empty() { "." } else { path }, "entries": entries, "truncated": truncated}),
        )
    }

    /// Walks to the directory holding the last of `names` (made where missing when
    /// `create`), refusing any step that is not a real directory. Returns it and the name.
    fn walk<'a>(&self, names: &'a [String], create: bool) -> Result<(PathBuf, &'a str), String> {
        let (last, dirs) = names.split_last().ok_or("no file named")?;
        let mut at = self.root.clone();
        for (i, name) in dirs.iter().enumerate() {
            at.push(name);
            let shown = names[..=i].join("/");
            match lstat(&at, &shown)? {
                Some(m) if m.file_type().is_symlink() => {
                    return Err(format!(
                        "{shown:?} is a symbolic link; paths may not pass through one"
                    ))
                }
                Some(m) if m.file_type().is_dir() => {}
                Some(_) => return Err(format!("{shown:?} is not a directory")),
                None if create => {
                    std::fs::create_dir(&at).map_err(|e| format!("{shown:?}: {e}"))?
                }
                None => return Err(format!("{shown:?}: no such directory")),
            }
        }
        // What the walk reached is the sandbox or below it (every step was a real directory;
        // this holds it against a directory moved in the meantime).
        let real = at.canonicalize().map_err(|e| format!("{e}"))?;
        if !real.starts_with(&self.root) {
            return Err("the path leads out of the sandbox".into());
        }
        Ok((real, last))
    }
}

/// The components of a relative `path`, checked as text.
fn components(path: &str, allow_root: bool) -> Result<Vec<String>, String> {
    let shown: String = path.chars().take(80).collect();
    let refuse = |why: &str| Err(format!("{shown:?}: {why}"));
    if path.len() > MAX_PATH {
        return refuse(&format!("longer than {MAX_PATH} bytes"));
    }
    if path.contains('\0') {
        return refuse("holds a NUL byte");
    }
    if path.starts_with('/') || path.starts_with('~') {
        return refuse("not a relative path (paths are relative to the sandbox)");
    }
    if path.contains('\\') {
        return refuse("holds a backslash");
    }
    if path.len() >= 2 && path.as_bytes()[1] == b':' {
        return refuse("names a drive");
    }
    if let Some(c) = path.chars().find(|c| c.is_control() || invisible(*c)) {
        return refuse(&format!(
            "holds the invisible or control character U+{:04X}",
            c as u32
        ));
    }
    let mut out = Vec::new();
    for name in path.split('/') {
        if name.is_empty() || name == "." {
            continue;
        }
        if name == ".." {
            return refuse("`..` leads out of the sandbox");
        }
        if name.chars().all(|c| DOT_LIKE.contains(&c)) {
            return refuse("a name made of dots or dot look-alikes");
        }
        if name.len() > MAX_NAME {
            return refuse(&format!("a name longer than {MAX_NAME} bytes"));
        }
        out.push(name.to_string());
    }
    if out.is_empty() && !allow_root {
        return refuse("names no file");
    }
    Ok(out)
}

/// `lstat`: the entry itself, a link not followed; `None` where nothing is.
fn lstat(path: &Path, shown: &str) -> Result<Option<Metadata>, String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{shown:?}: {e}")),
    }
}

/// A regular file with no other hard link (a link into the sandbox of a file outside it is
/// a second name for the same file).
fn regular_single(meta: &Metadata, shown: &str) -> Result<(), String> {
    let t = meta.file_type();
    if t.is_symlink() {
        return Err(format!(
            "{shown:?} is a symbolic link; links are not followed"
        ));
    }
    if t.is_dir() {
        return Err(format!("{shown:?} is a directory"));
    }
    if !t.is_file() {
        return Err(format!(
            "{shown:?} is not a regular file (a device, pipe or socket)"
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.nlink() > 1 {
            return Err(format!(
                "{shown:?} has other hard links; it may be a file outside the sandbox"
            ));
        }
    }
    Ok(())
}

/// The opened file is the one checked.
fn same_file(checked: &Metadata, opened: &Metadata, shown: &str) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if (checked.dev(), checked.ino()) != (opened.dev(), opened.ino()) {
            return Err(format!("{shown:?} changed while it was opened"));
        }
    }
    let _ = (checked, opened, shown);
    Ok(())
}

/// Opens without following a link at the last component (and without blocking on a pipe);
/// `create`: a new file, owner read/write, that must not exist yet.
fn open_nofollow(path: &Path, create: bool) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    if create {
        o.write(true).create_new(true);
    } else {
        o.read(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        if create {
            o.mode(0o600);
        }
    }
    o.open(path)
}

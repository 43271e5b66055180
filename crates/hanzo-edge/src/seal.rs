//! Sealed models: a GGUF file encrypted at rest with AES-256-GCM (ring's) in chunks that are
//! each authenticated on their own, so a model is decrypted chunk by chunk straight into the
//! buffer it is run from (no second copy, nothing decrypted on disk) and a damaged byte is
//! reported with the chunk it is in.
//!
//! The layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `HZSEAL\0\x01` |
//! | 4 | format version (1) |
//! | 4 | plaintext bytes per chunk (a power of two, 4 KiB to 64 MiB) |
//! | 8 | plaintext length |
//! | 16 | salt, random per file |
//! | 32 | key check |
//! | ... | each chunk's ciphertext followed by its 16-byte tag; the last chunk may be short |
//!
//! The 32-byte key the host holds is never used directly: HKDF-SHA256 over it with the
//! file's salt gives the file's AES key and its key check (so a wrong key is told from a
//! damaged file, and no two files share an AES key). Chunk `i`'s nonce is `i` (96 bits, big
//! endian); its additional data is the whole header and whether it is the last chunk, so
//! chunks cannot be reordered, moved between files, dropped from the end, or the header
//! edited.

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use ring::hkdf;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"HZSEAL\0\x01";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 72;
const TAG_LEN: usize = 16;
/// What `hanzo-edge seal` uses unless told otherwise.
pub const DEFAULT_CHUNK: u32 = 1 << 20;
const AES_INFO: &[u8] = b"hanzo-seal v1 aes-256-gcm";
const CHECK_INFO: &[u8] = b"hanzo-seal v1 key check";

/// Why a sealed file could not be written or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: not a sealed model (no HZSEAL header)")]
    NotSealed(String),
    #[error("{path}: sealed with format version {version}; this build reads version {VERSION}")]
    Version { path: String, version: u32 },
    #[error("{0}: the header is damaged ({1})")]
    Header(String, String),
    #[error("{path}: {found} bytes, where its header promises {expected}: the file was cut short or added to")]
    Length {
        path: String,
        expected: u64,
        found: u64,
    },
    #[error("{0}: the key does not open this file (a different key sealed it, or its header is damaged)")]
    WrongKey(String),
    #[error("{path}: chunk {index} of {count} (bytes {start}..{end} of the file) fails authentication: the file is damaged or was altered")]
    Chunk {
        path: String,
        index: u64,
        count: u64,
        start: u64,
        end: u64,
    },
    #[error("key: {0}")]
    Key(String),
    #[error("{0}")]
    Config(String),
}

/// A 256-bit sealing key; its bytes are overwritten when it is dropped.
pub struct SealKey([u8; 32]);

impl SealKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh key from the system's random source.
    pub fn generate() -> Result<Self, SealError> {
        use ring::rand::SecureRandom;
        let mut k = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut k)
            .map_err(|_| SealError::Key("the system's random source failed".into()))?;
        Ok(Self(k))
    }

    /// 64 hexadecimal digits (surrounding whitespace ignored) or exactly 32 raw bytes.
    pub fn parse(text_or_bytes: &[u8]) -> Result<Self, SealError> {
        let trimmed = text_or_bytes.trim_ascii();
        if trimmed.len() == 64 && trimmed.iter().all(u8::is_ascii_hexdigit) {
            let mut k = [0u8; 32];
            for (i, pair) in trimmed.chunks(2).enumerate() {
                let hex = std::str::from_utf8(pair).expect("ASCII hex digits");
                k[i] = u8::from_str_radix(hex, 16).expect("two hex digits");
            }
            return Ok(Self(k));
        }
        match <[u8; 32]>::try_from(text_or_bytes) {
            Ok(k) => Ok(Self(k)),
            Err(_) => Err(SealError::Key(format!(
                "{} bytes: a key is 64 hexadecimal digits or 32 raw bytes",
                text_or_bytes.len()
            ))),
        }
    }

    /// The key as 64 hexadecimal digits (what `hanzo-edge keygen` writes).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The file's AES key and key check.
    fn derive(&self, salt: &[u8]) -> (LessSafeKey, [u8; 32]) {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&self.0);
        let aes: UnboundKey = prk
            .expand(&[AES_INFO], &AES_256_GCM)
            .expect("32 bytes is within HKDF-SHA256's output")
            .into();
        let mut check = [0u8; 32];
        prk.expand(&[CHECK_INFO], hkdf::HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut check))
            .expect("32 bytes is within HKDF-SHA256's output");
        (LessSafeKey::new(aes), check)
    }
}

impl Drop for SealKey {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference into our own array; the
            // volatile write keeps the compiler from dropping the store as dead.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// A host-provided key: where a platform key store (Keychain, Keystore, TPM) plugs in.
pub type KeyCallback = Arc<dyn Fn() -> Result<SealKey, String> + Send + Sync>;

/// Where [`crate::Edge::new`] gets the key of a sealed model.
#[derive(Clone)]
pub enum KeySource {
    /// A file holding 64 hexadecimal digits or 32 raw bytes.
    File(PathBuf),
    /// An environment variable holding 64 hexadecimal digits.
    Env(String),
    /// Asked of the host when the model is opened.
    Host(KeyCallback),
}

impl KeySource {
    pub fn key(&self) -> Result<SealKey, SealError> {
        match self {
            KeySource::File(path) => {
                let bytes = std::fs::read(path).map_err(|source| SealError::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                SealKey::parse(&bytes)
                    .map_err(|e| SealError::Key(format!("{}: {e}", path.display())))
            }
            KeySource::Env(var) => match std::env::var(var) {
                Ok(v) => {
                    SealKey::parse(v.as_bytes()).map_err(|e| SealError::Key(format!("${var}: {e}")))
                }
                Err(_) => Err(SealError::Key(format!("${var} is not set"))),
            },
            KeySource::Host(callback) => callback().map_err(SealError::Key),
        }
    }
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::File(p) => write!(f, "File({})", p.display()),
            KeySource::Env(v) => write!(f, "Env({v})"),
            KeySource::Host(_) => f.write_str("Host(..)"),
        }
    }
}

/// The fields of a sealed file's header.
#[derive(Clone, Debug)]
struct Header {
    bytes: [u8; HEADER_LEN],
    chunk: u64,
    len: u64,
}

impl Header {
    fn new(chunk: u32, len: u64, salt: [u8; 16], check: [u8; 32]) -> Self {
        let mut bytes = [0u8; HEADER_LEN];
        bytes[..8].copy_from_slice(MAGIC);
        bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&chunk.to_le_bytes());
        bytes[16..24].copy_from_slice(&len.to_le_bytes());
        bytes[24..40].copy_from_slice(&salt);
        bytes[40..72].copy_from_slice(&check);
        Self {
            bytes,
            chunk: chunk as u64,
            len,
        }
    }

    fn parse(path: &str, bytes: [u8; HEADER_LEN]) -> Result<Self, SealError> {
        if &bytes[..8] != MAGIC {
            return Err(SealError::NotSealed(path.into()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let version = u32_at(8);
        if version != VERSION {
            return Err(SealError::Version {
                path: path.into(),
                version,
            });
        }
        let chunk = u32_at(12);
        if !chunk.is_power_of_two() || !(4096..=64 << 20).contains(&chunk) {
            return Err(SealError::Header(
                path.into(),
                format!("a chunk of {chunk} bytes"),
            ));
        }
        let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        Ok(Self {
            bytes,
            chunk: chunk as u64,
            len,
        })
    }

    fn salt(&self) -> &[u8] {
        &self.bytes[24..40]
    }

    fn check(&self) -> &[u8] {
        &self.bytes[40..72]
    }

    fn chunks(&self) -> u64 {
        self.len.div_ceil(self.chunk).max(1)
    }

    /// The sealed file's length.
    fn file_len(&self) -> u64 {
        HEADER_LEN as u64 + self.len + self.chunks() * TAG_LEN as u64
    }

    /// Chunk `i`'s nonce and additional data.
    fn nonce_aad(&self, i: u64) -> (Nonce, Aad<[u8; HEADER_LEN + 1]>) {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&i.to_be_bytes());
        let mut aad = [0u8; HEADER_LEN + 1];
        aad[..HEADER_LEN].copy_from_slice(&self.bytes);
        aad[HEADER_LEN] = (i + 1 == self.chunks()) as u8;
        (Nonce::assume_unique_for_key(nonce), Aad::from(aad))
    }

    /// Plaintext bytes of chunk `i`.
    fn chunk_len(&self, i: u64) -> usize {
        (self.len - i * self.chunk).min(self.chunk) as usize
    }
}

/// Whether the file at `path` starts as a sealed model does.
pub fn is_sealed(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == MAGIC
}

/// Seals `input` into `output` with `key`, `chunk` plaintext bytes per chunk. The output is
/// written beside its final name and renamed into place when whole (readable by its owner
/// only, on Unix).
pub fn seal_file(input: &Path, output: &Path, key: &SealKey, chunk: u32) -> Result<(), SealError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| SealError::Io { path, source }
    };
    if !chunk.is_power_of_two() || !(4096..=64 << 20).contains(&chunk) {
        return Err(SealError::Config(format!(
            "a chunk of {chunk} bytes: a power of two from 4 KiB to 64 MiB"
        )));
    }
    let mut src = File::open(input).map_err(io(input))?;
    let len = src.metadata().map_err(io(input))?.len();
    let mut salt = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
        .map_err(|_| SealError::Key("the system's random source failed".into()))?;
    let (aes, check) = key.derive(&salt);
    let header = Header::new(chunk, len, salt, check);

    let tmp = output.with_extension(format!("tmp-{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut dst = std::io::BufWriter::new(options.open(&tmp).map_err(io(&tmp))?);
    let result = (|| {
        dst.write_all(&header.bytes).map_err(io(&tmp))?;
        let mut buf = vec![0u8; chunk as usize];
        for i in 0..header.chunks() {
            let n = header.chunk_len(i);
            src.read_exact(&mut buf[..n]).map_err(io(input))?;
            let (nonce, aad) = header.nonce_aad(i);
            let tag = aes
                .seal_in_place_separate_tag(nonce, aad, &mut buf[..n])
                .map_err(|_| SealError::Config("AES-GCM refused a chunk".into()))?;
            dst.write_all(&buf[..n]).map_err(io(&tmp))?;
            dst.write_all(tag.as_ref()).map_err(io(&tmp))?;
        }
        let file = dst.into_inner().map_err(|e| io(&tmp)(e.into_error()))?;
        file.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, output).map_err(io(output))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A sealed model opened with its key: the header checked, the chunks not read yet.
pub struct SealedFile {
    path: String,
    file: File,
    header: Header,
    aes: LessSafeKey,
    /// The next chunk `read_next` decrypts.
    next: u64,
}

impl SealedFile {
    /// Opens `path`, checks its header, its length and that `key` is the one it was sealed
    /// with.
    pub fn open(path: &Path, key: &SealKey) -> Result<Self, SealError> {
        let name = path.display().to_string();
        let io = |source| SealError::Io {
            path: name.clone(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let found = file.metadata().map_err(io)?.len();
        let mut bytes = [0u8; HEADER_LEN];
        if found < HEADER_LEN as u64 {
            // Too short for a header: sealed only if it starts like one.
            let mut start = Vec::new();
            file.read_to_end(&mut start).map_err(io)?;
            if !start.starts_with(MAGIC) {
                return Err(SealError::NotSealed(name));
            }
            return Err(SealError::Header(name, format!("{found} bytes long")));
        }
        file.read_exact(&mut bytes).map_err(io)?;
        let header = Header::parse(&name, bytes)?;
        if found != header.file_len() {
            return Err(SealError::Length {
                path: name,
                expected: header.file_len(),
                found,
            });
        }
        let (aes, check) = key.derive(header.salt());
        if check.as_slice() != header.check() {
            return Err(SealError::WrongKey(name));
        }
        Ok(Self {
            path: name,
            file,
            header,
            aes,
            next: 0,
        })
    }

    /// The model's length once decrypted.
    pub fn plaintext_len(&self) -> u64 {
        self.header.len
    }

    /// Bytes of plaintext already decrypted by `read_next`.
    pub fn position(&self) -> u64 {
        (self.next * self.header.chunk).min(self.header.len)
    }

    /// Decrypts the next chunks into `dst`, in place (`dst` holds the ciphertext as it is
    /// read, then the plaintext), filling it whole: its length must end on a chunk
    /// boundary or at the end of the model.
    pub fn read_next(&mut self, dst: &mut [u8]) -> Result<(), SealError> {
        let end = self.position() + dst.len() as u64;
        if end > self.header.len
            || (end != self.header.len && !end.is_multiple_of(self.header.chunk))
        {
            return Err(SealError::Config(format!(
                "{}: {} bytes from {} do not end on a chunk",
                self.path,
                dst.len(),
                self.position()
            )));
        }
        let mut at = 0;
        while at < dst.len() {
            let i = self.next;
            let n = self.header.chunk_len(i);
            let piece = &mut dst[at..at + n];
            let mut tag = [0u8; TAG_LEN];
            let start = HEADER_LEN as u64 + i * (self.header.chunk + TAG_LEN as u64);
            let damaged = || SealError::Chunk {
                path: self.path.clone(),
                index: i,
                count: self.header.chunks(),
                start,
                end: start + (n + TAG_LEN) as u64,
            };
            self.file
                .read_exact(piece)
                .and_then(|()| self.file.read_exact(&mut tag))
                .map_err(|source| SealError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            let (nonce, aad) = self.header.nonce_aad(i);
            self.aes
                .open_in_place_separate_tag(nonce, aad, Tag::from(tag), piece, 0..)
                .map_err(|_| damaged())?;
            at += n;
            self.next += 1;
        }
        Ok(())
    }

    /// The rest of the model, decrypted (the whole of it on a fresh `SealedFile`).
    pub fn read_all(&mut self) -> Result<Vec<u8>, SealError> {
        let mut out = vec![0u8; (self.header.len - self.position()) as usize];
        self.read_next(&mut out)?;
        Ok(out)
    }

    /// Plaintext bytes per chunk.
    pub fn chunk_len(&self) -> u64 {
        self.header.chunk
    }
}

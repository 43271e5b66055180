//! Sealed models: a round trip is bit-exact, every byte flipped or moved in a sealed file is
//! caught (and named by its chunk), a wrong key is refused as such, a sealed model generates
//! what the plain one does, and loading one peaks within its budget.
#![cfg(feature = "seal")]

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use hanzo_edge::seal::{seal_file, KeySource, SealError, SealKey, SealedFile};
use hanzo_edge::{Edge, EdgeConfig, EdgeError, Event};
use hanzo_transformers::{GenerateOptions, Message, SamplingParams};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hanzo-seal-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn key(byte: u8) -> SealKey {
    SealKey::from_bytes([byte; 32])
}

/// Bytes from a small xorshift generator (no pattern AES-GCM could lean on).
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e3779b97f4a7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn open_all(path: &Path, key: &SealKey) -> Result<Vec<u8>, SealError> {
    SealedFile::open(path, key)?.read_all()
}

#[test]
fn round_trips_exactly_and_every_tampered_byte_is_caught() {
    let dir = scratch("tamper");
    let plain = noise(5 * 65536 + 1234); // five whole chunks and a short sixth
    let (input, sealed) = (dir.join("plain"), dir.join("sealed"));
    std::fs::write(&input, &plain).unwrap();
    seal_file(&input, &sealed, &key(7), 65536).unwrap();
    let bytes = std::fs::read(&sealed).unwrap();
    assert_eq!(bytes.len(), 72 + plain.len() + 6 * 16);
    assert_eq!(open_all(&sealed, &key(7)).unwrap(), plain);
    // Not the plaintext on disk: no 64-byte run of it survives.
    assert!(!bytes.windows(64).any(|w| w == &plain[4096..4160]));
    // The same input sealed twice differs (a fresh salt each time).
    let again = dir.join("again");
    seal_file(&input, &again, &key(7), 65536).unwrap();
    assert_ne!(std::fs::read(&again).unwrap(), bytes);

    // Every header byte, then bytes across the chunks and their tags (every 997th, each
    // chunk's first and last ciphertext byte and each tag's first byte).
    let mut positions: Vec<usize> = (0..72).chain((72..bytes.len()).step_by(997)).collect();
    for i in 0..6usize {
        let start = 72 + i * (65536 + 16);
        let n = if i < 5 { 65536 } else { 1234 };
        positions.extend([start, start + n - 1, start + n]);
    }
    let damaged = dir.join("damaged");
    for &at in &positions {
        let mut b = bytes.clone();
        b[at] ^= 0x20;
        std::fs::write(&damaged, &b).unwrap();
        match open_all(&damaged, &key(7)) {
            Ok(_) => panic!("a flipped byte at {at} went unnoticed"),
            Err(SealError::Chunk { index, .. }) => {
                assert!(at >= 72, "a header byte at {at} blamed on chunk {index}");
                assert_eq!(index as usize, (at - 72) / (65536 + 16), "byte {at}");
            }
            Err(
                SealError::NotSealed(_)
                | SealError::Version { .. }
                | SealError::Header(..)
                | SealError::Length { .. }
                | SealError::WrongKey(_),
            ) => assert!(at < 72, "byte {at} of a chunk reported as a header fault"),
            Err(e) => panic!("byte {at}: {e}"),
        }
    }
    eprintln!("{} flipped bytes caught", positions.len());

    // Cut short, added to, two chunks swapped.
    std::fs::write(&damaged, &bytes[..bytes.len() - 1]).unwrap();
    assert!(matches!(
        open_all(&damaged, &key(7)),
        Err(SealError::Length { .. })
    ));
    let mut longer = bytes.clone();
    longer.push(0);
    std::fs::write(&damaged, &longer).unwrap();
    assert!(matches!(
        open_all(&damaged, &key(7)),
        Err(SealError::Length { .. })
    ));
    let mut swapped = bytes.clone();
    let c = 65536 + 16;
    let (first, second) = swapped[72..72 + 2 * c].split_at_mut(c);
    first.swap_with_slice(second);
    std::fs::write(&damaged, &swapped).unwrap();
    let err = open_all(&damaged, &key(7)).unwrap_err();
    assert!(matches!(err, SealError::Chunk { index: 0, .. }), "{err}");
    assert!(err.to_string().contains("chunk 0 of 6"), "{err}");

    // A wrong key is told from damage.
    let err = open_all(&sealed, &key(8)).unwrap_err();
    assert!(matches!(err, SealError::WrongKey(_)), "{err}");
    // And a plain file is not taken for a sealed one.
    assert!(matches!(
        open_all(&input, &key(7)),
        Err(SealError::NotSealed(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn keys_are_read_from_hex_or_raw_bytes_and_nothing_else() {
    let k = SealKey::generate().unwrap();
    let hex = k.to_hex();
    assert_eq!(hex.len(), 64);
    assert_eq!(
        SealKey::parse(format!(" {hex}\n").as_bytes())
            .unwrap()
            .to_hex(),
        hex
    );
    assert_eq!(
        SealKey::parse(&[3u8; 32]).unwrap().to_hex(),
        "03".repeat(32)
    );
    for bad in [&b"abc"[..], &[0u8; 31], &[0u8; 33], &[b'g'; 64]] {
        assert!(matches!(SealKey::parse(bad), Err(SealError::Key(_))));
    }
    assert!(
        format!("{k:?}").find(&hex[..8]).is_none(),
        "Debug shows the key"
    );
    let unset = KeySource::Env("HANZO_TEST_NO_SUCH_KEY_VAR".into());
    assert!(unset.key().unwrap_err().to_string().contains("not set"));
}

fn greedy_reply(edge: &mut Edge) -> String {
    let options = GenerateOptions {
        max_tokens: 24,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ..GenerateOptions::default()
    };
    let messages = [Message::new("user", "Name three colours.")];
    let mut text = String::new();
    for event in edge.chat(&messages, &options).unwrap() {
        if let Event::Text(t) = event.unwrap() {
            text.push_str(&t);
        }
    }
    text
}

#[test]
fn a_sealed_model_generates_what_the_plain_one_does() {
    let dir = scratch("sdk");
    let plain = fixture_path::fixture("smollm2");
    let sealed = dir.join("smollm2.gguf.sealed");
    seal_file(&plain, &sealed, &key(42), 1 << 20).unwrap();

    let mut cfg = EdgeConfig::new(&sealed, 512, 1 << 30);
    match Edge::new(cfg.clone()) {
        Err(EdgeError::Config(m)) => assert!(m.contains("sealed"), "{m}"),
        other => panic!("opened without a key: {:?}", other.err()),
    }
    cfg.key = Some(KeySource::Host(Arc::new(|| Ok(key(41)))));
    match Edge::new(cfg.clone()) {
        Err(EdgeError::Sealed(SealError::WrongKey(_))) => {}
        other => panic!("a wrong key: {:?}", other.err()),
    }
    // Refused on the header's figures.
    let mut small = cfg.clone();
    small.max_memory_bytes = 20 << 20;
    small.key = Some(KeySource::Host(Arc::new(|| Ok(key(42)))));
    assert!(matches!(
        Edge::new(small),
        Err(EdgeError::OverBudget { .. })
    ));

    cfg.key = Some(KeySource::Host(Arc::new(|| Ok(key(42)))));
    let from_sealed = greedy_reply(&mut Edge::new(cfg).unwrap());
    let from_plain = greedy_reply(&mut Edge::new(EdgeConfig::new(&plain, 512, 1 << 30)).unwrap());
    assert_eq!(from_sealed, from_plain);
    assert!(!from_plain.is_empty());

    // Sealed bytes that are not a GGUF model: an error, not a panic.
    let junk = dir.join("junk");
    std::fs::write(&junk, noise(100_000)).unwrap();
    seal_file(&junk, &dir.join("junk.sealed"), &key(42), 4096).unwrap();
    let mut cfg = EdgeConfig::new(dir.join("junk.sealed"), 512, 1 << 30);
    cfg.key = Some(KeySource::Host(Arc::new(|| Ok(key(42)))));
    let err = Edge::new(cfg).err().expect("junk loaded");
    assert!(err.to_string().to_lowercase().contains("gguf"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn loading_a_sealed_model_peaks_within_its_budget() {
    let dir = scratch("cli");
    let model = fixture_path::fixture("gemma3");
    let sealed = dir.join("gemma3.gguf.sealed");
    let key = dir.join("key");
    let out = common::edge_command()
        .arg("keygen")
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success());
    let hex = std::fs::read_to_string(&key).unwrap();
    let out = common::edge_command()
        .args(["seal", "--key-env", "HANZO_TEST_SEAL_KEY"])
        .arg(&model)
        .arg(&sealed)
        .env("HANZO_TEST_SEAL_KEY", hex.trim())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = |extra: &[&str]| {
        common::edge_command()
            .args(["run", "-m"])
            .arg(&sealed)
            .args(["--max-memory-bytes", "2GB", "--max-context-tokens", "1024"])
            .args(["-n", "32", "--threads", "2", "--chat"])
            .args(extra)
            .arg("Tell me about lighthouses.")
            .output()
            .unwrap()
    };
    let out = run(&["--key-file", key.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!out.stdout.is_empty());
    let (peak, budget, line) = common::peak_and_budget(&err);
    eprintln!("sealed Gemma 3: {line}");
    assert!(peak <= budget * 1.05, "{line}");
    // The plain file's reply, word for word.
    let plain = common::edge_command()
        .args(["run", "-m"])
        .arg(&model)
        .args(["--max-memory-bytes", "2GB", "--max-context-tokens", "1024"])
        .args(["-n", "32", "--threads", "2", "--chat"])
        .arg("Tell me about lighthouses.")
        .output()
        .unwrap();
    assert_eq!(out.stdout, plain.stdout);
    // Without its key: a clear refusal, nothing generated.
    let out = run(&[]);
    assert!(!out.status.success() && out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--key-file"));
    std::fs::remove_dir_all(&dir).unwrap();
}

//! `hanzo-edge keygen` and `hanzo-edge seal`: a key, and a model encrypted with it.

use clap::Args;
use hanzo_edge::seal::{seal_file, SealKey, DEFAULT_CHUNK};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the new key (64 hexadecimal digits; readable by its owner only). An
    /// existing file is not overwritten.
    file: PathBuf,
}

pub fn keygen(a: KeygenArgs) -> anyhow::Result<()> {
    let key = SealKey::generate()?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&a.file)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.file.display()))?;
    writeln!(file, "{}", key.to_hex())?;
    eprintln!("wrote a new key to {}", a.file.display());
    Ok(())
}

#[derive(Args)]
pub struct SealArgs {
    /// The key: a file of 64 hexadecimal digits or 32 raw bytes (`hanzo-edge keygen`).
    #[arg(long, conflicts_with = "key_env", required_unless_present = "key_env")]
    key_file: Option<PathBuf>,
    /// The key from this environment variable (64 hexadecimal digits).
    #[arg(long)]
    key_env: Option<String>,
    /// Plaintext bytes per authenticated chunk (a power of two, 4 KiB to 64 MiB).
    #[arg(long, default_value_t = DEFAULT_CHUNK)]
    chunk_size: u32,
    /// The GGUF file to seal.
    input: PathBuf,
    /// The sealed file to write.
    output: PathBuf,
}

pub fn seal(a: SealArgs) -> anyhow::Result<()> {
    let source = super::key_source(a.key_file, a.key_env).expect("clap requires one");
    hanzo_ml::quantized::gguf::GgufFile::open(&a.input)
        .map_err(|e| anyhow::anyhow!("{e} (only GGUF models are sealed)"))?;
    let t0 = std::time::Instant::now();
    seal_file(&a.input, &a.output, &source.key()?, a.chunk_size)?;
    let len = std::fs::metadata(&a.output)?.len();
    eprintln!(
        "sealed {} into {} ({len} bytes) in {:.2} s",
        a.input.display(),
        a.output.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

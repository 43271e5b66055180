//! The commands of the `hanzo-edge` binary.

mod chat;
mod guard;
mod mcp;
mod run;
mod seal;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hanzo_edge::tools::{LocalTool, LocalTools, Sandbox};
use hanzo_edge::{EdgeConfig, Eviction};
use hanzo_ml::kv::KvDtype;
use hanzo_transformers::{GenerateOptions, SamplingParams};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "hanzo-edge",
    version,
    about = "Hanzo Edge: a model inside a fixed memory budget, on this device"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a reply to one prompt and print it as it comes.
    Run(run::RunArgs),
    /// Chat interactively; shows the budget and how much of the context is in use.
    Chat(chat::ChatArgs),
    /// Serve the OpenAI API on this device (loopback only), one conversation at a time.
    Serve(crate::serve::ServeArgs),
    /// Encrypt a model at rest (AES-256-GCM in authenticated chunks) for `--key-file`.
    Seal(seal::SealArgs),
    /// Write a new random key for `seal`.
    Keygen(seal::KeygenArgs),
    /// Offer the device's file tools, confined to one folder, to MCP clients on stdio.
    Mcp(mcp::McpArgs),
}

pub fn main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(a) => run::run(a),
        Command::Chat(a) => chat::chat(a),
        Command::Serve(a) => crate::serve::run(a),
        Command::Seal(a) => seal::seal(a),
        Command::Keygen(a) => seal::keygen(a),
        Command::Mcp(a) => mcp::mcp(a),
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum EvictionArg {
    /// Move the kept keys and rotate them back (fast; llama.cpp's context shift).
    Rerotate,
    /// Recompute the kept tokens (exactly a fresh run over them).
    Recompute,
    /// Refuse a conversation longer than the context.
    Off,
}

/// The model and its budget.
#[derive(Args)]
pub struct ModelArgs {
    /// A GGUF file, a model directory (config.json, *.safetensors, tokenizer.json: a Hugging
    /// Face model, or MLX's AFQ-quantized one), or the name of a model `hanzo-engine pull`
    /// put in the store.
    #[arg(long, short)]
    model: PathBuf,
    /// The memory budget: bytes, or with a unit (500MB, 1.5GiB).
    #[arg(long, value_parser = hanzo_api::sizes::parse_bytes)]
    max_memory_bytes: u64,
    /// Positions the KV cache holds (prompt and reply together).
    #[arg(long, default_value_t = 2048)]
    max_context_tokens: usize,
    /// Worker threads (default: one per core).
    #[arg(long, short)]
    threads: Option<usize>,
    /// What happens when a conversation outgrows the context.
    #[arg(long, value_enum, default_value = "rerotate")]
    eviction: EvictionArg,
    /// Tokens kept after the system prompt when older ones are evicted.
    #[arg(long, default_value_t = 0)]
    keep: usize,
    /// Prompt tokens per forward pass (fewer: less memory, slower prompts).
    #[arg(long, default_value_t = 256)]
    prefill_chunk: usize,
    /// Speculative decoding by prompt lookup: each pass also checks a draft copied from
    /// what followed the last earlier match of the newest N tokens (greedy replies stay the
    /// same; it pays where replies repeat their input).
    #[arg(long, value_name = "N")]
    lookup: Option<usize>,
    /// Speculative decoding with a draft model: a smaller model (file, directory or store name) with
    /// this one's vocabulary proposes tokens this one checks in one pass (its weights and
    /// KV store count in the budget).
    #[arg(long, value_name = "FILE", conflicts_with = "lookup")]
    draft_model: Option<PathBuf>,
    /// Tokens drafted at most per pass with --lookup or --draft-model (1 to 16).
    #[arg(long, default_value_t = 8)]
    draft_k: usize,
    /// A LoRA adapter every reply runs with: a GGUF adapter (llama.cpp's) or a PEFT
    /// directory, its update times SCALE (default 1); repeatable, applied together.
    #[arg(long, value_name = "FILE[:SCALE]")]
    lora: Vec<String>,
    /// How the KV cache holds keys and values: f16, q8_0 (53% of the bytes) or f32 (twice).
    #[arg(long, default_value = "f16")]
    kv_dtype: KvDtype,
    /// Above this thermal state (0 nominal, 1 fair, 2 serious, 3 critical) generate on half
    /// the threads until the device cools; `off` never.
    #[arg(long, default_value = "1", value_parser = thermal_limit)]
    thermal_limit: ThermalLimit,
    /// A folder the model's file tools are confined to (with --allow and --chat).
    #[arg(long)]
    sandbox: Option<PathBuf>,
    /// Tools the model may call (comma-separated): file_read, file_write, file_list.
    #[arg(long, value_delimiter = ',')]
    allow: Vec<LocalTool>,
    /// An OpenAI-compatible server to fall back on (`http://host:port` or `.../v1`).
    #[arg(long, requires = "cloud_model")]
    cloud_url: Option<String>,
    /// The model to ask for there (also the name clients use to ask for it).
    #[arg(long, requires = "cloud_url")]
    cloud_model: Option<String>,
    /// The environment variable that holds the cloud's API key.
    #[arg(long, requires = "cloud_url")]
    cloud_api_key_env: Option<String>,
    /// Send a reply to the cloud when the mean entropy of its first tokens is above this
    /// (nats); off unless given.
    #[arg(long, requires = "cloud_url")]
    fallback_entropy: Option<f32>,
    /// Tokens the entropy is judged over (held back meanwhile).
    #[arg(long, default_value_t = 16)]
    entropy_window: usize,
    /// Send requests to the cloud above this thermal state (0-3).
    #[arg(long, requires = "cloud_url")]
    cloud_thermal_level: Option<u8>,
    /// Longest wait for the cloud (connecting, its first answer, each later piece), seconds.
    #[arg(long, default_value_t = 30.0)]
    cloud_timeout: f64,
    /// Keep deterministic cloud answers here, to serve them again offline.
    #[arg(long, requires = "cloud_url")]
    cache_dir: Option<PathBuf>,
    /// The cache's size limit: bytes, or with a unit.
    #[arg(long, default_value = "64MB", value_parser = hanzo_api::sizes::parse_bytes)]
    cache_max_bytes: u64,
    /// The key of a sealed model: a file of 64 hexadecimal digits or 32 raw bytes.
    #[arg(long, conflicts_with = "key_env")]
    key_file: Option<PathBuf>,
    /// The key of a sealed model from this environment variable.
    #[arg(long)]
    key_env: Option<String>,
    #[command(flatten)]
    guard: guard::GuardArgs,
}

impl ModelArgs {
    /// The cloud fallback the `--cloud-*` options describe.
    fn cloud(&self) -> anyhow::Result<Option<hanzo_edge::cloud::Cloud>> {
        let (Some(url), Some(model)) = (&self.cloud_url, &self.cloud_model) else {
            return Ok(None);
        };
        if !(self.cloud_timeout > 0.0 && self.cloud_timeout.is_finite()) {
            anyhow::bail!(
                "--cloud-timeout {}: a number of seconds above 0",
                self.cloud_timeout
            );
        }
        let mut c = hanzo_edge::cloud::Cloud::new(url, model);
        if let Some(var) = &self.cloud_api_key_env {
            let key = std::env::var(var)
                .map_err(|_| anyhow::anyhow!("--cloud-api-key-env: ${var} is not set"))?;
            c.api_key = Some(key);
        }
        c.timeout = std::time::Duration::from_secs_f64(self.cloud_timeout);
        c.fallback_entropy = self.fallback_entropy;
        c.entropy_window = self.entropy_window.max(1);
        c.thermal_level = self.cloud_thermal_level;
        c.cache_dir = self.cache_dir.clone();
        c.cache_max_bytes = self.cache_max_bytes;
        Ok(Some(c))
    }
}

/// The tools `--allow` grants, the file tools confined to `--sandbox`.
fn local_tools(
    sandbox: Option<&std::path::Path>,
    allow: &[LocalTool],
    max_write_bytes: u64,
) -> anyhow::Result<LocalTools> {
    use anyhow::bail;
    let mut tools = LocalTools::default();
    for &t in allow {
        match t {
            LocalTool::FileRead | LocalTool::FileWrite | LocalTool::FileList => {
                if sandbox.is_none() {
                    bail!("--allow {} needs --sandbox DIR, the folder it is confined to", t.name());
                }
            }
            _ => bail!(
                "{} is backed by the host app (hanzo_edge::tools::LocalTools in the SDK); the command line grants the file tools",
                t.name()
            ),
        }
        tools.allow.insert(t);
    }
    if let Some(dir) = sandbox {
        let mut s =
            Sandbox::new(dir).map_err(|e| anyhow::anyhow!("--sandbox {}: {e}", dir.display()))?;
        s.max_write_bytes = max_write_bytes;
        tools.sandbox = Some(s);
    }
    Ok(tools)
}

/// `--key-file` or `--key-env`, where one is given.
fn key_source(file: Option<PathBuf>, env: Option<String>) -> Option<hanzo_edge::seal::KeySource> {
    use hanzo_edge::seal::KeySource;
    file.map(KeySource::File).or(env.map(KeySource::Env))
}

/// `--thermal-limit`: a state, or none (`off`).
#[derive(Clone, Copy)]
struct ThermalLimit(Option<u8>);

fn thermal_limit(s: &str) -> Result<ThermalLimit, String> {
    match s {
        "off" => Ok(ThermalLimit(None)),
        _ => match s.parse::<u8>() {
            Ok(n) if n <= 3 => Ok(ThermalLimit(Some(n))),
            _ => Err(format!("{s:?}: a thermal state 0 to 3, or off")),
        },
    }
}

impl ModelArgs {
    /// What clients call the model by default: the file's name without `.gguf` (the
    /// directory's name), or the store name as given.
    pub fn display_name(&self) -> String {
        match self.model.exists() {
            // `model.gguf` and its sealed `model.gguf.sealed` are both `model`.
            true => self
                .model
                .file_name()
                .map(|s| s.to_string_lossy())
                .map(|s| {
                    let s = s.strip_suffix(".sealed").unwrap_or(&s);
                    s.strip_suffix(".gguf").unwrap_or(s).to_string()
                }),
            false => Some(self.model.to_string_lossy().into_owned()),
        }
        .unwrap_or_else(|| "model".into())
    }

    /// The configuration, the model's path resolved (a path as it is, else a store name).
    pub fn config(&self) -> anyhow::Result<EdgeConfig> {
        let model = hanzo_store::resolve_model(&self.model)?;
        let mut c = EdgeConfig::new(model, self.max_context_tokens, self.max_memory_bytes);
        c.threads = self.threads;
        c.keep_tokens = self.keep;
        c.prefill_chunk = self.prefill_chunk;
        c.kv_dtype = self.kv_dtype;
        c.lookup = self
            .lookup
            .map(|n| hanzo_transformers::PromptLookup::new(n, self.draft_k));
        c.draft = match &self.draft_model {
            Some(m) => Some(hanzo_edge::DraftModel {
                model: hanzo_store::resolve_model(m)?,
                max_draft: self.draft_k,
            }),
            None => None,
        };
        c.lora = self
            .lora
            .iter()
            .map(|spec| {
                hanzo_transformers::Adapter::open_spec(spec)
                    .map_err(|e| anyhow::anyhow!("--lora {spec}: {e}"))
            })
            .collect::<anyhow::Result<_>>()?;
        c.thermal_limit = self.thermal_limit.0;
        c.key = key_source(self.key_file.clone(), self.key_env.clone());
        c.tools = local_tools(self.sandbox.as_deref(), &self.allow, 1 << 20)?;
        c.cloud = self.cloud()?;
        c.guard = self.guard.guard()?;
        c.eviction = match self.eviction {
            EvictionArg::Rerotate => Eviction::Rerotate,
            EvictionArg::Recompute => Eviction::Recompute,
            EvictionArg::Off => Eviction::Off,
        };
        Ok(c)
    }
}

/// Sampling.
#[derive(Args)]
pub struct SampleArgs {
    /// Tokens to generate at most.
    #[arg(short = 'n', long, default_value_t = 256)]
    max_tokens: usize,
    /// Temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Stop before this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
}

impl SampleArgs {
    fn options(&self) -> GenerateOptions {
        GenerateOptions {
            max_tokens: self.max_tokens,
            sampling: SamplingParams {
                temperature: self.temp,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                seed: self.seed,
                ..SamplingParams::default()
            },
            stop: self.stop.clone(),
            ..GenerateOptions::default()
        }
    }
}

/// Peak memory of this process against the budget, for the log.
fn memory_line(edge: &hanzo_edge::Edge) -> String {
    let budget = edge.budget().total();
    match hanzo_ml::memory::process_memory() {
        Some(m) => {
            let mut line = format!(
                "memory: peak {:.1} MiB of a {:.1} MiB budget ({:.0}%), resident now {:.1} MiB",
                m.peak as f64 / 1048576.0,
                budget as f64 / 1048576.0,
                100.0 * m.peak as f64 / budget as f64,
                m.resident as f64 / 1048576.0
            );
            if m.emulator > 0 {
                let mib = m.emulator as f64 / 1048576.0;
                line.push_str(&format!(" (and the emulator's own {mib:.1} MiB)"));
            }
            line
        }
        None => format!("memory: budget {:.1} MiB", budget as f64 / 1048576.0),
    }
}

pub fn init_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let default = Targets::new().with_default(LevelFilter::WARN);
    let filter = match std::env::var("HANZO_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse::<Targets>().unwrap_or(default),
        _ => default,
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .with(filter)
        .init();
}

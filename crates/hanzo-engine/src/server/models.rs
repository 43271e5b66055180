//! The models a server holds, by the name requests use: language models, each with its own
//! scheduler and KV pool, and BERT-family embedders.

use super::error::{ApiError, ApiResult};
use super::metrics::Metrics;
use super::scheduler::{Limits, Scheduler};
use super::tools::{TokenBytes, ToolGate, ToolPlan};
use anyhow::{bail, Context, Result};
use hanzo_ml::kv::{KvLayout, PagedKv};
use hanzo_transformers::pipeline::PREFILL_CHUNK;
use hanzo_transformers::{Embedder, Logits, LoraId, TextGeneration, WeightMode};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub struct ChatModel {
    pub name: String,
    pub pipeline: Arc<TextGeneration>,
    pub scheduler: Scheduler,
    /// Positions one sequence may hold: the context, or what the KV pool holds if less.
    pub ctx_size: usize,
    pub created: u64,
    /// Constrained decoding (made on the first constrained request).
    #[cfg(feature = "structured-output")]
    pub grammars: super::grammar::Grammars,
    /// Token texts for tool calls (made on the first request with tools).
    pub token_bytes: std::sync::OnceLock<Arc<TokenBytes>>,
    /// One embedding pass at a time: each holds a KV store of its own beside the pool.
    pub embedding_pass: Arc<tokio::sync::Semaphore>,
    /// LoRA adapters requests choose with `model: "NAME+ADAPTER"`, by adapter name.
    pub adapters: Vec<(String, LoraId)>,
}

/// A language model as a request named it: alone, or with one of its adapters.
#[derive(Clone, Copy)]
pub struct Served<'a> {
    pub model: &'a ChatModel,
    /// The name the request used (`NAME` or `NAME+ADAPTER`), echoed in the response.
    pub name: &'a str,
    pub lora: Option<LoraId>,
}

impl<'a> Served<'a> {
    pub fn base(model: &'a ChatModel) -> Self {
        Self {
            model,
            name: &model.name,
            lora: None,
        }
    }
}

/// `--lora [MODEL+][NAME=]FILE[:SCALE]`: an adapter for language model MODEL (default: the
/// first), served as `MODEL+NAME` (default NAME: the adapter's file or directory name).
#[derive(Clone, Debug)]
pub struct LoraSpec {
    pub model: Option<String>,
    pub name: Option<String>,
    pub file: String,
}

impl LoraSpec {
    pub fn parse(spec: &str) -> Self {
        let (model, rest) = match spec.split_once('+') {
            Some((m, rest)) if !m.is_empty() && !m.contains('/') => (Some(m.to_string()), rest),
            _ => (None, spec),
        };
        let (name, file) = match rest.split_once('=') {
            Some((n, f)) if !n.is_empty() && !n.contains('/') => (Some(n.to_string()), f),
            _ => (None, rest),
        };
        Self {
            model,
            name,
            file: file.to_string(),
        }
    }
}

impl ChatModel {
    pub fn vocab(&self) -> usize {
        self.pipeline.model.info().vocab_size
    }

    /// The prompt of a chat: the template applied and tokenized; a template's complaint
    /// (roles out of order, say) is a 400.
    pub fn chat_prompt(
        &self,
        messages: &[hanzo_transformers::Message],
        tools: Option<&ToolPlan>,
    ) -> ApiResult<Vec<u32>> {
        let tools = tools.map_or(&[][..], |t| &t.tools[..]);
        self.pipeline
            .chat_tokens_with_tools(messages, tools)
            .map_err(|e| ApiError::invalid("messages", e.to_string()))
    }

    /// One tool-call constraint per choice: the call forced when the plan requires one, its
    /// body under the functions' schemas where this build has the grammar engine. A schema
    /// that cannot be enforced is a 400.
    pub fn tool_constraints(
        &self,
        plan: &ToolPlan,
        n: usize,
    ) -> ApiResult<Vec<Box<dyn super::scheduler::Constraint>>> {
        let tokens = self
            .token_bytes
            .get_or_init(|| Arc::new(TokenBytes::new(&self.pipeline)))
            .clone();
        #[cfg(feature = "structured-output")]
        let grammar = Some(
            self.grammars
                .tool_call(&self.pipeline, &plan.callable())
                .map_err(|e| {
                    ApiError::invalid(
                        "tools",
                        format!("the parameter schemas cannot be enforced: {e}"),
                    )
                })?,
        );
        #[cfg(not(feature = "structured-output"))]
        let grammar = None;
        Ok((0..n)
            .map(|_| {
                Box::new(ToolGate::new(plan, tokens.clone(), grammar.clone()))
                    as Box<dyn super::scheduler::Constraint>
            })
            .collect())
    }

    /// One grammar per choice for a JSON schema (`None`: any JSON object); a schema that
    /// cannot be enforced is a 400.
    pub fn json_constraints(
        &self,
        schema: Option<&serde_json::Value>,
        n: usize,
    ) -> ApiResult<Vec<Box<dyn super::scheduler::Constraint>>> {
        #[cfg(feature = "structured-output")]
        return self.grammars.json(&self.pipeline, schema, n).map_err(|e| {
            ApiError::invalid(
                "response_format",
                format!("the schema cannot be enforced: {e}"),
            )
        });
        #[cfg(not(feature = "structured-output"))]
        {
            let _ = (schema, n);
            Err(ApiError::invalid(
                "response_format",
                "this build leaves out structured output (--no-default-features); build \
                 hanzo-engine with its default features or `--features structured-output` \
                 (docs/SERVER.md)",
            ))
        }
    }
}

pub struct EmbedModel {
    pub name: String,
    pub embedder: Arc<Embedder>,
    pub created: u64,
}

/// A model that embeds: a BERT-family encoder, or a language model read by last-token
/// pooling.
#[derive(Clone, Copy)]
pub enum Embedding<'a> {
    Encoder(&'a EmbedModel),
    Decoder(&'a ChatModel),
}

impl Embedding<'_> {
    pub fn name(&self) -> &str {
        match self {
            Embedding::Encoder(m) => &m.name,
            Embedding::Decoder(m) => &m.name,
        }
    }

    /// Values per vector.
    pub fn width(&self) -> usize {
        match self {
            Embedding::Encoder(m) => m.embedder.model.config.hidden_size,
            Embedding::Decoder(m) => m.pipeline.model.info().hidden_size,
        }
    }
}

#[derive(Default)]
pub struct Models {
    pub chat: Vec<ChatModel>,
    pub embed: Vec<EmbedModel>,
}

/// How every language model of a server is sized.
#[derive(Clone, Copy, Debug)]
pub struct Sizing {
    pub mode: WeightMode,
    pub kv_budget: usize,
    pub ctx_size: Option<usize>,
    pub max_seqs: usize,
    pub max_queue: usize,
    /// Speculative decoding by prompt lookup for every sequence.
    pub lookup: Option<hanzo_transformers::PromptLookup>,
    /// Tokens drafted at most per step, with a draft model.
    pub draft_k: usize,
}

/// `NAME=PATH`, or `PATH` named after its file (without the extension) or directory.
pub fn parse_spec(spec: &str) -> (String, PathBuf) {
    if let Some((name, path)) = spec.split_once('=') {
        if !name.is_empty() && !name.contains('/') {
            return (name.to_string(), PathBuf::from(path));
        }
    }
    let path = PathBuf::from(spec);
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| spec.to_string());
    (name, path)
}

/// The most positions one sequence can hold in `blocks` blocks (at most `limit`).
fn positions_in(layout: &KvLayout, blocks: usize, limit: usize) -> usize {
    let (mut lo, mut hi) = (0, limit);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if layout.blocks_for(mid, PREFILL_CHUNK) <= blocks {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

impl Models {
    /// Every name a request may use: the models, and each language model with each of
    /// its adapters (`MODEL+ADAPTER`).
    pub fn names(&self) -> Vec<String> {
        self.chat
            .iter()
            .flat_map(|m| {
                std::iter::once(m.name.clone())
                    .chain(m.adapters.iter().map(|(a, _)| format!("{}+{a}", m.name)))
            })
            .chain(self.embed.iter().map(|m| m.name.clone()))
            .collect()
    }

    /// The language model `name` (`MODEL`, or `MODEL+ADAPTER` for one of its adapters).
    pub fn chat_as<'a>(&'a self, name: &'a str) -> ApiResult<Served<'a>> {
        if let Some((base, adapter)) = name.split_once('+') {
            if let Some(m) = self.chat.iter().find(|m| m.name == base) {
                if let Some((_, id)) = m.adapters.iter().find(|(a, _)| a == adapter) {
                    return Ok(Served {
                        model: m,
                        name,
                        lora: Some(*id),
                    });
                }
                return Err(ApiError::model_not_found(name, &self.names()));
            }
        }
        Ok(Served::base(self.chat(name)?))
    }

    pub fn chat(&self, name: &str) -> ApiResult<&ChatModel> {
        if let Some(m) = self.chat.iter().find(|m| m.name == name) {
            return Ok(m);
        }
        if self.embed.iter().any(|m| m.name == name) {
            return Err(ApiError::invalid(
                "model",
                format!("`{name}` is an embedding model; it cannot generate text"),
            ));
        }
        Err(ApiError::model_not_found(name, &self.names()))
    }

    /// The model `name` as an embedder: an embedding model, or a language model (last-token
    /// pooling).
    pub fn embedder(&self, name: &str) -> ApiResult<Embedding<'_>> {
        if let Some(m) = self.embed.iter().find(|m| m.name == name) {
            return Ok(Embedding::Encoder(m));
        }
        if let Some(m) = self.chat.iter().find(|m| m.name == name) {
            return Ok(Embedding::Decoder(m));
        }
        Err(ApiError::model_not_found(name, &self.names()))
    }

    /// Loads one model: a BERT-family directory becomes an embedder, anything else a
    /// language model with a scheduler of its own.
    pub fn load(
        &mut self,
        spec: &str,
        sizing: Sizing,
        metrics: &Arc<Metrics>,
        loras: &[LoraSpec],
        draft: Option<&(Option<String>, PathBuf)>,
    ) -> Result<()> {
        let (mut name, path) = parse_spec(spec);
        let stored = crate::store::resolve_model(&path)?;
        if stored != path && !spec.contains('=') {
            name = spec.to_string(); // a store name serves under that name
        }
        let path = stored;
        if self.names().contains(&name) {
            bail!("two models are named {name:?}; name one with --model NAME=PATH");
        }
        let t0 = Instant::now();
        let created = super::unix_time();
        if path.is_dir() && Embedder::is_encoder_dir(&path) {
            let e = Embedder::from_dir(&path)
                .with_context(|| format!("cannot load {}", path.display()))?;
            tracing::info!(
                "model {name}: embedder, {} layers, hidden {}, loaded in {:.2} s",
                e.model.config.num_hidden_layers,
                e.model.config.hidden_size,
                t0.elapsed().as_secs_f64()
            );
            self.embed.push(EmbedModel {
                name,
                embedder: Arc::new(e),
                created,
            });
            return Ok(());
        }
        // The adapters named for this model, and those naming none for the first one.
        let first = self.chat.is_empty();
        let mine: Vec<&LoraSpec> = loras
            .iter()
            .filter(|l| l.model.as_deref().map_or(first, |m| m == name))
            .collect();
        let draft = draft
            .filter(|(m, _)| m.as_deref().map_or(first, |m| m == name))
            .map(|(_, p)| p.as_path());
        self.chat.push(load_language_model(
            name, &path, sizing, metrics, created, &mine, draft,
        )?);
        Ok(())
    }
}

fn load_language_model(
    name: String,
    path: &Path,
    sizing: Sizing,
    metrics: &Arc<Metrics>,
    created: u64,
    loras: &[&LoraSpec],
    draft: Option<&Path>,
) -> Result<ChatModel> {
    let t0 = Instant::now();
    let mut p = TextGeneration::load(path, sizing.mode)
        .with_context(|| format!("cannot load {}", path.display()))?;
    if let Some(d) = draft {
        let d = crate::store::resolve_model(d)?;
        let draft = TextGeneration::load(&d, sizing.mode)
            .with_context(|| format!("--draft-model: cannot load {}", d.display()))?;
        p.attach_draft(draft)
            .with_context(|| format!("--draft-model {}", d.display()))?;
    }
    let mut adapters: Vec<(String, LoraId)> = Vec::new();
    for l in loras {
        let a =
            crate::commands::open_adapter(&l.file).with_context(|| format!("--lora {}", l.file))?;
        let adapter = l.name.clone().unwrap_or_else(|| a.name.clone());
        if adapters.iter().any(|(n, _)| *n == adapter) {
            bail!(
                "model {name}: two adapters are named {adapter:?}; name one with --lora NAME=FILE"
            );
        }
        let id = p
            .model
            .attach_lora(std::slice::from_ref(&a))
            .with_context(|| format!("--lora {}", l.file))?;
        tracing::info!(
            "model {name}+{adapter}: LoRA adapter, {} weights, rank {}, {:.1} MiB",
            a.weights().count(),
            a.rank(),
            a.bytes() as f64 / (1 << 20) as f64
        );
        adapters.push((adapter, id));
    }
    warm_up(&p)?;
    let info = p.model.info().clone();
    let layout = p.model.kv_layout();
    let kv = PagedKv::new(layout.clone(), sizing.kv_budget).with_context(|| {
        format!(
            "--kv-budget {} holds no KV block for {name} ({} bytes each)",
            sizing.kv_budget,
            layout.block_bytes()
        )
    })?;
    let ctx_limit = sizing
        .ctx_size
        .unwrap_or(info.context_length)
        .min(info.context_length);
    let ctx_size = positions_in(&layout, kv.total_blocks(), ctx_limit);
    if ctx_size < ctx_limit {
        tracing::warn!(
            "model {name}: the KV budget holds one sequence of at most {ctx_size} positions \
             (context {ctx_limit}); raise --kv-budget for longer ones"
        );
    }
    tracing::info!(
        "model {name}: {} ({} layers, vocab {}), context {ctx_size}, KV cache {} MiB in {} \
         blocks, loaded in {:.2} s",
        info.architecture,
        info.layers,
        info.vocab_size,
        kv.bytes() >> 20,
        kv.total_blocks(),
        t0.elapsed().as_secs_f64()
    );
    // The draft model's store holds as many positions as the model's.
    let draft_kv = p.draft_model().map(|d| {
        let dl = d.kv_layout();
        let positions = kv.total_blocks() / layout.layers().max(1) * layout.block_size;
        let blocks = positions.div_ceil(dl.block_size) * dl.layers();
        let store = PagedKv::with_blocks(dl, blocks);
        tracing::info!(
            "model {name}: draft model {} ({} layers), its KV cache {} MiB",
            d.info().architecture,
            d.info().layers,
            store.bytes() >> 20
        );
        store
    });
    let limits = Limits {
        max_seqs: sizing.max_seqs,
        max_queue: sizing.max_queue,
        ctx_size,
        lookup: sizing.lookup,
        max_draft: match (&sizing.lookup, &draft_kv) {
            (Some(l), _) => l.max_draft,
            (None, Some(_)) => sizing.draft_k,
            (None, None) => 0,
        },
    };
    let pipeline = Arc::new(p);
    let scheduler = Scheduler::start(
        pipeline.clone(),
        kv,
        draft_kv,
        limits,
        metrics.clone(),
        name.clone(),
    )?;
    Ok(ChatModel {
        name,
        pipeline,
        scheduler,
        ctx_size,
        created,
        #[cfg(feature = "structured-output")]
        grammars: Default::default(),
        token_bytes: Default::default(),
        embedding_pass: Arc::new(tokio::sync::Semaphore::new(1)),
        adapters,
    })
}

/// One pass now: the weights are paged in and repacked before the first request, so every
/// request sees the same numerics and none waits for the copy. The move onto 2 MiB pages
/// then runs in the background while the server already answers.
fn warm_up(p: &TextGeneration) -> Result<()> {
    if let Some(d) = p.draft_model() {
        // The draft's weights too: two decode steps page them in and repack them.
        let mut cache = d.new_cache(2);
        for _ in 0..2 {
            d.forward(
                &[p.tokenizer.special().bos.unwrap_or(0)],
                &mut cache,
                Logits::Last,
            )?;
        }
    }
    if let Some(handle) = crate::commands::page_in(p)? {
        std::thread::spawn(move || match handle.join() {
            Ok(Ok(0)) | Err(_) => {}
            Ok(Ok(bytes)) => tracing::debug!("weights moved onto 2 MiB pages: {} MiB", bytes >> 20),
            Ok(Err(e)) => tracing::info!("weights stay partly on 4 KiB pages: {e}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_specs_name_their_models() {
        assert_eq!(
            parse_spec("qwen=/m/q.gguf"),
            ("qwen".into(), PathBuf::from("/m/q.gguf"))
        );
        assert_eq!(
            parse_spec("/m/Qwen2.5-0.5B.Q4_K_M.gguf"),
            (
                "Qwen2.5-0.5B.Q4_K_M".into(),
                PathBuf::from("/m/Qwen2.5-0.5B.Q4_K_M.gguf")
            )
        );
        assert_eq!(
            parse_spec("/models/minilm"),
            ("minilm".into(), PathBuf::from("/models/minilm"))
        );
    }

    #[test]
    fn lora_specs_name_their_model_and_adapter() {
        let l = LoraSpec::parse("smol+attn=/a/attn:0.5");
        assert_eq!(l.model.as_deref(), Some("smol"));
        assert_eq!(l.name.as_deref(), Some("attn"));
        assert_eq!(l.file, "/a/attn:0.5");
        let l = LoraSpec::parse("/adapters/v1+v2/attn.gguf");
        assert_eq!((l.model, l.name), (None, None));
        assert_eq!(l.file, "/adapters/v1+v2/attn.gguf");
        let l = LoraSpec::parse("attn=adapter");
        assert_eq!((l.model, l.name.as_deref()), (None, Some("attn")));
    }

    #[test]
    fn pool_capacity_in_positions() {
        // Two full-attention layers, 16-position blocks: 10 blocks hold 5 blocks per layer.
        let layout = KvLayout::new(8, vec![None, None]);
        assert_eq!(positions_in(&layout, 10, 1000), 80);
        assert_eq!(positions_in(&layout, 10, 50), 50);
        assert_eq!(positions_in(&layout, 1, 1000), 0);
    }
}

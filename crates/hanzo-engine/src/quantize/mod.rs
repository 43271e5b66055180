//! `hanzo-engine quantize IN OUT --type TYPE`: GGUF or safetensors in, GGUF out; or, for
//! MLX's affine types (`AFQ4`, ...), a Hugging Face directory in, MLX's layout out (`mlx`).
//!
//! Tensors are converted one at a time and streamed to `OUT.partial`, which is renamed over
//! `OUT` only when the whole file is written — a failure never leaves a truncated model.

mod imatrix;
#[cfg(feature = "mlx-export")]
mod mlx;
pub mod policy;
mod source;

use anyhow::{bail, Context, Result};
use hanzo_ml::quantized::gguf::{write_gguf, TensorSpec, Value};
use hanzo_ml::quantized::{GgmlDType, QTensor};
use imatrix::ImportanceMatrix;
use indicatif::{ProgressBar, ProgressStyle};
use policy::{Planner, Recipe};
use source::Source;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Input model: a .gguf file, a .safetensors file, a directory of safetensors shards, or
    /// a model in the store.
    pub input: PathBuf,
    /// Output GGUF file (a directory in MLX's layout for the AFQ types).
    pub output: PathBuf,
    /// Target: a llama.cpp mixture (Q4_K_M, Q5_K_M, Q4_K_S, Q5_K_S, Q3_K_M, Q3_K_L, Q3_K_S,
    /// Q2_K, Q6_K, IQ4_XS, IQ3_M, IQ3_S, IQ3_XS; with --imatrix also IQ3_XXS, IQ2_M, IQ2_S,
    /// IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S) or a single type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL,
    /// MXFP4, F16, BF16, F32; TQ1_0 and TQ2_0 for models trained ternary), or MLX's affine
    /// quantization, AFQ2/AFQ3/AFQ4/AFQ5/AFQ6/AFQ8, written in MLX's layout.
    #[arg(long = "type", value_name = "TYPE")]
    pub qtype: String,
    /// AFQ's group size: 32, 64 (MLX's default) or 128.
    #[arg(long, value_name = "N")]
    pub group_size: Option<usize>,
    /// Use the base type for every quantizable tensor (no mixture, no output-layer bump).
    #[arg(long)]
    pub pure: bool,
    /// Importance matrix from llama-imatrix (GGUF or legacy .dat), as llama-quantize's.
    #[arg(long, value_name = "FILE")]
    pub imatrix: Option<PathBuf>,
    /// Use the importance matrix only for weights whose names contain this.
    #[arg(
        long,
        value_name = "NAME",
        requires = "imatrix",
        conflicts_with = "exclude_weights"
    )]
    pub include_weights: Vec<String>,
    /// Do not use the importance matrix for weights whose names contain this.
    #[arg(long, value_name = "NAME", requires = "imatrix")]
    pub exclude_weights: Vec<String>,
    /// Fold a LoRA adapter (GGUF or PEFT directory) into the weights it changes, times SCALE
    /// (default 1), before quantizing; repeat for several. A GGUF file or a model directory
    /// as input.
    #[arg(long, value_name = "FILE[:SCALE]")]
    pub lora: Vec<String>,
}

pub fn run(mut args: Args) -> Result<()> {
    args.input = crate::store::resolve_model(&args.input)?;
    if let Some(t) = GgmlDType::from_name(&args.qtype).ok().and_then(|d| d.afq()) {
        let group = args.group_size.unwrap_or(t.group());
        let t = hanzo_ml::quantized::AfqType::new(t.bits(), group, t.scale())?;
        #[cfg(feature = "mlx-export")]
        return mlx::write(&args.input, &args.output, t);
        #[cfg(not(feature = "mlx-export"))]
        bail!("{}: this build leaves out writing MLX's layout (the `mlx-export` feature of the default build)", t.name());
    }
    if args.group_size.is_some() {
        bail!("--group-size is for the AFQ types; ggml's types have fixed blocks");
    }
    let recipe = Recipe::parse(&args.qtype)?;
    if args.input.canonicalize().ok() == args.output.canonicalize().ok() && args.output.exists() {
        bail!(
            "the output would overwrite the input {}",
            args.input.display()
        );
    }
    let start = Instant::now();
    let imatrix = match &args.imatrix {
        Some(p) => {
            let mut m = ImportanceMatrix::load(p)?;
            m.filter(&args.include_weights, &args.exclude_weights);
            tracing::info!(
                "{}: importance for {} weights from {} chunks of {}",
                p.display(),
                m.len(),
                m.chunk_count,
                if m.datasets.is_empty() {
                    "unnamed text".to_string()
                } else {
                    m.datasets.join(", ")
                }
            );
            Some(m)
        }
        None => None,
    };
    let source =
        Source::open(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let tensors = source.tensors()?;
    let merge = LoraMerge::open(&args.lora, &source, &tensors)?;
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    let mut planner = Planner::new(recipe, args.pure, &names, source.n_gqa())
        .with_importance(imatrix.as_ref().is_some_and(|m| m.len() > 0));
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dtype: planner.plan(&t.name, &t.shape, t.dtype),
            shape: t.shape.clone().into(),
        })
        .collect();
    if tensors.iter().any(|t| t.dtype.is_quantized()) {
        tracing::warn!("the input is already quantized; requantizing loses more precision than quantizing the original weights");
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &specs {
        *counts.entry(s.dtype.name()).or_default() += 1;
    }
    tracing::info!(
        "{}: {} tensors -> {} ({})",
        args.input.display(),
        specs.len(),
        recipe.name,
        counts
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let importance = importance_per_tensor(imatrix.as_ref(), &tensors, &specs)?;

    let mut metadata = source.metadata();
    metadata.retain(|(k, _)| !k.starts_with("quantize.imatrix."));
    metadata.push(("general.quantization_version".into(), Value::U32(2)));
    metadata.push(("general.file_type".into(), Value::U32(recipe.file_type)));
    if let (Some(m), Some(p)) = (&imatrix, &args.imatrix) {
        metadata.extend(m.metadata(p));
    }

    let total: u64 = tensors
        .iter()
        .map(|t| t.shape.iter().product::<usize>() as u64)
        .sum();
    let bar = progress_bar(total);
    let partial = partial_path(&args.output);
    let file = std::fs::File::create(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let written = write_gguf(&mut out, &metadata, &specs, |i| {
        let (t, spec) = (&tensors[i], &specs[i]);
        bar.set_message(t.name.clone());
        let merged = merge.changes(&t.name);
        let data: Cow<[u8]> = match source.raw(&t.name).map_err(to_ml)? {
            Some(raw) if spec.dtype == t.dtype && !merged => raw,
            _ => {
                let mut x = source.f32(&t.name).map_err(to_ml)?;
                merge.apply(&t.name, &mut x).map_err(to_ml)?;
                let q = match importance[i] {
                    Some(w) => QTensor::quantize_f32_weighted(&x, t.shape.clone(), spec.dtype, w)?,
                    None => QTensor::quantize_f32(&x, t.shape.clone(), spec.dtype)?,
                };
                Cow::Owned(q.data().to_vec())
            }
        };
        bar.inc(t.shape.iter().product::<usize>() as u64);
        Ok(data)
    });
    bar.finish_and_clear();
    if let Err(e) = written {
        std::fs::remove_file(&partial).ok();
        return Err(e).context("writing the GGUF file");
    }
    drop(out);
    std::fs::rename(&partial, &args.output)?;
    let size = |p: &PathBuf| dir_or_file_size(p) as f64 / 1e6;
    tracing::info!(
        "wrote {} ({:.1} MB from {:.1} MB) in {:.1} s",
        args.output.display(),
        size(&args.output),
        size(&args.input),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The adapters of `--lora`, laid out for the model's rows, folded into its weights.
struct LoraMerge {
    adapters: Vec<hanzo_transformers::Adapter>,
}

impl LoraMerge {
    fn open(specs: &[String], source: &Source, tensors: &[source::SourceTensor]) -> Result<Self> {
        if specs.is_empty() {
            return Ok(Self {
                adapters: Vec::new(),
            });
        }
        let Some((arch, heads, kv_heads)) = source.arch_and_heads() else {
            bail!("--lora: folding an adapter in needs a model the engine runs as input (a GGUF file with general.architecture, or a model directory)");
        };
        let (arch, heads, kv_heads) = (arch.as_str(), heads.unwrap_or(0), kv_heads.unwrap_or(0));
        let mut adapters = Vec::new();
        for spec in specs {
            let a = crate::commands::open_adapter(spec)
                .and_then(|a| Ok(a.for_model(arch, heads, kv_heads.max(1))?))
                .with_context(|| format!("--lora {spec}"))?;
            for (name, w) in a.weights() {
                let Some(t) = tensors.iter().find(|t| t.name == name) else {
                    let tied = match name == "output.weight" {
                        true => " (its output head is the token embedding, which stays shared)",
                        false => "",
                    };
                    bail!("--lora {spec}: the model has no weight {name}{tied}");
                };
                let (out, inp) = w.weight_dims();
                if t.shape != [out, inp] {
                    bail!(
                        "--lora {spec}: {name} is {:?} in the model, the update [{out}, {inp}]",
                        t.shape
                    );
                }
            }
            tracing::info!(
                "folding LoRA adapter {} into {} weights",
                a.name,
                a.weights().count()
            );
            adapters.push(a);
        }
        Ok(Self { adapters })
    }

    /// Whether an adapter changes weight `name`.
    fn changes(&self, name: &str) -> bool {
        self.adapters
            .iter()
            .any(|a| a.weights().any(|(n, _)| n == name))
    }

    /// `w` (weight `name`'s values, row-major) plus every adapter's update of it.
    fn apply(&self, name: &str, w: &mut [f32]) -> Result<()> {
        for a in &self.adapters {
            if let Some(d) = a.delta(name)? {
                for (x, d) in w.iter_mut().zip(d.flatten_all()?.to_vec1::<f32>()?) {
                    *x += d;
                }
            }
        }
        Ok(())
    }
}

/// The types llama-quantize will not write without an importance matrix (below 3 bits the
/// result is noise without one).
const NEEDS_IMPORTANCE: [GgmlDType; 6] = [
    GgmlDType::IQ1S,
    GgmlDType::IQ1M,
    GgmlDType::IQ2XXS,
    GgmlDType::IQ2XS,
    GgmlDType::IQ2S,
    GgmlDType::IQ3XXS,
];

/// The importance each tensor is quantized under (`None`: none, or not quantized here),
/// checked before anything is written: sizes that do not fit, and tensors of the
/// `NEEDS_IMPORTANCE` types without one, which llama-quantize refuses too (the embedding and
/// output projection excepted).
fn importance_per_tensor<'a>(
    imatrix: Option<&'a ImportanceMatrix>,
    tensors: &[source::SourceTensor],
    specs: &[TensorSpec],
) -> Result<Vec<Option<&'a [f32]>>> {
    let mut out = Vec::with_capacity(tensors.len());
    let mut missing = Vec::new();
    for (t, spec) in tensors.iter().zip(specs) {
        let quantized = spec.dtype != t.dtype && spec.dtype.is_quantized();
        let w = match imatrix {
            Some(m) if quantized => m.for_tensor(&t.name, &t.shape)?,
            _ => None,
        };
        let exempt = matches!(
            policy::category(&t.name),
            policy::Category::TokenEmbd | policy::Category::Output
        );
        if w.is_none() && NEEDS_IMPORTANCE.contains(&spec.dtype) && !exempt {
            bail!(
                "{} would be {}, which needs an importance matrix covering it \
                 (--imatrix FILE from llama-imatrix), as in llama-quantize",
                t.name,
                spec.dtype
            );
        }
        if w.is_none() && quantized {
            missing.push(t.name.as_str());
        }
        out.push(w);
    }
    if imatrix.is_some() && !missing.is_empty() {
        tracing::info!(
            "no importance for {} tensors, quantized without: {}",
            missing.len(),
            missing.join(", ")
        );
    }
    Ok(out)
}

/// The writer's callback speaks hanzo-ml errors; keep the whole context chain.
fn to_ml(e: anyhow::Error) -> hanzo_ml::Error {
    hanzo_ml::Error::invalid("quantize", format!("{e:#}"))
}

fn partial_path(out: &std::path::Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

fn dir_or_file_size(p: &std::path::Path) -> u64 {
    if p.is_dir() {
        std::fs::read_dir(p)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| dir_or_file_size(&e.path()))
                    .sum()
            })
            .unwrap_or(0)
    } else {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    }
}

/// A bar over elements converted; drawn only when stderr is a terminal.
fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {percent:>3}% {msg}")
            .expect("valid template"),
    );
    bar
}

/// The type `recipe` assigns to each tensor of a model, in file order.
pub fn plan_for(path: &std::path::Path, recipe: &str) -> Result<Vec<(String, GgmlDType)>> {
    let source = Source::open(path)?;
    let tensors = source.tensors()?;
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    let mut planner = Planner::new(Recipe::parse(recipe)?, false, &names, source.n_gqa());
    Ok(tensors
        .iter()
        .map(|t| (t.name.clone(), planner.plan(&t.name, &t.shape, t.dtype)))
        .collect())
}

//! Model sources for conversion: a GGUF file (any supported type, requantized through f32),
//! a model directory of an architecture the engine runs (written as llama.cpp's converter
//! would: GGUF's tensor names and layout, `config.json` as `{arch}.*` keys, `tokenizer.json`
//! as `tokenizer.ggml.*`), or other safetensors (a file, or a directory with
//! `model.safetensors` and `config.json`; tensors kept under their own names).

use anyhow::{bail, Context, Result};
use hanzo_ml::io::safetensors::{self, MmapedSafetensors};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use hanzo_ml::quantized::GgmlDType;
use hanzo_ml::DType;
use hanzo_transformers::{Error as ModelError, ModelDir};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

pub struct SourceTensor {
    pub name: String,
    /// Row-major.
    pub shape: Vec<usize>,
    pub dtype: GgmlDType,
}

pub enum Source {
    Gguf(GgufFile),
    #[cfg(feature = "hf-to-gguf")]
    Dir(Box<ModelDir>),
    Safetensors {
        files: Vec<MmapedSafetensors>,
        config: Option<serde_json::Value>,
        dir: PathBuf,
    },
}

fn is_gguf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    Ok(f.read(&mut magic)? == 4 && &magic == b"GGUF")
}

fn float_type(dt: DType) -> Option<GgmlDType> {
    match dt {
        DType::F32 => Some(GgmlDType::F32),
        DType::F16 => Some(GgmlDType::F16),
        DType::BF16 => Some(GgmlDType::BF16),
        _ => None,
    }
}

impl Source {
    pub fn open(path: &Path) -> Result<Self> {
        if path.is_dir() && path.join("config.json").exists() {
            match ModelDir::open(path) {
                Ok(dir) if dir.is_quantized() => bail!(
                    "{} holds MLX's quantized weights (AFQ); quantize the float model instead",
                    path.display()
                ),
                #[cfg(feature = "hf-to-gguf")]
                Ok(dir) => return Ok(Source::Dir(Box::new(dir))),
                #[cfg(not(feature = "hf-to-gguf"))]
                Ok(_) => bail!(
                    "{}: this build leaves out writing a model directory as GGUF (the `hf-to-gguf` feature of the default build)",
                    path.display()
                ),
                // Other architectures (an encoder, say) keep their tensors' own names.
                Err(ModelError::UnsupportedArchitecture(..)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if path.is_dir() {
            let shards = safetensors::files_in_dir(path)?;
            let config = match std::fs::read_to_string(path.join("config.json")) {
                Ok(s) => Some(serde_json::from_str(&s).context("config.json is not valid JSON")?),
                Err(_) => None,
            };
            let files = shards
                .iter()
                .map(MmapedSafetensors::new)
                .collect::<hanzo_ml::Result<_>>()?;
            return Ok(Source::Safetensors {
                files,
                config,
                dir: path.to_path_buf(),
            });
        }
        if is_gguf(path)? {
            return Ok(Source::Gguf(GgufFile::open(path)?));
        }
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let config = std::fs::read_to_string(dir.join("config.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok());
        Ok(Source::Safetensors {
            files: vec![MmapedSafetensors::new(path)?],
            config,
            dir,
        })
    }

    /// Tensors in file order (safetensors: name order), skipping non-float safetensors
    /// buffers such as position ids.
    pub fn tensors(&self) -> Result<Vec<SourceTensor>> {
        match self {
            Source::Gguf(f) => Ok(f
                .tensor_infos()
                .iter()
                .map(|t| SourceTensor {
                    name: t.name.clone(),
                    shape: t.shape.dims().to_vec(),
                    dtype: t.dtype,
                })
                .collect()),
            #[cfg(feature = "hf-to-gguf")]
            Source::Dir(dir) => Ok(dir
                .tensors()
                .into_iter()
                .filter_map(|(name, shape, dtype)| {
                    let dtype = float_type(dtype);
                    if dtype.is_none() {
                        tracing::warn!("skipping {name}: not a float tensor");
                    }
                    Some(SourceTensor {
                        name,
                        shape,
                        dtype: dtype?,
                    })
                })
                .collect()),
            Source::Safetensors { files, .. } => {
                let mut out = Vec::new();
                for f in files {
                    for name in f.names() {
                        let t = f.get(name)?;
                        match float_type(t.dtype()) {
                            Some(dtype) => out.push(SourceTensor {
                                name: name.to_string(),
                                shape: t.dims().to_vec(),
                                dtype,
                            }),
                            None => tracing::warn!(
                                "skipping {name}: {:?} is not a float tensor",
                                t.dtype()
                            ),
                        }
                    }
                }
                Ok(out)
            }
        }
    }

    /// Metadata to carry into the output (the converter adds the quantization keys).
    pub fn metadata(&self) -> Vec<(String, Value)> {
        const REWRITTEN: &[&str] = &[
            "general.file_type",
            "general.quantization_version",
            "general.alignment",
        ];
        match self {
            Source::Gguf(f) => f
                .metadata()
                .iter()
                .filter(|(k, _)| !REWRITTEN.contains(&k.as_str()))
                .cloned()
                .collect(),
            #[cfg(feature = "hf-to-gguf")]
            Source::Dir(dir) => {
                let mut m = vec![(
                    "general.architecture".to_string(),
                    Value::String(dir.arch().to_string()),
                )];
                if let Some(name) = dir.path().file_name().and_then(|n| n.to_str()) {
                    m.push(("general.name".to_string(), Value::String(name.to_string())));
                }
                // In the types llama.cpp writes: counts as u32, real numbers as f32.
                m.extend(dir.params().into_iter().map(|(k, v)| {
                    let v = match *v {
                        Value::U64(n) if n <= u32::MAX as u64 => Value::U32(n as u32),
                        Value::F64(x) => Value::F32(x as f32),
                        ref other => other.clone(),
                    };
                    (k.to_string(), v)
                }));
                // What llama.cpp's converter adds from the shapes: the rotary width (the
                // whole head) and the vocabulary.
                let arch = dir.arch();
                let get = |k: &str| {
                    m.iter()
                        .find(|(n, _)| *n == format!("{arch}.{k}"))
                        .and_then(|(_, v)| v.to_usize())
                };
                let head_dim = get("attention.key_length").or_else(|| {
                    Some(get("embedding_length")? / get("attention.head_count")?.max(1))
                });
                let vocab = dir
                    .tensors()
                    .into_iter()
                    .find(|(n, ..)| n == "token_embd.weight")
                    .map(|(_, shape, _)| shape[0]);
                let missing: Vec<_> = [("rope.dimension_count", head_dim), ("vocab_size", vocab)]
                    .into_iter()
                    .filter(|(key, _)| get(key).is_none())
                    .filter_map(|(key, v)| Some((format!("{arch}.{key}"), Value::U32(v? as u32))))
                    .collect();
                m.extend(missing);
                match hanzo_transformers::tokenizer::hf::gguf_keys(dir.path()) {
                    Ok(keys) => m.extend(keys),
                    Err(e) => tracing::warn!(
                        "the output will hold no tokenizer (tokenizer.json: {e}); it is not a runnable model by itself"
                    ),
                }
                m
            }
            Source::Safetensors { config, dir, .. } => {
                let mut m = Vec::new();
                if let Some(arch) = config.as_ref().and_then(|c| c["model_type"].as_str()) {
                    m.push((
                        "general.architecture".to_string(),
                        Value::String(arch.to_string()),
                    ));
                }
                if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
                    m.push(("general.name".to_string(), Value::String(name.to_string())));
                }
                m
            }
        }
    }

    /// The architecture and the attention's query and KV head counts, where the source is a
    /// model the engine runs (a GGUF file, a model directory).
    pub fn arch_and_heads(&self) -> Option<(String, Option<usize>, Option<usize>)> {
        let arch = match self {
            Source::Gguf(f) => f.get("general.architecture")?.as_str()?,
            #[cfg(feature = "hf-to-gguf")]
            Source::Dir(dir) => dir.arch(),
            Source::Safetensors { .. } => return None,
        };
        let get = |k: &str| {
            let key = format!("{arch}.attention.{k}");
            match self {
                Source::Gguf(f) => f.get(&key)?.to_usize(),
                #[cfg(feature = "hf-to-gguf")]
                Source::Dir(dir) => dir
                    .params()
                    .into_iter()
                    .find(|(n, _)| *n == key)?
                    .1
                    .to_usize(),
                Source::Safetensors { .. } => None,
            }
        };
        Some((arch.to_string(), get("head_count"), get("head_count_kv")))
    }

    /// Query heads per KV head (1 when unknown); the Q2_K/IQ4_NL mixtures use it.
    pub fn n_gqa(&self) -> usize {
        let (heads, kv) = match (self, self.arch_and_heads()) {
            (_, Some((_, h, k))) => (h, k),
            (Source::Safetensors { config, .. }, None) => {
                let get = |k: &str| {
                    config
                        .as_ref()
                        .and_then(|c| c[k].as_u64())
                        .map(|v| v as usize)
                };
                (get("num_attention_heads"), get("num_key_value_heads"))
            }
            _ => (None, None),
        };
        match (heads, kv) {
            (Some(h), Some(k)) if k > 0 => h / k,
            _ => 1,
        }
    }

    /// The stored bytes of a tensor kept in its own type (GGUF only: zero-copy).
    pub fn raw(&self, name: &str) -> Result<Option<Cow<'_, [u8]>>> {
        match self {
            Source::Gguf(f) => Ok(Some(Cow::Borrowed(f.tensor_bytes(name)?))),
            #[cfg(feature = "hf-to-gguf")]
            Source::Dir(_) => Ok(None),
            Source::Safetensors { .. } => Ok(None),
        }
    }

    /// A tensor's values as f32, row-major.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>> {
        match self {
            Source::Gguf(f) => Ok(f.tensor(name)?.dequantize_f32()?),
            #[cfg(feature = "hf-to-gguf")]
            Source::Dir(dir) => Ok(dir.tensor(name)?.dequantize_f32()?),
            Source::Safetensors { files, .. } => {
                for f in files {
                    if f.names().contains(&name) {
                        return Ok(f.get(name)?.to_dtype(DType::F32)?.to_vec_flat::<f32>()?);
                    }
                }
                bail!("no tensor named {name}")
            }
        }
    }
}

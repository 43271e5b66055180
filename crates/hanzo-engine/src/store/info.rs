//! What a model file says about itself, for `list` and `show`: architecture, parameter
//! count, quantization, context length, tensors by type, tokenizer and chat template. Read
//! from the GGUF header, or from a safetensors model's config.json and tensor headers.

use anyhow::{bail, Context, Result};
use hanzo_ml::quantized::gguf::{GgufFile, Value};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// One tensor type's share of a model.
#[derive(Debug, Default, Clone, Serialize)]
pub struct TypeShare {
    pub tensors: usize,
    pub parameters: u64,
    pub bytes: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct ModelInfo {
    pub format: String,
    pub architecture: String,
    pub parameters: u64,
    /// llama.cpp's name for the file type (`Q4_K_M`), else the type holding most bytes.
    pub quantization: String,
    pub context_length: Option<u64>,
    pub tensors: usize,
    pub tensor_types: BTreeMap<String, TypeShare>,
    pub tokenizer: Option<String>,
    pub vocab_size: Option<usize>,
    pub chat_template: Option<String>,
    /// Every GGUF metadata entry, long arrays shortened (`show --verbose`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, serde_json::Value>>,
}

/// Reads the model at `path` (a GGUF file or a safetensors directory).
pub fn read(path: &Path, with_metadata: bool) -> Result<ModelInfo> {
    if path.is_dir() {
        read_safetensors_dir(path)
    } else {
        read_gguf(path, with_metadata)
    }
}

fn read_gguf(path: &Path, with_metadata: bool) -> Result<ModelInfo> {
    let f = GgufFile::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let s = |k: &str| f.get(k).and_then(Value::as_str).map(str::to_string);
    let architecture = s("general.architecture").unwrap_or_else(|| "unknown".into());
    let mut info = ModelInfo {
        format: "gguf".into(),
        context_length: f
            .get(&format!("{architecture}.context_length"))
            .and_then(Value::to_u64),
        architecture,
        tokenizer: s("tokenizer.ggml.model"),
        vocab_size: f.get("tokenizer.ggml.tokens").map(|v| match v {
            Value::Array(a) => a.len(),
            _ => 0,
        }),
        chat_template: s("tokenizer.chat_template"),
        ..Default::default()
    };
    for t in f.tensor_infos() {
        let n = t.shape.elem_count() as u64;
        info.parameters += n;
        info.tensors += 1;
        let share = info
            .tensor_types
            .entry(t.dtype.name().to_ascii_uppercase())
            .or_default();
        share.tensors += 1;
        share.parameters += n;
        share.bytes += t.size as u64;
    }
    info.quantization = f
        .get("general.file_type")
        .and_then(Value::to_u64)
        .and_then(file_type_name)
        .map(str::to_string)
        .unwrap_or_else(|| dominant_type(&info.tensor_types));
    if with_metadata {
        info.metadata = Some(
            f.metadata()
                .iter()
                .map(|(k, v)| (k.clone(), metadata_json(v)))
                .collect(),
        );
    }
    Ok(info)
}

fn read_safetensors_dir(dir: &Path) -> Result<ModelInfo> {
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("config.json"))
            .with_context(|| format!("{}: no config.json", dir.display()))?,
    )
    .context("config.json is not JSON")?;
    let architecture = config["model_type"]
        .as_str()
        .or_else(|| config["architectures"][0].as_str())
        .unwrap_or("unknown")
        .to_string();
    let mut info = ModelInfo {
        format: "safetensors".into(),
        architecture,
        context_length: config["max_position_embeddings"].as_u64(),
        vocab_size: config["vocab_size"].as_u64().map(|v| v as usize),
        ..Default::default()
    };
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    names.sort();
    if names.is_empty() {
        bail!("{}: no .safetensors files", dir.display());
    }
    for p in names {
        for (dtype, n, bytes) in safetensors_header(&p)? {
            info.parameters += n;
            info.tensors += 1;
            let share = info.tensor_types.entry(dtype).or_default();
            share.tensors += 1;
            share.parameters += n;
            share.bytes += bytes;
        }
    }
    info.quantization = dominant_type(&info.tensor_types);
    if let Ok(bytes) = std::fs::read(dir.join("tokenizer.json")) {
        let tok: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        info.tokenizer = tok["model"]["type"].as_str().map(str::to_string);
    }
    if let Ok(bytes) = std::fs::read(dir.join("tokenizer_config.json")) {
        let cfg: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        info.chat_template = cfg["chat_template"].as_str().map(str::to_string);
    }
    Ok(info)
}

/// (dtype, elements, bytes) of each tensor in a safetensors file's header.
fn safetensors_header(path: &Path) -> Result<Vec<(String, u64, u64)>> {
    let mut f = std::fs::File::open(path)?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .with_context(|| format!("{}: too short for a safetensors file", path.display()))?;
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        bail!("{}: a {len}-byte header is not plausible", path.display());
    }
    let mut header = vec![0u8; len as usize];
    f.read_exact(&mut header)
        .with_context(|| format!("{}: truncated header", path.display()))?;
    let header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&header)
        .with_context(|| format!("{}: the header is not JSON", path.display()))?;
    let mut out = Vec::new();
    for (name, t) in header {
        if name == "__metadata__" {
            continue;
        }
        let dtype = t["dtype"].as_str().unwrap_or("?").to_string();
        let n = t["shape"]
            .as_array()
            .map_or(0, |s| s.iter().filter_map(|d| d.as_u64()).product());
        let offs = &t["data_offsets"];
        let bytes = offs[1]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(offs[0].as_u64().unwrap_or(0));
        out.push((dtype, n, bytes));
    }
    Ok(out)
}

fn dominant_type(types: &BTreeMap<String, TypeShare>) -> String {
    types
        .iter()
        .max_by_key(|(_, s)| s.bytes)
        .map_or_else(|| "unknown".into(), |(k, _)| k.clone())
}

/// llama.cpp's name for a `general.file_type`: the recipes `quantize` writes, then the
/// types it reads but cannot write (ids from llama.cpp's `llama_ftype`, append-only).
fn file_type_name(id: u64) -> Option<&'static str> {
    if let Some(r) = crate::quantize::policy::Recipe::by_file_type(id) {
        return Some(r.name);
    }
    Some(match id {
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        _ => return None,
    })
}

/// A metadata value as JSON; arrays longer than 16 show their first 16 items and length.
fn metadata_json(v: &Value) -> serde_json::Value {
    use serde_json::json;
    match v {
        Value::String(s) => json!(s),
        Value::Bool(b) => json!(b),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(a) => {
            let head: Vec<serde_json::Value> = if let Some(s) = a.as_strings() {
                s.iter().take(16).map(|x| json!(x)).collect()
            } else if let Some(x) = a.to_i64s() {
                x.into_iter().take(16).map(|x| json!(x)).collect()
            } else if let Some(x) = a.as_f32s() {
                x.iter().take(16).map(|x| json!(x)).collect()
            } else {
                Vec::new()
            };
            if a.len() > 16 {
                json!({"length": a.len(), "first": head})
            } else {
                json!(head)
            }
        }
        other => other
            .to_i64()
            .map(|i| json!(i))
            .or_else(|| other.to_u64().map(|u| json!(u)))
            .unwrap_or(serde_json::Value::Null),
    }
}

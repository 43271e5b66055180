//! Hugging Face model directories: `config.json` + one or more `*.safetensors` files.
//!
//! Rather than a second copy of every model, a directory is presented to the GGUF loaders
//! the way llama.cpp's converter would write it: `config.json` becomes `{arch}.*` parameters,
//! tensor names are mapped to GGUF's, and Llama/Mistral Q/K rows are permuted to the
//! interleaved rotary layout GGUF files use. Weights stay in the file's float type unless the
//! [`WeightMode`] quantizes them (ISQ). MLX's quantized directories (`quantization` in
//! `config.json`, each quantized layer's `weight` in `u32` words beside its `scales` and
//! `biases`) load as AFQ weights, as MLX stores them.

use super::meta::{Gguf, Params, TensorSource, WeightMode};
use crate::{Error, Result};
use hanzo_ml::io::safetensors::{files_in_dir, ShardedSafetensors};
use hanzo_ml::quantized::gguf::Value;
use hanzo_ml::quantized::{AfqScale, AfqType, GgmlDType, QTensor};
use hanzo_ml::{DType, Tensor};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::Path;

/// Architectures a directory can hold, by `config.json`'s `model_type`.
pub const SUPPORTED: &str = "llama, mistral, phi3, qwen2, qwen3";

/// The safetensors files of a directory, with GGUF-style names.
pub struct SafetensorsDir {
    shards: ShardedSafetensors,
    /// Q/K rows are permuted for interleaved RoPE: (query heads, KV heads).
    permute_qk: Option<(usize, usize)>,
    /// Phi-3's `mlp.gate_up_proj` is GGUF's `ffn_up`.
    fused_gate_up: bool,
    /// `config.json`'s `quantization`, for MLX's quantized directories.
    mlx: Option<Json>,
}

impl SafetensorsDir {
    fn open(
        dir: &Path,
        permute_qk: Option<(usize, usize)>,
        fused_gate_up: bool,
        mlx: Option<Json>,
    ) -> Result<Self> {
        Ok(Self {
            shards: ShardedSafetensors::open(&files_in_dir(dir)?)?,
            permute_qk,
            fused_gate_up,
            mlx,
        })
    }

    fn tensor(&self, name: &str) -> Result<Tensor> {
        self.shards
            .get(name)
            .ok_or_else(|| Error::model("safetensors", format!("missing tensor {name}")))?
            .map_err(Error::from)
    }

    /// The AFQ weight of MLX's layer `module` (`weight` in `u32` words, `scales`, `biases`),
    /// its group size from `quantization` (a per-layer entry before the global one), its
    /// width from the shapes.
    fn afq(&self, module: &str) -> Result<QTensor> {
        let cfg = self.mlx.as_ref().expect("checked by the caller");
        let layer = cfg.get(module).filter(|v| v.is_object()).unwrap_or(cfg);
        let group = layer["group_size"].as_u64().unwrap_or(64) as usize;
        let bad = |msg: String| Error::model("MLX quantization", format!("{module}: {msg}"));
        AfqType::check_group(group).map_err(|e| bad(e.to_string()))?;
        let w = self.tensor(&format!("{module}.weight"))?;
        let scales = self.tensor(&format!("{module}.scales"))?;
        let biases = self.tensor(&format!("{module}.biases"))?;
        let (Ok((n, words)), Ok((sn, groups))) = (w.dims2(), scales.dims2()) else {
            return Err(bad("weight and scales must be 2-D".into()));
        };
        let k = groups * group;
        if sn != n || biases.dims() != scales.dims() || w.dtype() != DType::U32 || k == 0 {
            return Err(bad(format!(
                "weight {:?} {:?}, scales {:?}, biases {:?} are not MLX's layout",
                w.dims(),
                w.dtype(),
                scales.dims(),
                biases.dims()
            )));
        }
        if !(words * 32).is_multiple_of(k) {
            return Err(bad(format!("{words} words a row do not pack {k} weights")));
        }
        let scale = match scales.dtype() {
            DType::BF16 => AfqScale::BF16,
            // f32 scales (MLX's for f32 weights) are held as f16.
            _ => AfqScale::F16,
        };
        let t = AfqType::new(words * 32 / k, group, scale)?;
        let packed: Vec<u8> = w
            .flatten_all()?
            .to_vec1::<u32>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let (s, b) = (bits16(&scales, scale)?, bits16(&biases, scale)?);
        Ok(QTensor::from_mlx(t, (n, k), &packed, &s, &b)?)
    }
}

/// A 16-bit float tensor's values as bits of `scale`'s type (converted when stored otherwise).
fn bits16(t: &Tensor, scale: AfqScale) -> Result<Vec<u16>> {
    let t = t.flatten_all()?;
    Ok(match scale {
        AfqScale::BF16 => t
            .to_dtype(DType::BF16)?
            .to_vec1::<half::bf16>()?
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        AfqScale::F16 => t
            .to_dtype(DType::F16)?
            .to_vec1::<half::f16>()?
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    })
}

/// GGUF's row order for interleaved RoPE: within each head, row `2j + s` is HF row
/// `s * head_dim / 2 + j` (HF rotates the two halves of a head, GGUF adjacent pairs). Whole
/// rows of bytes move, so it serves float and AFQ weights (and 1-D biases) alike.
pub(crate) fn permute_rows(q: &QTensor, heads: usize) -> Result<QTensor> {
    let rows = q.shape().dims()[0];
    if heads == 0 || !rows.is_multiple_of(heads * 2) {
        return Err(Error::model(
            "safetensors",
            format!("cannot split {rows} rows over {heads} rotary heads"),
        ));
    }
    let (data, head) = (q.data(), rows / heads);
    let row_bytes = data.len() / rows;
    let mut out = Vec::with_capacity(data.len());
    for h in 0..heads {
        for j in 0..head / 2 {
            for half in 0..2 {
                let src = h * head + half * head / 2 + j;
                out.extend_from_slice(&data[src * row_bytes..][..row_bytes]);
            }
        }
    }
    Ok(QTensor::from_bytes(q.dtype(), q.shape().clone(), &out)?)
}

/// A block's tensors: GGUF's part name beside Hugging Face's (Llama-family layout).
const BLOCK_PARTS: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_qkv", "self_attn.qkv_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// The tensors outside the blocks: GGUF's name beside Hugging Face's.
const TOP_NAMES: &[(&str, &str)] = &[
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

/// The HF name of a GGUF tensor name (Llama-family layout; Phi-3 fuses gate and up).
fn hf_name(gguf: &str, fused_gate_up: bool) -> Option<String> {
    if let Some((_, hf)) = TOP_NAMES.iter().find(|(g, _)| *g == gguf) {
        return Some(hf.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (part, kind) = rest.rsplit_once('.')?;
    let hf = match part {
        "ffn_up" if fused_gate_up => "mlp.gate_up_proj",
        _ => BLOCK_PARTS.iter().find(|(g, _)| *g == part)?.1,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// The GGUF name of a Hugging Face tensor name (`hf_name` the other way; Phi-3's
/// `mlp.gate_up_proj` is `ffn_up`).
pub(crate) fn gguf_name(hf: &str) -> Option<String> {
    if let Some((g, _)) = TOP_NAMES.iter().find(|(_, h)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    let gguf = match part {
        "mlp.gate_up_proj" => "ffn_up",
        _ => BLOCK_PARTS.iter().find(|(_, h)| *h == part)?.0,
    };
    Some(format!("blk.{layer}.{gguf}.{kind}"))
}

impl TensorSource for SafetensorsDir {
    fn has(&self, name: &str) -> bool {
        hf_name(name, self.fused_gate_up).is_some_and(|n| self.shards.contains(&n))
    }

    fn get(&self, name: &str) -> Result<QTensor> {
        let hf = hf_name(name, self.fused_gate_up)
            .ok_or_else(|| Error::model("safetensors", format!("no tensor for {name}")))?;
        let afq = hf
            .strip_suffix(".weight")
            .filter(|m| self.mlx.is_some() && self.shards.contains(&format!("{m}.scales")));
        let q = match afq {
            Some(module) => self.afq(module)?,
            None => {
                let t = self.tensor(&hf)?;
                let dtype = match t.dtype() {
                    DType::F16 => GgmlDType::F16,
                    DType::BF16 => GgmlDType::BF16,
                    _ => GgmlDType::F32,
                };
                QTensor::quantize(&t, dtype)?
            }
        };
        match self.permute_qk {
            Some((heads, _)) if name.contains(".attn_q.") => permute_rows(&q, heads),
            Some((_, kv_heads)) if name.contains(".attn_k.") => permute_rows(&q, kv_heads),
            _ => Ok(q),
        }
    }
}

/// `config.json` of a directory.
pub fn read_config(dir: &Path) -> Result<Json> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::model("config.json", format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::model("config.json", format!("{}: {e}", path.display())))
}

/// A directory's model as the GGUF loaders see it: (architecture, parameters, tensors).
pub fn open(dir: &Path) -> Result<(String, HashMap<String, Value>, SafetensorsDir)> {
    let cfg = read_config(dir)?;
    let arch = cfg["model_type"]
        .as_str()
        .ok_or_else(|| Error::model("config.json", "no model_type"))?
        .to_string();
    if !matches!(
        arch.as_str(),
        "llama" | "mistral" | "phi3" | "qwen2" | "qwen3"
    ) {
        return Err(Error::UnsupportedArchitecture(arch, SUPPORTED));
    }
    let count = |k: &str| cfg[k].as_u64().map(Value::U64);
    let need = |k: &str| {
        count(k).ok_or_else(|| Error::model("config.json", format!("missing or invalid {k}")))
    };
    let mut p = HashMap::new();
    let mut put = |k: &str, v: Value| {
        p.insert(format!("{arch}.{k}"), v);
    };
    put("embedding_length", need("hidden_size")?);
    put("block_count", need("num_hidden_layers")?);
    put("feed_forward_length", need("intermediate_size")?);
    let heads = need("num_attention_heads")?;
    let kv_heads = count("num_key_value_heads").unwrap_or(heads.clone());
    put("attention.head_count", heads.clone());
    put("attention.head_count_kv", kv_heads.clone());
    if let Some(d) = count("head_dim") {
        put("attention.key_length", d);
    }
    if let Some(c) = count("max_position_embeddings") {
        put("context_length", c);
    }
    let num = |k: &str| cfg[k].as_f64().map(Value::F64);
    if let Some(e) = num("rms_norm_eps") {
        put("attention.layer_norm_rms_epsilon", e);
    }
    if let Some(b) = num("rope_theta") {
        put("rope.freq_base", b);
    }
    // Qwen2 configs carry a window but disable it with `use_sliding_window: false`.
    let window_on = cfg["use_sliding_window"].as_bool().unwrap_or(true);
    if let (true, Some(w)) = (window_on, count("sliding_window")) {
        put("attention.sliding_window", w);
    }
    let rs = &cfg["rope_scaling"];
    if let Some(kind) = rs["rope_type"].as_str().or(rs["type"].as_str()) {
        put("rope.scaling.type", Value::String(kind.to_string()));
        for (from, to) in [
            ("factor", "rope.scaling.factor"),
            ("low_freq_factor", "rope.scaling.low_freq_factor"),
            ("high_freq_factor", "rope.scaling.high_freq_factor"),
        ] {
            if let Some(v) = rs[from].as_f64() {
                put(to, Value::F64(v));
            }
        }
        if let Some(v) = rs["original_max_position_embeddings"].as_u64() {
            put("rope.scaling.original_context_length", Value::U64(v));
        }
    }
    let as_usize = |v: &Value| v.to_usize().unwrap_or(0);
    // The GGUF converter permutes Llama/Mistral Q/K for interleaved rotary; Qwen keeps halves.
    let permute = matches!(arch.as_str(), "llama" | "mistral")
        .then(|| (as_usize(&heads), as_usize(&kv_heads)));
    // MLX's quantized directories: `quantization` (newer mlx-lm writes `quantization_config`
    // too; only the affine mode is read).
    let mlx = cfg["quantization"]
        .as_object()
        .map(|_| cfg["quantization"].clone());
    if let Some(mode) = mlx.as_ref().and_then(|q| q["mode"].as_str()) {
        if mode != "affine" {
            return Err(Error::model(
                "config.json",
                format!("MLX quantization mode {mode:?}: only the affine mode (AFQ) is read"),
            ));
        }
    }
    let tensors = SafetensorsDir::open(dir, permute, arch == "phi3", mlx)?;
    Ok((arch, p, tensors))
}

/// Loads the model of a directory through the GGUF loader of its architecture.
pub fn load(dir: &Path, mode: WeightMode) -> Result<Box<dyn super::LanguageModel>> {
    let (arch, params, tensors) = open(dir)?;
    let g = Gguf::from_parts(arch, Params::Map(params), &tensors, mode);
    Ok(Box::new(super::llama::load(&g)?))
}

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
use super::{LanguageModel, ModelInfo};
use crate::{Error, Result};
use hanzo_ml::io::safetensors::{files_in_dir, RawTensor, ShardedSafetensors};
use hanzo_ml::kv::KvLayout;
use hanzo_ml::quantized::gguf::Value;
use hanzo_ml::quantized::{AfqScale, AfqType, GgmlDType, QMatMul, QTensor};
use hanzo_ml::{DType, Tensor};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

    fn raw(&self, name: &str) -> Result<RawTensor<'_>> {
        self.shards
            .raw(name)
            .ok_or_else(|| Error::model("safetensors", format!("missing tensor {name}")))?
            .map_err(Error::from)
    }

    /// MLX's layer `module` as an AFQ weight: its type (group size from `quantization`, a
    /// per-layer entry before the global one; width from the shapes), `[n, k]`, and its
    /// three stored tensors (`weight` in `u32` words, `scales`, `biases`). No data is read.
    fn afq_parts(&self, module: &str) -> Result<AfqParts<'_>> {
        let cfg = self.mlx.as_ref().expect("checked by the caller");
        let layer = cfg.get(module).filter(|v| v.is_object()).unwrap_or(cfg);
        let group = layer["group_size"].as_u64().unwrap_or(64) as usize;
        let bad = |msg: String| Error::model("MLX quantization", format!("{module}: {msg}"));
        AfqType::check_group(group).map_err(|e| bad(e.to_string()))?;
        let w = self.raw(&format!("{module}.weight"))?;
        let scales = self.raw(&format!("{module}.scales"))?;
        let biases = self.raw(&format!("{module}.biases"))?;
        let (&[n, words], &[sn, groups]) = (w.shape, scales.shape) else {
            return Err(bad("weight and scales must be 2-D".into()));
        };
        let k = groups * group;
        if sn != n
            || biases.shape != scales.shape
            || biases.dtype != scales.dtype
            || !matches!(scales.dtype, DType::BF16 | DType::F16 | DType::F32)
            || w.dtype != DType::U32
            || k == 0
        {
            return Err(bad(format!(
                "weight {:?} {:?}, scales {:?} {:?}, biases {:?} {:?} are not MLX's layout",
                w.shape, w.dtype, scales.shape, scales.dtype, biases.shape, biases.dtype
            )));
        }
        if !(words * 32).is_multiple_of(k) {
            return Err(bad(format!("{words} words a row do not pack {k} weights")));
        }
        let scale = match scales.dtype {
            DType::BF16 => AfqScale::BF16,
            // f32 scales (MLX's for f32 weights) are held as f16.
            _ => AfqScale::F16,
        };
        let t = AfqType::new(words * 32 / k, group, scale)?;
        Ok(AfqParts {
            t,
            n,
            k,
            w,
            scales,
            biases,
        })
    }

    /// The AFQ weight of MLX's layer `module`, read straight from the stored bytes into the
    /// one buffer it keeps.
    fn afq(&self, module: &str) -> Result<QTensor> {
        let p = self.afq_parts(module)?;
        let (s, b) = (bits16(&p.scales, p.t), bits16(&p.biases, p.t));
        Ok(QTensor::from_mlx(p.t, (p.n, p.k), p.w.bytes, &s, &b)?)
    }

    /// The bytes the loaded model holds for the tensors it reads, computed from the headers
    /// alone: AFQ weights in their blocks, float weights in their type (dense f32 ones twice,
    /// as `QMatMul` counts them), norms and biases as read plus their f32 copy.
    fn resident_bytes(&self) -> Result<u64> {
        let mut total = 0u64;
        for name in self.shards.names() {
            if gguf_name(name).is_none() {
                continue; // not read by the loader
            }
            let module = name
                .strip_suffix(".weight")
                .or_else(|| name.strip_suffix(".scales"))
                .or_else(|| name.strip_suffix(".biases"));
            if let Some(m) = module.filter(|m| self.is_afq(m)) {
                if name.ends_with(".weight") {
                    let p = self.afq_parts(m)?;
                    total += (p.n * p.k / p.t.group() * p.t.block_bytes()) as u64;
                }
                continue;
            }
            let r = self.raw(name)?;
            total += match *r.shape {
                [n, k] => {
                    let dtype = float_type(r.dtype);
                    QMatMul::resident_bytes(dtype, n, k, dtype.bytes_for(n * k)?) as u64
                }
                _ => (r.bytes.len() + 4 * r.shape.iter().product::<usize>()) as u64,
            };
        }
        Ok(total)
    }

    /// Whether `module` is stored as MLX quantizes a layer.
    fn is_afq(&self, module: &str) -> bool {
        self.mlx.is_some() && self.shards.contains(&format!("{module}.scales"))
    }
}

/// An AFQ layer's stored parts (`SafetensorsDir::afq_parts`).
struct AfqParts<'a> {
    t: AfqType,
    n: usize,
    k: usize,
    w: RawTensor<'a>,
    scales: RawTensor<'a>,
    biases: RawTensor<'a>,
}

/// The GGUF type a float tensor is held in: its own where GGUF has it, else f32.
fn float_type(dtype: DType) -> GgmlDType {
    match dtype {
        DType::F16 => GgmlDType::F16,
        DType::BF16 => GgmlDType::BF16,
        _ => GgmlDType::F32,
    }
}

/// Stored scales or biases (bf16, f16 or f32: `afq_parts` checked) as bits of `t`'s scale
/// type; f32 ones are rounded to f16.
fn bits16(r: &RawTensor, t: AfqType) -> Vec<u16> {
    match (r.dtype, t.scale()) {
        (DType::F32, _) => r
            .bytes
            .chunks_exact(4)
            .map(|c| half::f16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits())
            .collect(),
        _ => r
            .bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect(),
    }
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
        let afq = hf.strip_suffix(".weight").filter(|m| self.is_afq(m));
        // Every weight is copied out of the map, whose pages it read then leave the resident
        // set: loading never holds a model twice.
        let q = match afq {
            Some(module) => {
                let q = self.afq(module)?;
                for part in ["weight", "scales", "biases"] {
                    self.shards.release(&format!("{module}.{part}"));
                }
                q
            }
            None => {
                let t = self.tensor(&hf)?;
                let q = QTensor::quantize(&t, float_type(t.dtype()))?;
                drop(t);
                self.shards.release(&hf);
                q
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
fn open(dir: &Path) -> Result<(String, HashMap<String, Value>, SafetensorsDir)> {
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

/// A Hugging Face or MLX model directory, opened: `config.json` read, the safetensors files
/// mapped and their headers parsed, no tensor data read. What it needs in memory is known
/// before it loads (the edge runtime's budget).
pub struct ModelDir {
    path: PathBuf,
    arch: String,
    params: HashMap<String, Value>,
    tensors: SafetensorsDir,
    /// `SafetensorsDir::resident_bytes`, computed (and every AFQ layer's layout checked) at
    /// opening.
    resident: u64,
}

impl ModelDir {
    pub fn open(dir: &Path) -> Result<Self> {
        let (arch, params, tensors) = open(dir)?;
        Ok(Self {
            path: dir.to_path_buf(),
            arch,
            params,
            resident: tensors.resident_bytes()?,
            tensors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `config.json`'s `model_type`, GGUF's `general.architecture`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The hyper-parameters as GGUF keys (`{arch}.embedding_length`, ...), sorted.
    pub fn params(&self) -> Vec<(&str, &Value)> {
        let mut p: Vec<_> = self.params.iter().map(|(k, v)| (k.as_str(), v)).collect();
        p.sort_by_key(|(k, _)| *k);
        p
    }

    /// Whether the weights are MLX's quantized ones (`quantization` in `config.json`).
    pub fn is_quantized(&self) -> bool {
        self.tensors.mlx.is_some()
    }

    /// The tensors the loader reads, under GGUF's names, with their shapes and stored types
    /// (an AFQ layer as its `weight`, of `u32` words); in the order llama.cpp's converter
    /// writes them: the embedding, the blocks by number, then the rest.
    pub fn tensors(&self) -> Vec<(String, Vec<usize>, DType)> {
        let mut out: Vec<_> = self
            .tensors
            .shards
            .names()
            .filter_map(|hf| {
                let gguf = gguf_name(hf)?;
                let module = hf.rsplit_once('.').map_or(hf, |(m, _)| m);
                let afq_part = self.tensors.is_afq(module) && !hf.ends_with(".weight");
                let raw = self.tensors.raw(hf).ok()?;
                (!afq_part).then(|| (gguf, raw.shape.to_vec(), raw.dtype))
            })
            .collect();
        let rank = |name: &str| match name.strip_prefix("blk.") {
            _ if name.starts_with("token_embd.") => (0, 0),
            Some(rest) => (
                1,
                rest.split('.')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0),
            ),
            None => (2, 0),
        };
        out.sort_by(|a, b| (rank(&a.0), &a.0).cmp(&(rank(&b.0), &b.0)));
        out
    }

    /// The tensor GGUF calls `name` (`blk.0.attn_q.weight`), laid out as a GGUF file holds it
    /// (Llama/Mistral Q/K rows permuted for interleaved rotary).
    pub fn tensor(&self, name: &str) -> Result<QTensor> {
        self.tensors.get(name)
    }

    fn gguf(&self, mode: WeightMode) -> Gguf<'_> {
        let params = Params::Map(self.params.clone());
        Gguf::from_parts(self.arch.clone(), params, &self.tensors, mode)
    }

    /// What [`Self::load`] would build, from `config.json` and the headers: the model's
    /// [`ModelInfo`] and the [`KvLayout`] of its KV state.
    pub fn describe(&self) -> Result<(ModelInfo, KvLayout)> {
        let g = self.gguf(WeightMode::AsStored);
        let (ctx, windows) = super::llama::context_and_windows(&g)?;
        let vocab = self.tensors.raw("model.embed_tokens.weight")?.shape[0];
        super::describe(&g, vocab, ctx, windows)
    }

    /// The bytes the model loaded as stored holds (AFQ weights exactly, in their blocks),
    /// from the headers alone.
    pub fn resident_bytes(&self) -> u64 {
        self.resident
    }

    /// The model, weights as `mode` says. Each weight is copied out of the files, whose
    /// pages then leave the resident set (the files stay mapped until `self` is dropped).
    pub fn load(&self, mode: WeightMode) -> Result<Box<dyn LanguageModel>> {
        let model = super::llama::load(&self.gguf(mode))?;
        // Reads map the pages around them too; none of them is needed any more.
        self.tensors.shards.release_all();
        Ok(Box::new(model))
    }
}

/// Loads the model of a directory through the GGUF loader of its architecture.
pub fn load(dir: &Path, mode: WeightMode) -> Result<Box<dyn LanguageModel>> {
    ModelDir::open(dir)?.load(mode)
}

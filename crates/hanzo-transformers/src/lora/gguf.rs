//! llama.cpp's GGUF LoRA adapters: `general.type = "adapter"`, `adapter.type = "lora"`,
//! `adapter.lora.alpha`, and for every adapted weight `W` the tensors `W.lora_a`
//! (`[r, in]`) and `W.lora_b` (`[out, r]`), in any stored type. An update is scaled by
//! `alpha / r`, or not at all when alpha is 0 or missing (llama.cpp's rule). The converter
//! already permuted B's query and key rows as it permutes the weights.

use super::{Adapter, Halves, LowRank};
use crate::{Error, Result};
use hanzo_ml::quantized::gguf::GgufFile;
use std::path::Path;

pub(super) fn read(path: &Path) -> Result<Adapter> {
    let err = |msg: String| Error::model(format!("GGUF adapter {}", path.display()), msg);
    let file = GgufFile::open(path)?;
    let text = |key: &str| file.get(key).and_then(|v| v.as_str()).map(str::to_string);
    match text("general.type").as_deref() {
        Some("adapter") => {}
        Some(other) => {
            return Err(err(format!(
                "general.type is {other:?}: a model, not an adapter"
            )))
        }
        None => return Err(err("no general.type (a model, not an adapter)".into())),
    }
    match text("adapter.type").as_deref() {
        Some("lora") => {}
        other => {
            return Err(err(format!(
                "adapter.type is {other:?}: only LoRA adapters are read"
            )))
        }
    }
    let alpha = file
        .get("adapter.lora.alpha")
        .and_then(|v| v.to_f64())
        .unwrap_or(0.0);
    let mut halves = Halves::default();
    for info in file.tensor_infos() {
        let (base, is_a) = if let Some(b) = info.name.strip_suffix(".lora_a") {
            (b, true)
        } else if let Some(b) = info.name.strip_suffix(".lora_b") {
            (b, false)
        } else {
            return Err(err(format!("tensor {:?} is not a LoRA weight", info.name)));
        };
        halves.put(base, is_a, file.tensor(&info.name)?.dequantize()?);
    }
    let pairs = halves.pairs("lora_a and lora_b").map_err(err)?;
    let mut weights = Vec::with_capacity(pairs.len());
    for (name, a, b) in pairs {
        let rank = a.dims().first().copied().unwrap_or(1).max(1);
        let scale = match alpha {
            0.0 => 1.0,
            a => a / rank as f64,
        };
        weights.push((name, LowRank { a, b, scale }));
    }
    Ok(Adapter {
        name: String::new(),
        architecture: text("general.architecture"),
        hf_rows: false,
        weights,
    })
}

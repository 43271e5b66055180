//! PEFT's LoRA directories: `adapter_config.json` (`r`, `lora_alpha`, `use_rslora`,
//! `rank_pattern`, `alpha_pattern`) and `adapter_model.safetensors`, whose tensors are named
//! `base_model.model.<module>.lora_A.weight` (`[r, in]`) and `...lora_B.weight` (`[out, r]`).
//! A module's update is scaled by `alpha / r`, or `alpha / √r` with rank-stabilised LoRA.

use super::{Adapter, Halves, LowRank};
use crate::models::hf::gguf_name;
use crate::{Error, Result};
use hanzo_ml::DType;
use serde_json::Value as Json;
use std::path::Path;

fn err(msg: impl Into<String>) -> Error {
    Error::model("PEFT adapter", msg)
}

pub(super) fn read(dir: &Path) -> Result<Adapter> {
    let cfg_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg_path)
        .map_err(|e| err(format!("{}: {e}", cfg_path.display())))?;
    let cfg: Json =
        serde_json::from_str(&text).map_err(|e| err(format!("{}: {e}", cfg_path.display())))?;
    let cfg = Config::parse(&cfg)?;
    let file = dir.join("adapter_model.safetensors");
    if !file.is_file() {
        let pickled = dir.join("adapter_model.bin").is_file();
        return Err(err(format!(
            "{}: no adapter_model.safetensors{}",
            dir.display(),
            if pickled {
                " (adapter_model.bin is a PyTorch pickle, which is not read: save the adapter \
                 with safe_serialization=True)"
            } else {
                ""
            }
        )));
    }
    let tensors = hanzo_ml::io::safetensors::load(&file)?;
    let mut halves = Halves::default();
    for (key, t) in tensors {
        let Some(rest) = key.strip_prefix("base_model.model.") else {
            return Err(err(format!(
                "unexpected tensor {key:?} (not base_model.model.*)"
            )));
        };
        let (module, is_a) = if let Some(m) = rest.strip_suffix(".lora_A.weight") {
            (m, true)
        } else if let Some(m) = rest.strip_suffix(".lora_B.weight") {
            (m, false)
        } else if rest.contains("lora_embedding_") {
            return Err(err(format!("{key}: LoRA on embeddings is not supported")));
        } else if rest.contains("lora_magnitude_vector") {
            return Err(err(format!("{key}: DoRA adapters are not supported")));
        } else {
            return Err(err(format!(
                "{key}: not a LoRA weight (full modules saved beside the adapter, \
                 `modules_to_save`, are not supported)"
            )));
        };
        halves.put(module, is_a, t.to_dtype(DType::F32)?);
    }
    let pairs = halves.pairs("lora_A and lora_B").map_err(err)?;
    let mut weights = Vec::with_capacity(pairs.len());
    for (module, a, b) in pairs {
        let name = gguf_name(&format!("{module}.weight")).ok_or_else(|| {
            err(format!(
                "{module}: not a projection of a supported architecture's blocks or its head"
            ))
        })?;
        let rank = a.dims().first().copied().unwrap_or(0);
        let want = cfg.rank(&module)?;
        if rank != want {
            return Err(err(format!(
                "{module}: lora_A has rank {rank}, adapter_config.json says {want}"
            )));
        }
        let alpha = cfg.alpha(&module)?;
        let scale = match cfg.rslora {
            true => alpha / (rank as f64).sqrt(),
            false => alpha / rank as f64,
        };
        weights.push((name, LowRank { a, b, scale }));
    }
    Ok(Adapter {
        name: String::new(),
        architecture: None,
        hf_rows: true,
        weights,
    })
}

/// What `adapter_config.json` says about the scales.
struct Config {
    r: usize,
    alpha: f64,
    rslora: bool,
    rank_pattern: Vec<(String, usize)>,
    alpha_pattern: Vec<(String, f64)>,
}

impl Config {
    fn parse(cfg: &Json) -> Result<Self> {
        if let Some(t) = cfg["peft_type"].as_str() {
            if t != "LORA" {
                return Err(err(format!("peft_type {t:?}: only LORA adapters are read")));
            }
        }
        if cfg["use_dora"].as_bool() == Some(true) {
            return Err(err("DoRA adapters (use_dora) are not supported"));
        }
        if cfg["fan_in_fan_out"].as_bool() == Some(true) {
            return Err(err(
                "fan_in_fan_out adapters (Conv1D layers, GPT-2) are not supported",
            ));
        }
        let r = cfg["r"]
            .as_u64()
            .filter(|&r| r > 0)
            .ok_or_else(|| err("adapter_config.json: missing or invalid r"))?
            as usize;
        let alpha = cfg["lora_alpha"].as_f64().unwrap_or(8.0);
        let pattern = |key: &str| -> Result<Vec<(String, f64)>> {
            match &cfg[key] {
                Json::Null => Ok(Vec::new()),
                Json::Object(m) => m
                    .iter()
                    .map(|(k, v)| {
                        let v = v
                            .as_f64()
                            .ok_or_else(|| err(format!("{key}[{k:?}] is not a number")))?;
                        Ok((k.clone(), v))
                    })
                    .collect(),
                _ => Err(err(format!("{key} is not an object"))),
            }
        };
        Ok(Self {
            r,
            alpha,
            rslora: cfg["use_rslora"].as_bool().unwrap_or(false),
            rank_pattern: pattern("rank_pattern")?
                .into_iter()
                .map(|(k, v)| (k, v as usize))
                .collect(),
            alpha_pattern: pattern("alpha_pattern")?,
        })
    }

    fn rank(&self, module: &str) -> Result<usize> {
        Ok(matching(&self.rank_pattern, module)?.unwrap_or(self.r))
    }

    fn alpha(&self, module: &str) -> Result<f64> {
        Ok(matching(&self.alpha_pattern, module)?.unwrap_or(self.alpha))
    }
}

/// The value of the first pattern that names `module` the way PEFT matches them: the
/// pattern (a regular expression) is the whole name or a dotted suffix of it.
fn matching<T: Copy>(patterns: &[(String, T)], module: &str) -> Result<Option<T>> {
    for (p, v) in patterns {
        let re = fancy_regex::Regex::new(&format!(r"^(?:.*\.)?(?:{p})$"))
            .map_err(|e| err(format!("pattern {p:?}: {e}")))?;
        if re.is_match(module).unwrap_or(false) {
            return Ok(Some(*v));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::matching;

    #[test]
    fn patterns_name_a_module_or_a_dotted_suffix_of_it() {
        let p = vec![
            ("layers.3.mlp.down_proj".to_string(), 2.0),
            ("q_proj".to_string(), 4.0),
        ];
        let m = "model.layers.3.mlp.down_proj";
        assert_eq!(matching(&p, m).unwrap(), Some(2.0));
        assert_eq!(matching(&p, "model.layers.13.mlp.down_proj").unwrap(), None);
        assert_eq!(
            matching(&p, "model.layers.0.self_attn.q_proj").unwrap(),
            Some(4.0)
        );
        assert_eq!(
            matching(&p, "model.layers.0.self_attn.xq_proj").unwrap(),
            None
        );
        let bad = vec![("(".to_string(), 1.0)];
        assert!(matching(&bad, m).is_err());
    }
}

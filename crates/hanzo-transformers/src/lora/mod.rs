//! LoRA adapters: low-rank updates `W + scale·B·A` of a model's projections, read from
//! PEFT's directories (`adapter_config.json` + `adapter_model.safetensors`) and from
//! llama.cpp's GGUF adapters (`general.type = adapter`).
//!
//! The base weights stay as they are stored (quantized or not): a model with an adapter
//! attached computes `scale·(x·Aᵀ)·Bᵀ` in f32 beside each adapted matmul
//! (`LanguageModel::attach_lora`), so one model serves requests with and without adapters,
//! and with different ones, in one batch. `hanzo-engine quantize --lora` folds an adapter
//! into the weights instead (`Adapter::delta`).

mod gguf;
mod peft;

use crate::{Error, Result};
use hanzo_ml::quantized::{GgmlDType, QTensor};
use hanzo_ml::Tensor;
use std::path::{Path, PathBuf};

/// One adapted weight's update: `scale · B · A`, `A` `[rank, in]`, `B` `[out, rank]` (f32).
#[derive(Clone, Debug)]
pub struct LowRank {
    pub a: Tensor,
    pub b: Tensor,
    pub scale: f64,
}

impl LowRank {
    pub fn rank(&self) -> usize {
        self.a.dims()[0]
    }

    /// `(out, in)` of the weight this update applies to.
    pub fn weight_dims(&self) -> (usize, usize) {
        (self.b.dims()[0], self.a.dims()[1])
    }

    fn check(&self, name: &str) -> Result<()> {
        let (a, b) = (self.a.dims(), self.b.dims());
        if a.len() != 2 || b.len() != 2 || a[0] != b[1] || a[0] == 0 {
            return Err(Error::model(
                "LoRA adapter",
                format!("{name}: A {a:?} and B {b:?} are not a rank-r pair ([r, in] and [out, r])"),
            ));
        }
        Ok(())
    }
}

/// A loaded adapter: its updates by the GGUF name of the weight they change
/// (`blk.3.attn_q.weight`, `output.weight`).
#[derive(Clone, Debug)]
pub struct Adapter {
    /// What the user called it (the file or directory name without extension by default).
    pub name: String,
    /// The architecture it was made for, where the file says (GGUF adapters).
    pub architecture: Option<String>,
    /// B's rows of the query and key projections in Hugging Face's rotary order (PEFT),
    /// not yet in GGUF's (interleaved for Llama/Mistral).
    hf_rows: bool,
    weights: Vec<(String, LowRank)>,
}

impl Adapter {
    /// Reads an adapter: a GGUF file, or a PEFT directory (or its `adapter_model.safetensors`
    /// / `adapter_config.json`).
    pub fn open(path: &Path) -> Result<Self> {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "lora".into());
        let is_file = path.is_file();
        let mut adapter = if is_file && is_gguf(path)? {
            gguf::read(path)?
        } else {
            let dir = match is_file {
                true => path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                false => path.to_path_buf(),
            };
            if !dir.join("adapter_config.json").is_file() {
                return Err(Error::model(
                    "LoRA adapter",
                    format!(
                        "{}: neither a GGUF adapter nor a PEFT directory (no adapter_config.json)",
                        path.display()
                    ),
                ));
            }
            peft::read(&dir)?
        };
        adapter.name = match (is_file, path.file_name()) {
            // A PEFT directory is named by the directory.
            (false, Some(n)) => n.to_string_lossy().into_owned(),
            _ => name,
        };
        for (n, w) in &adapter.weights {
            w.check(n)?;
        }
        if adapter.weights.is_empty() {
            return Err(Error::model(
                "LoRA adapter",
                format!("{}: holds no LoRA weights", path.display()),
            ));
        }
        Ok(adapter)
    }

    /// `FILE[:SCALE]` (the form of `--lora`): the adapter at FILE, its updates times SCALE
    /// (1 when left out).
    pub fn open_spec(spec: &str) -> Result<Self> {
        let (path, scale) = parse_spec(spec)?;
        Ok(Self::open(&path)?.scaled(scale))
    }

    /// Every update times `s`.
    pub fn scaled(mut self, s: f64) -> Self {
        for (_, w) in &mut self.weights {
            w.scale *= s;
        }
        self
    }

    /// The updates, by the GGUF name of the weight each changes.
    pub fn weights(&self) -> impl Iterator<Item = (&str, &LowRank)> {
        self.weights.iter().map(|(n, w)| (n.as_str(), w))
    }

    /// The largest rank among the updates.
    pub fn rank(&self) -> usize {
        self.weights
            .iter()
            .map(|(_, w)| w.rank())
            .max()
            .unwrap_or(0)
    }

    /// Bytes the updates hold (f32).
    pub fn bytes(&self) -> usize {
        self.weights
            .iter()
            .map(|(_, w)| 4 * (w.a.elem_count() + w.b.elem_count()))
            .sum()
    }

    /// The adapter as it applies to a model of `architecture` with `heads` query and
    /// `kv_heads` KV heads: an error if it was made for another architecture; the rows of
    /// B for queries and keys permuted the way the GGUF converter permutes the weights
    /// (Llama and Mistral rotate adjacent pairs), so they line up with the model's rows.
    pub fn for_model(&self, architecture: &str, heads: usize, kv_heads: usize) -> Result<Self> {
        if let Some(a) = &self.architecture {
            if a != architecture {
                return Err(Error::model(
                    "LoRA adapter",
                    format!(
                        "{} was made for {a}, the model is {architecture}",
                        self.name
                    ),
                ));
            }
        }
        let mut out = self.clone();
        let permute = self.hf_rows && matches!(architecture, "llama" | "mistral");
        if permute {
            for (name, w) in &mut out.weights {
                let count = match name.split('.').nth(2) {
                    Some("attn_q") => heads,
                    Some("attn_k") => kv_heads,
                    _ => continue,
                };
                let q = QTensor::quantize(&w.b, GgmlDType::F32)?;
                w.b = crate::models::hf::permute_rows(&q, count)
                    .map_err(|e| Error::model("LoRA adapter", format!("{name}: {e}")))?
                    .dequantize()?;
            }
        }
        out.hf_rows = false;
        Ok(out)
    }

    /// The update of weight `name` (GGUF name) as one `[out, in]` f32 tensor, `Σ scale·B·A`
    /// over the updates of that weight; `None` when the adapter leaves it alone. Call it on
    /// [`Self::for_model`]'s result.
    pub fn delta(&self, name: &str) -> Result<Option<Tensor>> {
        let mut sum: Option<Tensor> = None;
        for (n, w) in &self.weights {
            if n != name {
                continue;
            }
            let d = w.b.matmul(&w.a)?.affine(w.scale, 0.0)?;
            sum = Some(match sum {
                Some(s) => s.add(&d)?,
                None => d,
            });
        }
        Ok(sum)
    }
}

/// The A and B halves of a file's updates, collected in the file's order and named by what
/// they change (the readers of both forms).
#[derive(Default)]
struct Halves(std::collections::BTreeMap<String, (Option<Tensor>, Option<Tensor>)>);

impl Halves {
    fn put(&mut self, name: &str, is_a: bool, t: Tensor) {
        let slot = self.0.entry(name.to_string()).or_default();
        match is_a {
            true => slot.0 = Some(t),
            false => slot.1 = Some(t),
        }
    }

    /// `(name, A, B)` in name order; the message for a name missing a half, which the
    /// file calls `halves` (`lora_a and lora_b`).
    fn pairs(self, halves: &str) -> std::result::Result<Vec<(String, Tensor, Tensor)>, String> {
        self.0
            .into_iter()
            .map(|(name, pair)| match pair {
                (Some(a), Some(b)) => Ok((name, a, b)),
                _ => Err(format!("{name}: {halves} do not both appear")),
            })
            .collect()
    }
}

/// `FILE[:SCALE]`: the path and the scale (1 when left out). A colon followed by something
/// that is not a number belongs to the path.
pub fn parse_spec(spec: &str) -> Result<(PathBuf, f64)> {
    if let Some((path, scale)) = spec.rsplit_once(':') {
        if let Ok(s) = scale.parse::<f64>() {
            if !s.is_finite() {
                return Err(Error::Invalid(format!(
                    "LoRA scale {scale:?} is not finite"
                )));
            }
            return Ok((PathBuf::from(path), s));
        }
    }
    Ok((PathBuf::from(spec), 1.0))
}

fn is_gguf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::model("LoRA adapter", format!("{}: {e}", path.display())))?;
    Ok(f.read(&mut magic)? == 4 && &magic == b"GGUF")
}

/// Which adapter set a sequence runs with: the handle `LanguageModel::attach_lora` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoraId(pub(crate) u32);

impl LoraId {
    /// The attach order: 0 for the model's first adapter set, 1 for its second, ...
    pub fn index(&self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_split_a_trailing_scale_off_the_path() {
        assert_eq!(
            parse_spec("a/b.gguf").unwrap(),
            (PathBuf::from("a/b.gguf"), 1.0)
        );
        assert_eq!(
            parse_spec("a/b.gguf:0.5").unwrap(),
            (PathBuf::from("a/b.gguf"), 0.5)
        );
        assert_eq!(parse_spec("a/b:-1").unwrap(), (PathBuf::from("a/b"), -1.0));
        // A colon that is not followed by a number belongs to the path.
        assert_eq!(
            parse_spec("c:/x/y").unwrap(),
            (PathBuf::from("c:/x/y"), 1.0)
        );
        assert!(parse_spec("a.gguf:inf").is_err());
    }
}

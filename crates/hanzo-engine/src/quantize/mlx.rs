//! `hanzo-engine quantize DIR OUT_DIR --type AFQ4 [--group-size 64]`: a Hugging Face model
//! directory in, MLX's quantized layout out, as `mlx_lm.convert -q` writes it: each 2-D
//! weight whose rows are whole groups (the linear layers, the embedding, the head) becomes
//! `weight` (the levels in `u32` words), `scales` and `biases`, in the weights' 16-bit type
//! (bf16 stays bf16; f16 and f32 sources get f16); everything else is copied as stored;
//! `config.json` gets `quantization`; the tokenizer and other files are copied. Written to
//! `OUT_DIR.partial` and renamed when complete.

use anyhow::{bail, Context, Result};
use hanzo_ml::io::safetensors::{files_in_dir, MmapedSafetensors};
use hanzo_ml::quantized::{AfqScale, AfqType, GgmlDType, QTensor};
use hanzo_ml::{DType, Device, Tensor};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

pub fn write(input: &Path, output: &Path, t: AfqType) -> Result<()> {
    let start = Instant::now();
    let config_path = input.join("config.json");
    if !input.is_dir() || !config_path.exists() {
        bail!(
            "{}: MLX's layout is a Hugging Face model directory, so AFQ needs one as input (config.json and safetensors)",
            input.display()
        );
    }
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&config_path).context("reading config.json")?,
    )
    .context("config.json is not valid JSON")?;
    if config.get("quantization").is_some() {
        bail!(
            "{} is already quantized (config.json has `quantization`)",
            input.display()
        );
    }
    let files = files_in_dir(input)?
        .iter()
        .map(MmapedSafetensors::new)
        .collect::<hanzo_ml::Result<Vec<_>>>()?;
    let mut out: BTreeMap<String, Tensor> = BTreeMap::new();
    let (mut quantized, mut kept) = (0usize, 0usize);
    let total: usize = files.iter().map(|f| f.names().len()).sum();
    let bar = super::progress_bar(total as u64);
    for f in &files {
        for name in f.names() {
            bar.set_message(name.to_string());
            let w = f.get(name)?;
            match name.strip_suffix(".weight").filter(|_| quantizable(&w, t)) {
                Some(module) => {
                    let scale = match w.dtype() {
                        DType::BF16 => AfqScale::BF16,
                        _ => AfqScale::F16,
                    };
                    let (q, s, b) = mlx_tensors(&w, t.with_scale(scale))
                        .with_context(|| format!("quantizing {name}"))?;
                    out.insert(format!("{module}.weight"), q);
                    out.insert(format!("{module}.scales"), s);
                    out.insert(format!("{module}.biases"), b);
                    quantized += 1;
                }
                None => {
                    out.insert(name.to_string(), w);
                    kept += 1;
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    let q = serde_json::json!({"group_size": t.group(), "bits": t.bits(), "mode": "affine"});
    config["quantization"] = q.clone();
    config["quantization_config"] = q;

    let partial = super::partial_path(output);
    if partial.exists() {
        std::fs::remove_dir_all(&partial).ok();
    }
    std::fs::create_dir_all(&partial).with_context(|| format!("creating {}", partial.display()))?;
    let written = (|| -> Result<()> {
        hanzo_ml::io::safetensors::save(&out, partial.join("model.safetensors"))?;
        std::fs::write(
            partial.join("config.json"),
            serde_json::to_string_pretty(&config)?,
        )?;
        for entry in std::fs::read_dir(input)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let is_weights =
                name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json");
            if entry.file_type()?.is_file() && !is_weights && name != "config.json" {
                std::fs::copy(entry.path(), partial.join(&*name))?;
            }
        }
        Ok(())
    })();
    if let Err(e) = written {
        std::fs::remove_dir_all(&partial).ok();
        return Err(e).context(format!("writing {}", output.display()));
    }
    if output.exists() {
        std::fs::remove_dir_all(output)
            .with_context(|| format!("replacing {}", output.display()))?;
    }
    std::fs::rename(&partial, output)?;
    tracing::info!(
        "wrote {} ({} weights to {}-bit AFQ in groups of {}, {kept} tensors kept; {:.1} MB from {:.1} MB) in {:.1} s",
        output.display(),
        quantized,
        t.bits(),
        t.group(),
        super::dir_or_file_size(output) as f64 / 1e6,
        super::dir_or_file_size(input) as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// MLX's rule (`mlx_lm`'s default predicate): the 2-D float weights whose rows are whole
/// groups.
fn quantizable(w: &Tensor, t: AfqType) -> bool {
    matches!(w.dtype(), DType::F32 | DType::F16 | DType::BF16)
        && w.rank() == 2
        && w.dims()[1].is_multiple_of(t.group())
}

/// `w [n, k]` as MLX's `weight` (`u32 [n, k·bits/32]`), `scales` and `biases`
/// (`[n, k/group]`, in `t`'s scale type).
fn mlx_tensors(w: &Tensor, t: AfqType) -> Result<(Tensor, Tensor, Tensor)> {
    let (n, k) = w.dims2()?;
    let q = QTensor::quantize(w, GgmlDType::Afq(t))?;
    let (packed, scales, biases) = q.to_mlx().expect("an AFQ tensor");
    let words: Vec<u32> = packed
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let halves = |bytes: Vec<u8>| -> Result<Tensor> {
        let bits = bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]));
        let shape = (n, k / t.group());
        Ok(match t.scale() {
            AfqScale::F16 => Tensor::from_vec(
                bits.map(half::f16::from_bits).collect(),
                shape,
                &Device::Cpu,
            )?,
            AfqScale::BF16 => Tensor::from_vec(
                bits.map(half::bf16::from_bits).collect(),
                shape,
                &Device::Cpu,
            )?,
        })
    };
    Ok((
        Tensor::from_vec(words, (n, k * t.bits() / 32), &Device::Cpu)?,
        halves(scales)?,
        halves(biases)?,
    ))
}

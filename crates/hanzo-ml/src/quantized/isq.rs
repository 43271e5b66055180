//! In-situ quantization (ISQ): float weights from safetensors quantized as they are loaded,
//! so an f16/bf16 checkpoint runs through `QMatMul` without a separate conversion step.

use super::{GgmlDType, QMatMul, QTensor};
use crate::io::safetensors::MmapedSafetensors;
use crate::{Result, Tensor};
use std::path::Path;

/// The type a tensor with rows of `ncols` elements gets when `wanted` does not divide them:
/// llama.cpp's fallbacks (a 256-block k-quant falls back to a 32-block type of similar size),
/// then F16 when even 32 does not divide.
pub fn fallback_type(wanted: GgmlDType, ncols: usize) -> GgmlDType {
    if ncols.is_multiple_of(wanted.block_size()) {
        return wanted;
    }
    // AFQ: the smallest group MLX takes, then F16.
    if let Some(t) = wanted.afq() {
        return match super::AfqType::new(t.bits(), 32, t.scale()) {
            Ok(t) if ncols.is_multiple_of(32) => GgmlDType::Afq(t),
            _ => GgmlDType::F16,
        };
    }
    let next = match wanted {
        GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::TQ1_0 | GgmlDType::TQ2_0 => GgmlDType::Q4_0,
        GgmlDType::IQ4XS
        | GgmlDType::IQ3S
        | GgmlDType::IQ3XXS
        | GgmlDType::IQ2S
        | GgmlDType::IQ2XS
        | GgmlDType::IQ2XXS
        | GgmlDType::IQ1S
        | GgmlDType::IQ1M => GgmlDType::IQ4NL,
        GgmlDType::Q4K => GgmlDType::Q5_0,
        GgmlDType::Q5K => GgmlDType::Q5_1,
        GgmlDType::Q6K | GgmlDType::Q8K => GgmlDType::Q8_0,
        _ => GgmlDType::F16,
    };
    if ncols.is_multiple_of(next.block_size()) {
        next
    } else {
        GgmlDType::F16
    }
}

/// Quantizes a weight matrix `[out, in]` to `dtype` (or its fallback for awkward widths).
pub fn quantize_weight(w: &Tensor, dtype: GgmlDType) -> Result<QTensor> {
    let ncols = w.dims().last().copied().unwrap_or(1);
    QTensor::quantize(w, fallback_type(dtype, ncols))
}

/// Safetensors weights with matmul weights quantized on load.
pub struct IsqLoader {
    st: MmapedSafetensors,
    dtype: GgmlDType,
}

impl IsqLoader {
    pub fn open(path: impl AsRef<Path>, dtype: GgmlDType) -> Result<Self> {
        Ok(Self {
            st: MmapedSafetensors::new(path)?,
            dtype,
        })
    }

    pub fn names(&self) -> Vec<&str> {
        self.st.names()
    }

    /// A tensor as stored (norms, embeddings, biases).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        self.st.get(name)
    }

    /// A 2-D weight as a quantized matmul.
    pub fn qmatmul(&self, name: &str) -> Result<QMatMul> {
        QMatMul::from_qtensor(quantize_weight(&self.st.get(name)?, self.dtype)?)
    }
}

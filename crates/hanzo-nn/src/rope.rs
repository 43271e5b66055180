//! Rotary position embeddings with the frequency scalings used by released models.
//!
//! The angle of pair `i` at position `p` is `p * inv_freq[i]`, `inv_freq[i] = base^(-2i/d)`.
//! Scalings change `inv_freq` (and, for YaRN, the magnitude of cos/sin) to stretch a model's
//! context. Tables are computed for the positions a call needs, in f64, rather than for the
//! whole context up front: a 131k-position table for a 128-token chat wastes ~64 MB.

use hanzo_ml::{Device, Error, Result, RopeKind, Tensor};
use std::f64::consts::PI;

#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (position interpolation).
    Linear {
        factor: f64,
    },
    /// Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth blend between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position: usize,
    },
    /// YaRN (Peng et al. 2023): per-dimension blend of interpolation and extrapolation between
    /// the `beta_fast` and `beta_slow` rotation counts, with cos/sin scaled by
    /// `attention_factor` (default `0.1 ln(factor) + 1`).
    Yarn {
        factor: f64,
        original_max_position: usize,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: Option<f64>,
    },
}

/// Rotary embedding for heads of `head_dim`, rotating the first `rot_dim` features.
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    inv_freq: Vec<f64>,
    magnitude: f64,
    rot_dim: usize,
    kind: RopeKind,
}

impl RotaryEmbedding {
    /// `kind`: `HalfSplit` pairs `(i, i + d/2)` (Hugging Face / NeoX layout), `Interleaved`
    /// pairs `(2i, 2i + 1)` (original GPT-J / Meta Llama, and ggml's "norm" rope).
    pub fn new(base: f64, rot_dim: usize, scaling: &RopeScaling, kind: RopeKind) -> Result<Self> {
        if rot_dim == 0
            || !rot_dim.is_multiple_of(2)
            || base.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater)
        {
            return Err(Error::invalid(
                "RotaryEmbedding",
                format!(
                    "need an even rot_dim > 0 and base > 1, got rot_dim {rot_dim}, base {base}"
                ),
            ));
        }
        let half = rot_dim / 2;
        let base_freq: Vec<f64> = (0..half)
            .map(|i| base.powf(-((2 * i) as f64) / rot_dim as f64))
            .collect();
        let mut magnitude = 1.0;
        let inv_freq = match *scaling {
            RopeScaling::None => base_freq,
            RopeScaling::Linear { factor } => base_freq.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                let orig = original_max_position as f64;
                let low_wavelen = orig / low_freq_factor;
                let high_wavelen = orig / high_freq_factor;
                base_freq
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (orig / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn {
                factor,
                original_max_position,
                beta_fast,
                beta_slow,
                attention_factor,
            } => {
                // The dimension whose wavelength fits `rotations` times in the original context.
                let correction_dim = |rotations: f64| {
                    rot_dim as f64 * (original_max_position as f64 / (rotations * 2.0 * PI)).ln()
                        / (2.0 * base.ln())
                };
                let low = correction_dim(beta_fast).floor().max(0.0);
                let high = correction_dim(beta_slow).ceil().min(rot_dim as f64 - 1.0);
                let span = if high == low { 0.001 } else { high - low };
                magnitude = attention_factor.unwrap_or(if factor > 1.0 {
                    0.1 * factor.ln() + 1.0
                } else {
                    1.0
                });
                base_freq
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / span).clamp(0.0, 1.0);
                        let extrapolate = 1.0 - ramp;
                        (f / factor) * (1.0 - extrapolate) + f * extrapolate
                    })
                    .collect()
            }
        };
        Ok(Self {
            inv_freq,
            magnitude,
            rot_dim,
            kind,
        })
    }

    /// Divides each pair's frequency by a per-pair factor, as GGUF files of Llama 3.1+ store
    /// their scaling (`rope_freqs.weight`) instead of the scaling parameters.
    pub fn with_freq_factors(mut self, factors: &[f32]) -> Result<Self> {
        if factors.len() != self.inv_freq.len() || factors.iter().any(|&f| f <= 0.0) {
            return Err(Error::invalid(
                "RotaryEmbedding",
                format!(
                    "need {} positive frequency factors, got {}",
                    self.inv_freq.len(),
                    factors.len()
                ),
            ));
        }
        for (f, &d) in self.inv_freq.iter_mut().zip(factors) {
            *f /= d as f64;
        }
        Ok(self)
    }

    pub fn inv_freq(&self) -> &[f64] {
        &self.inv_freq
    }

    /// cos and sin tables `[positions.len(), rot_dim / 2]` (f32).
    pub fn cos_sin(&self, positions: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            for &f in &self.inv_freq {
                let (s, c) = (p as f64 * f).sin_cos();
                cos.push((c * self.magnitude) as f32);
                sin.push((s * self.magnitude) as f32);
            }
        }
        let shape = (positions.len(), half);
        Ok((
            Tensor::from_vec(cos, shape, device)?,
            Tensor::from_vec(sin, shape, device)?,
        ))
    }

    /// Rotates `x` `[b, heads, t, head_dim]` whose tokens sit at positions `start..start + t`.
    pub fn apply(&self, x: &Tensor, start: usize) -> Result<Tensor> {
        let (_, _, t, d) = x.dims4()?;
        let positions: Vec<usize> = (start..start + t).collect();
        self.apply_at(x, &positions, d)
    }

    fn apply_at(&self, x: &Tensor, positions: &[usize], d: usize) -> Result<Tensor> {
        if d < self.rot_dim {
            return Err(Error::invalid(
                "RotaryEmbedding",
                format!("head_dim {d} is smaller than rot_dim {}", self.rot_dim),
            ));
        }
        let (cos, sin) = self.cos_sin(positions, &x.device())?;
        if d == self.rot_dim {
            return x.rotary_emb(&cos, &sin, self.kind);
        }
        // Partial rotary (Phi, GPT-NeoX): only the first rot_dim features rotate.
        let rot = x
            .narrow(3, 0, self.rot_dim)?
            .rotary_emb(&cos, &sin, self.kind)?;
        let pass = x.narrow(3, self.rot_dim, d - self.rot_dim)?;
        Tensor::cat(&[&rot, &pass], 3)
    }
}

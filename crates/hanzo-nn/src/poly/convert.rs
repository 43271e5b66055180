//! Converting a trained model to polynomial form.
//!
//! Polynomial approximations are only good on a bounded interval, and under FHE the inputs
//! cannot be inspected at run time, so the intervals are fixed beforehand: the converter runs
//! calibration inputs through the model and fits each replacement to the range its input
//! actually takes (widened by a margin), feeding the *converted* layer's output onward so later
//! layers are calibrated on what they will really see.

use super::{PolyActivation, PolyLayerNorm, PolySoftmax};
use crate::{Activation, AvgPool2d, Layer, LayerNorm, MaxPool2d, Sequential, Softmax};
use hanzo_ml::{Result, Tensor};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct PolyConfig {
    /// Degree of the Chebyshev fits for activations and exp.
    pub degree: usize,
    /// Calibrated ranges are widened by this fraction of their width on each side.
    pub margin: f64,
    /// Degree of the first guess for reciprocals / inverse square roots.
    pub guess_degree: usize,
    /// Newton–Raphson iterations after the guess.
    pub newton_iters: usize,
}

impl Default for PolyConfig {
    fn default() -> Self {
        Self {
            degree: 15,
            margin: 0.1,
            guess_degree: 8,
            newton_iters: 3,
        }
    }
}

/// What the converter replaced, with the interval it fitted.
#[derive(Clone, Debug, PartialEq)]
pub struct Substitution {
    pub layer: usize,
    pub what: String,
    pub interval: (f64, f64),
}

/// A substituted layer, a description and the interval it was fitted on.
type Replacement = (Arc<dyn Layer>, String, (f64, f64));

fn range(x: &Tensor) -> Result<(f64, f64)> {
    let x = x.to_dtype(hanzo_ml::DType::F64)?;
    Ok((
        x.min_all()?.to_scalar::<f64>()?,
        x.max_all()?.to_scalar::<f64>()?,
    ))
}

fn widen((lo, hi): (f64, f64), margin: f64) -> (f64, f64) {
    let w = (hi - lo).max(1e-3);
    (lo - margin * w, hi + margin * w)
}

/// A copy of `model` with activations, layer norms and softmax replaced by polynomial
/// versions and max pooling by average pooling; every other layer (and its weights) is
/// shared with `model`. `calibration` is a batch of representative inputs.
pub fn to_polynomial(
    model: &Sequential,
    calibration: &Tensor,
    cfg: &PolyConfig,
) -> Result<(Sequential, Vec<Substitution>)> {
    let mut out = Sequential::new();
    let mut subs = Vec::new();
    let mut x = hanzo_ml::no_grad(|| Ok::<_, hanzo_ml::Error>(calibration.detach()))?;
    for (i, layer) in model.layers().iter().enumerate() {
        let any = layer.as_any();
        let replacement: Option<Replacement> = if let Some(act) = any.downcast_ref::<Activation>() {
            if *act == Activation::Identity {
                None
            } else {
                let (lo, hi) = widen(range(&x)?, cfg.margin);
                let p = PolyActivation::new(*act, lo, hi, cfg.degree)?;
                Some((
                    Arc::new(p),
                    format!("{act:?} -> Chebyshev degree {}", cfg.degree),
                    (lo, hi),
                ))
            }
        } else if let Some(norm) = any.downcast_ref::<LayerNorm>() {
            let last = x.rank() - 1;
            let c = x.sub(&x.mean_keepdim(last)?)?;
            let var = c.sqr()?.mean_keepdim(last)?;
            let (lo, hi) = range(&var)?;
            let (lo, hi) = (lo * (1.0 - cfg.margin), hi * (1.0 + cfg.margin));
            let p = PolyLayerNorm::new(norm, lo, hi, cfg.guess_degree, cfg.newton_iters)?;
            Some((
                Arc::new(p),
                "LayerNorm -> Newton inverse sqrt".into(),
                (lo, hi),
            ))
        } else if any.downcast_ref::<Softmax>().is_some() {
            let last = x.rank() - 1;
            let centred = x.sub(&x.mean_keepdim(last)?)?;
            let (lo, hi) = widen(range(&centred)?, cfg.margin);
            let (lo, hi) = (lo.min(-1e-3), hi.max(1e-3));
            let p = PolySoftmax::new(lo, hi, x.dims()[last], cfg.degree)?;
            Some((
                Arc::new(p),
                "Softmax -> scaled Chebyshev exp + Newton reciprocal".into(),
                (lo, hi),
            ))
        } else if let Some(MaxPool2d(k)) = any.downcast_ref::<MaxPool2d>() {
            Some((
                Arc::new(AvgPool2d(*k)),
                format!("MaxPool2d({k}) -> AvgPool2d({k})"),
                (0.0, 0.0),
            ))
        } else if let Some(inner) = any.downcast_ref::<Sequential>() {
            let (conv, inner_subs) = to_polynomial(inner, &x, cfg)?;
            subs.extend(inner_subs.into_iter().map(|mut s| {
                s.what = format!("[{i}] {}", s.what);
                s
            }));
            Some((Arc::new(conv), "nested".into(), (0.0, 0.0)))
        } else {
            None
        };
        let chosen: Arc<dyn Layer> = match replacement {
            Some((l, what, interval)) => {
                if what != "nested" {
                    subs.push(Substitution {
                        layer: i,
                        what,
                        interval,
                    });
                }
                l
            }
            None => layer.clone(),
        };
        x = chosen.forward_t(&x, false)?.detach();
        out.push_shared(chosen);
    }
    Ok((out, subs))
}

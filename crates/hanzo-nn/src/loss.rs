//! Losses, averaged over the batch (PyTorch's `reduction="mean"`).

use hanzo_ml::{DType, Error, Result, Tensor};

/// `-mean(log_probs[i, target[i]])` for `log_probs` `[n, classes]` and integer `target` `[n]`.
pub fn nll(log_probs: &Tensor, target: &Tensor) -> Result<Tensor> {
    let (n, classes) = log_probs.dims2()?;
    if target.dims() != [n] {
        return Err(Error::invalid(
            "nll",
            format!(
                "targets {:?} do not match {n} rows of {classes} classes",
                target.dims()
            ),
        ));
    }
    let ids = target.to_dtype(DType::I64)?.unsqueeze(1)?;
    log_probs.gather(&ids, 1)?.mean_all()?.neg()
}

/// Cross-entropy of unnormalised `logits` `[n, classes]` against integer `target` `[n]`.
pub fn cross_entropy(logits: &Tensor, target: &Tensor) -> Result<Tensor> {
    nll(&logits.log_softmax(1)?, target)
}

/// `mean((a - b)^2)`.
pub fn mse(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.sub(b)?.sqr()?.mean_all()
}

/// Binary cross-entropy of `logits` against 0/1 `target`, computed stably as
/// `max(x, 0) - x t + log(1 + e^-|x|)`.
pub fn binary_cross_entropy_with_logits(logits: &Tensor, target: &Tensor) -> Result<Tensor> {
    let t = target.to_dtype(logits.dtype())?;
    let soft = logits.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?;
    logits.relu()?.sub(&logits.mul(&t)?)?.add(&soft)?.mean_all()
}

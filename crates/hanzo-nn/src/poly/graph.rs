//! Which operations produced a tensor: a walk over the recorded op graph, used to prove that a
//! polynomial layer's forward pass needs nothing but additions and multiplications.
//!
//! Ops are recorded only when an input tracks gradients, so evaluate the layer on a
//! `Tensor::variable()` input before walking.

use hanzo_ml::Tensor;
use std::collections::{BTreeSet, HashSet};

/// Ciphertext arithmetic: +, -, x, sums (repeated +), and affine maps / negation with
/// plaintext constants.
pub const ARITHMETIC: &[&str] = &["add", "sub", "mul", "affine", "neg", "sum"];

/// Moving or viewing data (rotations / slot packing under FHE), no arithmetic.
pub const DATA_MOVEMENT: &[&str] = &[
    "reshape",
    "broadcast",
    "narrow",
    "transpose",
    "permute",
    "contiguous",
    "cat",
    "index_select",
];

/// Linear maps by plaintext weights (multiply-accumulate): allowed in an FHE model, reported
/// separately from the element-wise arithmetic.
pub const LINEAR: &[&str] = &["matmul", "conv2d", "unfold2d"];

/// Every op name recorded in the graph that produced `t`.
pub fn recorded_ops(t: &Tensor) -> BTreeSet<&'static str> {
    let mut names = BTreeSet::new();
    let mut seen = HashSet::new();
    let mut stack = vec![t.clone()];
    while let Some(t) = stack.pop() {
        if !seen.insert(t.id()) {
            continue;
        }
        if let Some(op) = t.op() {
            names.insert(op.name());
            stack.extend(op.inputs().iter().cloned());
        }
    }
    names
}

/// The recorded ops outside `allowed` (empty: the property holds).
pub fn ops_outside(t: &Tensor, allowed: &[&[&str]]) -> BTreeSet<&'static str> {
    recorded_ops(t)
        .into_iter()
        .filter(|n| !allowed.iter().any(|set| set.contains(n)))
        .collect()
}

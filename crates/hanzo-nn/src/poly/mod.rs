//! FHE-friendly layers: forward passes built from additions and multiplications only (plus
//! affine maps with plaintext constants, sums and data movement), which is all that fully
//! homomorphic encryption can evaluate on ciphertexts.
//!
//! - [`Chebyshev`] fits any function on `[a, b]` and evaluates it with the Clenshaw recurrence;
//! - [`Reciprocal`] and [`InvSqrt`] refine a polynomial guess with Newton–Raphson;
//! - [`PolyActivation`], [`PolyGeluTaylor`], [`PolySoftmax`], [`PolyLayerNorm`] replace their
//!   exact counterparts, and average pooling replaces max pooling;
//! - [`to_polynomial`] converts a trained [`crate::Sequential`] model, calibrating each
//!   approximation's interval on sample inputs;
//! - [`graph`] proves the property from the recorded op graph.

mod chebyshev;
mod convert;
pub mod graph;
mod layers;
mod newton;

pub use chebyshev::Chebyshev;
pub use convert::{to_polynomial, PolyConfig, Substitution};
pub use layers::{target_fn, PolyActivation, PolyExp, PolyGeluTaylor, PolyLayerNorm, PolySoftmax};
pub use newton::{InvSqrt, Reciprocal};

//! One error type for the crate. Every variant names the op and the offending values so a user
//! can act on the message without a debugger.

use crate::{DType, DeviceLocation, Shape};

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("{op}: shape mismatch, expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        op: &'static str,
        expected: Shape,
        got: Shape,
    },

    #[error("{op}: shapes {lhs:?} and {rhs:?} cannot be broadcast together")]
    BroadcastIncompatible {
        op: &'static str,
        lhs: Shape,
        rhs: Shape,
    },

    #[error("{op}: expected rank {expected}, got rank {got} (shape {shape:?})")]
    RankMismatch {
        op: &'static str,
        expected: usize,
        got: usize,
        shape: Shape,
    },

    #[error("{op}: dimension {dim} out of range for rank {rank}")]
    DimOutOfRange {
        op: &'static str,
        dim: i64,
        rank: usize,
    },

    #[error("{op}: dtype mismatch, expected {expected:?}, got {got:?}")]
    DTypeMismatch {
        op: &'static str,
        expected: DType,
        got: DType,
    },

    #[error("{op}: unsupported dtype {dtype:?}")]
    UnsupportedDType { op: &'static str, dtype: DType },

    #[error("{op}: device mismatch, {lhs:?} vs {rhs:?}")]
    DeviceMismatch {
        op: &'static str,
        lhs: DeviceLocation,
        rhs: DeviceLocation,
    },

    #[error("{op}: index {index} out of range for size {size}")]
    IndexOutOfRange {
        op: &'static str,
        index: i64,
        size: usize,
    },

    #[error("{op}: narrow start {start} + len {len} exceeds dim {dim} of size {size}")]
    NarrowOutOfRange {
        op: &'static str,
        dim: usize,
        start: usize,
        len: usize,
        size: usize,
    },

    #[error("{op}: invalid argument: {msg}")]
    InvalidArgument { op: &'static str, msg: String },

    #[error("backward: {0}")]
    Backward(String),

    #[error("device {0:?} is not available in this build")]
    DeviceUnavailable(DeviceLocation),

    #[error("format error in {context}: {msg}")]
    Format { context: String, msg: String },

    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),

    #[error("{op}: {msg}")]
    Custom { op: String, msg: String },

    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            msg: msg.into(),
        }
    }

    pub fn format(context: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Format {
            context: context.into(),
            msg: msg.into(),
        }
    }
}

/// `bail!(Error::...)`-style early return with a formatted InvalidArgument.
#[macro_export]
macro_rules! bail_invalid {
    ($op:expr, $($arg:tt)*) => {
        return Err($crate::Error::InvalidArgument { op: $op, msg: format!($($arg)*) })
    };
}

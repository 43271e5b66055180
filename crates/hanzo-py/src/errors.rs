//! Rust errors as Python exceptions: files that cannot be read are `OSError` (a missing one
//! `FileNotFoundError`), everything else the caller got wrong (shapes, dtypes, malformed
//! files, bad options) is `ValueError`. The message is the Rust one, causes included.

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::PyErr;
use std::path::Path;

/// A tensor or format error of the core.
pub fn ml(e: hanzo_ml::Error) -> PyErr {
    match e {
        hanzo_ml::Error::Io(io) => PyOSError::new_err(io.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// A model library error.
pub fn model(e: hanzo_transformers::Error) -> PyErr {
    match e {
        hanzo_transformers::Error::Io(io) => PyOSError::new_err(io.to_string()),
        hanzo_transformers::Error::Ml(e) => ml(e),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// `FileNotFoundError` unless `path` exists.
pub fn must_exist(path: &Path) -> Result<(), PyErr> {
    if path.exists() {
        Ok(())
    } else {
        Err(PyFileNotFoundError::new_err(format!(
            "{}: no such file or directory",
            path.display()
        )))
    }
}

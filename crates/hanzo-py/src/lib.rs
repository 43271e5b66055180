//! `import hanzo`: the framework and its models from Python, as one abi3 extension module
//! (`hanzo._native`, re-exported by the pure-Python package in `python/hanzo`).
//!
//! - `tensor.rs` / `array.rs`: `hanzo.Tensor`, NumPy interop without copies, autograd;
//! - `io.rs`: safetensors and GGUF files;
//! - `llm.rs`: `hanzo.LLM` (completions, chat with tools, streaming, tokenizer, logits);
//! - `embed.rs`: `hanzo.Embedder` (sentence-transformers' `encode`);
//! - `rerank.rs`: `hanzo.Reranker` (a language model as the judge);
//! - `errors.rs`: Rust errors as `ValueError` / `OSError`.

#![deny(unsafe_op_in_unsafe_fn)]

mod array;
mod embed;
mod errors;
mod io;
mod llm;
mod rerank;
mod tensor;

use pyo3::prelude::*;

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<array::ArrayView>()?;
    m.add_class::<llm::Llm>()?;
    m.add_class::<llm::Stream>()?;
    m.add_class::<embed::PyEmbedder>()?;
    m.add_class::<rerank::PyReranker>()?;
    m.add_function(wrap_pyfunction!(tensor::tensor, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::zeros, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::ones, m)?)?;
    m.add_function(wrap_pyfunction!(io::load_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(io::save_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(io::load_gguf, m)?)?;
    Ok(())
}

//! `hanzo.Embedder`: sentence-transformers models (BERT / MPNet encoders with their pooling
//! and normalisation) with `encode` as sentence-transformers has it.

use crate::errors;
use hanzo_transformers::{l2_normalize, EmbedOptions, Embedder};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

#[pyclass(name = "Embedder", module = "hanzo", frozen)]
pub struct PyEmbedder {
    e: Embedder,
}

#[pymethods]
impl PyEmbedder {
    /// `Embedder(model, threads=None)`: a sentence-transformers directory (config.json,
    /// model.safetensors, tokenizer.json; its pooling and Normalize modules when present) or
    /// a name in the model store.
    #[new]
    #[pyo3(signature = (model, threads=None))]
    fn new(py: Python<'_>, model: PathBuf, threads: Option<usize>) -> PyResult<Self> {
        crate::llm::set_threads(threads);
        let path = crate::llm::resolve(&model)?;
        if !(path.is_dir() && Embedder::is_encoder_dir(&path)) {
            return Err(PyValueError::new_err(format!(
                "{}: not a sentence-transformers model directory (config.json of a BERT or \
                 MPNet encoder, model.safetensors, tokenizer.json)",
                path.display()
            )));
        }
        let e = py
            .detach(|| Embedder::from_dir(&path))
            .map_err(errors::model)?;
        Ok(PyEmbedder { e })
    }

    /// The vectors' length.
    #[getter]
    fn dimension(&self) -> usize {
        self.e.model.config.hidden_size
    }

    /// The most tokens a sentence may have (longer ones are cut, as sentence-transformers
    /// does).
    #[getter]
    fn max_seq_length(&self) -> usize {
        self.e.max_tokens
    }

    /// `encode(sentences, batch_size=32, normalize_embeddings=False)` as sentence-transformers
    /// has it: a float32 array of shape (len(sentences), dimension), or (dimension,) for one
    /// string. The model's own Normalize module applies either way.
    #[pyo3(signature = (sentences, batch_size=32, show_progress_bar=None, normalize_embeddings=false, convert_to_numpy=true))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        sentences: &Bound<'py, PyAny>,
        batch_size: usize,
        show_progress_bar: Option<bool>,
        normalize_embeddings: bool,
        convert_to_numpy: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = show_progress_bar;
        if !convert_to_numpy {
            return Err(PyValueError::new_err(
                "convert_to_numpy=False is not supported: vectors come back as a NumPy array",
            ));
        }
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        let (texts, single): (Vec<String>, bool) = match sentences.extract::<String>() {
            Ok(s) => (vec![s], true),
            Err(_) => (
                sentences.extract().map_err(|_| {
                    PyValueError::new_err("sentences must be a string or a list of strings")
                })?,
                false,
            ),
        };
        let dim = self.dimension();
        let flat = py
            .detach(|| {
                let mut flat = Vec::with_capacity(texts.len() * dim);
                for batch in texts.chunks(batch_size) {
                    let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
                    let out = self.e.embed_with(&refs, EmbedOptions { truncate: true })?;
                    for mut v in out.vectors {
                        if normalize_embeddings {
                            l2_normalize(&mut v);
                        }
                        flat.extend(v);
                    }
                }
                Ok::<_, hanzo_transformers::Error>(flat)
            })
            .map_err(errors::model)?;
        let t = hanzo_ml::Tensor::from_vec(flat, (texts.len(), dim), &hanzo_ml::Device::Cpu)
            .map_err(errors::ml)?;
        let t = if single {
            t.squeeze(0).map_err(errors::ml)?
        } else {
            t
        };
        crate::array::to_numpy(py, &t)
    }
}

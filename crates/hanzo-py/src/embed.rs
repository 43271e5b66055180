//! `hanzo.Embedder`: sentence-transformers models (BERT / MPNet encoders with their pooling
//! and normalisation), or a language model by last-token pooling (as `hanzo-engine embed`
//! and llama.cpp's `--pooling last`), with `encode` as sentence-transformers has it.

use crate::errors;
use hanzo_transformers::{
    l2_normalize, EmbedOptions, Embedder, Embeddings, TextGeneration, WeightMode,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

/// The model that embeds.
enum Model {
    Encoder(Box<Embedder>),
    /// A decoder, its final hidden state at the last token.
    LastToken(Box<TextGeneration>),
}

#[pyclass(name = "Embedder", module = "hanzo", frozen)]
pub struct PyEmbedder {
    model: Model,
}

impl PyEmbedder {
    fn embed(&self, texts: &[&str]) -> hanzo_transformers::Result<Embeddings> {
        let opts = EmbedOptions { truncate: true };
        match &self.model {
            Model::Encoder(e) => e.embed_with(texts, opts),
            Model::LastToken(p) => p.embed_last_token(texts, p.model.info().context_length, opts),
        }
    }
}

#[pymethods]
impl PyEmbedder {
    /// `Embedder(model, threads=None)`: a sentence-transformers directory (config.json,
    /// model.safetensors, tokenizer.json; its pooling and Normalize modules when present), a
    /// language model (GGUF file or model directory; last-token pooling, unit vectors), or
    /// a name in the model store.
    #[new]
    #[pyo3(signature = (model, threads=None))]
    fn new(py: Python<'_>, model: PathBuf, threads: Option<usize>) -> PyResult<Self> {
        crate::llm::set_threads(threads);
        let path = crate::llm::resolve(&model)?;
        let model = if path.is_dir() && Embedder::is_encoder_dir(&path) {
            Model::Encoder(Box::new(
                py.detach(|| Embedder::from_dir(&path))
                    .map_err(errors::model)?,
            ))
        } else {
            Model::LastToken(Box::new(
                py.detach(|| TextGeneration::load(&path, WeightMode::AsStored))
                    .map_err(|e| {
                        PyValueError::new_err(format!(
                            "{}: neither a sentence-transformers directory nor a language \
                             model: {e}",
                            path.display()
                        ))
                    })?,
            ))
        };
        Ok(PyEmbedder { model })
    }

    /// The vectors' length.
    #[getter]
    fn dimension(&self) -> usize {
        match &self.model {
            Model::Encoder(e) => e.model.config.hidden_size,
            Model::LastToken(p) => p.model.info().hidden_size,
        }
    }

    /// The most tokens a sentence may have (longer ones are cut, as sentence-transformers
    /// does).
    #[getter]
    fn max_seq_length(&self) -> usize {
        match &self.model {
            Model::Encoder(e) => e.max_tokens,
            Model::LastToken(p) => p.model.info().context_length,
        }
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
                    let out = self.embed(&refs)?;
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

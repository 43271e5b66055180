//! `hanzo.Reranker`: documents ordered by a language model's judgement of their relevance to
//! a query (`hanzo_transformers::rerank`, the server's `/v1/rerank` scoring), all documents
//! read together through the batched core.

use crate::errors;
use hanzo_transformers::rerank::Judge;
use hanzo_transformers::{TextGeneration, WeightMode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

#[pyclass(name = "Reranker", module = "hanzo", frozen)]
pub struct PyReranker {
    p: TextGeneration,
    judge: Judge,
}

#[pymethods]
impl PyReranker {
    /// `Reranker(model, threads=None)`: a language model (GGUF file, model directory or store
    /// name) whose vocabulary spells "yes" and "no" in one token each.
    #[new]
    #[pyo3(signature = (model, threads=None))]
    fn new(py: Python<'_>, model: PathBuf, threads: Option<usize>) -> PyResult<Self> {
        crate::llm::set_threads(threads);
        let path = crate::llm::resolve(&model)?;
        // Brought to the steady state the server scores in (see `LLM`).
        let p = py
            .detach(|| {
                let p = TextGeneration::load(&path, WeightMode::AsStored)?;
                p.page_in()?;
                Ok(p)
            })
            .map_err(|e: hanzo_transformers::Error| {
                PyValueError::new_err(format!("cannot load {}: {e}", path.display()))
            })?;
        let judge = Judge::new(&p).map_err(errors::model)?;
        Ok(PyReranker { p, judge })
    }

    /// The documents by relevance, most relevant first (ties in the given order): dicts with
    /// `index`, `relevance_score` (P("yes"), 0 to 1) and, unless `return_documents=False`,
    /// `document`; the first `top_n` only where given.
    #[pyo3(signature = (query, documents, top_n=None, return_documents=true))]
    fn rank<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        documents: Vec<String>,
        top_n: Option<usize>,
        return_documents: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let prompts = documents
            .iter()
            .map(|d| self.judge.prompt(&self.p, query, d))
            .collect::<hanzo_transformers::Result<Vec<_>>>()
            .map_err(errors::model)?;
        let ids = self.judge.ids();
        let lps = py
            .detach(|| self.p.last_logprobs_batch(&prompts, &ids))
            .map_err(errors::model)?;
        let scores: Vec<f64> = lps.iter().map(|lp| self.judge.relevance(lp)).collect();
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        order.truncate(top_n.unwrap_or(order.len()));
        let out = PyList::empty(py);
        for i in order {
            let d = PyDict::new(py);
            d.set_item("index", i)?;
            d.set_item("relevance_score", scores[i])?;
            if return_documents {
                d.set_item("document", &documents[i])?;
            }
            out.append(d)?;
        }
        Ok(out)
    }
}

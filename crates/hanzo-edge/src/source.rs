//! The model files an `Edge` runs: a GGUF file (mapped, or in memory), or a Hugging Face /
//! MLX model directory (`config.json`, safetensors, `tokenizer.json`; MLX's AFQ weights as
//! MLX writes them). Either is described from its headers alone, for the budget, then
//! loaded as it will run.

use crate::EdgeError;
use hanzo_ml::kv::KvLayout;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_ml::quantized::QMatMul;
use hanzo_transformers::{
    describe_gguf, load_gguf_with, ModelDir, ModelInfo, TextGeneration, WeightMode,
};
use std::path::Path;

/// The tokenizer's structures per byte of a GGUF file's header (the vocabulary, scores and
/// merges it stores as GGUF arrays: the parsed arrays, the token table, the merge ranks and
/// their hash maps), and a fixed part. Fitted to the fixtures' tokenizers (SentencePiece and
/// BPE, 49k to 262k tokens: 13 to 34 MiB).
const TOKENIZER_PER_HEADER_BYTE: u64 = 4;
const TOKENIZER_BYTES: u64 = 8 << 20;
/// The same for a directory's `tokenizer.json`, per byte of the file: the text read, the
/// JSON tree parsed from it while the vocabulary is built, and the structures kept.
/// Fitted to the fixtures' tokenizers written as `tokenizer.json` (SmolLM2's 49k tokens,
/// 1.5 MB: 21.7 MB measured; Qwen2.5's 152k, 5.2 MB: 68.7 MB).
const TOKENIZER_PER_JSON_BYTE: u64 = 13;
const TOKENIZER_JSON_BYTES: u64 = 2 << 20;

/// A model's files, as the budget reads them and `Edge` loads them.
#[derive(Clone, Copy)]
pub enum ModelFiles<'a> {
    Gguf(&'a GgufFile),
    Dir(&'a ModelDir),
}

impl<'a> From<&'a GgufFile> for ModelFiles<'a> {
    fn from(file: &'a GgufFile) -> Self {
        ModelFiles::Gguf(file)
    }
}

impl<'a> From<&'a ModelDir> for ModelFiles<'a> {
    fn from(dir: &'a ModelDir) -> Self {
        ModelFiles::Dir(dir)
    }
}

impl ModelFiles<'_> {
    /// The model's shape and KV layout, from the headers.
    pub fn describe(self) -> Result<(ModelInfo, KvLayout), EdgeError> {
        Ok(match self {
            ModelFiles::Gguf(f) => describe_gguf(f)?,
            ModelFiles::Dir(d) => d.describe()?,
        })
    }

    /// The weights as they will sit in memory. A mapped GGUF file's weights count as they
    /// will be resident; a GGUF file in memory counts whole, plus what its weights take
    /// beyond their stored bytes; a directory's weights are copied out of its files (which
    /// are then let go), so they count as the loaded model holds them.
    pub fn weights_bytes(self) -> u64 {
        let file = match self {
            ModelFiles::Gguf(f) => f,
            ModelFiles::Dir(d) => return d.resident_bytes(),
        };
        let resident: u64 = file
            .tensor_infos()
            .iter()
            .map(|t| match t.shape.dims() {
                &[n, k] => QMatMul::resident_bytes(t.dtype, n, k, t.size) as u64,
                // Norms and biases: read once and held as f32.
                d => (t.size + 4 * d.iter().product::<usize>()) as u64,
            })
            .sum();
        if file.is_mapped() {
            return resident;
        }
        let stored: u64 = file.tensor_infos().iter().map(|t| t.size as u64).sum();
        let file_len = file
            .tensor_infos()
            .iter()
            .map(|t| t.offset + t.size as u64)
            .max()
            .unwrap_or(0);
        file_len + resident.saturating_sub(stored)
    }

    /// The header as read and the tokenizer built from it (GGUF), or the tokenizer built
    /// from `tokenizer.json` (a directory).
    pub fn tokenizer_bytes(self) -> u64 {
        match self {
            ModelFiles::Gguf(file) => {
                let header = file
                    .tensor_infos()
                    .iter()
                    .map(|t| t.offset)
                    .min()
                    .unwrap_or(0);
                header * TOKENIZER_PER_HEADER_BYTE + TOKENIZER_BYTES
            }
            ModelFiles::Dir(dir) => {
                let json = std::fs::metadata(dir.path().join("tokenizer.json"))
                    .map(|m| m.len())
                    .unwrap_or(0);
                json * TOKENIZER_PER_JSON_BYTE + TOKENIZER_JSON_BYTES
            }
        }
    }

    /// The model with its tokenizer and chat template, weights as stored, the copies the
    /// decode kernels want made now: each weight's stored pages are read once and released
    /// as they are copied, so memory never holds both (which the first prompt's pass over
    /// stored weights would cause), and the budget's weights term is what the process holds.
    pub(crate) fn pipeline(self) -> Result<TextGeneration, EdgeError> {
        let (model, repacked) = match self {
            ModelFiles::Gguf(file) => {
                // Only the pages read are held, and a repacked weight's released pages stay
                // released (decode speed measured the same on the fixtures: docs/EDGE.md).
                file.prefer_small_pages();
                let model = load_gguf_with(file, WeightMode::AsStored)?;
                let repacked = model.repack_weights();
                (model, repacked)
            }
            ModelFiles::Dir(dir) => {
                let model = dir.load(WeightMode::AsStored)?;
                let repacked = model.repack_weights();
                (model, repacked)
            }
        };
        crate::edge::log_memory(&format!("model loaded, {repacked} weights repacked"));
        let pipeline = match self {
            ModelFiles::Gguf(file) => {
                TextGeneration::from_gguf_model(file, model, WeightMode::AsStored)?
            }
            ModelFiles::Dir(dir) => TextGeneration::from_dir_model(dir.path(), model)?,
        };
        crate::edge::log_memory("tokenizer built");
        Ok(pipeline)
    }
}

/// A model's files opened from a path: a directory, or a GGUF file (mapped).
pub(crate) enum OpenedModel {
    Gguf(GgufFile),
    Dir(ModelDir),
}

impl OpenedModel {
    pub(crate) fn open(path: &Path) -> Result<Self, EdgeError> {
        Ok(match path.is_dir() {
            true => OpenedModel::Dir(ModelDir::open(path)?),
            false => OpenedModel::Gguf(GgufFile::open(path)?),
        })
    }

    pub(crate) fn files(&self) -> ModelFiles<'_> {
        match self {
            OpenedModel::Gguf(f) => ModelFiles::Gguf(f),
            OpenedModel::Dir(d) => ModelFiles::Dir(d),
        }
    }
}

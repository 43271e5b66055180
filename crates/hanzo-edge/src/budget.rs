//! The memory a model will take, computed from its file before anything large is read or
//! allocated (docs/EDGE.md says how each term is computed and what it was checked against).

use crate::config::EdgeConfig;
use hanzo_ml::kv::KvLayout;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_ml::quantized::QMatMul;
use hanzo_transformers::models::{scratch_bytes, ModelInfo};

/// Bytes of the process before any model: the binary's pages, the thread stacks and the
/// allocator's arenas (measured: `hanzo-edge` holds 4–5 MiB before it opens a file, and its worker threads and allocator arenas take a few more).
const RUNTIME_BYTES: u64 = 12 << 20;
/// The tokenizer's structures per byte of the file's header (the vocabulary, scores and
/// merges it stores as GGUF arrays: the parsed arrays, the token table, the merge ranks and
/// their hash maps), and a fixed part. Fitted to the fixtures' tokenizers (SentencePiece and
/// BPE, 49k to 262k tokens: 13 to 34 MiB).
const TOKENIZER_PER_HEADER_BYTE: u64 = 4;
const TOKENIZER_BYTES: u64 = 8 << 20;
/// Extra room the sliding-window layers keep behind their windows, so that a chat whose
/// last reply tokenizes differently when sent back can be truncated instead of recomputed.
pub(crate) const TRUNCATE_SLACK: usize = 32;

/// The terms of a budget, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breakdown {
    /// The weights as they sit in memory after any repacking.
    pub weights: u64,
    /// The KV cache for `max_context_tokens`, allocated once.
    pub kv_cache: u64,
    /// Activations of one prefill chunk, the logits and the sampler's copies of them.
    pub activations: u64,
    /// The file's header as read and the tokenizer built from it.
    pub tokenizer: u64,
    /// The process itself.
    pub runtime: u64,
}

impl Breakdown {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.activations + self.tokenizer + self.runtime
    }
}

impl std::fmt::Display for Breakdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = crate::error::mib;
        write!(
            f,
            "weights {}, KV cache {}, activations {}, tokenizer {}, runtime {}",
            m(self.weights),
            m(self.kv_cache),
            m(self.activations),
            m(self.tokenizer),
            m(self.runtime)
        )
    }
}

/// What a model with a given configuration needs, and the KV store's size.
#[derive(Clone, Debug)]
pub struct Budget {
    pub breakdown: Breakdown,
    /// Blocks of the KV store (`PagedKv::with_blocks`).
    pub kv_blocks: usize,
}

impl Budget {
    /// The budget of `file`'s model (its `info` and `layout` read by the lazy loader, no
    /// tensor data touched) with `cfg`'s context, chunk and kept prefix.
    pub fn compute(file: &GgufFile, info: &ModelInfo, layout: &KvLayout, cfg: &EdgeConfig) -> Self {
        let weights = file
            .tensor_infos()
            .iter()
            .map(|t| match t.shape.dims() {
                &[n, k] => QMatMul::resident_bytes(t.dtype, n, k, t.size) as u64,
                // Norms and biases: read once and held as f32.
                d => (t.size + 4 * d.iter().product::<usize>()) as u64,
            })
            .sum();
        let ctx = cfg.max_context_tokens;
        let chunk = cfg.chunk();
        let kv_blocks = layout.blocks_pinned(ctx, chunk + TRUNCATE_SLACK, cfg.max_keep_tokens);
        let kv_cache = (kv_blocks * layout.block_bytes()) as u64;
        // An eviction copies one layer's moved keys and values (f16) aside.
        let eviction = (ctx * layout.row * 2 * 2) as u64;
        let activations = scratch_bytes(info, chunk, 1) as u64 + eviction;
        let header = file
            .tensor_infos()
            .iter()
            .map(|t| t.offset)
            .min()
            .unwrap_or(0);
        Self {
            breakdown: Breakdown {
                weights,
                kv_cache,
                activations,
                tokenizer: header * TOKENIZER_PER_HEADER_BYTE + TOKENIZER_BYTES,
                runtime: RUNTIME_BYTES,
            },
            kv_blocks,
        }
    }

    pub fn total(&self) -> u64 {
        self.breakdown.total()
    }
}

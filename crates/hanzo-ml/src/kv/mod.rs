//! Keys and values of running sequences, and attention over them.
//!
//! [`PagedKv`] is the store: a pool of fixed-size blocks allocated once from a byte budget,
//! a block table per sequence and layer, prefix sharing by block content, copy-on-write
//! forks and sliding-window layers that hold only what their window sees.
//! [`PagedKv::attention`] is the attention operation over it; each device brings its own
//! kernel (the CPU one is `cpu::attention`, the numerics of ggml's CPU flash attention).

mod arena;
mod blocks;
mod paged;
mod shift;

pub use arena::KvDtype;
pub use blocks::BlockId;
pub use paged::{KvLayout, KvStats, LayerView, PagedKv, SeqId, DEFAULT_BLOCK_SIZE};

use crate::{Device, Error, Result, Tensor};

/// What a KV store operation could not do. `OutOfBlocks` is the one a scheduler acts on
/// (preempt a sequence, then retry); the others are caller mistakes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("KV cache full: sequence {seq} needs {needed} more blocks, {free} are free")]
    OutOfBlocks {
        seq: SeqId,
        needed: usize,
        free: usize,
    },
    #[error("KV budget of {bytes} bytes holds no block ({block_bytes} bytes each)")]
    Budget { bytes: usize, block_bytes: usize },
    #[error("no sequence {0} in the KV store")]
    UnknownSequence(SeqId),
    #[error("sequence {seq}: {positions} positions written or committed without a reserve")]
    Unreserved { seq: SeqId, positions: usize },
    /// An eviction or truncation the sequence cannot make (`PagedKv::evict`, `truncate`).
    #[error("{0}")]
    Shift(String),
    /// A layout the store cannot hold (`KvLayout::check_dtype`).
    #[error("{0}")]
    Layout(String),
}

/// Which keys a query sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Keys at or before the query's position.
    Causal,
    /// Causal, and only the last `w` positions (the query's own included).
    Sliding(usize),
    /// Every key of the sequence (encoders).
    Bidirectional,
}

impl Mask {
    /// The sliding window of a layer, or causal.
    pub fn causal(window: Option<usize>) -> Self {
        window.map_or(Mask::Causal, Mask::Sliding)
    }

    /// Keys a query at position `p` sees when the sequence holds `end` positions.
    pub fn keys(self, p: usize, end: usize) -> std::ops::Range<usize> {
        match self {
            Mask::Causal => 0..p + 1,
            Mask::Sliding(w) => (p + 1).saturating_sub(w)..p + 1,
            Mask::Bidirectional => 0..end,
        }
    }
}

/// Head counts of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl PagedKv {
    /// Attention of `q` (`[t, heads, head_dim]` f32, already scaled) at positions
    /// `start..start + t` of `seq`, whose keys and values `layer` holds up to `start + t`;
    /// returns `[t, heads * head_dim]`. The queries end a run of `run` positions (at least
    /// `t`), whose length picks the kernel (see `cpu::attention::attend`).
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        seq: SeqId,
        layer: usize,
        q: &Tensor,
        start: usize,
        run: usize,
        mask: Mask,
        heads: Heads,
    ) -> Result<Tensor> {
        let (t, h, d) = q.dims3()?;
        if h != heads.heads
            || d != heads.head_dim
            || heads.kv_heads == 0
            || !heads.heads.is_multiple_of(heads.kv_heads)
            || heads.kv_heads * d != self.layout().row
        {
            return Err(Error::invalid(
                "attention",
                format!(
                    "queries {:?} do not fit {heads:?} over KV rows of {}",
                    q.dims(),
                    self.layout().row
                ),
            ));
        }
        let view = self.layer(seq, layer)?;
        match q.device() {
            Device::Cpu => {
                let out = q.with_contiguous::<f32, _>(|q| {
                    crate::cpu::attention::attend(q, view, start, run, mask, heads)
                })?;
                Tensor::from_vec(out, (t, h * d), &Device::Cpu)
            }
            #[allow(unreachable_patterns)] // the CPU is the only device of some builds
            other => Err(Error::DeviceUnavailable(other.location())),
        }
    }
}

#[cfg(test)]
mod tests;

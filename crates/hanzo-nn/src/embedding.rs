//! Token embeddings: a lookup table `[vocab, hidden]`.

use crate::{Init, Module, Param, VarBuilder};
use hanzo_ml::{Result, Tensor};

#[derive(Clone, Debug)]
pub struct Embedding {
    table: Param,
    hidden: usize,
}

impl Embedding {
    pub fn new(table: impl Into<Param>) -> Result<Self> {
        let table = table.into();
        let (_, hidden) = table.get().dims2()?;
        Ok(Self { table, hidden })
    }

    /// `weight` `[vocab, hidden]`, initialised N(0, 1) like PyTorch when trainable.
    pub fn load(vocab: usize, hidden: usize, vb: &VarBuilder) -> Result<Self> {
        let table = vb.get_with_init(
            (vocab, hidden),
            "weight",
            Init::Normal {
                mean: 0.0,
                std: 1.0,
            },
        )?;
        Ok(Self { table, hidden })
    }

    pub fn table(&self) -> Tensor {
        self.table.get()
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }
}

impl Module for Embedding {
    /// Integer ids of any shape `[...]` -> `[..., hidden]`; an id past the vocabulary is an
    /// error, not a read out of bounds.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        self.table.get().embedding(ids)
    }
}

//! The speculative-decoding options `run` and `bench` share: drafts by prompt lookup or from
//! a draft model, and how many tokens a draft has at most.

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use hanzo_transformers::{GenerateOptions, ModelDraft, PromptLookup, TextGeneration};
use std::path::PathBuf;

#[derive(ClapArgs, Debug, Default)]
pub struct SpecArgs {
    /// Speculative decoding by prompt lookup: draft what followed the last earlier match of
    /// the newest N tokens (N down to 1) and check the draft in one pass. Greedy output is
    /// unchanged; it pays where the reply repeats the prompt (code edits, summaries).
    #[arg(long, value_name = "N", conflicts_with = "draft_model")]
    pub lookup: Option<usize>,
    /// Speculative decoding with a draft model: a smaller model with the same vocabulary
    /// (a store name, GGUF file or model directory) proposes tokens, the model checks them
    /// in one pass. Greedy output is unchanged; sampled output keeps its distribution.
    #[arg(long, value_name = "MODEL")]
    pub draft_model: Option<PathBuf>,
    /// Quantize the draft model's float weights to this type while loading (e.g. q4_0).
    #[arg(long, value_name = "TYPE", requires = "draft_model")]
    pub draft_isq: Option<String>,
    /// Tokens drafted at most per pass (with --lookup or --draft-model); drafts start at 2
    /// and grow while they are kept whole.
    #[arg(long, default_value_t = 8)]
    pub draft_k: usize,
}

impl SpecArgs {
    /// Whether any speculation was asked for.
    pub fn active(&self) -> bool {
        self.lookup.is_some() || self.draft_model.is_some()
    }

    /// Loads the draft model, if any, as `p`'s (checking that the vocabularies match).
    pub fn attach(&self, p: &mut TextGeneration) -> Result<()> {
        if self.draft_k == 0 {
            bail!("--draft-k: at least 1 token");
        }
        if let Some(d) = &self.draft_model {
            let draft = super::load(&super::ModelArgs {
                model: d.clone(),
                isq: self.draft_isq.clone(),
                f32: false,
                lora: Vec::new(),
            })?;
            p.attach_draft(draft)
                .with_context(|| format!("--draft-model {}", d.display()))?;
        }
        Ok(())
    }

    /// `opts` with the drafts these options ask for.
    pub fn apply(&self, opts: GenerateOptions) -> Result<GenerateOptions> {
        Ok(GenerateOptions {
            lookup: match self.lookup {
                Some(0) => bail!("--lookup: an n-gram of at least 1 token"),
                Some(n) => Some(PromptLookup::new(n, self.draft_k)),
                None => None,
            },
            draft: self.draft_model.as_ref().map(|_| ModelDraft {
                max_draft: self.draft_k,
            }),
            ..opts
        })
    }

    /// How the test is named in `bench`: `lookup3`, `draft`.
    pub fn label(&self) -> String {
        match (self.lookup, &self.draft_model) {
            (Some(n), _) => format!("lookup{n} k{}", self.draft_k),
            (None, Some(_)) => format!("draft k{}", self.draft_k),
            (None, None) => "plain".into(),
        }
    }
}

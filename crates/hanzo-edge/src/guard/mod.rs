//! The safety guard: a classifier prompt that a local model answers with "Yes" or "No", run
//! on the user's turn before the chat model reads it and on the reply before the caller
//! sees it. Each policy category is asked about on its own and scored by the probability
//! of "Yes" against "No" in the guard's next-token distribution (ShieldGemma's way of
//! reading a guard model); a score at or over the threshold flags the turn, and the caller
//! gets a refusal that names the category instead of the model's text.
//!
//! The guard is the chat model itself (no more weights, only a small KV store of its own)
//! or a separate GGUF model, a dedicated guard model where one is at hand; either way its
//! memory counts in the budget.

mod judge;
pub(crate) mod stream;

pub(crate) use judge::Judge;

use std::path::PathBuf;

/// One thing the guard looks for: a short name (reported when it flags a turn) and the
/// policy the guard model reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Category {
    pub name: String,
    pub policy: String,
}

impl Category {
    pub fn new(name: &str, policy: &str) -> Self {
        Self {
            name: name.into(),
            policy: policy.into(),
        }
    }

    /// The four harm types ShieldGemma was trained on, each with a policy in plain words:
    /// `dangerous`, `harassment`, `hate`, `sexual`.
    pub fn defaults() -> Vec<Self> {
        vec![
            Self::new(
                "dangerous",
                "The text must not help anyone cause serious harm: no instructions for making \
                 weapons, explosives, poisons or drugs, for attacking, hurting or killing \
                 people, or for self-harm and suicide.",
            ),
            Self::new(
                "harassment",
                "The text must not threaten, bully, intimidate or demean a person, or urge \
                 others to do so.",
            ),
            Self::new(
                "hate",
                "The text must not attack, demean or dehumanize people for their race, \
                 ethnicity, religion, nationality, sex, sexual orientation, disability or \
                 another protected trait.",
            ),
            Self::new(
                "sexual",
                "The text must not contain sexually explicit descriptions, and nothing sexual \
                 involving minors.",
            ),
        ]
    }

    /// The default category called `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::defaults().into_iter().find(|c| c.name == name)
    }
}

/// What the guard checks and how ([`crate::EdgeConfig::guard`]).
#[derive(Clone, Debug)]
pub struct Guard {
    /// A GGUF model that judges (`None`: the chat model judges its own turns).
    pub model: Option<PathBuf>,
    pub categories: Vec<Category>,
    /// The probability of "Yes" at or over which a category flags a turn.
    pub threshold: f32,
    /// Judge the user's turn before the chat model reads it.
    pub check_prompt: bool,
    /// Judge the reply before the caller sees it: the reply is then held back until it is
    /// complete (its first piece comes with the last).
    pub check_reply: bool,
    /// Tokens of text judged per pass; a longer text is judged in windows of this many
    /// tokens, and flagged if any window is.
    pub window_tokens: usize,
    /// What the caller gets instead of a flagged turn; `{category}` is replaced with the
    /// category's name.
    pub refusal: String,
}

impl Default for Guard {
    fn default() -> Self {
        Self {
            model: None,
            categories: Category::defaults(),
            threshold: 0.5,
            check_prompt: true,
            check_reply: true,
            window_tokens: 512,
            refusal: "I can't help with that: it falls under the {category} policy.".into(),
        }
    }
}

impl Guard {
    /// Positions the guard's own KV store holds: a window of text and the instructions
    /// and policy around it ([`Judge`] refuses a policy that makes the prompt longer).
    pub(crate) fn context(&self) -> usize {
        self.window_tokens + PROMPT_ROOM
    }

    pub(crate) fn validate(&self) -> Result<(), crate::EdgeError> {
        let bad = |m: &str| Err(crate::EdgeError::Config(format!("guard: {m}")));
        if self.categories.is_empty() {
            return bad("no categories to check");
        }
        if !(0.0..=1.0).contains(&self.threshold) {
            return bad("the threshold is a probability, 0 to 1");
        }
        if self.window_tokens < 16 {
            return bad("window_tokens must be at least 16");
        }
        if !self.check_prompt && !self.check_reply {
            return bad("neither the prompt nor the reply is checked");
        }
        Ok(())
    }

    pub(crate) fn refusal_for(&self, category: &str) -> String {
        self.refusal.replace("{category}", category)
    }
}

/// Positions of the guard prompt besides the judged text: the instructions, the policy and
/// the chat template's markup.
pub(crate) const PROMPT_ROOM: usize = 256;

/// Which turn was judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Prompt,
    Reply,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Prompt => "prompt",
            Stage::Reply => "reply",
        }
    }
}

/// What the guard made of one text.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Each category's probability of breaking its policy (the highest over windows), in
    /// the order of `Guard::categories`.
    pub scores: Vec<(String, f32)>,
    /// The first category at or over the threshold.
    pub flagged: Option<String>,
    /// Tokens the guard model read (all passes) and the seconds it took.
    pub tokens: usize,
    pub seconds: f64,
}

/// The guard's part of a reply's summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GuardReport {
    /// The category that flagged the turn, and the turn it flagged.
    pub flagged: Option<(String, Stage)>,
    /// The highest score of any category, any turn.
    pub max_score: f32,
    /// Tokens the guard model read for this reply and the seconds that took.
    pub tokens: usize,
    pub seconds: f64,
    /// Of those seconds, the ones before the first piece reached the caller (the prompt's
    /// check; with the reply checked, the reply's check too).
    pub first_token_seconds: f64,
}

impl GuardReport {
    pub(crate) fn add(&mut self, stage: Stage, v: &Verdict) {
        self.tokens += v.tokens;
        self.seconds += v.seconds;
        for (_, s) in &v.scores {
            self.max_score = self.max_score.max(*s);
        }
        if self.flagged.is_none() {
            if let Some(c) = &v.flagged {
                self.flagged = Some((c.clone(), stage));
            }
        }
    }

    /// Tokens the guard read per second.
    pub fn tokens_per_second(&self) -> f64 {
        match self.seconds > 0.0 {
            true => self.tokens as f64 / self.seconds,
            false => 0.0,
        }
    }
}

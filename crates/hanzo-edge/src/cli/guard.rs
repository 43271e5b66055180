//! `--guard*`: the safety guard on the command line.

use clap::{Args, ValueEnum};
use hanzo_edge::guard::{Category, Guard, GuardReport};
use std::path::PathBuf;

/// The safety guard.
#[derive(Args)]
pub struct GuardArgs {
    /// Judge the user's turn and the reply with the chat model itself before they go
    /// through; a flagged turn is answered with a refusal naming the category.
    #[arg(long)]
    guard: bool,
    /// Judge with this model instead (a GGUF file or a model directory: a dedicated guard
    /// model; it counts in the budget).
    #[arg(long)]
    guard_model: Option<PathBuf>,
    /// Categories to check (comma-separated): dangerous, harassment, hate, sexual, or a
    /// name given with --guard-policy.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "dangerous,harassment,hate,sexual"
    )]
    guard_categories: Vec<String>,
    /// A category's policy in words, NAME=TEXT (repeatable; replaces a default's).
    #[arg(long)]
    guard_policy: Vec<String>,
    /// The probability of "Yes" (the turn breaks the policy) at which a turn is flagged.
    #[arg(long, default_value_t = 0.5)]
    guard_threshold: f32,
    /// What is judged: the user's turn, the reply (held back until it is judged), or both.
    #[arg(long, value_enum, default_value = "both")]
    guard_check: GuardCheck,
    /// Tokens of text judged per pass (longer texts in windows of this many).
    #[arg(long, default_value_t = 512)]
    guard_window: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum GuardCheck {
    Prompt,
    Reply,
    Both,
}

impl GuardArgs {
    /// The guard these options describe, where `--guard` or `--guard-model` asks for one.
    pub fn guard(&self) -> anyhow::Result<Option<Guard>> {
        if !self.guard && self.guard_model.is_none() {
            return Ok(None);
        }
        let mut custom = Vec::new();
        for p in &self.guard_policy {
            let Some((name, text)) = p.split_once('=') else {
                anyhow::bail!("--guard-policy {p:?}: NAME=TEXT");
            };
            if name.trim().is_empty() || text.trim().is_empty() {
                anyhow::bail!("--guard-policy {p:?}: a name and a policy are both needed");
            }
            custom.push(Category::new(name.trim(), text.trim()));
        }
        let mut categories = Vec::new();
        for name in &self.guard_categories {
            let found = custom.iter().find(|c| &c.name == name).cloned();
            match found.or_else(|| Category::named(name)) {
                Some(c) => categories.push(c),
                None => anyhow::bail!(
                    "--guard-categories: no category {name:?} (dangerous, harassment, hate, \
                     sexual, or one given with --guard-policy)"
                ),
            }
        }
        // A policy given but not listed is checked too.
        for c in custom {
            if !categories.iter().any(|k| k.name == c.name) {
                categories.push(c);
            }
        }
        Ok(Some(Guard {
            model: self.guard_model.clone(),
            categories,
            threshold: self.guard_threshold,
            check_prompt: matches!(self.guard_check, GuardCheck::Prompt | GuardCheck::Both),
            check_reply: matches!(self.guard_check, GuardCheck::Reply | GuardCheck::Both),
            window_tokens: self.guard_window,
            ..Guard::default()
        }))
    }
}

/// The guard's line for the log: what it flagged and what it cost.
pub fn report_line(r: &GuardReport) -> String {
    let verdict = match &r.flagged {
        Some((category, stage)) => format!("flagged {category} in the {}", stage.as_str()),
        None => "passed".into(),
    };
    format!(
        "guard: {verdict} (highest score {:.2}); read {} tokens in {:.3} s ({:.0} tokens/s), +{:.3} s to the first token",
        r.max_score,
        r.tokens,
        r.seconds,
        r.tokens_per_second(),
        r.first_token_seconds
    )
}

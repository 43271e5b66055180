//! `bench --lookup N` / `--draft-model M`: greedy generation of `-n` tokens from a real chat
//! prompt without and with speculative decoding (the same tokens either way), and the share
//! of drafted tokens kept. The end-of-text tokens are biased away so every run is as long.

use super::bench::{Args, Row};
use anyhow::Result;
use hanzo_transformers::{GenerateOptions, Message, SamplingParams, TextGeneration};

/// A code edit: the reply gives most of the listing back, which prompt lookup drafts from.
const CODE_EDIT: &str = "Rename the variable `count` to `total` in this Python function and \
return the whole function:\n\n```python\ndef summarize(values):\n    count = 0\n    for v in \
values:\n        if v is None:\n            continue\n        count += v\n    average = count / \
len(values) if values else 0\n    print(\"count:\", count)\n    print(\"average:\", average)\n    \
return count, average\n```";

pub(super) fn rows(p: &TextGeneration, a: &Args) -> Result<Vec<Row>> {
    let text = a.spec_prompt.as_deref().unwrap_or(CODE_EDIT);
    let prompt = p.chat_tokens(&[Message::new("user", text)])?;
    let vocab = p.tokenizer.vocab();
    let logit_bias = (0..vocab.len() as u32)
        .filter(|&t| vocab.is_end_of_generation(t))
        .map(|t| (t, -100.0))
        .collect();
    let plain = GenerateOptions {
        max_tokens: a.n_gen,
        sampling: SamplingParams {
            logit_bias,
            ..SamplingParams::greedy()
        },
        ..GenerateOptions::default()
    };
    let spec = a.spec.apply(plain.clone())?;
    let mut out = Vec::new();
    let mut tokens: Vec<Vec<u32>> = Vec::new();
    for (label, opts) in [("plain", &plain), (a.spec.label().as_str(), &spec)] {
        let run = || p.generate(&prompt, opts, &mut |_| true);
        tokens.push(run()?.tokens); // warm-up
        let runs = (0..a.reps).map(|_| run()).collect::<Result<Vec<_>, _>>()?;
        let kept = runs.iter().map(|g| g.speculation.accepted).sum::<usize>();
        let drafted = runs.iter().map(|g| g.speculation.drafted).sum::<usize>();
        let speculating = opts.lookup.is_some() || opts.draft.is_some();
        out.push(Row {
            test: format!("tg{} {label}", a.n_gen),
            tokens: a.n_gen,
            samples: runs
                .iter()
                .map(|g| g.tokens.len() as f64 / g.generate_seconds.max(1e-9))
                .collect(),
            acceptance: speculating.then(|| kept as f64 / drafted.max(1) as f64),
        });
    }
    if tokens[0] != tokens[1] {
        let at = tokens[0]
            .iter()
            .zip(&tokens[1])
            .take_while(|(x, y)| x == y)
            .count();
        eprintln!("warning: the speculative run's greedy tokens differ from the plain run's from token {at}");
    }
    Ok(out)
}

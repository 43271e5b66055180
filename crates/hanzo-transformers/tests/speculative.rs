//! Speculative decoding by prompt lookup: greedy tokens with speculation are the tokens
//! without it, on the three fixtures, 256 tokens each, on a prompt whose continuation
//! repeats it in part (so that drafts are made, kept and turned down).

mod common;

use hanzo_transformers::{GenerateOptions, PromptLookup, SamplingParams, TextGeneration};

const CODE: &str = "Rename the variable `count` to `total` in this Python function and return \
the whole function:\n\n```python\ndef summarize(values):\n    count = 0\n    for v in values:\n        \
if v is None:\n            continue\n        count += v\n    average = count / len(values) if values \
else 0\n    print(\"count:\", count)\n    print(\"average:\", average)\n    return count, average\n```";

/// Greedy, 256 tokens, the end-of-text tokens biased away so that every run is that long.
fn greedy(p: &TextGeneration, lookup: Option<PromptLookup>) -> GenerateOptions {
    let vocab = p.tokenizer.vocab();
    let logit_bias = (0..vocab.len() as u32)
        .filter(|&t| vocab.is_end_of_generation(t))
        .map(|t| (t, -100.0))
        .collect();
    GenerateOptions {
        max_tokens: 256,
        sampling: SamplingParams {
            logit_bias,
            ..SamplingParams::greedy()
        },
        lookup,
        ..GenerateOptions::default()
    }
}

#[test]
fn greedy_tokens_are_the_same_with_and_without_speculation() {
    for fixture in ["gemma3", "smollm2", "qwen2"] {
        let p = TextGeneration::from_gguf(common::fixture(fixture)).unwrap();
        // A continuation rather than a chat turn, so that no end of turn stops it short of
        // 256 tokens: the listing again, which the models repeat in part.
        let prompt = p.text_tokens(&format!(
            "{CODE}\n\nThe function again, renamed:\n\n```python\n"
        ));
        let plain = p
            .generate(&prompt, &greedy(&p, None), &mut |_| true)
            .unwrap();
        for k in [4, 8] {
            let spec = p
                .generate(
                    &prompt,
                    &greedy(&p, Some(PromptLookup::new(3, k))),
                    &mut |_| true,
                )
                .unwrap();
            let s = spec.speculation;
            eprintln!(
                "{fixture} k={k}: {} tokens, {} passes, {}/{} drafted kept",
                spec.tokens.len(),
                s.passes,
                s.accepted,
                s.drafted
            );
            assert_eq!(spec.tokens, plain.tokens, "{fixture}, drafts of {k}");
            assert_eq!(spec.tokens.len(), 256, "{fixture}");
            assert_eq!(spec.text, plain.text);
            assert_eq!(spec.finish, plain.finish);
            assert!(s.accepted > 0 && s.accepted < s.drafted, "{fixture}: {s:?}");
        }
    }
}

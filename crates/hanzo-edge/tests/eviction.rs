//! A reply that outgrows the context goes on past an eviction, and what follows it is what a
//! fresh run over the kept tokens generates: when evictions recompute, token for token up to
//! the first near-tie (two logits within 0.5, which the prompt's chunking alone can swap);
//! for re-rotation, which keeps what the evicted tokens left in the deeper layers, the
//! agreement is printed.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use hanzo_edge::{Edge, EdgeConfig, Event, Eviction};
use hanzo_transformers::{GenerateOptions, Logits, SamplingParams};

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        stop_tokens: Vec::new(),
        penalize_prompt: false,
        ..GenerateOptions::default()
    }
}

fn config(fixture: &str, ctx: usize, eviction: Eviction) -> EdgeConfig {
    let mut c = EdgeConfig::new(fixture_path::fixture(fixture), ctx, 4 << 30);
    c.eviction = eviction;
    c.prefill_chunk = 32;
    c.max_keep_tokens = 16;
    c
}

/// Generates past the context of `ctx` from `prompt` (first `keep` tokens pinned) and
/// returns the kept tokens right after the first eviction, the tokens generated after it and
/// the summary's eviction count.
fn after_eviction(
    edge: &mut Edge,
    prompt: Vec<u32>,
    keep: usize,
    n: usize,
) -> (Vec<u32>, Vec<u32>, usize) {
    let mut stream = edge.complete_tokens(prompt, keep, &greedy(n)).unwrap();
    let mut snapshot = None;
    let mut evictions = 0;
    while let Some(event) = stream.next() {
        if let Event::Done(s) = event.unwrap() {
            evictions = s.evictions;
            break;
        }
        if snapshot.is_none() && stream.evictions() > 0 {
            // The step that evicted also sampled the token just generated, from the kept
            // context: it is the first token after the eviction.
            let at = stream.tokens().len() - 1;
            snapshot = Some((stream.context().to_vec(), at));
        }
    }
    let (kept, at) = snapshot.expect("the reply outgrew the context, no eviction happened");
    (kept, stream.tokens()[at..].to_vec(), evictions)
}

/// `ctx` positions; the prompt leaves about 60 of them for the reply.
fn check(fixture: &str, eviction: Eviction, ctx: usize) -> (usize, usize) {
    let mut edge = Edge::new(config(fixture, ctx, eviction)).unwrap();
    let p = edge.pipeline();
    let mut prompt = p.text_tokens("Some notes on European geography.\n");
    let filler = p.text_tokens(" Rivers, mountains, plains and coasts shape where people live.");
    while prompt.len() + filler.len() + 60 < ctx {
        prompt.extend_from_slice(&filler[1..]);
    }
    let tail = p.text_tokens("\nHere is a list of the countries of Europe and their capital cities, in alphabetical order:\n1.");
    prompt.extend_from_slice(&tail[1..]);
    let (kept, after, evictions) = after_eviction(&mut edge, prompt, 4, 120);
    assert!(evictions >= 1);
    assert!(kept.len() < ctx);
    assert!(edge.context_used() <= ctx);
    let n = after.len().min(12);
    assert!(n >= 4, "only {n} tokens after the eviction");
    // A fresh runtime with room for everything, over the kept tokens.
    let mut fresh = Edge::new(config(fixture, 2 * ctx, Eviction::Off)).unwrap();
    let mut stream = fresh.complete_tokens(kept.clone(), 0, &greedy(n)).unwrap();
    let mut text = String::new();
    while let Some(Event::Text(t)) = stream.next().transpose().unwrap() {
        text.push_str(&t);
    }
    let want = stream.tokens().to_vec();
    drop(stream);
    let same = after.iter().zip(&want).take_while(|(a, b)| a == b).count();
    eprintln!("{fixture} {eviction:?}: {same} of {n} tokens after the eviction match a fresh run ({text:?})");
    let n = n.min(want.len());
    if same < n {
        // Where they part, the two tokens must be a near-tie of a fresh pass's logits: the
        // prompt's chunking alone moves such ties (a fresh run chunked otherwise parts there
        // too).
        let mut tokens = kept.clone();
        tokens.extend_from_slice(&after[..same]);
        let model = fresh.pipeline().model.as_ref();
        let mut cache = model.new_cache(tokens.len() + 1);
        let logits = model.forward(&tokens, &mut cache, Logits::Last).unwrap();
        let row: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();
        let (a, b) = (row[after[same] as usize], row[want[same] as usize]);
        eprintln!(
            "{fixture} {eviction:?}: at token {same} the logits of the two choices differ by {:.3}",
            (a - b).abs()
        );
        if eviction == Eviction::Recompute {
            assert!(
                (a - b).abs() < 0.5,
                "{fixture}: not a near-tie ({a} against {b})"
            );
        }
    }
    (same, n)
}

#[test]
fn recomputing_eviction_continues_as_a_fresh_run_over_the_kept_tokens() {
    // Gemma 3 with a context past its local layers' window of 512: those keep the pinned
    // prefix and their window only.
    let runs = if common::quick() {
        vec![("smollm2", 96)]
    } else {
        vec![("smollm2", 96), ("qwen2", 96), ("gemma3", 640)]
    };
    for (fixture, ctx) in runs {
        let (same, n) = check(fixture, Eviction::Recompute, ctx);
        assert!(same >= 2, "{fixture}: {same} of {n}");
    }
}

#[test]
fn rerotating_eviction_goes_on_past_the_context() {
    let runs = if common::quick() {
        vec![("smollm2", 96)]
    } else {
        vec![("smollm2", 96), ("gemma3", 640)]
    };
    for (fixture, ctx) in runs {
        let (_, n) = check(fixture, Eviction::Rerotate, ctx);
        assert!(n >= 4);
    }
}

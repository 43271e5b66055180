//! Speculative decoding, by prompt lookup (`EdgeConfig::lookup`) or with a draft model
//! (`EdgeConfig::draft`, a Q2_K copy of the model made by `hanzo-engine quantize`), changes
//! nothing a greedy reply says: the same text, the same finish, the same evictions, and
//! afterwards the same tokens in the KV cache (so the next turn is the same too), with
//! drafts both kept and turned down along the way.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use common::greedy;
use hanzo_edge::{DraftModel, Edge, EdgeConfig, Summary};
use hanzo_transformers::{Message, PromptLookup};
use std::path::PathBuf;

fn config(fixture: &str, ctx: usize) -> EdgeConfig {
    EdgeConfig::new(fixture_path::fixture(fixture), ctx, 4 << 30)
}

fn edge(fixture: &str, ctx: usize, lookup: Option<PromptLookup>) -> Edge {
    let mut c = config(fixture, ctx);
    c.lookup = lookup;
    Edge::new(c).unwrap()
}

/// A Q2_K copy of `fixture` (its vocabulary, other numbers), written as `name`.
fn q2k_draft(fixture: &str, name: &str) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.gguf"));
    common::quantize(&fixture_path::fixture(fixture), &out, &["--type", "Q2_K"]);
    out
}

fn chat(edge: &mut Edge, messages: &[Message], n: usize) -> (String, Summary) {
    edge.chat(messages, &greedy(n))
        .unwrap()
        .collect_text()
        .unwrap()
}

const CODE: &str = "def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n        subtotal += item.price * item.quantity\n    tax = subtotal * tax_rate\n    return subtotal + tax\n";

/// Two turns of a code edit, without speculation and with `fast`'s.
fn two_turns(fixture: &str, fast: EdgeConfig) -> (usize, usize) {
    let mut plain = edge(fixture, 1024, None);
    let mut fast = Edge::new(fast).unwrap();
    let mut messages = vec![Message::new(
        "user",
        &format!(
            "Rename `subtotal` to `net` in this function and show the whole function:\n\n{CODE}"
        ),
    )];
    let (mut drafted, mut kept) = (0, 0);
    for turn in 0..2 {
        let (a, sa) = chat(&mut plain, &messages, 160);
        let (b, sb) = chat(&mut fast, &messages, 160);
        assert_eq!(
            a, b,
            "{fixture}, turn {turn}: the reply changed with lookup"
        );
        assert_eq!(sa.finish, sb.finish);
        assert_eq!(sa.completion_tokens, sb.completion_tokens);
        assert_eq!(
            sa.computed_prompt_tokens, sb.computed_prompt_tokens,
            "{fixture}"
        );
        assert_eq!(
            plain.context_tokens(),
            fast.context_tokens(),
            "{fixture}, turn {turn}: the KV cache holds other tokens"
        );
        assert_eq!(sa.drafted_tokens, 0);
        assert!(sb.accepted_tokens <= sb.drafted_tokens);
        drafted += sb.drafted_tokens;
        kept += sb.accepted_tokens;
        messages.push(Message::new("assistant", &a));
        messages.push(Message::new("user", "Now rename `tax` to `levy` as well."));
    }
    println!("{fixture}: kept {kept} of {drafted} drafted tokens");
    (drafted, kept)
}

/// `two_turns` on each of `fixtures` (only SmolLM2 in a quick run) with the speculation
/// `speculative` configures: some drafts kept on each, some turned down over all.
fn same_on(fixtures: &[&str], speculative: impl Fn(&str) -> EdgeConfig) {
    let fixtures = match common::quick() {
        true => &fixtures[..1],
        false => fixtures,
    };
    let (mut drafted, mut kept) = (0, 0);
    for f in fixtures {
        let (d, k) = two_turns(f, speculative(f));
        assert!(k > 0, "{f}: no draft was kept");
        drafted += d;
        kept += k;
    }
    assert!(
        kept < drafted,
        "no draft was turned down: the check was not exercised"
    );
}

#[test]
fn greedy_replies_and_the_kv_cache_are_the_same_with_lookup() {
    same_on(&["smollm2", "qwen2", "gemma3"], |f| {
        let mut c = config(f, 1024);
        c.lookup = Some(PromptLookup::new(3, 8));
        c
    });
}

#[test]
fn greedy_replies_and_the_kv_cache_are_the_same_with_a_draft_model() {
    same_on(&["smollm2", "gemma3"], |f| {
        let mut c = config(f, 1024);
        c.draft = Some(DraftModel {
            model: q2k_draft(f, &format!("{f}-q2k-edge-draft")),
            max_draft: 6,
        });
        // The draft's weights and KV store are a term of the budget, and the check pass's
        // rows of logits add to the activations.
        let with = Edge::new(c.clone()).unwrap().budget().clone();
        let without = edge(f, 1024, None).budget().clone();
        let (w, wo) = (&with.breakdown, &without.breakdown);
        assert!(w.draft > 0 && w.activations > wo.activations);
        assert_eq!(
            with.total() - w.draft - w.activations,
            without.total() - wo.activations
        );
        c
    });
}

#[test]
fn sampled_replies_with_a_draft_repeat_with_their_seed() {
    let mut c = config("smollm2", 512);
    c.draft = Some(DraftModel {
        model: q2k_draft("smollm2", "smollm2-q2k-edge-draft-sampled"),
        max_draft: 4,
    });
    let mut e = Edge::new(c).unwrap();
    let mut opts = greedy(48);
    opts.sampling.temperature = 0.8;
    opts.sampling.seed = 7;
    let mut reply = || {
        e.reset();
        e.complete("Once upon a time", &opts)
            .unwrap()
            .collect_text()
            .unwrap()
    };
    let (a, sa) = reply();
    let (b, _) = reply();
    assert_eq!(a, b);
    assert!(sa.drafted_tokens > 0);
}

#[test]
fn drafts_never_move_an_eviction() {
    // A reply three times the context: evictions come at the same tokens with lookup.
    let prompt =
        "List the numbers from one to one hundred in words, separated by commas: one, two, three,";
    let mut out = Vec::new();
    for lookup in [None, Some(PromptLookup::new(2, 8))] {
        let mut e = edge("smollm2", 128, lookup);
        let (text, s) = e
            .complete(prompt, &greedy(300))
            .unwrap()
            .collect_text()
            .unwrap();
        assert!(s.evictions >= 2, "{} evictions", s.evictions);
        out.push((
            text,
            s.evictions,
            s.evicted_tokens,
            e.context_tokens().to_vec(),
        ));
        if lookup.is_some() {
            assert!(s.accepted_tokens > 0, "lookup kept no draft");
        }
    }
    assert_eq!(out[0], out[1]);
}

#[test]
fn a_bad_lookup_or_draft_is_refused() {
    let mut c = config("smollm2", 256);
    for (n, k) in [(0, 8), (3, 0), (3, 17)] {
        c.lookup = Some(PromptLookup::new(n, k));
        let e = Edge::new(c.clone()).err().expect("refused");
        assert!(e.to_string().contains("lookup"), "{e}");
    }
    // Both kinds of drafting at once; a draft with another vocabulary.
    c.lookup = Some(PromptLookup::new(3, 8));
    c.draft = Some(DraftModel {
        model: fixture_path::fixture("qwen2"),
        max_draft: 4,
    });
    let e = Edge::new(c.clone()).err().expect("refused").to_string();
    assert!(e.contains("pick one"), "{e}");
    c.lookup = None;
    let e = Edge::new(c).err().expect("refused").to_string();
    assert!(e.contains("vocabulary"), "{e}");
}

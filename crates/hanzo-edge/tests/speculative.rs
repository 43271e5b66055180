//! Speculative decoding by prompt lookup (`EdgeConfig::lookup`) changes nothing a greedy
//! reply says: the same text, the same finish, the same evictions, and afterwards the same
//! tokens in the KV cache (so the next turn is the same too), with drafts both kept and
//! turned down along the way.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use common::greedy;
use hanzo_edge::{Edge, EdgeConfig, Summary};
use hanzo_transformers::{Message, PromptLookup};

fn edge(fixture: &str, ctx: usize, lookup: Option<PromptLookup>) -> Edge {
    let mut c = EdgeConfig::new(fixture_path::fixture(fixture), ctx, 4 << 30);
    c.lookup = lookup;
    Edge::new(c).unwrap()
}

fn chat(edge: &mut Edge, messages: &[Message], n: usize) -> (String, Summary) {
    edge.chat(messages, &greedy(n))
        .unwrap()
        .collect_text()
        .unwrap()
}

const CODE: &str = "def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n        subtotal += item.price * item.quantity\n    tax = subtotal * tax_rate\n    return subtotal + tax\n";

/// Two turns of a code edit, with and without lookup.
fn two_turns(fixture: &str) -> (usize, usize) {
    let mut plain = edge(fixture, 1024, None);
    let mut fast = edge(fixture, 1024, Some(PromptLookup::new(3, 8)));
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

#[test]
fn greedy_replies_and_the_kv_cache_are_the_same_with_lookup() {
    let fixtures: &[&str] = match common::quick() {
        true => &["smollm2"],
        false => &["smollm2", "qwen2", "gemma3"],
    };
    let (mut drafted, mut kept) = (0, 0);
    for f in fixtures {
        let (d, k) = two_turns(f);
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
fn a_bad_lookup_is_refused() {
    let mut c = EdgeConfig::new(fixture_path::fixture("smollm2"), 256, 1 << 30);
    for (n, k) in [(0, 8), (3, 0), (3, 17)] {
        c.lookup = Some(PromptLookup::new(n, k));
        let e = Edge::new(c.clone()).err().expect("refused");
        assert!(e.to_string().contains("lookup"), "{e}");
    }
}

//! Evicting positions from a sequence's KV store (`LanguageModel::evict`) moves the later
//! positions down and re-rotates their keys. The first layer's keys depend on the token and
//! its position only, so there the moved keys must equal what a fresh pass over the kept
//! tokens writes, up to the f16 rounding of keys rotated twice; the pinned prefix is
//! untouched in every layer. (Deeper layers' keys also saw the evicted tokens: an eviction
//! that re-rotates is llama.cpp's context shift, not a recomputation; the logits' distance
//! from a fresh pass is printed, not asserted.)

mod common;

use hanzo_ml::kv::{PagedKv, SeqId};
use hanzo_transformers::{LanguageModel, Logits, SeqChunk, TextGeneration, WeightMode};

fn prefill(model: &dyn LanguageModel, kv: &mut PagedKv, seq: SeqId, tokens: &[u32]) {
    for chunk in tokens.chunks(64) {
        model
            .forward_batch(&[SeqChunk::new(seq, chunk, Logits::None)], kv)
            .unwrap();
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn check(fixture: &str, keep: usize, count: usize) {
    let p = TextGeneration::load(common::fixture(fixture).as_ref(), WeightMode::AsStored).unwrap();
    let model = p.model.as_ref();
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(4)
        + "In the beginning the universe was created. This has made a lot of people very angry \
           and been widely regarded as a bad move. Far out in the uncharted backwaters of the \
           unfashionable end of the western spiral arm of the galaxy lies a small unregarded \
           yellow sun. fn main() { let answer = 42; println!(\"{answer}\"); }";
    let tokens = p.text_tokens(&text);
    assert!(tokens.len() > keep + count + 8, "{}", tokens.len());
    let kept: Vec<u32> = tokens[..keep]
        .iter()
        .chain(&tokens[keep + count..])
        .copied()
        .collect();
    let layout = model.kv_layout();
    let blocks = layout.blocks_pinned(tokens.len() + 1, 64, keep);

    let mut kv = PagedKv::with_blocks(layout.clone(), blocks);
    let seq = kv.add_sequence();
    kv.pin(seq, keep).unwrap();
    prefill(model, &mut kv, seq, &tokens);
    let before: Vec<Vec<f32>> = (0..layout.layers())
        .map(|l| kv.keys(seq, l, 0..keep))
        .collect();
    model.evict(&mut kv, seq, count).unwrap();
    assert_eq!(kv.len(seq).unwrap(), kept.len());

    let mut fresh_kv = PagedKv::with_blocks(layout.clone(), blocks);
    let fresh = fresh_kv.add_sequence();
    prefill(model, &mut fresh_kv, fresh, &kept);

    for (l, b) in before.iter().enumerate() {
        assert_eq!(
            &kv.keys(seq, l, 0..keep),
            b,
            "{fixture}: pinned keys of layer {l}"
        );
    }
    let moved = kv.keys(seq, 0, keep..kept.len());
    let want = fresh_kv.keys(fresh, 0, keep..kept.len());
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let diff = max_diff(&moved, &want);
    eprintln!(
        "{fixture}: layer 0 keys after the move differ by at most {diff:.5} (largest {scale:.2})"
    );
    // Two roundings to f16 (11 significant bits) of keys up to `scale`.
    assert!(
        diff <= scale * 2f32.powi(-9),
        "{fixture}: moved keys differ by {diff}"
    );

    // The next token's logits, for the record.
    let next = [tokens[tokens.len() - 1]];
    let logits = |kv: &mut PagedKv, s: SeqId| -> Vec<f32> {
        let out = model
            .forward_batch(&[SeqChunk::new(s, &next, Logits::Last)], kv)
            .unwrap();
        out.flatten_all().unwrap().to_vec1().unwrap()
    };
    let (a, b) = (logits(&mut kv, seq), logits(&mut fresh_kv, fresh));
    eprintln!(
        "{fixture}: next-token logits differ from a fresh pass by {:.3}",
        max_diff(&a, &b)
    );
}

#[test]
fn qwen_keys_move_to_where_a_fresh_pass_puts_them() {
    check("qwen2", 5, 37);
}

#[test]
fn gemma3_window_layers_keep_their_pinned_prefix_and_move_their_keys() {
    // Gemma 3's first layer is a local one (window 512, its own RoPE base).
    check("gemma3", 3, 41);
}

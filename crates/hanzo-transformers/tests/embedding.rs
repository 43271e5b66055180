//! all-MiniLM-L6-v2 embeddings against sentence-transformers' reference vectors.

mod common;

use common::cosine;
use hanzo_transformers::Embedder;

#[test]
fn minilm_matches_sentence_transformers() {
    let e = Embedder::from_dir(common::fixture("minilm")).unwrap();
    let r = common::reference("all-minilm-l6-v2-embeddings-sentence-transformers.json");
    let items = r["sentences"].as_array().unwrap();
    let texts: Vec<&str> = items.iter().map(|s| s["text"].as_str().unwrap()).collect();
    // All at once (padded batch) and one by one must both match.
    let batch = e.embed(&texts).unwrap();
    for (i, s) in items.iter().enumerate() {
        assert_eq!(
            e.encode(texts[i]).unwrap(),
            common::ids(&s["input_ids"]),
            "{:?}",
            texts[i]
        );
        let want: Vec<f64> = s["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let single = e.embed(&texts[i..i + 1]).unwrap().remove(0);
        for v in [&batch[i], &single] {
            let c = cosine(v, &want);
            let max_diff = v
                .iter()
                .zip(&want)
                .map(|(&a, &b)| (a as f64 - b).abs())
                .fold(0.0, f64::max);
            eprintln!("{:?}: cosine {c:.7}, max |diff| {max_diff:.2e}", texts[i]);
            assert!(c >= 0.9999, "cosine {c}");
            assert!(max_diff < 1e-4);
        }
        let norm: f32 = batch[i].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
    }
}

/// A text past the model's 256 tokens is an error naming both counts, unless truncation is
/// asked for; then the result says which text was cut, and whatever follows the cut cannot
/// change its vector.
#[test]
fn long_inputs_fail_unless_truncation_is_asked_for() {
    use hanzo_transformers::{EmbedOptions, Error};
    let e = Embedder::from_dir(common::fixture("minilm")).unwrap();
    assert_eq!(e.max_tokens, 256);
    let long = "the quick brown fox jumps over the lazy dog ".repeat(40);
    let longer = format!("{long} and then it runs far away into the forest");
    let short = "A short sentence.";
    match e.embed(&[short, &long]) {
        Err(Error::TooLong {
            index: 1,
            tokens,
            limit: 256,
        }) => assert!(tokens > 256, "{tokens}"),
        other => panic!("expected TooLong, got {other:?}"),
    }
    let cut = e
        .embed_with(&[short, &long, &longer], EmbedOptions { truncate: true })
        .unwrap();
    assert_eq!(cut.truncated, [false, true, true]);
    assert_eq!(&cut.tokens[1..], [256, 256]);
    // Batched with the long texts, the short one is padded: its vector moves by rounding only.
    let alone = e.embed(&[short]).unwrap().remove(0);
    assert!(
        cosine(
            &cut.vectors[0],
            &alone.iter().map(|&x| x as f64).collect::<Vec<_>>()
        ) > 0.99999
    );
    assert_eq!(cut.vectors[1], cut.vectors[2]);
    let norm: f32 = cut.vectors[1].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
}

//! Embeddings from decoder models by last-token pooling.
//!
//! Qwen2.5-Coder-0.5B against llama.cpp's `llama-embedding --pooling last --embd-normalize 2`
//! on the same GGUF (tests/reference/qwen2.5-coder-0.5b-embeddings-last-llamacpp.json). Both
//! run the Q4_K_M weights with 8-bit activations, so the vectors agree to rounding. Then the
//! batching: a text's vector is the same, bit for bit, whether it runs alone or beside
//! others, in one prefill chunk or several (Gemma 3's sliding-window layers included).

mod common;

use common::cosine;
use hanzo_transformers::{EmbedOptions, Error, TextGeneration};

fn embed(p: &TextGeneration, texts: &[&str]) -> Vec<Vec<f32>> {
    p.embed_last_token(texts, 4096, EmbedOptions::default())
        .unwrap()
        .vectors
}

#[test]
fn qwen2_matches_llama_cpp() {
    let p = TextGeneration::from_gguf(common::fixture("qwen2")).unwrap();
    let r = common::reference("qwen2.5-coder-0.5b-embeddings-last-llamacpp.json");
    let items = r["items"].as_array().unwrap();
    let texts: Vec<&str> = items.iter().map(|s| s["text"].as_str().unwrap()).collect();
    let together = embed(&p, &texts);
    let mut worst = 1.0f64;
    for (i, item) in items.iter().enumerate() {
        let want: Vec<f64> = item["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let alone = embed(&p, &texts[i..i + 1]).remove(0);
        assert_eq!(alone, together[i], "{:?}: alone vs batched", texts[i]);
        assert_eq!(alone.len(), 896);
        let c = cosine(&alone, &want);
        eprintln!("{:?}: cosine to llama.cpp {c:.6}", texts[i]);
        worst = worst.min(c);
        let norm: f32 = alone.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }
    assert!(worst > 0.999, "worst cosine {worst}");
    // Qwen adds no BOS: an empty text has nothing to embed.
    assert!(matches!(
        p.embed_last_token(&["ok", ""], 100, EmbedOptions::default()),
        Err(Error::Invalid(m)) if m.contains("input 1")
    ));
    // The vectors say something: the two English prose sentences sit closer to each other
    // than either does to the code.
    let sim = |a: usize, b: usize| cosine(&together[a], &to_f64(&together[b]));
    assert!(sim(0, 2) > sim(0, 1) && sim(0, 2) > sim(2, 1));
}

fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Past one prefill chunk (512 tokens) and past Gemma 3's 512-position sliding window: a
/// long text beside short ones gives what it gives alone, and the limit is enforced.
#[test]
fn gemma3_long_texts_batch_exactly() {
    let p = TextGeneration::from_gguf(common::fixture("gemma3")).unwrap();
    let long = "Rivers carve valleys over many thousands of years. ".repeat(120);
    let short = ["A cat sits on the mat.", "fn main() {}"];
    let tokens = p.text_tokens(&long).len();
    assert!(tokens > 1050, "{tokens} tokens");
    let together = embed(&p, &[short[0], &long, short[1]]);
    assert_eq!(together[1], embed(&p, &[&long]).remove(0));
    assert_eq!(together[0], embed(&p, &short[..1]).remove(0));
    assert_eq!(together[2], embed(&p, &short[1..]).remove(0));
    assert_eq!(together[0].len(), 640);

    match p.embed_last_token(&[short[0], &long], 1000, EmbedOptions::default()) {
        Err(Error::TooLong {
            index: 1,
            tokens: t,
            limit: 1000,
        }) => assert_eq!(t, tokens),
        other => panic!("expected TooLong, got {other:?}"),
    }
    let cut = p
        .embed_last_token(&[&long], 1000, EmbedOptions { truncate: true })
        .unwrap();
    assert_eq!((cut.tokens[0], cut.truncated[0]), (1000, true));
    // Gemma adds BOS, so even an empty text has a token to embed.
    let empty = p
        .embed_last_token(&[""], 100, EmbedOptions::default())
        .unwrap();
    assert_eq!(empty.tokens, [1]);
}

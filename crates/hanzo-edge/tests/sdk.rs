//! The Rust SDK beyond chat: the reply as an async `Stream` (the iterator's events, in the
//! same order), embeddings by last-token pooling equal to the engine's, computed beside the
//! conversation without disturbing it, and the Q8_0 KV cache's budget.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use common::greedy;
use hanzo_edge::{Budget, Edge, EdgeConfig, Event, KvDtype};
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{describe_gguf, EmbedOptions, TextGeneration};

fn text_of(events: Vec<Event>) -> (String, usize) {
    let mut text = String::new();
    let mut tokens = 0;
    for e in events {
        match e {
            Event::Text(t) => text += &t,
            Event::Done(s) => tokens = s.completion_tokens,
        }
    }
    (text, tokens)
}

/// The greedy continuation of `prompt` (`max_tokens` at most) and its token count.
fn complete_greedy(edge: &mut Edge, prompt: &str, max_tokens: usize) -> (String, usize) {
    let events = edge.complete(prompt, &greedy(max_tokens)).unwrap();
    text_of(events.collect::<Result<_, _>>().unwrap())
}

#[test]
fn the_async_stream_gives_the_iterators_events() {
    use futures_core::Stream;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    let cfg = EdgeConfig::new(fixture_path::fixture("smollm2"), 512, 1 << 30);
    let mut edge = Edge::new(cfg).unwrap();
    let prompt = "The three primary colours are";
    let (a, na) = complete_greedy(&mut edge, prompt, 24);
    edge.reset();
    let mut stream = edge.complete(prompt, &greedy(24)).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut by_stream = Vec::new();
    loop {
        match Pin::new(&mut stream).poll_next(&mut cx) {
            Poll::Ready(Some(e)) => by_stream.push(e.unwrap()),
            Poll::Ready(None) => break,
            Poll::Pending => panic!("the stream is never pending"),
        }
    }
    let (b, nb) = text_of(by_stream);
    assert_eq!((a.as_str(), na), (b.as_str(), nb));
    assert!(na > 0 && !a.is_empty());
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

#[test]
fn embeddings_match_the_engines_and_leave_the_conversation_alone() {
    let path = fixture_path::fixture("smollm2");
    let texts = [
        "A lighthouse stands on the rocks.",
        "Bees make honey in summer.",
    ];
    let reference = TextGeneration::from_gguf(&path)
        .unwrap()
        .embed_last_token(&texts, 512, EmbedOptions::default())
        .unwrap();
    let mut cfg = EdgeConfig::new(&path, 512, 1 << 30);
    cfg.prefill_chunk = 8; // several passes per text
    let mut edge = Edge::new(cfg).unwrap();
    // A conversation first: the embeddings run beside it.
    let _: Vec<_> = edge
        .complete("Once upon a time", &greedy(8))
        .unwrap()
        .collect();
    let held = edge.context_tokens().to_vec();
    let out = edge.embed(&texts).unwrap();
    assert_eq!(out.tokens, reference.tokens);
    for (got, want) in out.vectors.iter().zip(&reference.vectors) {
        assert_eq!(got.len(), want.len());
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        let c = cosine(got, want);
        assert!(c >= 0.99999, "cosine {c}");
    }
    assert!(
        cosine(&out.vectors[0], &out.vectors[1]) < 0.999,
        "distinct texts, distinct vectors"
    );
    assert_eq!(
        edge.context_tokens(),
        held.as_slice(),
        "the conversation moved"
    );
    // Its next turn computes only what is new.
    let mut prompt = held.clone();
    prompt.extend(edge.pipeline().text_tokens(" there was"));
    let mut stream = edge.complete_tokens(prompt.clone(), 1, &greedy(2)).unwrap();
    let mut computed = None;
    for e in stream.by_ref() {
        if let Event::Done(s) = e.unwrap() {
            computed = Some(s.computed_prompt_tokens);
        }
    }
    let computed = computed.unwrap();
    assert!(
        computed < prompt.len() - held.len() + 2,
        "{computed} of {} recomputed",
        prompt.len()
    );
    // An input longer than the context is an error, nothing else changes.
    let long = "word ".repeat(600);
    assert!(edge.embed(&[long.as_str()]).is_err());
}

#[test]
fn a_q8_0_cache_takes_about_half_the_kv_bytes() {
    let path = fixture_path::fixture("qwen2");
    let file = GgufFile::open(&path).unwrap();
    let (info, layout) = describe_gguf(&file).unwrap();
    let mut cfg = EdgeConfig::new(&path, 4096, 4 << 30);
    let f16 = Budget::compute(&file, &info, &layout, &cfg);
    cfg.kv_dtype = KvDtype::Q8_0;
    let q8 = Budget::compute(
        &file,
        &info,
        &layout.clone().with_dtype(KvDtype::Q8_0),
        &cfg,
    );
    assert_eq!(f16.kv_blocks, q8.kv_blocks);
    // 34 bytes per 32 values against 64.
    assert_eq!(q8.breakdown.kv_cache * 64, f16.breakdown.kv_cache * 34);
    // Qwen2.5-Coder-0.5B: 24 layers, 2 KV heads of 64, 4096 positions, keys and values.
    assert_eq!(f16.breakdown.kv_cache, 24 * 4096 * 128 * 2 * 2);
    // A model whose rows are not whole Q8_0 blocks would be refused, not mis-stored; the
    // fixtures' rows all are, so the greedy reply of a Q8_0 cache is checked to be sane.
    let mut edge = Edge::new(cfg).unwrap();
    let (text, n) = complete_greedy(&mut edge, "def fibonacci(n):", 24);
    assert_eq!(n, 24);
    assert!(
        text.contains("fibonacci") || text.contains("return"),
        "{text:?}"
    );
}

#[test]
fn a_hot_device_generates_on_half_the_threads_and_the_same_tokens() {
    let zones = std::env::temp_dir().join(format!("hanzo-edge-zones-{}", std::process::id()));
    let zone = zones.join("thermal_zone0");
    std::fs::create_dir_all(&zone).unwrap();
    let set_temp = |milli: i64| std::fs::write(zone.join("temp"), format!("{milli}\n")).unwrap();
    set_temp(99_000); // critical by the fixed thresholds
    let mut cfg = EdgeConfig::new(fixture_path::fixture("smollm2"), 512, 1 << 30);
    cfg.thermal_zones = zones.clone();
    let mut edge = Edge::new(cfg).unwrap();
    let cool = rayon::current_num_threads();
    let hot_text = complete_greedy(&mut edge, "The three primary colours are", 16);
    assert_eq!(edge.thermal_state(), Some(3));
    assert_eq!(edge.threads(), (cool / 2).max(1));
    // Cooled down: all threads again at the next check (a second later), the same tokens.
    set_temp(40_000);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    edge.reset();
    let cool_text = complete_greedy(&mut edge, "The three primary colours are", 16);
    assert_eq!(edge.thermal_state(), Some(0));
    assert_eq!(edge.threads(), cool);
    assert_eq!(hot_text, cool_text);
    std::fs::remove_dir_all(&zones).unwrap();
}

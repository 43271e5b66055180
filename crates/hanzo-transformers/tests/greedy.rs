//! Greedy continuations against llama.cpp's recorded outputs (Gemma 3 270M Q4_K_M) and
//! next-token logits against PyTorch/transformers (SmolLM2-135M).

mod common;

use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{load_gguf, Logits};

fn log_softmax(v: &[f32]) -> Vec<f32> {
    let m = v.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = v.iter().map(|&x| ((x - m) as f64).exp()).sum::<f64>().ln() as f32 + m;
    v.iter().map(|&x| x - lse).collect()
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Token for token up to the first step where llama.cpp's own top-1/top-2 margin is below
/// 0.1, and each chosen token's log-probability within 0.05 of llama.cpp's there.
#[test]
fn gemma3_greedy_equals_llama_cpp() {
    let file = GgufFile::open(common::fixture("gemma3")).unwrap();
    let model = load_gguf(&file).unwrap();
    let r = common::reference("gemma3-270m-greedy-llamacpp.json");
    for item in r["items"].as_array().unwrap() {
        let prompt = common::ids(&item["prompt_ids"]);
        let steps = item["steps"].as_array().unwrap();
        let mut cache = model.new_cache(4096);
        let mut logits = model.forward(&prompt, &mut cache, Logits::Last).unwrap();
        let mut checked = 0;
        let mut worst = 0f32;
        for step in steps {
            let lp = log_softmax(&logits.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            let ours = argmax(&lp);
            if std::env::var("DBG").is_ok() {
                for t5 in step["top5"].as_array().unwrap() {
                    let id = t5["id"].as_u64().unwrap() as usize;
                    eprintln!(
                        "  step {checked} id {id} ref {:.4} ours {:.4}",
                        t5["logprob"].as_f64().unwrap(),
                        lp[id]
                    );
                }
            }
            let want = step["id"].as_u64().unwrap() as u32;
            let margin = step["margin_top1_top2"].as_f64().unwrap();
            assert_eq!(
                ours, want,
                "{:?}: step {checked} (llama.cpp margin {margin})",
                item["prompt"]
            );
            let d = (lp[want as usize] - step["logprob"].as_f64().unwrap() as f32).abs();
            if std::env::var("DBG").is_ok() {
                for t5 in step["top5"].as_array().unwrap() {
                    let id = t5["id"].as_u64().unwrap() as usize;
                    eprintln!(
                        "  step {checked} id {id} ref {:.4} ours {:.4}",
                        t5["logprob"].as_f64().unwrap(),
                        lp[id]
                    );
                }
            }
            worst = worst.max(d);
            checked += 1;
            if margin < 0.1 {
                break;
            }
            logits = model.forward(&[ours], &mut cache, Logits::Last).unwrap();
        }
        eprintln!(
            "{:?}: {checked} steps equal, max |dlogprob| {worst:.4}",
            item["prompt"]
        );
        assert!(worst < 0.05, "logprob drift {worst}");
    }
}

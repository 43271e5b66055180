//! LoRA adapters on the device (`EdgeConfig::lora`, `--lora`): replies equal what the
//! engine's pipeline generates with the same adapters (whose logits hanzo-transformers'
//! tests hold to PEFT's), with prompt lookup too; the adapters' bytes are a term of the
//! budget, and a budget without room for them is refused.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;
#[path = "../../../scripts/lora_test_adapters.rs"]
mod lora_test_adapters;

use common::greedy;
use hanzo_edge::{Edge, EdgeConfig, EdgeError};
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{load_gguf_with, Adapter, PromptLookup, TextGeneration, WeightMode};
use std::path::PathBuf;

const PROMPT: &str = "The capital of France is";
const TOKENS: usize = 32;

/// What the engine's pipeline generates with `adapters`, its weights repacked first as the
/// device's are (so the prompt's pass reads the same numbers).
fn pipeline_text(adapters: &[Adapter]) -> String {
    let file = GgufFile::open(fixture_path::fixture("smollm2")).unwrap();
    let model = load_gguf_with(&file, WeightMode::AsStored).unwrap();
    model.repack_weights();
    let mut p = TextGeneration::from_gguf_model(&file, model, WeightMode::AsStored).unwrap();
    if !adapters.is_empty() {
        p.attach_lora(adapters).unwrap();
    }
    let ids = p.text_tokens(PROMPT);
    p.generate(&ids, &greedy(TOKENS), &mut |_| true)
        .unwrap()
        .text
}

fn config(adapters: &[Adapter], limit: u64) -> EdgeConfig {
    let mut c = EdgeConfig::new(fixture_path::fixture("smollm2"), 512, limit);
    c.lora = adapters.to_vec();
    c
}

fn edge_text(edge: &mut Edge) -> String {
    edge.complete(PROMPT, &greedy(TOKENS))
        .unwrap()
        .collect_text()
        .unwrap()
        .0
}

#[test]
fn replies_with_adapters_match_the_pipeline_and_the_budget_counts_them() {
    let dir = lora_test_adapters::write(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lora-adapters-edge"),
    );
    // The PEFT form of one adapter and the GGUF form of the other, applied together.
    let adapters = vec![
        Adapter::open(&dir.join("attn")).unwrap(),
        Adapter::open(&dir.join("mlp.gguf")).unwrap(),
    ];
    let lora_bytes: u64 = adapters.iter().map(|a| a.bytes() as u64).sum();

    let mut plain = Edge::new(config(&[], 1 << 30)).unwrap();
    let plain_text = edge_text(&mut plain);
    assert_eq!(plain_text, pipeline_text(&[]));
    assert_eq!(plain.budget().breakdown.lora, 0);

    let mut adapted = Edge::new(config(&adapters, 1 << 30)).unwrap();
    let text = edge_text(&mut adapted);
    eprintln!("plain: {plain_text:?}\nadapted: {text:?}");
    assert_ne!(text, plain_text, "the adapters changed nothing");
    assert_eq!(text, pipeline_text(&adapters));
    // The budget holds the adapters as the model holds them (f32 A and B), and the model
    // took them from the configuration rather than keeping a second copy.
    assert_eq!(adapted.budget().breakdown.lora, lora_bytes);
    assert_eq!(
        adapted.budget().total(),
        plain.budget().total() + lora_bytes
    );
    assert!(adapted.config().lora.is_empty());

    // Prompt lookup runs its checks with the adapters too.
    let mut c = config(&adapters, 1 << 30);
    c.lookup = Some(PromptLookup::new(2, 8));
    assert_eq!(edge_text(&mut Edge::new(c).unwrap()), text);

    // A budget with room for the model but not its adapters.
    let limit = adapted.budget().total() - 1;
    drop((plain, adapted));
    match Edge::new(config(&adapters, limit)) {
        Err(EdgeError::OverBudget { needed, .. }) => assert_eq!(needed, limit + 1),
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("loaded over the budget"),
    }
}

#[test]
fn an_adapter_for_another_model_is_refused() {
    let dir = lora_test_adapters::write(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lora-adapters-edge-refused"),
    );
    // SmolLM2's adapters on Qwen2.5-Coder: the GGUF form names its architecture, the PEFT
    // form's shapes do not fit.
    for (name, says) in [("attn.gguf", "made for llama"), ("attn", "the update is [")] {
        let mut c = EdgeConfig::new(fixture_path::fixture("qwen2"), 256, 2 << 30);
        c.lora = vec![Adapter::open(&dir.join(name)).unwrap()];
        let e = Edge::new(c).err().expect("refused").to_string();
        assert!(e.contains("LoRA adapter") && e.contains(says), "{e}");
    }
}

//! A prompt's pass never waits for weights to be repacked for decode (`QMatMul`'s lazy
//! repacking): a one-token prompt reads the stored blocks as a longer prompt does, and the
//! first decode step makes the copies. (A test binary of its own: the repacked-bytes count
//! is the process's, so no other test may decode beside it.)

mod common;

use hanzo_ml::quantized::cpu::interleaved::{repacked_bytes, repacks_here};
use hanzo_transformers::{GenerateOptions, TextGeneration, WeightMode};

#[test]
fn a_one_token_prompt_leaves_the_repacking_to_the_first_decode_step() {
    // Qwen2.5-Coder's Q8_0 output head and Q5_0/Q8_0 layers are of the repacked types.
    let path = common::fixture("qwen2");
    let p = TextGeneration::load(path.as_ref(), WeightMode::AsStored).unwrap();
    let before = repacked_bytes();
    let opts = GenerateOptions {
        max_tokens: 4,
        ..GenerateOptions::default()
    };
    let prompt = p.text_tokens("Hello");
    assert_eq!(prompt.len(), 1, "{prompt:?}");
    let mut g = p.start(&prompt, &opts).unwrap();
    assert_eq!(
        repacked_bytes(),
        before,
        "the prompt's pass repacked weights"
    );
    // The first step samples from the prompt's logits; the second runs the first decode step.
    p.step(&mut g).unwrap();
    p.step(&mut g).unwrap();
    if repacks_here() {
        assert!(
            repacked_bytes() > before,
            "the first decode step repacked nothing"
        );
    }
}

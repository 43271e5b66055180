//! LoRA adapters on SmolLM2-135M against PEFT (tests/reference/smollm2-135m-lora-peft.json,
//! recorded by scripts/lora_adapters.py, which also writes the adapters here with NumPy):
//! the PEFT form on the f32 weights gives PEFT's logits, the GGUF form gives what the PEFT
//! form gives, and sequences running different adapters (or none) in one batch get what
//! each gets alone.

mod common;

use common::row;
use hanzo_ml::kv::KvDtype;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::models::SeqChunk;
use hanzo_transformers::{load_gguf_with, Adapter, LanguageModel, Logits, LoraId, WeightMode};
use std::path::PathBuf;
use std::sync::OnceLock;

const REFERENCE: &str = "smollm2-135m-lora-peft.json";

/// The adapters, written once per test run and checked against the reference's hashes.
fn adapters_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| common::write_checked("lora_adapters.py", "lora-adapters", REFERENCE))
}

fn adapter(name: &str) -> Adapter {
    Adapter::open(&adapters_dir().join(name)).unwrap()
}

fn model(mode: WeightMode) -> Box<dyn LanguageModel> {
    load_gguf_with(&GgufFile::open(common::fixture("smollm2")).unwrap(), mode).unwrap()
}

/// Every position's logits for the reference's tokens, with adapter set `lora`, keys and
/// values cached as `kv`.
fn logits_as(m: &dyn LanguageModel, lora: Option<LoraId>, kv: KvDtype) -> Vec<Vec<f32>> {
    let r = common::reference(REFERENCE);
    let ids = common::ids(&r["token_ids"]);
    let mut cache = m.new_cache_as(ids.len(), kv);
    cache.set_lora(lora);
    let all = row(&m.forward(&ids, &mut cache, Logits::All).unwrap());
    all.chunks(all.len() / ids.len())
        .map(<[f32]>::to_vec)
        .collect()
}

/// The reference's recorded logits of `variant`: `[position][k]` for ids `k * stride`.
fn recorded(variant: &str) -> (Vec<Vec<f32>>, usize) {
    let r = common::reference(REFERENCE);
    let rows = r["logits"][variant]["subset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    (rows, r["vocab_stride"].as_u64().unwrap() as usize)
}

fn logits(m: &dyn LanguageModel, lora: Option<LoraId>) -> Vec<Vec<f32>> {
    logits_as(m, lora, KvDtype::F16)
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn subset(all: &[Vec<f32>], stride: usize) -> Vec<Vec<f32>> {
    all.iter()
        .map(|r| r.iter().step_by(stride).copied().collect())
        .collect()
}

#[test]
fn peft_adapters_give_pefts_logits() {
    // f32 weights and an f32 cache: the numerics of the reference.
    let mut m = model(WeightMode::F32);
    let logits = |m: &dyn LanguageModel, lora| logits_as(m, lora, KvDtype::F32);
    let attn = m.attach_lora(&[adapter("attn")]).unwrap();
    let mlp = m.attach_lora(&[adapter("mlp")]).unwrap();
    let both = m.attach_lora(&[adapter("attn"), adapter("mlp")]).unwrap();
    let (want_base, stride) = recorded("base");
    let base = subset(&logits(m.as_ref(), None), stride);
    let base_drift = max_diff(&base, &want_base);
    for (name, id) in [("attn", attn), ("mlp", mlp), ("attn+mlp", both)] {
        let (want, _) = recorded(name);
        let got = subset(&logits(m.as_ref(), Some(id)), stride);
        // What the adapter changes, ours against PEFT's.
        let effect = |x: &[Vec<f32>], b: &[Vec<f32>]| -> Vec<Vec<f32>> {
            x.iter()
                .zip(b)
                .map(|(x, b)| x.iter().zip(b).map(|(x, b)| x - b).collect())
                .collect()
        };
        let moved = max_diff(&want, &want_base);
        let drift = max_diff(&got, &want);
        let effect_drift = max_diff(&effect(&got, &base), &effect(&want, &want_base));
        eprintln!(
            "{name}: the adapter moves PEFT's logits by up to {moved:.2}; ours differ from \
             PEFT's by {drift:.2e} (base: {base_drift:.2e}), the adapter's effect by \
             {effect_drift:.2e}"
        );
        assert!(moved > 1.0, "{name}: the adapter barely changes the logits");
        assert!(drift < 1e-3, "{name}: logits differ from PEFT's by {drift}");
        assert!(
            effect_drift < 1e-3,
            "{name}: effect differs by {effect_drift}"
        );
    }
}

#[test]
fn gguf_adapters_give_what_peft_adapters_give() {
    let mut m = model(WeightMode::AsStored);
    for name in ["attn", "mlp"] {
        let peft = m.attach_lora(&[adapter(name)]).unwrap();
        let gguf = m.attach_lora(&[adapter(&format!("{name}.gguf"))]).unwrap();
        let a = logits(m.as_ref(), Some(peft));
        let b = logits(m.as_ref(), Some(gguf));
        let d = max_diff(&a, &b);
        eprintln!("{name}: GGUF form against PEFT form, max |Δ logit| {d:.2e}");
        assert!(d < 1e-4, "{name}: the two forms differ by {d}");
    }
}

#[test]
fn sequences_with_different_adapters_batch_together() {
    let mut m = model(WeightMode::AsStored);
    let attn = m.attach_lora(&[adapter("attn")]).unwrap();
    let mlp = m.attach_lora(&[adapter("mlp").scaled(0.5)]).unwrap();
    let sets = [Some(attn), None, Some(mlp), Some(attn)];
    let prompts: [&[u32]; 4] = [
        &[1, 504, 3575, 282, 4649, 314],
        &[1, 7042, 30, 378],
        &[1, 504, 3575, 282, 4649, 314],
        &[1, 6476, 282, 7042, 314, 504, 3575, 282],
    ];
    let steps = 6;
    // Weights repacked first, so that every pass below reads them the same way.
    m.repack_weights();
    // Alone: greedy continuations with every step's logits.
    let solo: Vec<(Vec<u32>, Vec<Vec<f32>>)> = prompts
        .iter()
        .zip(sets)
        .map(|(p, lora)| {
            let mut cache = m.new_cache(p.len() + steps + 1);
            cache.set_lora(lora);
            let mut l = row(&m.forward(p, &mut cache, Logits::Last).unwrap());
            let (mut toks, mut rows) = (Vec::new(), vec![l.clone()]);
            for _ in 0..steps {
                let t = common::argmax(&l) as u32;
                toks.push(t);
                l = row(&m.forward(&[t], &mut cache, Logits::Last).unwrap());
                rows.push(l.clone());
            }
            (toks, rows)
        })
        .collect();
    assert_ne!(solo[0].0, solo[1].0, "the adapter changes nothing here");
    // Together: the four prompts in one pass, then one decode step each per pass.
    let layout = m.kv_layout();
    let blocks = layout.layers() * prompts.len() * (8 + steps).div_ceil(layout.block_size);
    let mut kv = hanzo_ml::kv::PagedKv::with_blocks(layout, blocks);
    let seqs: Vec<_> = prompts.iter().map(|_| kv.add_sequence()).collect();
    let mut inputs: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
    let vocab = m.info().vocab_size;
    for step in 0..=steps {
        let batch: Vec<SeqChunk> = seqs
            .iter()
            .zip(&inputs)
            .zip(sets)
            .map(|((&s, t), lora)| SeqChunk::new(s, t, Logits::Last).with_lora(lora))
            .collect();
        let out = row(&m.forward_batch(&batch, &mut kv).unwrap());
        for (i, got) in out.chunks(vocab).enumerate() {
            let want = &solo[i].1[step];
            let d = got
                .iter()
                .zip(want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                d < 1e-5,
                "sequence {i}, step {step}: batched differs by {d}"
            );
        }
        if step < steps {
            inputs = solo.iter().map(|(toks, _)| vec![toks[step]]).collect();
        }
    }
}

#[test]
fn adapters_that_do_not_fit_are_refused() {
    let err = |r: hanzo_transformers::Result<_>| r.map(|_: ()| ()).unwrap_err().to_string();
    // Made for SmolLM2's shapes, attached to Qwen2.5-Coder.
    let qwen = GgufFile::open(common::fixture("qwen2")).unwrap();
    let mut q = load_gguf_with(&qwen, WeightMode::AsStored).unwrap();
    let e = err(q.attach_lora(&[adapter("attn")]).map(|_| ()));
    assert!(
        e.contains("blk.0.attn_") && e.contains("the model's weight is [128, 896]"),
        "{e}"
    );
    let e = err(q.attach_lora(&[adapter("attn.gguf")]).map(|_| ()));
    assert!(e.contains("made for llama") && e.contains("qwen2"), "{e}");
    // A model is not an adapter; a folder without adapter_config.json is neither form.
    let e = err(Adapter::open(&common::fixture("smollm2")).map(|_| ()));
    assert!(e.contains("a model, not an adapter"), "{e}");
    let e = err(Adapter::open(&std::env::temp_dir()).map(|_| ()));
    assert!(e.contains("no adapter_config.json"), "{e}");
    // A truncated safetensors file.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lora-truncated");
    std::fs::create_dir_all(&dir).unwrap();
    let src = adapters_dir().join("attn");
    std::fs::copy(
        src.join("adapter_config.json"),
        dir.join("adapter_config.json"),
    )
    .unwrap();
    let bytes = std::fs::read(src.join("adapter_model.safetensors")).unwrap();
    std::fs::write(
        dir.join("adapter_model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    let e = err(Adapter::open(&dir).map(|_| ()));
    assert!(!e.is_empty());
    // Nothing changed on the refusals: the model still takes a fitting adapter first.
    let mut m = model(WeightMode::AsStored);
    assert!(m.attach_lora(&[adapter("attn")]).is_ok());
}

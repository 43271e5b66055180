//! A model directory quantized to GGUF (`quantize DIR OUT.gguf`) is the model: SmolLM2's
//! f32 directory (scripts/gguf_to_hf.py writes it from the GGUF fixture, Q/K rows in
//! Hugging Face's rotary layout, the tokenizer as `tokenizer.json`) quantized to Q8_0 gives
//! the fixture quantized to Q8_0, key for key and byte for byte: GGUF's tensor names, the
//! rows permuted back, `config.json` as `llama.*` keys, `tokenizer.json` as
//! `tokenizer.ggml.*`. The same holds with a PEFT adapter folded in (`--lora`).

mod common;
#[path = "../../../scripts/gguf_to_hf.rs"]
mod gguf_to_hf;
#[path = "../../../scripts/lora_test_adapters.rs"]
mod lora_test_adapters;

use common::{engine, fixture};
use hanzo_ml::quantized::gguf::GgufFile;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// SmolLM2 as an f32 Hugging Face directory, written once.
fn hf_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tmp("gguf-smollm2-hf");
        gguf_to_hf::write(&fixture("smollm2"), &dir);
        dir
    })
}

fn quantize(input: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "quantize",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
    ];
    args.extend_from_slice(extra);
    let r = engine(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// The two files hold the same keys (but `general.*`, which names the source) with the
/// same values, and the same tensors in the same types with the same bytes.
fn assert_same_model(ours: &Path, theirs: &Path) {
    let (a, b) = (
        GgufFile::open(ours).unwrap(),
        GgufFile::open(theirs).unwrap(),
    );
    let keys = |f: &GgufFile| {
        let mut k: Vec<String> = f
            .metadata()
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| !k.starts_with("general.") || k == "general.architecture")
            .collect();
        k.sort();
        k
    };
    let (ka, kb) = (keys(&a), keys(&b));
    for k in &kb {
        assert!(ka.contains(k), "{k} missing from the directory's GGUF");
        assert_eq!(
            format!("{:?}", a.get(k).unwrap()),
            format!("{:?}", b.get(k).unwrap()),
            "{k}"
        );
    }
    // Ours may say more (add_eos_token where the fixture leaves it to the default).
    for k in ka.iter().filter(|k| !kb.contains(k)) {
        assert_eq!(k, "tokenizer.ggml.add_eos_token", "{k} only in ours");
    }
    let tokens = |f: &GgufFile| {
        f.get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .and_then(|a| a.as_strings().map(|s| s.to_vec()))
            .unwrap()
    };
    assert_eq!(tokens(&a), tokens(&b));
    let (ta, tb) = (a.tensor_infos(), b.tensor_infos());
    assert_eq!(ta.len(), tb.len());
    for t in tb {
        let o = ta
            .iter()
            .find(|o| o.name == t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!(
            (o.dtype, o.shape.dims()),
            (t.dtype, t.shape.dims()),
            "{}",
            t.name
        );
        assert!(
            a.tensor_bytes(&t.name).unwrap() == b.tensor_bytes(&t.name).unwrap(),
            "{}: different bytes",
            t.name
        );
    }
}

#[test]
fn a_model_directory_quantizes_to_the_gguf_model() {
    let (ours, theirs) = (
        tmp("smollm2-from-hf.q8_0.gguf"),
        tmp("smollm2-from-gguf.q8_0.gguf"),
    );
    quantize(hf_dir(), &ours, &["Q8_0"]);
    quantize(&fixture("smollm2"), &theirs, &["Q8_0"]);
    assert_same_model(&ours, &theirs);
    // And it runs: the same greedy reply from both.
    let reply = |m: &Path| {
        let r = engine(&[
            "run",
            "-m",
            m.to_str().unwrap(),
            "-n",
            "24",
            "-t",
            "2",
            "--temp",
            "0",
            "--chat",
            "What is the capital of France?",
        ]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        String::from_utf8(r.stdout).unwrap()
    };
    let (a, b) = (reply(&ours), reply(&theirs));
    assert!(a.split_whitespace().count() >= 8, "{a}");
    assert_eq!(a, b);
    std::fs::remove_file(&ours).ok();
    std::fs::remove_file(&theirs).ok();
}

#[test]
fn a_peft_adapter_folds_into_a_model_directory_as_into_its_gguf() {
    let adapters = lora_test_adapters::write(tmp("lora-adapters-quantize-hf"));
    let peft = adapters.join("attn");
    let peft = peft.to_str().unwrap();
    let (ours, theirs) = (
        tmp("smollm2-hf-lora.f32.gguf"),
        tmp("smollm2-gguf-lora.f32.gguf"),
    );
    quantize(hf_dir(), &ours, &["F32", "--pure", "--lora", peft]);
    quantize(
        &fixture("smollm2"),
        &theirs,
        &["F32", "--pure", "--lora", peft],
    );
    assert_same_model(&ours, &theirs);
    // The adapter changed something: the merged weights are not the plain ones.
    let plain = tmp("smollm2-hf-plain.f32.gguf");
    quantize(hf_dir(), &plain, &["F32", "--pure"]);
    let (m, p) = (
        GgufFile::open(&ours).unwrap(),
        GgufFile::open(&plain).unwrap(),
    );
    assert!(
        m.tensor_bytes("blk.0.attn_q.weight").unwrap()
            != p.tensor_bytes("blk.0.attn_q.weight").unwrap()
    );
    for f in [&ours, &theirs, &plain] {
        std::fs::remove_file(f).ok();
    }
}

//! LoRA adapters from the command line (`run --lora`, `quantize --lora`) on SmolLM2, with
//! the adapters scripts/lora_adapters.py writes: the GGUF and PEFT forms generate the same
//! text, which differs from the model's own; scale 0 changes nothing; an adapter folded into
//! f32 weights gives PEFT's logits (hanzo-transformers' tests/reference); bad adapters are
//! refused with the reason.

mod common;
#[path = "../../../scripts/lora_test_adapters.rs"]
mod lora_test_adapters;

use common::{engine, fixture};
use hanzo_ml::kv::KvDtype;
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{load_gguf, Logits};
use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;

const PROMPT: &str = "The capital of France is";

fn reference() -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../hanzo-transformers/tests/reference/smollm2-135m-lora-peft.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The adapters, written once per test run.
fn adapters() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        lora_test_adapters::write(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lora-adapters-cli"),
        )
    })
}

fn adapter(name: &str) -> String {
    adapters().join(name).to_str().unwrap().to_string()
}

fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stderr: {err}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn failure(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn run(extra: &[&str]) -> Output {
    let model = fixture("smollm2");
    let mut args = vec![
        "run",
        "-m",
        model.to_str().unwrap(),
        "-t",
        "2",
        "--temp",
        "0",
    ];
    args.extend(["-n", "24"]);
    args.extend_from_slice(extra);
    args.push(PROMPT);
    engine(&args)
}

#[test]
fn run_with_an_adapter_in_either_form() {
    let plain = ok(&run(&[]));
    let gguf = ok(&run(&["--lora", &adapter("attn.gguf")]));
    let peft = ok(&run(&["--lora", &adapter("attn")]));
    eprintln!("plain: {plain:?}\nadapter: {gguf:?}");
    assert_eq!(
        gguf, peft,
        "the GGUF and PEFT forms generate different text"
    );
    assert_ne!(gguf, plain, "the adapter changed nothing");
    // Scale 0 leaves the model as it is; two adapters apply together.
    assert_eq!(
        ok(&run(&["--lora", &format!("{}:0", adapter("attn"))])),
        plain
    );
    let both = ok(&run(&[
        "--lora",
        &adapter("attn"),
        "--lora",
        &adapter("mlp.gguf"),
    ]));
    assert_ne!(both, gguf);
}

#[test]
fn bad_adapters_are_refused_with_the_reason() {
    let e = failure(&run(&["--lora", "/no/such/adapter"]));
    assert!(e.contains("--lora /no/such/adapter"), "{e}");
    let model = fixture("qwen2");
    let e = failure(&engine(&[
        "run",
        "-m",
        model.to_str().unwrap(),
        "-n",
        "4",
        "--lora",
        &adapter("attn.gguf"),
        "hi",
    ]));
    assert!(e.contains("made for llama") && e.contains("qwen2"), "{e}");
    let smollm2 = fixture("smollm2");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lora-refused.gguf");
    // The output head of SmolLM2 is the embedding: there is no output weight to fold into.
    let e = failure(&engine(&[
        "quantize",
        smollm2.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q8_0",
        "--lora",
        &adapter("mlp"),
    ]));
    assert!(e.contains("output.weight"), "{e}");
    assert!(!out.exists());
}

/// Every position's logits for the reference's tokens, every 97th id.
fn logits(path: &std::path::Path) -> Vec<f32> {
    let r = reference();
    let ids: Vec<u32> = r["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let model = load_gguf(&GgufFile::open(path).unwrap()).unwrap();
    let mut cache = model.new_cache_as(ids.len(), KvDtype::F32);
    let all = model.forward(&ids, &mut cache, Logits::All).unwrap();
    let vocab = all.dims()[1];
    let all = all.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let stride = r["vocab_stride"].as_u64().unwrap() as usize;
    all.chunks(vocab)
        .flat_map(|row| row.iter().step_by(stride).copied())
        .collect()
}

#[test]
fn quantize_folds_an_adapter_into_the_weights() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let merged = dir.join("smollm2-attn-merged-f32.gguf");
    let smollm2 = fixture("smollm2");
    ok(&engine(&[
        "quantize",
        smollm2.to_str().unwrap(),
        merged.to_str().unwrap(),
        "--type",
        "F32",
        "--pure",
        "--lora",
        &adapter("attn.gguf"),
    ]));
    let got = logits(&merged);
    std::fs::remove_file(&merged).ok();
    let want: Vec<f32> = reference()["logits"]["attn"]["subset"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got.len(), want.len());
    let worst = got
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!("folded adapter against PEFT: max |Δ logit| {worst:.2e}");
    assert!(
        worst < 1e-3,
        "the folded model differs from PEFT by {worst}"
    );
}

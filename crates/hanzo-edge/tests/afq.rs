//! AFQ models in MLX's layout (a model directory: `config.json`, `model.safetensors` with
//! each quantized layer's `weight`, `scales` and `biases`, `tokenizer.json`), made here from
//! SmolLM2 (scripts/gguf_to_hf.py, then `hanzo-engine quantize --type AFQ4|AFQ8`): the budget
//! counts the AFQ weights exactly (their stored bytes, from the headers alone), a run peaks
//! within it, and the replies are the engine's on the same directory.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;
#[path = "../../../scripts/gguf_to_hf.rs"]
mod gguf_to_hf;

use common::{edge_command, engine_bin, quick};
use hanzo_edge::{Budget, Edge, EdgeConfig, EdgeError, ModelFiles};
use hanzo_ml::io::safetensors::MmapedSafetensors;
use hanzo_transformers::ModelDir;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PROMPT: &str = "Write a short story about a lighthouse keeper.";

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// SmolLM2 as AFQ4 (groups of 64) and AFQ8 (groups of 32) directories, made once.
fn afq_dirs() -> &'static [(PathBuf, &'static str); 2] {
    static DIRS: OnceLock<[(PathBuf, &'static str); 2]> = OnceLock::new();
    DIRS.get_or_init(|| {
        let hf = tmp("edge-afq-smollm2-hf");
        gguf_to_hf::write(&fixture_path::fixture("smollm2"), &hf);
        let make = |kind: &str, group: &str| {
            let dir = tmp(&format!("edge-afq-smollm2-{kind}-g{group}"));
            common::quantize(&hf, &dir, &["--type", kind, "--group-size", group]);
            dir
        };
        let dirs = [(make("AFQ4", "64"), "AFQ4"), (make("AFQ8", "32"), "AFQ8")];
        // The f32 source is 540 MB; the quantized directories are all the tests read.
        let _ = std::fs::remove_dir_all(&hf);
        dirs
    })
}

#[test]
fn the_budget_counts_afq_weights_as_stored() {
    for (dir, kind) in afq_dirs() {
        let model = ModelDir::open(dir).unwrap();
        let cfg = EdgeConfig::new(dir, 512, 4_000_000_000);
        let (budget, _) = Budget::check(&model, &cfg).unwrap();
        // Independently, from the file: an AFQ layer is held as its stored levels with a
        // 16-bit scale and bias per group (MLX's `weight`, `scales`, `biases` bytes), and each
        // norm as stored plus its f32 copy.
        let st = MmapedSafetensors::new(dir.join("model.safetensors")).unwrap();
        let (mut afq, mut norms, mut layers) = (0u64, 0u64, 0);
        for name in st.names() {
            let raw = st.raw(name).unwrap();
            let module = name.rsplit_once('.').unwrap().0;
            if st.raw(&format!("{module}.scales")).is_ok() {
                afq += raw.bytes.len() as u64;
                layers += name.ends_with(".scales") as usize;
            } else {
                assert_eq!(raw.shape.len(), 1, "{name} is neither AFQ nor a norm");
                norms += raw.bytes.len() as u64 + 4 * raw.shape[0] as u64;
            }
        }
        // SmolLM2: 30 blocks of 7 projections, and the (tied) embedding.
        assert_eq!(layers, 211, "{kind}");
        assert_eq!(budget.breakdown.weights, afq + norms, "{kind}");
        let file_len = std::fs::metadata(dir.join("model.safetensors"))
            .unwrap()
            .len();
        assert!(afq < file_len && file_len - afq < 1 << 20, "{kind}");
    }
}

/// Runs `hanzo-edge run` on `dir` and returns (reply, peak MiB, budget MiB).
fn run_edge(dir: &Path, n: usize) -> (String, f64, f64) {
    let out = edge_command()
        .arg("run")
        .arg("-m")
        .arg(dir)
        .args(["--max-memory-bytes", "1GB", "--max-context-tokens", "512"])
        .args([
            "--threads",
            "2",
            "--temp",
            "0",
            "--chat",
            "-n",
            &n.to_string(),
        ])
        .arg(PROMPT)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let (peak, budget, line) = common::peak_and_budget(&err);
    eprintln!("{}: {line}", dir.display());
    (String::from_utf8(out.stdout).unwrap(), peak, budget)
}

#[cfg(target_os = "linux")]
#[test]
fn an_afq_directory_runs_within_its_budget_as_the_engine_does() {
    let n = if quick() { 24 } else { 96 };
    for (dir, kind) in afq_dirs() {
        let (reply, peak, budget) = run_edge(dir, n);
        assert!(
            peak <= budget * 1.05,
            "{kind}: peak {peak} MiB, budget {budget} MiB"
        );
        // Not padded either: all but the KV cache (whose pages come as it fills) is reached.
        let model = ModelDir::open(dir).unwrap();
        let cfg = EdgeConfig::new(dir, 512, 1_000_000_000);
        let (b, _) = Budget::check(&model, &cfg).unwrap();
        let kv = b.breakdown.kv_cache as f64 / 1048576.0;
        assert!(
            peak >= (budget - kv) * 0.8,
            "{kind}: peak {peak} of {budget} MiB"
        );
        // The engine's greedy reply on the same directory, token for token.
        let engine = Command::new(engine_bin())
            .arg("run")
            .arg("-m")
            .arg(dir)
            .args(["-t", "2", "--temp", "0", "--chat", "-n", &n.to_string()])
            .arg(PROMPT)
            .env("HANZO_LOG", "warn")
            .output()
            .unwrap();
        assert!(engine.status.success());
        let engine = String::from_utf8(engine.stdout).unwrap();
        assert!(reply.split_whitespace().count() > 10, "{kind}: {reply:?}");
        assert_eq!(reply.trim_end(), engine.trim_end(), "{kind}");
    }
}

#[test]
fn an_afq_directory_over_its_budget_is_refused_before_loading() {
    let (dir, _) = &afq_dirs()[0];
    match Edge::new(EdgeConfig::new(dir, 512, 60_000_000)) {
        Err(EdgeError::OverBudget { breakdown, .. }) => {
            let model = ModelDir::open(dir).unwrap();
            assert_eq!(
                breakdown.weights,
                ModelFiles::from(&model).weights_bytes(),
                "{breakdown:?}"
            );
            assert!(breakdown.weights > 60_000_000);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("60 MB held a 72 MB model"),
    }
    // A directory that is not a model: a clear error naming what is missing.
    let empty = tmp("edge-afq-not-a-model");
    std::fs::create_dir_all(&empty).unwrap();
    let err = Edge::new(EdgeConfig::new(&empty, 512, 1_000_000_000))
        .err()
        .expect("an empty directory loaded");
    assert!(err.to_string().contains("config.json"), "{err}");
    // Levels whose scales are missing: refused when the directory is opened.
    let broken = tmp("edge-afq-broken");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(dir.join(f), broken.join(f)).unwrap();
    }
    let st = MmapedSafetensors::new(dir.join("model.safetensors")).unwrap();
    let mut kept = std::collections::HashMap::new();
    for name in st.names() {
        if name != "model.layers.0.mlp.down_proj.biases" {
            kept.insert(name.to_string(), st.get(name).unwrap());
        }
    }
    hanzo_ml::io::safetensors::save(&kept, broken.join("model.safetensors")).unwrap();
    let err = Edge::new(EdgeConfig::new(&broken, 512, 1_000_000_000))
        .err()
        .expect("a layer without biases loaded");
    assert!(
        err.to_string()
            .contains("model.layers.0.mlp.down_proj.biases"),
        "{err}"
    );
}

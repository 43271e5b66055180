//! The memory budget: a model that does not fit is refused before it is loaded, with the
//! figures; one that fits peaks (VmHWM) within the computed budget plus 5%.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use common::{edge_command, quick};
use hanzo_edge::{Budget, Edge, EdgeConfig, EdgeError, KvDtype};
use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::describe_gguf;
fn edge_cli(args: &[&str]) -> std::process::Output {
    edge_command().args(args).output().unwrap()
}

#[test]
fn a_budget_too_small_is_refused_with_the_breakdown() {
    let gemma = fixture_path::fixture("gemma3");
    match Edge::new(EdgeConfig::new(&gemma, 2048, 50_000_000)) {
        Err(EdgeError::OverBudget {
            needed,
            limit,
            breakdown,
        }) => {
            assert_eq!(limit, 50_000_000);
            assert_eq!(needed, breakdown.total());
            // The weights alone are most of the 253 MB file.
            assert!(breakdown.weights > 200_000_000, "{breakdown:?}");
            assert!(breakdown.kv_cache > 0 && breakdown.activations > 0);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a 50 MB budget held Gemma 3"),
    }
    let out = edge_cli(&[
        "run",
        "-m",
        gemma.to_str().unwrap(),
        "--max-memory-bytes",
        "50MB",
        "-n",
        "4",
        "Hello",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for part in [
        "needs",
        "over the limit of 50000000 bytes",
        "weights",
        "KV cache",
        "activations",
        "tokenizer",
        "runtime",
    ] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }
    assert!(out.stdout.is_empty(), "generated text despite the refusal");
}

/// Runs `hanzo-edge run -n 256` (64 when quick) and returns (peak MiB, budget MiB) from its memory line.
fn peak_and_budget(fixture: &str, ctx: usize, extra: &[&str]) -> (f64, f64) {
    let model = fixture_path::fixture(fixture);
    let ctx = ctx.to_string();
    let n = if quick() { "64" } else { "256" };
    let mut args = vec![
        "run",
        "-m",
        model.to_str().unwrap(),
        "--max-memory-bytes",
        "4GB",
        "--max-context-tokens",
        &ctx,
        "-n",
        n,
        "--threads",
        "2",
    ];
    args.extend_from_slice(extra);
    args.push("Write a long story about a lighthouse keeper and the sea.");
    let out = edge_cli(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let (peak, budget, line) = common::peak_and_budget(&err);
    eprintln!("{fixture} at {ctx}: {line}");
    (peak, budget)
}

/// The KV cache term of the budget `peak_and_budget` runs under, in MiB.
fn kv_mib(fixture: &str, ctx: usize, extra: &[&str]) -> f64 {
    let path = fixture_path::fixture(fixture);
    let file = GgufFile::open(&path).unwrap();
    let (info, layout) = describe_gguf(&file).unwrap();
    let mut cfg = EdgeConfig::new(&path, ctx, 4_000_000_000);
    if extra.contains(&"q8_0") {
        cfg.kv_dtype = KvDtype::Q8_0;
    }
    let layout = layout.with_dtype(cfg.kv_dtype);
    Budget::compute(&file, &info, &layout, &cfg)
        .breakdown
        .kv_cache as f64
        / 1048576.0
}

#[cfg(target_os = "linux")]
#[test]
fn a_run_peaks_within_its_budget() {
    let q8: &[&str] = &["--kv-dtype", "q8_0"];
    let runs = if quick() {
        // The instruct model ends a bare prompt at once; its chat template gets a reply.
        let q8_chat: &[&str] = &["--kv-dtype", "q8_0", "--chat"];
        vec![("smollm2", 512, &["--chat"][..]), ("smollm2", 512, q8_chat)]
    } else {
        vec![
            ("gemma3", 2048, &[][..]),
            ("qwen2", 4096, &[]),
            ("qwen2", 4096, q8),
        ]
    };
    for (fixture, ctx, extra) in runs {
        let (peak, budget) = peak_and_budget(fixture, ctx, extra);
        assert!(
            peak <= budget * 1.05,
            "{fixture} {extra:?}: peak {peak} MiB, budget {budget} MiB"
        );
        // And the budget is not padded: the run reaches most of it but the KV cache, whose
        // pages the system hands over only as the conversation fills them.
        let kv = kv_mib(fixture, ctx, extra);
        assert!(
            peak >= (budget - kv) * 0.7,
            "{fixture} {extra:?}: peak {peak} MiB of {budget} MiB ({kv} MiB of KV cache)"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_store_name_loads_the_model_pulled_under_it() {
    // A store as `hanzo-engine pull` leaves it: models/NAME/ with the file and its manifest.
    let root = std::env::temp_dir().join(format!("hanzo-edge-store-{}", std::process::id()));
    let dir = root.join("models").join("smol:135m");
    std::fs::create_dir_all(&dir).unwrap();
    let file = "SmolLM2-135M-Instruct.Q4_1.gguf";
    std::os::unix::fs::symlink(fixture_path::fixture("smollm2"), dir.join(file)).unwrap();
    let manifest = serde_json::json!({
        "name": "smol:135m", "source": "test", "format": "gguf", "entry": file,
        "files": [], "pulled_at": "2026-01-01T00:00:00Z",
    });
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let run = |model: &str| {
        edge_command()
            .args([
                "run",
                "-m",
                model,
                "--max-memory-bytes",
                "1GB",
                "-n",
                "4",
                "--temp",
                "0",
            ])
            .arg("The capital of France is")
            .env("HANZO_MODELS_DIR", &root)
            .output()
            .unwrap()
    };
    let by_name = run("smol"); // `NAME` finds `NAME:latest` only; a typo lists near matches
    assert!(!by_name.status.success());
    assert!(String::from_utf8_lossy(&by_name.stderr).contains("smol:135m"));
    let by_name = run("smol:135m");
    assert!(
        by_name.status.success(),
        "{}",
        String::from_utf8_lossy(&by_name.stderr)
    );
    let by_path = run(fixture_path::fixture("smollm2").to_str().unwrap());
    assert_eq!(by_name.stdout, by_path.stdout);
    assert!(!by_name.stdout.is_empty());
    std::fs::remove_dir_all(&root).unwrap();
}

//! The memory budget: a model that does not fit is refused before it is loaded, with the
//! figures; one that fits peaks (VmHWM) within the computed budget plus 5%.

#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use hanzo_edge::{Edge, EdgeConfig, EdgeError};
use std::process::Command;

fn edge_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hanzo-edge"))
        .args(args)
        .env("HANZO_LOG", "warn")
        .output()
        .unwrap()
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

/// Runs `hanzo-edge run -n 256` and returns (peak MiB, budget MiB) from its memory line.
fn peak_and_budget(fixture: &str, ctx: usize, extra: &[&str]) -> (f64, f64) {
    let model = fixture_path::fixture(fixture);
    let ctx = ctx.to_string();
    let mut args = vec![
        "run",
        "-m",
        model.to_str().unwrap(),
        "--max-memory-bytes",
        "4GB",
        "--max-context-tokens",
        &ctx,
        "-n",
        "256",
        "--threads",
        "2",
    ];
    args.extend_from_slice(extra);
    args.push("Write a long story about a lighthouse keeper and the sea.");
    let out = edge_cli(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("memory: peak"))
        .unwrap_or_else(|| panic!("no memory line in {err}"));
    let nums: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    eprintln!("{fixture} at {ctx}: {line}");
    (nums[0], nums[1])
}

#[cfg(target_os = "linux")]
#[test]
fn a_run_peaks_within_its_budget() {
    for (fixture, ctx) in [("gemma3", 2048), ("qwen2", 4096)] {
        let (peak, budget) = peak_and_budget(fixture, ctx, &[]);
        assert!(
            peak <= budget * 1.05,
            "{fixture}: peak {peak} MiB, budget {budget} MiB"
        );
        // And the budget is not padded: the run reaches most of it.
        assert!(
            peak >= budget * 0.7,
            "{fixture}: peak {peak} MiB of {budget} MiB"
        );
    }
}

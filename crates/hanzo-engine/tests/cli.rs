//! `hanzo-engine run / tokenize / perplexity / bench` end to end on the Gemma 3 fixture,
//! against llama.cpp's recorded outputs, and the errors bad input gets.

mod common;

use common::{engine, fixture};
use hanzo_ml::quantized::gguf::{write_gguf, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

fn reference(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hanzo-transformers/tests/reference")
        .join(name)
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn tokenize_prints_llama_cpp_ids() {
    let m = fixture("gemma3");
    let out = stdout(&engine(&[
        "tokenize",
        "--model",
        m.to_str().unwrap(),
        "The capital of France is",
    ]));
    assert_eq!(out.trim(), "[2,818,5279,529,7001,563]");
    let out = stdout(&engine(&[
        "tokenize",
        "--no-bos",
        "-m",
        m.to_str().unwrap(),
        "Hello world",
    ]));
    assert_eq!(out.trim(), "[9259,1902]");
}

/// Only the continuation reaches stdout; it is llama.cpp's greedy continuation.
#[test]
fn run_streams_the_greedy_continuation() {
    let m = fixture("gemma3");
    let o = engine(&[
        "run",
        "--model",
        m.to_str().unwrap(),
        "--temp",
        "0",
        "-n",
        "8",
        "-t",
        "2",
        "The capital of France is",
    ]);
    assert_eq!(stdout(&o), " the capital of the country of France.");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("loaded gemma3") && err.contains("generated: 8 tokens"),
        "{err}"
    );
    // Same seed, same text; the chat template path runs too.
    let chat = |seed: &str| {
        stdout(&engine(&[
            "run",
            "-m",
            m.to_str().unwrap(),
            "--chat",
            "--system",
            "Answer briefly.",
            "-n",
            "12",
            "--seed",
            seed,
            "What is the capital of France?",
        ]))
    };
    let a = chat("7");
    assert_eq!(a, chat("7"));
    assert!(!a.trim().is_empty());
}

/// llama.cpp b10470 reports PPL = 26.6860 for this text at -c 128.
#[test]
fn perplexity_is_close_to_llama_cpp() {
    let m = fixture("gemma3");
    let f = reference("perplexity-text.txt");
    let out = stdout(&engine(&[
        "perplexity",
        "-m",
        m.to_str().unwrap(),
        "-f",
        f.to_str().unwrap(),
        "-c",
        "128",
    ]));
    let ppl: f64 = out
        .trim()
        .strip_prefix("PPL = ")
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {out:?}"));
    let rel = (ppl / 26.6860 - 1.0).abs();
    eprintln!("PPL {ppl:.4} vs llama.cpp 26.6860: {:.2}%", rel * 100.0);
    assert!(
        rel < 0.005,
        "PPL {ppl} is {:.2}% from llama.cpp",
        rel * 100.0
    );
    assert!(out.contains("+/-"));
}

#[test]
fn bench_json_reports_median_speeds() {
    let m = fixture("gemma3");
    let out = stdout(&engine(&[
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "3",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let tests: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["pp16", "tg4"]);
    for r in v.as_array().unwrap() {
        assert!(r["tokens_per_second"].as_f64().unwrap() > 0.0);
        assert_eq!(r["samples_tokens_per_second"].as_array().unwrap().len(), 3);
        // The kernel set this CPU runs, by the name the library gives it.
        let kernels = r["kernels"].as_str().unwrap();
        assert_eq!(kernels, hanzo_ml::cpu::features::isa().name());
    }
}

#[test]
fn bench_parallel_runs_sequences_together_within_its_memory_budget() {
    let m = fixture("gemma3");
    let o = engine(&[
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "24",
        "-n",
        "8",
        "--parallel",
        "1,16",
        "--json",
    ]);
    let out = stdout(&o);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (r, n) in rows.iter().zip([1, 16]) {
        assert_eq!(r["test"], "parallel");
        assert_eq!(r["parallel"], n);
        assert_eq!(
            (r["prompt"].as_u64(), r["generated"].as_u64()),
            (Some(24), Some(8))
        );
        let total = r["total_tokens_per_second"].as_f64().unwrap();
        let each = r["tokens_per_second"].as_f64().unwrap();
        assert!(total > 0.0 && (total / n as f64 - each).abs() < 1e-6 * total);
        assert!(r["ttft_s"].as_f64().unwrap() > 0.0);
    }
    // "memory: peak RSS P MiB; budget B MiB = ...": the peak within the budget plus 10%.
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err.lines().find(|l| l.starts_with("memory:")).expect(&err);
    let mib = |after: &str| -> f64 {
        let rest = &line[line.find(after).unwrap() + after.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    let (peak, budget) = (mib("peak RSS "), mib("budget "));
    assert!(peak <= 1.1 * budget, "{line}");
}

#[test]
fn bench_times_an_encoder_forward_pass() {
    let m = fixture("minilm");
    let bench = |p: &str| {
        engine(&[
            "bench",
            "-m",
            m.to_str().unwrap(),
            "-p",
            p,
            "-r",
            "2",
            "--json",
        ])
    };
    let out = stdout(&bench("32"));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v.as_array().unwrap()[..];
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["test"], "enc32");
    assert_eq!(r[0]["architecture"], "bert");
    let (tps, ms) = (
        r[0]["tokens_per_second"].as_f64().unwrap(),
        r[0]["ms_per_run"].as_f64().unwrap(),
    );
    assert!((tps * ms / 1e3 - 32.0).abs() < 1e-6, "{tps} t/s, {ms} ms");
    // MiniLM has 512 positions.
    let o = bench("513");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("1 to 512 tokens"),
        "{err}"
    );
}

#[test]
fn bad_models_get_clear_errors() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let missing = engine(&["run", "-m", "/nonexistent/model.gguf", "hi"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/model.gguf"));

    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"not a gguf file at all").unwrap();
    let o = engine(&["run", "-m", junk.to_str().unwrap(), "hi"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error") && err.contains("junk.gguf"), "{err}");

    // A well-formed GGUF of an architecture we do not run names it.
    let other = dir.join("other-arch.gguf");
    let mut f = std::fs::File::create(&other).unwrap();
    let meta = vec![(
        "general.architecture".to_string(),
        Value::String("mamba".into()),
    )];
    write_gguf(&mut f, &meta, &[], |_| unreachable!()).unwrap();
    let o = engine(&["run", "-m", other.to_str().unwrap(), "hi"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("unsupported architecture \"mamba\""),
        "{err}"
    );
}

#[test]
fn embed_prints_normalised_vectors() {
    let m = fixture("minilm");
    let out = stdout(&engine(&[
        "embed",
        "-m",
        m.to_str().unwrap(),
        "Hello world",
        "Rust is a systems programming language.",
    ]));
    let v: Vec<Vec<f32>> = serde_json::from_str(&out).unwrap();
    assert_eq!(v.len(), 2);
    for e in &v {
        assert_eq!(e.len(), 384);
        let n: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-5);
    }
    // A language model embeds by last-token pooling: unit vectors of its hidden width.
    let o = engine(&[
        "embed",
        "-m",
        fixture("gemma3").to_str().unwrap(),
        "x",
        "y z",
    ]);
    let v: Vec<Vec<f32>> = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!((v.len(), v[0].len()), (2, 640));
    assert_ne!(v[0], v[1]);
    for e in &v {
        let n: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-5);
    }
    assert!(String::from_utf8_lossy(&o.stderr).contains("last-token pooling"));

    // Too long for the model: an error, unless --truncate, which says what it cut.
    let long = "words upon words ".repeat(200);
    let o = engine(&["embed", "-m", m.to_str().unwrap(), "short", &long]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("input 1 has") && err.contains("at most 256"),
        "{err}"
    );
    let o = engine(&[
        "embed",
        "--truncate",
        "-m",
        m.to_str().unwrap(),
        "short",
        &long,
    ]);
    let v: Vec<Vec<f32>> = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v.len(), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("text 1 truncated to 256 tokens"), "{err}");
    assert!(!err.contains("text 0 truncated"), "{err}");
}

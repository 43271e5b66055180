//! Speculative decoding with a draft model (`run --draft-model`): on the three fixtures, a
//! draft made from the same model by `quantize --type Q2_K` (a same-vocabulary pair from one
//! family) leaves the greedy tokens as they are without it for 256 tokens; sampled runs repeat
//! with their seed; a draft with another vocabulary is refused.

mod common;

use common::{engine, fixture};
use std::path::Path;
use std::process::Output;

const CODE: &str = "def summarize(values):\n    count = 0\n    for v in values:\n        \
if v is None:\n            continue\n        count += v\n    average = count / len(values) if values \
else 0\n    print(\"count:\", count)\n    return count, average\n\n";

fn ok(o: &Output) -> (String, String) {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "stderr: {err}");
    (String::from_utf8(o.stdout.clone()).unwrap(), err)
}

/// The number after `key` in `text` (e.g. "generated: 256 tokens").
fn number_after(text: &str, key: &str) -> usize {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {text}"))
        + key.len();
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {text}"))
}

fn quantize(model: &Path, out: &Path, qtype: &str) {
    ok(&engine(&[
        "quantize",
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        qtype,
    ]));
}

/// `run` on the listing, greedy unless `extra` says otherwise, 256 tokens unless it says.
fn run(model: &Path, extra: &[&str]) -> (String, String) {
    let m = model.to_str().unwrap();
    let mut args = vec!["run", "-m", m, "-t", "2"];
    if !extra.contains(&"--temp") {
        args.extend(["--temp", "0"]);
    }
    if !extra.contains(&"-n") {
        args.extend(["-n", "256"]);
    }
    args.extend_from_slice(extra);
    args.push(CODE);
    ok(&engine(&args))
}

#[test]
fn greedy_tokens_are_the_same_with_and_without_a_draft_model() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for name in ["gemma3", "smollm2", "qwen2"] {
        let target = fixture(name);
        let draft = dir.join(format!("{name}-q2k-draft.gguf"));
        quantize(&target, &draft, "Q2_K");
        let (plain, plain_err) = run(&target, &[]);
        let n = number_after(&plain_err, "generated:");
        let (spec, err) = run(
            &target,
            &["--draft-model", draft.to_str().unwrap(), "--draft-k", "6"],
        );
        eprintln!("{name}: {}", err.lines().last().unwrap_or_default());
        assert_eq!(spec, plain, "{name}: the draft changed the greedy text");
        assert_eq!(number_after(&err, "generated:"), n, "{name}");
        // Drafts were kept and turned down (the Q2_K draft is not the model).
        let (kept, drafted) = (number_after(&err, "passes,"), number_after(&err, "of"));
        assert!(kept > 0 && kept < drafted, "{name}: {err}");
        if name == "smollm2" {
            // The continuation is long, so that the drafts are checked many times over.
            assert_eq!(n, 256, "{plain_err}");
            // Sampling with a draft repeats with its seed (the draws are the target's).
            let sampled = |seed: &str| {
                run(
                    &target,
                    &[
                        "--temp",
                        "0.8",
                        "--seed",
                        seed,
                        "-n",
                        "48",
                        "--draft-model",
                        draft.to_str().unwrap(),
                    ],
                )
                .0
            };
            assert_eq!(sampled("5"), sampled("5"));
        }
    }
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let (target, other) = (fixture("smollm2"), fixture("qwen2"));
    let o = engine(&[
        "run",
        "-m",
        target.to_str().unwrap(),
        "--draft-model",
        other.to_str().unwrap(),
        "-n",
        "4",
        "hello",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--draft-model") && err.contains("vocabulary is not the model's"),
        "{err}"
    );
    // Prompt lookup and a draft model are one or the other.
    let o = engine(&[
        "run",
        "-m",
        target.to_str().unwrap(),
        "--draft-model",
        target.to_str().unwrap(),
        "--lookup",
        "3",
        "hello",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot be used with"), "{err}");
}

/// `bench --lookup` adds the greedy rows without and with drafts, and the share kept.
#[test]
fn bench_reports_the_speculative_rows_and_their_acceptance() {
    let m = fixture("smollm2");
    let (out, _) = ok(&engine(&[
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "0",
        "-n",
        "48",
        "-r",
        "1",
        "-t",
        "2",
        "--lookup",
        "3",
        "--json",
    ]));
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let tests: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["tg48", "tg48 plain", "tg48 lookup3 k8"]);
    assert!(rows[1]["draft_acceptance"].is_null());
    let kept = rows[2]["draft_acceptance"].as_f64().unwrap();
    assert!(kept > 0.0 && kept < 1.0, "{kept}");
    assert!(rows[2]["tokens_per_second"].as_f64().unwrap() > 0.0);
}

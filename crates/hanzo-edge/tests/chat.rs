//! `hanzo-edge chat`, scripted: a 40-turn conversation several times longer than the context
//! goes on without an error, evicting old turns, and its memory stays where it was after
//! the first turns.

mod common;
#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use std::io::Write;
use std::process::Stdio;

#[test]
fn forty_turns_past_the_context_keep_the_same_memory() {
    let model = fixture_path::fixture("smollm2");
    let ctx = 256;
    let mut child = common::edge_command()
        .args([
            "chat",
            "-m",
            model.to_str().unwrap(),
            "--max-memory-bytes",
            "1GB",
            "--max-context-tokens",
            &ctx.to_string(),
            "-n",
            "40",
            "--threads",
            "2",
            "--system",
            "You are a friendly assistant who answers at length.",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let topics = [
        "the sea",
        "mountains",
        "bread",
        "trains",
        "the moon",
        "bees",
        "rivers",
        "chess",
    ];
    let mut script = String::new();
    for i in 0..40 {
        script += &format!(
            "Tell me something about {} (question {i}).\n",
            topics[i % topics.len()]
        );
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // One status line per turn: [context C/256 tokens, E evicted; ...; resident now R MiB]
    let turns: Vec<(usize, usize, f64, usize, usize)> = err
        .lines()
        .filter(|l| l.starts_with("[context "))
        .map(|l| {
            let context = l["[context ".len()..]
                .split('/')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let evicted = l
                .split(" tokens, ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let resident = l
                .split("resident now ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let computed = l.split("evicted; ").nth(1).unwrap();
            let mut w = computed.split(' ');
            let new = w.next().unwrap().parse().unwrap();
            let prompt = w.nth(1).unwrap().parse().unwrap();
            (context, evicted, resident, new, prompt)
        })
        .collect();
    assert_eq!(turns.len(), 40, "{err}");
    let evicted: usize = turns.iter().map(|t| t.1).sum();
    let total = evicted + turns[39].0;
    eprintln!("40 turns: {total} tokens through a context of {ctx}, {evicted} evicted; resident after turn 5 {} MiB, after turn 40 {} MiB", turns[4].2, turns[39].2);
    assert!(turns.iter().all(|t| t.0 <= ctx));
    assert!(total >= 3 * ctx, "only {total} tokens in 40 turns");
    // Each turn computes only what is new: the last reply's end and the user's turn
    // (a turn after an eviction included), never the whole conversation again.
    let recomputed = turns[1..].iter().filter(|t| t.3 * 2 > t.4).count();
    assert_eq!(
        recomputed, 0,
        "turns that recomputed their prompt: {turns:?}"
    );
    let (r5, r40) = (turns[4].2, turns[39].2);
    assert!(
        (r40 - r5).abs() <= 0.02 * r5,
        "resident {r5} MiB after turn 5, {r40} MiB after turn 40"
    );
}

#!/usr/bin/env python3
"""Prompt (ppN) and generation (tgN) speed of several engines on one model, in alternating
rounds, so that a machine's slow and fast phases fall on every engine alike.

    python3 scripts/bench_compare.py --model M.gguf [--rounds 5] [-p 512] [-n 128] [-t 2] \\
        --hanzo target/release/hanzo-engine [--hanzo OTHER-BUILD ...] [--llama-bench PATH]

Each round runs every engine once, in order (`hanzo-engine bench --json`, llama.cpp's
`llama-bench -o json`, each with `-r 3`, taking the median of those repetitions). Prints the
median over rounds of each engine's tokens/s with the range, and each engine's ratio to the
first one per round (median and range). llama.cpp is not part of this repository: build it
yourself and pass the path to its `llama-bench`.
"""
import argparse
import json
import statistics
import subprocess


def hanzo(binary, a):
    out = subprocess.run(
        [binary, "bench", "--model", a.model, "-p", str(a.p), "-n", str(a.n), "-r", "3",
         "-t", str(a.t), "--json"],
        check=True, capture_output=True, text=True).stdout
    return {row["test"]: row["tokens_per_second"] for row in json.loads(out)}


def llama(binary, a):
    out = subprocess.run(
        [binary, "-m", a.model, "-p", str(a.p), "-n", str(a.n), "-r", "3", "-t", str(a.t),
         "-o", "json"],
        check=True, capture_output=True, text=True).stdout
    speeds = {}
    for row in json.loads(out):
        test = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
        speeds[test] = statistics.median(row["samples_ts"])
    return speeds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--hanzo", action="append", default=[], help="a hanzo-engine binary (repeatable)")
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench binary")
    a = ap.parse_args()
    engines = [(b, hanzo) for b in a.hanzo] + ([(a.llama_bench, llama)] if a.llama_bench else [])
    if not engines:
        ap.error("nothing to run: give --hanzo and/or --llama-bench")
    tests = [f"pp{a.p}", f"tg{a.n}"]
    runs = {name: [] for name, _ in engines}
    for r in range(a.rounds):
        for name, run in engines:
            speeds = run(name, a)
            runs[name].append(speeds)
            print(f"round {r + 1} {name}: " + ", ".join(f"{t} {speeds[t]:.1f}" for t in tests), flush=True)
    first = engines[0][0]
    print()
    print("| engine | " + " | ".join(f"{t} t/s (median, range)" for t in tests) + " | " +
          " | ".join(f"{t} / first, per round" for t in tests) + " |")
    print("|---|" + "---|" * (2 * len(tests)))
    for name, _ in engines:
        cells = []
        for t in tests:
            v = [s[t] for s in runs[name]]
            cells.append(f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})")
        for t in tests:
            q = [s[t] / f[t] for s, f in zip(runs[name], runs[first])]
            cells.append(f"{statistics.median(q):.2f}x ({min(q):.2f}–{max(q):.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

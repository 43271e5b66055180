#!/usr/bin/env python3
"""Prompt (ppN) and generation (tgN) speed of several engines on one or more models, in
alternating rounds, so that a machine's slow and fast phases fall on every engine alike.

    python3 scripts/bench_compare.py --model M.gguf [--model M2.gguf ...] [--rounds 5] [-p 512] \\
        [-n 128] [-t 2] [--reps 3] --hanzo target/release/hanzo-engine [--hanzo OTHER-BUILD ...] \\
        [--llama-bench PATH]

Each round runs every engine once on every model, in order (`hanzo-engine bench --json`,
llama.cpp's `llama-bench -o json`, each with `-r REPS`, taking the median of those
repetitions). Prints, per model, the median over rounds of each engine's tokens/s with the
range, and each engine's ratio to the first one per round (median and range). llama.cpp is
not part of this repository: build it yourself and pass the path to its `llama-bench`.
"""
import argparse
import json
import statistics
import subprocess


def hanzo(binary, model, a):
    out = subprocess.run(
        [binary, "bench", "--model", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.reps),
         "-t", str(a.t), "--json"],
        check=True, capture_output=True, text=True).stdout
    return {row["test"]: row["tokens_per_second"] for row in json.loads(out)}


def llama(binary, model, a):
    out = subprocess.run(
        [binary, "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.reps), "-t", str(a.t),
         "-o", "json"],
        check=True, capture_output=True, text=True).stdout
    speeds = {}
    for row in json.loads(out):
        test = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
        speeds[test] = statistics.median(row["samples_ts"])
    return speeds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="a GGUF file (repeatable)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="repetitions inside each engine's run")
    ap.add_argument("--hanzo", action="append", default=[], help="a hanzo-engine binary (repeatable)")
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench binary")
    a = ap.parse_args()
    engines = [(b, hanzo) for b in a.hanzo] + ([(a.llama_bench, llama)] if a.llama_bench else [])
    if not engines:
        ap.error("nothing to run: give --hanzo and/or --llama-bench")
    tests = [f"pp{a.p}", f"tg{a.n}"]
    runs = {(m, name): [] for m in a.model for name, _ in engines}
    for r in range(a.rounds):
        for m in a.model:
            for name, run in engines:
                try:
                    speeds = run(name, m, a)
                except subprocess.CalledProcessError as e:
                    # One engine failing on one file (a crash, an unsupported type) leaves
                    # the rest of the run to finish; its cells read "failed".
                    runs[(m, name)].append(None)
                    print(f"round {r + 1} {m} {name}: failed ({e})", flush=True)
                    continue
                runs[(m, name)].append(speeds)
                print(f"round {r + 1} {m} {name}: " +
                      ", ".join(f"{t} {speeds[t]:.1f}" for t in tests), flush=True)
    first = engines[0][0]
    print()
    print("| model | engine | " + " | ".join(f"{t} t/s (median, range)" for t in tests) + " | " +
          " | ".join(f"{t} / first, per round" for t in tests) + " |")
    print("|---|---|" + "---|" * (2 * len(tests)))
    for m in a.model:
        for name, _ in engines:
            cells = []
            for t in tests:
                v = [s[t] for s in runs[(m, name)] if s]
                cells.append(f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})" if v
                             else "failed")
            for t in tests:
                q = [s[t] / f[t] for s, f in zip(runs[(m, name)], runs[(m, first)]) if s and f]
                cells.append(f"{statistics.median(q):.2f}x ({min(q):.2f}–{max(q):.2f})" if q
                             else "failed")
            print(f"| {m} | {name} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()

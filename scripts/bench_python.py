#!/usr/bin/env python3
"""The Python package against the native binary, same machine, same thread count:
`LLM.stream` decode tokens/s against `hanzo-engine run` on the same GGUF (greedy, the same
prompt), and `Embedder.encode` of 1,000 sentences. Medians of --runs runs.

    python3 scripts/bench_python.py --engine target/release/hanzo-engine \\
        --model qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --embedder all-MiniLM-L6-v2 -t 2

Run it with the interpreter that has the wheel installed (scripts/test_python.sh leaves one
in target/python-venv)."""

import argparse
import re
import statistics
import subprocess
import time

import hanzo

PROMPT = "Write a long story about a lighthouse keeper and the sea."


def native(engine, model, threads, n):
    out = subprocess.run(
        [engine, "-t", str(threads), "run", "-m", model, "--temp", "0", "-n", str(n), "--chat", PROMPT],
        check=True, capture_output=True, text=True,
    ).stderr
    m = re.search(r"generated: (\d+) tokens in ([0-9.]+) s", out)
    return int(m.group(1)) / float(m.group(2))


def python(llm, n):
    messages = [{"role": "user", "content": PROMPT}]
    stream = llm.stream(messages, max_tokens=n, temperature=0)
    t1 = time.perf_counter()
    for _ in stream:
        pass
    return len(stream.tokens) / (time.perf_counter() - t1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--embedder")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()

    llm = hanzo.LLM(a.model, threads=a.threads)
    py, nat = [], []
    for _ in range(a.runs):
        nat.append(native(a.engine, a.model, a.threads, a.n))
        py.append(python(llm, a.n))
    p, q = statistics.median(py), statistics.median(nat)
    print(f"decode, {a.n} tokens, {a.threads} threads: hanzo.LLM {p:.1f} t/s, hanzo-engine run {q:.1f} t/s, ratio {p / q:.3f}")

    if a.embedder:
        e = hanzo.Embedder(a.embedder)
        sentences = [f"Sentence number {i} is about {('the sea', 'a lighthouse', 'ships', 'storms')[i % 4]} and nothing else." for i in range(1000)]
        times = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            e.encode(sentences, batch_size=32)
            times.append(time.perf_counter() - t0)
        s = statistics.median(times)
        print(f"Embedder.encode, 1000 sentences, batch 32: {s:.2f} s ({1000 / s:.0f} sentences/s)")


if __name__ == "__main__":
    main()

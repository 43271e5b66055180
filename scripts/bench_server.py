#!/usr/bin/env python3
"""Load an OpenAI-compatible server with N concurrent streaming clients and report total
generated tokens/s and time to first token (a benchmark, not a test).

Each client sends a distinct prompt of about `--prompt-words` words to /v1/completions with
`max_tokens` tokens, temperature 0, streaming; a token is one streamed chunk with text (both
hanzo-engine and llama-server stream one token per chunk). Works against `hanzo-engine serve`
and llama.cpp's `llama-server` alike (`--ignore-eos` asks llama-server to run every stream to
`max_tokens`; hanzo-engine has no such field, so pick a pretrained model that rarely stops).

    python3 scripts/bench_server.py --url http://127.0.0.1:36900 --model gemma --clients 1,4,16

`--task code-edit` sends each client a short Python function to give back with a variable
renamed instead, a reply that repeats its prompt (what `serve --lookup` drafts from).
"""

import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse

WORDS = (
    "river stone light paper window garden silver morning engine market winter story "
    "forest letter bridge candle harbor music village orange thunder mirror valley "
    "shadow island castle pencil rocket summer planet cotton meadow lantern compass"
).split()


def prompt(i, words, task="story"):
    rng = random.Random(i)
    if task == "code-edit":
        names = [rng.choice(WORDS) for _ in range(3)]
        listing = (
            f"def {names[0]}_{i}(values):\n    count = 0\n    for v in values:\n"
            f"        if v is None:\n            continue\n        count += v\n"
            f"    {names[1]} = count / len(values) if values else 0\n"
            f"    print(\"{names[2]}:\", count)\n    return count, {names[1]}\n"
        )
        return f"{listing}\n# The same function with `count` renamed to `total`:\n"
    return f"Story {i}: " + " ".join(rng.choice(WORDS) for _ in range(words))


def one(url, model, text, max_tokens, ignore_eos, out):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {
        "model": model,
        "prompt": text,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    if ignore_eos:
        body["ignore_eos"] = True
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first, tokens = None, 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if any(c.get("text") for c in chunk.get("choices", [])):
            tokens += 1
            if first is None:
                first = time.monotonic() - t0
    out.append({"ttft": first, "tokens": tokens, "end": time.monotonic()})
    conn.close()


def run(url, model, clients, words, max_tokens, ignore_eos, offset, task):
    out = []
    threads = [
        threading.Thread(
            target=one,
            args=(url, model, prompt(offset + i, words, task), max_tokens, ignore_eos, out),
        )
        for i in range(clients)
    ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(out) != clients:
        raise RuntimeError(f"{clients - len(out)} clients failed")
    wall = max(o["end"] for o in out) - t0
    tokens = sum(o["tokens"] for o in out)
    return {
        "clients": clients,
        "generated": tokens,
        "wall_s": round(wall, 3),
        "total_tokens_per_second": round(tokens / wall, 2),
        "median_ttft_s": round(statistics.median(o["ttft"] for o in out), 3),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--prompt-words", type=int, default=75, help="about 100 tokens")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--label", default="")
    ap.add_argument("--task", choices=["story", "code-edit"], default="story")
    a = ap.parse_args()
    # Each run gets prompts of its own, so no run reads another's prefix cache.
    offset = 1000 * int(time.time() % 1000)
    for n in map(int, a.clients.split(",")):
        row = run(
            a.url, a.model, n, a.prompt_words, a.max_tokens, a.ignore_eos, offset, a.task
        )
        offset += n
        row["server"] = a.label
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

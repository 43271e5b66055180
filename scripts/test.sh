#!/usr/bin/env bash
# The whole test suite. NumPy produces the reference expectations afresh for the op
# conformance suite (tests/numpy_reference.rs reads them from $HANZO_NUMPY_CASES).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c "import numpy" 2>/dev/null; then
  echo "installing numpy for the reference generator" >&2
  python3 -m pip install --quiet numpy
fi
mkdir -p target/numpy-ref
python3 crates/hanzo-ml/tests/reference/gen_numpy_reference.py target/numpy-ref/numpy_cases.json
export HANZO_NUMPY_CASES="$PWD/target/numpy-ref/numpy_cases.json"

cargo test --workspace --all-targets
cargo test --workspace --doc

#!/usr/bin/env bash
# The whole test suite. NumPy produces the reference expectations afresh for the op
# conformance suite (tests/numpy_conformance.rs reads them from $HANZO_NUMPY_CASES).
set -euo pipefail
cd "$(dirname "$0")/.."

# NumPy generates expectations; NumPy and the safetensors package also check that files we
# write load in the reference implementations (tests/io.rs).
if ! python3 -c "import numpy, safetensors" 2>/dev/null; then
  echo "installing numpy and safetensors for the reference tests" >&2
  python3 -m pip install --quiet numpy safetensors
fi
mkdir -p target/numpy-ref
python3 crates/hanzo-ml/tests/numpy/gen_cases.py target/numpy-ref/numpy_cases.json
export HANZO_NUMPY_CASES="$PWD/target/numpy-ref/numpy_cases.json"

cargo test --workspace --all-targets
cargo test --workspace --doc

#!/usr/bin/env bash
# The Python package (crates/hanzo-py, `import hanzo`): the wheel built by maturin as users
# get it (release, one abi3 wheel), installed into a fresh virtual environment — no editable
# install, no path tricks — with pytest and the reference readers the tests compare with
# (the safetensors and gguf packages); then the pytest suite, beside the release
# `hanzo-engine` of the same tree (scripts/check_size.sh builds it) that the models' replies
# are compared with. Prints the wheel's size and the package's import time.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -m maturin --version >/dev/null 2>&1; then
  echo "installing maturin for the Python wheel" >&2
  python3 -m pip install --quiet "maturin>=1.5,<2"
fi
cargo build --release -p hanzo-engine
rm -rf target/wheels
python3 -m maturin build --release --quiet -m crates/hanzo-py/Cargo.toml --out target/wheels
wheel=$(ls target/wheels/hanzo_ml-*.whl)
echo "wheel: $(basename "$wheel") $(stat -c %s "$wheel") bytes" >&2

venv=target/python-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "$wheel" pytest safetensors gguf
"$venv/bin/python" -X importtime -c "import hanzo" 2>&1 | tail -n 1 |
  awk -F'|' '{gsub(/ /, "", $2); print "import hanzo: " $2 " us (cumulative)"}' >&2
HANZO_ENGINE_BIN="$PWD/target/release/hanzo-engine" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider crates/hanzo-py/tests

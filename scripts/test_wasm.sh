#!/usr/bin/env bash
# The WebAssembly build's own checks, and what the Node and Chromium tests need:
#  1. the kernel tests (quantized dot products, f32 row kernels) compiled for WebAssembly
#     with SIMD128, and again with relaxed SIMD, and run under Node's WASI, so those kernels
#     are held to the scalar ones in a WebAssembly build itself; clippy over that code;
#  2. the packages crates/hanzo-wasm/pkg/{relaxed,simd,scalar} (scripts/build_wasm.sh);
#  3. playwright-core (npm ci, from the committed lock file) and Debian's Chromium.
# The Node and Chromium tests themselves (crates/hanzo-wasm/tests/*.test.mjs) run from
# `cargo test` (crates/hanzo-engine/tests/wasm.rs), beside the native binary they compare with.
set -euo pipefail
cd "$(dirname "$0")/.."

for target in wasm32-wasip1 wasm32-unknown-unknown; do
  if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
  fi
done
simd_flags="-C target-feature=+simd128"
relaxed_flags="-C target-feature=+simd128,+relaxed-simd"
wasi_test() {
  local flags=$1 dir=$2
  shift 2
  CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$flags" \
  CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings $PWD/scripts/wasi_run.mjs" \
    cargo test -p hanzo-ml --target wasm32-wasip1 --target-dir "$dir" "$@"
}
# One thread: WASI has none to spare.
wasi_test "$simd_flags" target/wasi --lib -- --test-threads=1 quantized::kernels quantized::cpu::interleaved quantized::cpu::afq cpu::simd cpu::attention
wasi_test "$simd_flags" target/wasi --test simd -- --test-threads=1
wasi_test "$relaxed_flags" target/wasi-relaxed --lib -- --test-threads=1 quantized::kernels quantized::cpu::interleaved quantized::cpu::afq
for build in relaxed simd scalar; do
  flags='--cfg getrandom_backend="wasm_js"'
  [ "$build" = simd ] && flags="$flags $simd_flags"
  [ "$build" = relaxed ] && flags="$flags $relaxed_flags"
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$flags" \
    cargo clippy -p hanzo-wasm --target wasm32-unknown-unknown --target-dir "target/wasm-$build" \
    -- -D warnings
done

bash scripts/build_wasm.sh

(cd crates/hanzo-wasm && npm ci --no-audit --no-fund --loglevel=error)
if ! command -v chromium >/dev/null && ! command -v chromium-headless-shell >/dev/null; then
  echo "installing Debian's chromium for the browser test" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq chromium >/dev/null
fi

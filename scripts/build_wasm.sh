#!/usr/bin/env bash
# Builds crates/hanzo-wasm for WebAssembly: crates/hanzo-wasm/pkg/relaxed (SIMD128 kernels with
# relaxed SIMD's 8-bit dot product), pkg/simd (SIMD128 alone) and pkg/scalar (for engines
# without SIMD), each wasm-bindgen's ES-module glue and the .wasm.
# Installs what it needs: Rust's
# wasm32-unknown-unknown standard library (rustup) and wasm-bindgen-cli at exactly the
# version Cargo.lock gives the wasm-bindgen crate (from crates.io, cached in
# ~/.cache/hanzo-ml/tools or $HANZO_TOOLS).
#   bash scripts/build_wasm.sh [relaxed|simd|scalar]...   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."

target=wasm32-unknown-unknown
if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi

version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
tools="${HANZO_TOOLS:-$HOME/.cache/hanzo-ml/tools}"
bindgen="$tools/bin/wasm-bindgen"
if ! "$bindgen" --version 2>/dev/null | grep -qF " $version"; then
  echo "installing wasm-bindgen-cli $version into $tools" >&2
  cargo install --quiet wasm-bindgen-cli --version "=$version" --root "$tools"
fi

builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(relaxed simd scalar)
for build in "${builds[@]}"; do
  # rustflags replace the ones .cargo/config.toml sets for the target, so repeat its cfg.
  flags='--cfg getrandom_backend="wasm_js"'
  case "$build" in
    relaxed) flags="$flags -C target-feature=+simd128,+relaxed-simd" ;;
    simd) flags="$flags -C target-feature=+simd128" ;;
    scalar) ;;
    *) echo "unknown build $build (relaxed, simd or scalar)" >&2; exit 2 ;;
  esac
  # One target directory per build: they differ in rustflags, which would otherwise rebuild
  # every crate at each switch. The release profile strips symbols, which would also drop the
  # section telling wasm-bindgen which features the module uses; it strips names itself.
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$flags" CARGO_PROFILE_RELEASE_STRIP=false \
    cargo build --quiet -p hanzo-wasm --release --target "$target" --target-dir "target/wasm-$build"
  out="crates/hanzo-wasm/pkg/$build"
  rm -rf "$out"
  "$bindgen" --target web --remove-name-section --remove-producers-section --out-dir "$out" \
    "target/wasm-$build/$target/release/hanzo_wasm.wasm"
  wasm="$out/hanzo_wasm_bg.wasm"
  echo "$build: $wasm $(wc -c < "$wasm") bytes, $(gzip -9 -c "$wasm" | wc -c) gzipped" >&2
done

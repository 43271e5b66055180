#!/usr/bin/env bash
# Runs hanzo-ml's quantized-kernel tests (NEON included) for AArch64 under qemu user-mode
# emulation, on an x86_64 Debian/Ubuntu machine. Not part of CI: it needs apt and rustup.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add aarch64-unknown-linux-gnu
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    apt-get install -y qemu-user gcc-aarch64-linux-gnu
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
target=(--release --target aarch64-unknown-linux-gnu --target-dir "${TMPDIR:-/tmp}/hanzo-aarch64")
cargo test -p hanzo-ml "${target[@]}" --lib quantized:: -- --nocapture
cargo test -p hanzo-ml "${target[@]}" --test qmatmul

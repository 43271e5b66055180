#!/usr/bin/env bash
# Runs hanzo-ml's kernel tests (the NEON quantized dot products and f32 row kernels) and
# hanzo-edge's budget and eviction tests for AArch64 under qemu user-mode emulation, on an
# x86_64 Debian machine. qemu's default CPU has
# ARMv8.2's dot product, so both forms of the quantized kernels are checked (widening
# multiplies and `sdot`); a second run on a CPU without it (Cortex-A53) checks that no `sdot`
# kernel is picked there.
#
#   bash scripts/test_aarch64.sh               set up what is missing (apt, rustup), then test
#   bash scripts/test_aarch64.sh --if-possible the same, but when the setup cannot be done
#                                              (no apt, no network for the Rust target) say so
#                                              and exit 0; test failures still fail
set -euo pipefail
cd "$(dirname "$0")/.."
optional=false
[[ "${1:-}" == "--if-possible" ]] && optional=true

skip() {
    echo "NEON kernels NOT tested: $*" >&2
    if $optional; then exit 0; fi
    exit 1
}

# g++ as well as gcc: the tokenizer's suffix array (esaxx) is C++.
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-g++ >/dev/null; then
    command -v apt-get >/dev/null || skip "qemu-aarch64 / aarch64-linux-gnu-g++ missing and no apt-get"
    echo "installing qemu-user and g++-aarch64-linux-gnu (Debian packages)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        qemu-user gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null; } \
        || skip "apt-get install qemu-user g++-aarch64-linux-gnu failed"
fi
if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    timeout 300 rustup target add aarch64-unknown-linux-gnu >&2 \
        || skip "rustup could not fetch the aarch64-unknown-linux-gnu standard library"
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
runner="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner"
target=(--target aarch64-unknown-linux-gnu)
cargo test -p hanzo-ml "${target[@]}" --lib -- --nocapture quantized:: cpu::
QEMU_CPU=cortex-a53 cargo test -p hanzo-ml "${target[@]}" --lib -- --nocapture quantized::kernels
# The f32 row kernels. (QMatMul's own tests stay on x86: under emulation their build and
# run cost CI minutes, and the kernel tests above already hold every NEON dot product and
# tile to the scalar reference.)
cargo test -p hanzo-ml "${target[@]}" --test simd -- --nocapture

# Hanzo Edge on AArch64 (the embedded target): the memory budget (a model refused with the
# figures; a run's peak within its budget, the emulator's own memory told apart) and
# conversations past the context (recomputing and re-rotating eviction). The tests start the
# hanzo-edge binary through the emulator too (HANZO_TEST_RUNNER), and HANZO_TEST_QUICK keeps
# them to the smallest fixture and short replies: emulated, a token costs ~30x native.
HANZO_TEST_RUNNER="$runner" HANZO_TEST_QUICK=1 \
    cargo test -p hanzo-edge "${target[@]}" --test budget --test eviction -- --nocapture

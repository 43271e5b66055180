#!/usr/bin/env bash
# Instructions per 256 weights that each weight type's AArch64 kernels execute, at each kernel
# level: the dot product alone over every row (`dot`, as ggml's `vec_dot` runs), and the
# matmul's decode (one activation row) and prefill (eight), driver included. Counted under
# qemu's AArch64 emulation: an instruction count, not a time (no AArch64 CPU to time on here).
#
#   bash scripts/neon_instructions.sh [TYPE ...]     (default: every weight type)
#
# Needs what scripts/test_aarch64.sh installs (qemu-user, the cross linker, Rust's AArch64
# standard library) and gcc for the counting plugin (scripts/qemu_count_insns.c).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/neon-instructions
mkdir -p "$out"
gcc -shared -fPIC -O2 scripts/qemu_count_insns.c -o "$out/libcount.so"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
cargo build --release -q -p hanzo-ml --example kernel_instructions --target aarch64-unknown-linux-gnu
bin=target/aarch64-unknown-linux-gnu/release/examples/kernel_instructions

types=("$@")
[[ ${#types[@]} -gt 0 ]] || types=(Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS
    MXFP4 IQ3_S IQ3_XXS IQ2_S IQ2_XS IQ2_XXS IQ1_S IQ1_M TQ1_0 TQ2_0 F16 BF16)
levels=(scalar neon neondot)
reps=4

# Instructions of one run: the plugin's total.
count() {
    RAYON_NUM_THREADS=1 HANZO_ISA=$1 qemu-aarch64 -L /usr/aarch64-linux-gnu \
        -plugin "$out/libcount.so" "$bin" "$2" "$3" "$4" 2>&1 >/dev/null \
        | awk '/^instructions/ {print $2}'
}

printf '%-8s %5s' type rows
printf ' %9s' "${levels[@]}"
echo "   (instructions per 256 weights and activation row)"
for t in "${types[@]}"; do
    for m in dot 1 8; do
        printf '%-8s %5s' "$t" "$m"
        for level in "${levels[@]}"; do
            base=$(count "$level" "$t" 0 "$m")
            full=$(count "$level" "$t" "$reps" "$m")
            # 512 rows of 2,048 weights a product.
            awk -v a="$base" -v b="$full" -v r="$reps" -v m="${m/dot/1}" \
                'BEGIN { printf " %9.0f", (b - a) / r / (512 * 2048 * m / 256) }'
        done
        echo
    done
done

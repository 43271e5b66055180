#!/usr/bin/env python3
"""Reference AFQ tensors from MLX itself (`mlx.core.quantize` / `dequantize` on its CPU
backend, PyPI `mlx[cpu]`).

  gen.py OUT.safetensors

For f16 and bf16 weights (random rows, plus groups that are constant, zero, or have one
outlier) and every bit width and group size MLX's affine mode takes: the weights
(`{dtype}.w`), MLX's packed levels, scales and biases (`{dtype}.{bits}.{group}.q/.s/.b`) and
its dequantization (`.deq`). tests/afq.rs checks ours against them bit for bit.
"""
import sys

import mlx.core as mx
import numpy as np

BITS = [2, 3, 4, 5, 6, 8]
GROUPS = [32, 64, 128]


def weights():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((12, 512)).astype(np.float32) * 0.05
    w[1, :128] = 0.0  # all-zero groups
    w[2, :128] = 0.25  # constant groups
    w[3, 5] = 3.0  # one outlier
    w[4, :] = np.abs(w[4, :])  # one-signed rows
    w[5, :] = -np.abs(w[5, :])
    w[6, :] *= 1e-4  # tiny magnitudes
    return w


def main(out):
    tensors = {}
    base = weights()
    for name, dtype in [("f16", mx.float16), ("bf16", mx.bfloat16)]:
        w = mx.array(base).astype(dtype)
        tensors[f"{name}.w"] = w
        for bits in BITS:
            for group in GROUPS:
                q, s, b = mx.quantize(w, group_size=group, bits=bits)
                key = f"{name}.{bits}.{group}"
                tensors[key + ".q"] = q
                tensors[key + ".s"] = s
                tensors[key + ".b"] = b
                tensors[key + ".deq"] = mx.dequantize(q, s, b, group_size=group, bits=bits)
    mx.eval(tensors)
    mx.save_safetensors(out, tensors)


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""MLX's side of the AFQ model tests (PyPI `mlx[cpu]` and `mlx-lm`).

  mlx_afq.py bf16 SRC DST             SRC (a Hugging Face directory) with its weights in bf16
  mlx_afq.py convert SRC DST          `mlx_lm.convert -q` (4 bits, groups of 64) of SRC
  mlx_afq.py logits DIR OUT.json ID.. `mlx_lm.load(DIR)`'s logits for the token ids: per
                                      position the argmax, the top 5 and the first 64 logits
"""
import json
import os
import shutil
import sys

import mlx.core as mx


def bf16(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if name.endswith(".safetensors"):
            weights = {k: v.astype(mx.bfloat16) for k, v in mx.load(path).items()}
            mx.save_safetensors(os.path.join(dst, name), weights)
        elif name == "config.json":
            config = json.load(open(path))
            config["torch_dtype"] = "bfloat16"
            json.dump(config, open(os.path.join(dst, name), "w"), indent=2)
        elif os.path.isfile(path):
            shutil.copy(path, dst)


def convert(src, dst):
    from mlx_lm import convert as mlx_convert

    shutil.rmtree(dst, ignore_errors=True)
    mlx_convert(src, mlx_path=dst, quantize=True, q_group_size=64, q_bits=4)


def logits(model_dir, out, ids):
    from mlx_lm import load

    model, _ = load(model_dir)
    rows = model(mx.array([ids]))[0].astype(mx.float32)
    mx.eval(rows)
    positions = []
    for row in rows.tolist():
        top = sorted(range(len(row)), key=lambda i: -row[i])[:5]
        positions.append({"argmax": top[0], "top5": [[i, row[i]] for i in top],
                          "first64": row[:64]})
    json.dump({"ids": ids, "positions": positions}, open(out, "w"))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "bf16":
        bf16(*args)
    elif cmd == "convert":
        convert(*args)
    elif cmd == "logits":
        logits(args[0], args[1], [int(a) for a in args[2:]])
    else:
        sys.exit(f"unknown command {cmd}")

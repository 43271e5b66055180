#!/usr/bin/env python3
"""Rewrite a Llama-architecture GGUF in Phi-3's tensor layout.

    python3 scripts/gguf_as_phi3.py LLAMA.gguf OUT.gguf

Phi-3 differs from Llama in layout only: Q, K and V are one `attn_qkv` matmul, gate and up
one `ffn_up` of twice the width, and its rotary embedding rotates half-split pairs (so Q/K
rows are not permuted as the converter does for `llama`). No Phi-3 model ships in a package
we can fetch, so the Phi-3 test runs a real small Llama (SmolLM2) in this layout and expects
the same logits. Quantized rows are moved as raw bytes: the weights are bit-identical.
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter


def unpermute_rows(rows, heads):
    """llama.cpp's Q/K permutation undone on row-major rows (any row encoding)."""
    n = rows.shape[0]
    return rows.reshape(heads, n // heads // 2, 2, -1).swapaxes(1, 2).reshape(rows.shape)


def main(src, dst):
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    if arch != "llama":
        sys.exit(f"{src}: expected a llama GGUF, got {arch!r}")
    w = GGUFWriter(dst, arch="phi3")
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = GGUFValueType(f.types[0])
        sub = GGUFValueType(f.types[1]) if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key.replace("llama.", "phi3.", 1), f.contents(), vtype, sub)

    heads = r.fields["llama.attention.head_count"].contents()
    kv_heads = r.fields["llama.attention.head_count_kv"].contents()
    tensors = {t.name: t for t in r.tensors}

    def rows(name):
        return np.asarray(tensors[name].data)

    for t in r.tensors:
        name = t.name
        parts = name.split(".")
        if name.endswith(("attn_k.weight", "attn_v.weight", "ffn_gate.weight")):
            continue  # folded into attn_qkv / ffn_up
        if name.endswith("attn_q.weight"):
            blk = ".".join(parts[:2])
            q = unpermute_rows(rows(f"{blk}.attn_q.weight"), heads)
            k = unpermute_rows(rows(f"{blk}.attn_k.weight"), kv_heads)
            v = rows(f"{blk}.attn_v.weight")
            types = {tensors[f"{blk}.attn_{x}.weight"].tensor_type for x in "qkv"}
            if len(types) != 1:
                sys.exit(f"{blk}: Q/K/V of different types cannot be fused")
            w.add_tensor(f"{blk}.attn_qkv.weight", np.concatenate([q, k, v]),
                         raw_dtype=t.tensor_type)
        elif name.endswith("ffn_up.weight"):
            blk = ".".join(parts[:2])
            gate, up = tensors[f"{blk}.ffn_gate.weight"], t
            if gate.tensor_type != up.tensor_type:
                sys.exit(f"{blk}: gate/up of different types cannot be fused")
            w.add_tensor(name, np.concatenate([rows(gate.name), rows(name)]),
                         raw_dtype=t.tensor_type)
        else:
            w.add_tensor(name, rows(name), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

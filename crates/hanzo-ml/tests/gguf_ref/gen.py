#!/usr/bin/env python3
"""Reference data from the `gguf` Python package (ggml's own Python implementation).

  gen.py blocks OUT.npz        random blocks of every type with gguf's dequantization, and
                               random floats with gguf's quantization (the types it implements)
  gen.py dump FILE.gguf OUT.json
                               gguf.GGUFReader's view of a file: every metadata key with its
                               type and a digest of its value, every tensor's directory entry,
                               and a digest of every tensor dequantized by gguf
  gen.py read FILE.gguf OUT.json
                               metadata values in full (for files we wrote)
  gen.py seeds DIR             small GGUF files written by gguf.GGUFWriter (fuzzing seeds)
"""
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFValueType as V
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

# f16 scale fields per block type: byte offsets inside one block.
SCALE_OFFSETS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
    # IQ1_M spreads its f16 scale over the top nibbles of four words; MXFP4's scale is an
    # exponent byte (see `blocks`).
    T.IQ1_M: [], T.MXFP4: [],
}
QUANTIZED_BY_GGUF = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16, T.F16, T.TQ1_0, T.TQ2_0,
                     T.MXFP4]


def blocks(out):
    rng = np.random.default_rng(20261122)
    arrays = {}
    n_blocks = 64
    for t, offsets in SCALE_OFFSETS.items():
        bs, ts = GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
        # Random bytes would make NaN/inf scales; give every scale a finite random value.
        for off in offsets:
            d = rng.normal(0, 0.05, size=n_blocks).astype(np.float16)
            raw[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
        if t == T.IQ1_M:
            d = rng.normal(0, 0.05, size=n_blocks).astype(np.float16).view(np.uint16)
            words = raw[:, 48:56].copy().view(np.uint16)
            for k in range(4):
                words[:, k] = (words[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
            raw[:, 48:56] = words.view(np.uint8)
        if t == T.MXFP4:
            raw[:, 0] = rng.integers(100, 140, size=n_blocks, dtype=np.uint8)
            raw[:3, 0] = [0, 1, 2]  # the subnormal scales
        rows = raw.reshape(4, -1)
        arrays[f"{t.name}_blocks"] = rows.reshape(-1)
        arrays[f"{t.name}_deq"] = quants.dequantize(rows, t).astype(np.float32).reshape(-1)
    for t in [T.BF16, T.F16]:
        raw = rng.normal(0, 1, size=512).astype(np.float32)
        raw_bytes = quants.quantize(raw.reshape(4, -1), t).reshape(-1).view(np.uint8)
        arrays[f"{t.name}_blocks"] = raw_bytes
        arrays[f"{t.name}_deq"] = quants.dequantize(raw_bytes.reshape(4, -1), t).astype(np.float32).reshape(-1)

    # Quantization inputs: Gaussian rows of different scales, plus the awkward cases:
    # an all-zero block, a constant block, ties at the largest magnitude, tiny values.
    x = rng.normal(0, 1, size=(8, 256)).astype(np.float32)
    x *= np.array([0.01, 0.1, 1, 10, 0.5, 2, 0.03, 5], dtype=np.float32)[:, None]
    x[1, :32] = 0
    x[2, 32:64] = 0.75
    x[3, 64:96] = np.tile(np.float32([3.0, -3.0]), 16)
    x[4, 96:128] = rng.normal(0, 1e-6, 32).astype(np.float32)
    arrays["quant_input"] = x.reshape(-1)
    for t in QUANTIZED_BY_GGUF:
        arrays[f"{t.name}_quant"] = quants.quantize(x, t).reshape(-1).view(np.uint8)
    np.savez(out, **arrays)


def digest(values):
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    return {"n": int(v.size), "sum": float(v.sum()), "sumsq": float((v * v).sum()),
            "head": [float(x) for x in v[:8]]}


def field_json(f, full):
    types = [V(t).name for t in f.types]
    if not f.types:
        return {"types": types}
    value = f.contents()
    if f.types[0] == V.ARRAY:
        n = len(f.data)
        if full:
            return {"types": types, "len": n, "value": value}
        head = value[:4] if n else []
        return {"types": types, "len": n, "head": head}
    return {"types": types, "value": value}


def dump(path, out, full=False):
    r = GGUFReader(path)
    meta = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        meta[name] = field_json(f, full)
    tensors = []
    if not full:
        for t in r.tensors:
            try:
                d = digest(quants.dequantize(t.data, t.tensor_type))
            except NotImplementedError:  # gguf has no Q8_1/Q8_K dequantizer
                d = None
            tensors.append({
                "name": t.name,
                "type": t.tensor_type.name,
                "ne": [int(x) for x in t.shape],
                "offset": int(t.data_offset),
                "n_bytes": int(t.n_bytes),
                "digest": d,
            })
    with open(out, "w") as fh:
        json.dump({"alignment": r.alignment, "data_offset": int(r.data_offset),
                   "metadata": meta, "tensors": tensors}, fh)


def seeds(out_dir):
    """A few small files covering every metadata type and a tensor of several block types."""
    import os
    from gguf import GGUFWriter
    rng = np.random.default_rng(7)
    for n, (qtype, shape) in enumerate([(T.F32, (4, 8)), (T.Q8_0, (2, 64)), (T.Q4_0, (3, 32)),
                                        (T.F16, (5,))]):
        path = os.path.join(out_dir, f"seed{n}.gguf")
        w = GGUFWriter(path, "llama")
        w.add_uint8("u8", 7); w.add_int8("i8", -7); w.add_uint16("u16", 700)
        w.add_int16("i16", -700); w.add_uint32("u32", 70000); w.add_int32("i32", -70000)
        w.add_uint64("u64", 1 << 40); w.add_int64("i64", -(1 << 40)); w.add_float32("f32", 1.5)
        w.add_float64("f64", 2.5); w.add_bool("b", True); w.add_string("s", "hanzo")
        w.add_array("a", [1, 2, 3]); w.add_array("as", ["x", "yz"])
        x = rng.standard_normal(shape).astype(np.float32)
        data = x if qtype == T.F32 else (x.astype(np.float16) if qtype == T.F16
                                          else quants.quantize(x, qtype))
        w.add_tensor("t", data, raw_dtype=qtype if qtype not in (T.F32, T.F16) else None)
        w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file()
        w.close()


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "blocks":
        blocks(sys.argv[2])
    elif cmd == "dump":
        dump(sys.argv[2], sys.argv[3])
    elif cmd == "read":
        dump(sys.argv[2], sys.argv[3], full=True)
    elif cmd == "seeds":
        seeds(sys.argv[2])
    else:
        sys.exit(f"unknown command {cmd}")

#!/usr/bin/env python3
"""Tiny random-weight Hugging Face models that exercise one architecture feature each.

    python3 scripts/tiny_models.py write DIR [REFERENCE.json]  (NumPy only: what the tests run)
    python3 scripts/tiny_models.py reference DIR OUT.json      (needs torch + transformers)

`write` builds DIR/<name>/{config.json, model.safetensors} for every model below with NumPy's
legacy RandomState (a stream NumPy keeps stable across versions), so the same bytes come out
on every machine. `reference` runs each directory through transformers in f32 and records
the logits of every position of a fixed token sequence, with the sha256 of the weights it
read. `write DIR REFERENCE.json` fails unless every model it writes has the sha256 the
reference recorded, so a change here cannot silently drift from the committed reference
(crates/hanzo-transformers/tests/tiny_models.rs runs it that way).

Each model is small enough (2 layers, hidden 64, vocab 96) that its reference is exact to
f32 rounding, and each sets the one feature it tests strongly enough that leaving the
feature out moves the logits far past the test's tolerance.
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np

VOCAB = 96
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
FFN = 128
LAYERS = 2
SEQ_LEN = 40

BASE = {
    "hidden_size": HIDDEN,
    "intermediate_size": FFN,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "num_hidden_layers": LAYERS,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}

MODELS = {
    # Llama 3.1's frequency-dependent RoPE scaling. original_max_position_embeddings is small
    # so that most rotary frequencies fall in the scaled or the smoothed band.
    "llama3-rope-scaling": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    },
    # Mistral's sliding window: positions past the window see only its last 8 keys.
    "mistral-sliding-window": {
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        "sliding_window": 8,
        "head_dim": HEAD_DIM,
    },
    # Qwen3: RMS norm over each query and key head before RoPE, an explicit head_dim.
    "qwen3-qk-norm": {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "head_dim": HEAD_DIM,
        "attention_bias": False,
        "use_sliding_window": False,
    },
    # Qwen2: biases on the Q, K and V projections.
    "qwen2-qkv-bias": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "use_sliding_window": False,
    },
}


def tensors(name, cfg, rng):
    """HF tensor names and f32 values for one model."""
    def normal(*shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm_weight(n):
        return (1.0 + rng.standard_normal(n) * 0.2).astype(np.float32)

    out = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN, std=1.0)}
    q_rows, kv_rows = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = norm_weight(HIDDEN)
        out[p + "self_attn.q_proj.weight"] = normal(q_rows, HIDDEN, std=0.25)
        out[p + "self_attn.k_proj.weight"] = normal(kv_rows, HIDDEN, std=0.25)
        out[p + "self_attn.v_proj.weight"] = normal(kv_rows, HIDDEN, std=0.25)
        out[p + "self_attn.o_proj.weight"] = normal(HIDDEN, q_rows, std=0.15)
        if cfg["model_type"] == "qwen2":
            out[p + "self_attn.q_proj.bias"] = normal(q_rows, std=1.0)
            out[p + "self_attn.k_proj.bias"] = normal(kv_rows, std=1.0)
            out[p + "self_attn.v_proj.bias"] = normal(kv_rows, std=1.0)
        if cfg["model_type"] == "qwen3":
            out[p + "self_attn.q_norm.weight"] = norm_weight(HEAD_DIM)
            out[p + "self_attn.k_norm.weight"] = norm_weight(HEAD_DIM)
        out[p + "post_attention_layernorm.weight"] = norm_weight(HIDDEN)
        out[p + "mlp.gate_proj.weight"] = normal(FFN, HIDDEN, std=0.15)
        out[p + "mlp.up_proj.weight"] = normal(FFN, HIDDEN, std=0.15)
        out[p + "mlp.down_proj.weight"] = normal(HIDDEN, FFN, std=0.1)
    out["model.norm.weight"] = norm_weight(HIDDEN)
    out["lm_head.weight"] = normal(VOCAB, HIDDEN, std=0.2)
    return out


def write_safetensors(path, named):
    """The safetensors layout: an 8-byte header length, a JSON header, the raw data."""
    header, blobs, offset = {}, [], 0
    for name in sorted(named):
        data = np.ascontiguousarray(named[name], dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(named[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def token_ids():
    """The sequence every model is run on (no BOS: these models have no tokenizer)."""
    return [int(x) for x in np.random.RandomState(7).randint(0, VOCAB, SEQ_LEN)]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write(root, check=None):
    want = json.load(open(check))["models"] if check else None
    for seed, (name, extra) in enumerate(sorted(MODELS.items())):
        cfg = dict(BASE, **extra)
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        rng = np.random.RandomState(1000 + seed)
        write_safetensors(os.path.join(d, "model.safetensors"), tensors(name, cfg, rng))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1, sort_keys=True)
            f.write("\n")
        if want is not None:
            got = sha256(os.path.join(d, "model.safetensors"))
            if got != want[name]["safetensors_sha256"]:
                sys.exit(f"{name}: weights sha256 {got} differ from the reference's; "
                         f"regenerate {check} with `reference`")


def reference(root, out):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    ids = token_ids()
    result = {
        "generator": "scripts/tiny_models.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "token_ids": ids,
        "models": {},
    }
    for name in sorted(MODELS):
        d = os.path.join(root, name)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        model.eval()
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
        result["models"][name] = {
            "safetensors_sha256": sha256(os.path.join(d, "model.safetensors")),
            "config": json.load(open(os.path.join(d, "config.json"))),
            "logits": [[round(float(v), 5) for v in row] for row in logits],
        }
    with open(out, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "write":
        write(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "reference":
        reference(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)

#!/usr/bin/env python3
"""LoRA adapters for SmolLM2-135M, in PEFT's layout and llama.cpp's GGUF layout, and the
logits PEFT computes with them.

    python3 scripts/lora_adapters.py write OUT_DIR [REFERENCE.json]   (NumPy + gguf: the tests)
    python3 scripts/lora_adapters.py reference OUT_DIR BASE_DIR OUT.json (torch, transformers, peft)
    python3 scripts/lora_adapters.py train BASE_DIR OUT_DIR            (torch, transformers, peft)

`write` makes two PEFT adapter directories, OUT_DIR/attn (rank 8 on the attention
projections, alpha 16) and OUT_DIR/mlp (rank 4 on the MLP projections and the output head,
rank-stabilised scaling, an alpha_pattern for layer 3's down projection), with NumPy's legacy
RandomState (stable across NumPy versions), so the same bytes come out everywhere; then each
one's GGUF form (OUT_DIR/attn.gguf, OUT_DIR/mlp.gguf) as llama.cpp's converter lays it out:
`general.type = adapter`, `adapter.lora.alpha`, `blk.N.attn_q.weight.lora_a` `[r, in]` /
`.lora_b` `[out, r]`, the query and key rows of B permuted as the converter permutes Llama's
weights. The mlp adapter's per-module scales differ, which one GGUF alpha cannot say, so its
scales are folded into B and its alpha is 0 (llama.cpp then scales by 1). With
REFERENCE.json, `write` fails unless the adapters hash to what the reference recorded.

`reference` runs BASE_DIR (the SmolLM2 fixture as a Hugging Face directory,
scripts/gguf_to_hf.py) through transformers in f32, alone, with each adapter through PEFT,
and with both adapters active at once, and records the logits of every position of the
token sequence for a fixed subset of the vocabulary (every 97th id) with the top 5 ids.

`train` fine-tunes a rank-8 PEFT adapter on BASE_DIR for a few steps on a short text (a real
trained adapter, for checking by hand that `hanzo-engine run --lora` and PEFT agree on it).
"""
import hashlib
import json
import os
import sys

import numpy as np

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS, VOCAB = 576, 9, 3, 64, 1536, 30, 49152
# "The capital of France is" after BOS, then a few more tokens of the fixture's vocabulary.
TOKENS = [1, 504, 3575, 282, 4649, 314, 7042, 30, 378, 6476, 282, 7042, 314]
STRIDE = 97

ADAPTERS = {
    "attn": {
        "r": 8, "lora_alpha": 16, "use_rslora": False, "alpha_pattern": {},
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "std_b": 0.05,
    },
    "mlp": {
        "r": 4, "lora_alpha": 8, "use_rslora": True,
        "alpha_pattern": {"model.layers.3.mlp.down_proj": 2},
        "target_modules": ["gate_proj", "up_proj", "down_proj", "lm_head"], "std_b": 0.04,
    },
}

DIMS = {  # (out, in)
    "q_proj": (HEADS * HEAD_DIM, HIDDEN), "k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
    "v_proj": (KV_HEADS * HEAD_DIM, HIDDEN), "o_proj": (HIDDEN, HEADS * HEAD_DIM),
    "gate_proj": (FFN, HIDDEN), "up_proj": (FFN, HIDDEN), "down_proj": (HIDDEN, FFN),
    "lm_head": (VOCAB, HIDDEN),
}
PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
          "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
GGUF_PART = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
             "o_proj": "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up",
             "down_proj": "ffn_down"}


def modules(spec):
    """(HF module name, kind) of every module the adapter changes."""
    out = []
    for kind in spec["target_modules"]:
        if kind == "lm_head":
            out.append(("lm_head", kind))
            continue
        for i in range(LAYERS):
            out.append((f"model.layers.{i}.{PARENT[kind]}.{kind}", kind))
    return out


def scale(spec, module):
    alpha = spec["alpha_pattern"].get(module, spec["lora_alpha"])
    r = spec["r"]
    return alpha / (r ** 0.5 if spec["use_rslora"] else r)


def permute(b, heads):
    """Hugging Face's rotary row order to GGUF's (interleaved pairs), per head."""
    out, d = b.shape[0], b.shape[0] // heads
    return (b.reshape(heads, 2, d // 2, -1).swapaxes(1, 2).reshape(out, -1))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write(root, check=None):
    from safetensors.numpy import save_file
    import gguf

    want = json.load(open(check))["adapters"] if check else None
    for seed, (name, spec) in enumerate(sorted(ADAPTERS.items())):
        rng = np.random.RandomState(4000 + seed)
        r = spec["r"]
        tensors, pairs = {}, []
        for module, kind in modules(spec):
            out_dim, in_dim = DIMS[kind]
            a = (rng.standard_normal((r, in_dim)) / np.sqrt(in_dim)).astype(np.float32)
            b = (rng.standard_normal((out_dim, r)) * spec["std_b"]).astype(np.float32)
            tensors[f"base_model.model.{module}.lora_A.weight"] = a
            tensors[f"base_model.model.{module}.lora_B.weight"] = b
            pairs.append((module, kind, a, b))
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        save_file(tensors, os.path.join(d, "adapter_model.safetensors"))
        config = {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r,
            "lora_alpha": spec["lora_alpha"], "use_rslora": spec["use_rslora"],
            "alpha_pattern": spec["alpha_pattern"], "rank_pattern": {},
            "target_modules": spec["target_modules"], "lora_dropout": 0.0, "bias": "none",
            "fan_in_fan_out": False, "use_dora": False, "modules_to_save": None,
            "base_model_name_or_path": None, "inference_mode": True,
        }
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump(config, f, indent=1, sort_keys=True)
            f.write("\n")

        # The GGUF form.
        uniform = not spec["use_rslora"] and not spec["alpha_pattern"]
        path = os.path.join(root, f"{name}.gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_type("adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", float(spec["lora_alpha"]) if uniform else 0.0)
        for module, kind, a, b in pairs:
            if not uniform:
                b = (b * np.float32(scale(spec, module))).astype(np.float32)
            if kind == "q_proj":
                b = permute(b, HEADS)
            elif kind == "k_proj":
                b = permute(b, KV_HEADS)
            base = "output" if kind == "lm_head" else \
                f"blk.{module.split('.')[2]}.{GGUF_PART[kind]}"
            w.add_tensor(f"{base}.weight.lora_a", np.ascontiguousarray(a))
            w.add_tensor(f"{base}.weight.lora_b", np.ascontiguousarray(b))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        if want is not None:
            got = sha256(os.path.join(d, "adapter_model.safetensors"))
            if got != want[name]["safetensors_sha256"]:
                sys.exit(f"{name}: adapter sha256 {got} differs from the reference's; "
                         f"regenerate {check} with `reference`")


def reference(root, base_dir, out):
    import torch
    import transformers
    import peft
    from transformers import AutoModelForCausalLM

    def logits_of(model):
        with torch.no_grad():
            x = model(torch.tensor([TOKENS])).logits[0].float().numpy()
        return {
            "subset": [[round(float(v), 5) for v in row[::STRIDE]] for row in x],
            "top5": [[int(i) for i in np.argsort(-row)[:5]] for row in x],
        }

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    base.eval()
    result = {
        "generator": "scripts/lora_adapters.py",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__,
        "base": "SmolLM2-135M fixture through scripts/gguf_to_hf.py (f32)",
        "base_safetensors_sha256": sha256(os.path.join(base_dir, "model.safetensors")),
        "token_ids": TOKENS, "vocab_stride": STRIDE,
        "logits": {"base": logits_of(base)}, "adapters": {},
    }
    model = None
    for name in sorted(ADAPTERS):
        d = os.path.join(root, name)
        if model is None:
            model = peft.PeftModel.from_pretrained(base, d, adapter_name=name)
        else:
            model.load_adapter(d, adapter_name=name)
        model.set_adapter(name)
        model.eval()
        result["logits"][name] = logits_of(model)
        result["adapters"][name] = {
            "safetensors_sha256": sha256(os.path.join(d, "adapter_model.safetensors"))}
    # Both at once: PEFT sums the active adapters' updates.
    model.base_model.set_adapter(sorted(ADAPTERS))
    result["logits"]["attn+mlp"] = logits_of(model)
    with open(out, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")


def train(base_dir, out_dir):
    import torch
    import peft
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    cfg = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
                          lora_dropout=0.0, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, cfg)
    text = [1] + [504, 3575, 282, 4649, 314, 7042, 30] * 4
    x = torch.tensor([text])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    for step in range(8):
        loss = model(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}")
    model.save_pretrained(out_dir, safe_serialization=True)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "write" and len(sys.argv) in (3, 4):
        write(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
    elif cmd == "reference" and len(sys.argv) == 5:
        reference(*sys.argv[2:5])
    elif cmd == "train" and len(sys.argv) == 4:
        train(*sys.argv[2:4])
    else:
        sys.exit(__doc__)

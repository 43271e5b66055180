#!/usr/bin/env python3
"""Record transformers' logits for a GGUF fixture (the reference the model tests compare with).

    python3 scripts/reference/transformers_logits.py MODEL.gguf "PROMPT" OUT.json

Needs torch, transformers and gguf (not installed by the test suite: the output is committed
under crates/hanzo-transformers/tests/reference/). transformers dequantizes every tensor of
the GGUF to f32 itself (gguf-py), so this is an implementation independent of ours reading
the same file. Greedy steps recompute the whole sequence (no cache) in f32.
"""
import hashlib
import json
import sys
import time

import gguf
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    path, prompt, out = sys.argv[1:4]
    reader = gguf.GGUFReader(path)
    field = reader.get_field("general.architecture")
    arch = bytes(field.parts[field.data[0]]).decode()
    add_bos = reader.get_field("tokenizer.ggml.add_bos_token")
    add_bos = bool(add_bos.parts[add_bos.data[0]][0]) if add_bos is not None else False
    folder, name = path.rsplit("/", 1)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    load_seconds = time.time() - t0

    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    if add_bos and tok.bos_token_id is not None:
        ids = [tok.bos_token_id] + ids

    def logits_of(seq):
        with torch.no_grad():
            return model(torch.tensor([seq])).logits[0].float()

    all_logits = logits_of(ids)
    last = all_logits[-1]
    top = torch.topk(last, 5)
    logprobs = torch.log_softmax(last, -1)
    steps, top1, margins, seq = [], [], [], list(ids)
    for _ in range(32):
        row = logits_of(seq)[-1]
        v, i = torch.topk(row, 2)
        steps.append(int(i[0]))
        top1.append(round(float(v[0]), 4))
        margins.append(round(float(v[0] - v[1]), 4))
        seq.append(int(i[0]))
    result = {
        "gguf": name,
        "gguf_sha256": sha256(path),
        "architecture": arch,
        "loader": f"transformers {transformers.__version__} from_pretrained(gguf_file=..., dtype=float32)",
        "torch": torch.__version__,
        "load_seconds": round(load_seconds, 2),
        "prompt": prompt,
        "prompt_ids": ids,
        "bos_prepended": add_bos,
        "next_token_top5": [
            {
                "id": int(i),
                "text": tok.decode([int(i)]),
                "logit": float(v),
                "logprob": float(logprobs[int(i)]),
            }
            for v, i in zip(top.values, top.indices)
        ],
        "last_position_logits_stats": {
            "max": float(last.max()),
            "min": float(last.min()),
            "mean": float(last.mean()),
            "std": float(last.std()),
            "first8": [float(x) for x in last[:8]],
        },
        "all_positions_argmax": [int(x) for x in all_logits.argmax(-1)],
        "greedy_note": "argmax over fp32 logits, 32 steps, full recompute, EOS not treated as stop",
        "greedy_32_ids": steps,
        "greedy_32_text": tok.decode(steps),
        "greedy_32_step_top1_logit": top1,
        "greedy_32_step_top1_minus_top2": margins,
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()

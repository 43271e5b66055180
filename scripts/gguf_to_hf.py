#!/usr/bin/env python3
"""Write a Hugging Face-style model directory from a Llama-family GGUF file.

    python3 scripts/gguf_to_hf.py [--tokenizer-only] MODEL.gguf OUT_DIR

OUT_DIR gets config.json, model.safetensors (every tensor dequantized to f32 by the `gguf`
package, Q/K rows of `llama` files permuted back to Hugging Face's rotary layout),
tokenizer.json (byte-level BPE, with the pre-tokenizer a `tokenizer.ggml.pre` value stands
for) and tokenizer_config.json. No model hub is reachable here, so the model-directory tests
build their directory this way from a GGUF fixture; the weights are then exactly those that
the transformers reference in tests/reference was computed from.
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import save_file

# tokenizer.json pre-tokenizers for the GGUF pre-tokenizer names the fixtures use, as
# Hugging Face writes them for those models.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


PRE = {
    "smollm": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level(True)]},
    "qwen2": {"type": "Sequence", "pretokenizers": [split(QWEN2_REGEX), byte_level(False)]},
    "llama-bpe": {"type": "Sequence", "pretokenizers": [split(LLAMA3_REGEX), byte_level(False)]},
    "gpt2": byte_level(True),
    "default": byte_level(True),
}

HF_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    top = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    _, layer, part, kind = name.split(".")
    return f"model.layers.{layer}.{HF_NAMES[part]}.{kind}"


def unpermute(w, heads):
    """Inverse of llama.cpp's converter permutation (HF halves -> GGUF adjacent pairs)."""
    rows = w.shape[0]
    return (w.reshape(heads, rows // heads // 2, 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


def main(src, out, tokenizer_only=False):
    r = GGUFReader(src)

    def field(key, default=None):
        f = r.fields.get(key)
        return default if f is None else f.contents()

    arch = field("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3", "mistral"):
        sys.exit(f"{src}: architecture {arch!r} is not a Llama-family model")
    a = lambda k, d=None: field(f"{arch}.{k}", d)  # noqa: E731
    heads, kv_heads = a("attention.head_count"), a("attention.head_count_kv")
    heads_kv = kv_heads or heads

    os.makedirs(out, exist_ok=True)
    write_tokenizer(field, out)
    if tokenizer_only:
        return
    tensors = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)])
        if arch in ("llama", "mistral") and ".attn_q." in t.name:
            w = unpermute(w, heads)
        elif arch in ("llama", "mistral") and ".attn_k." in t.name:
            w = unpermute(w, heads_kv)
        if t.name == "rope_freqs.weight":
            continue
        tensors[hf_name(t.name)] = np.ascontiguousarray(w)
    save_file(tensors, os.path.join(out, "model.safetensors"))

    vocab = a("vocab_size") or len(field("tokenizer.ggml.tokens"))
    config = {
        "model_type": arch,
        "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}[arch]],
        "hidden_size": a("embedding_length"),
        "intermediate_size": a("feed_forward_length"),
        "num_hidden_layers": a("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": heads_kv,
        "max_position_embeddings": a("context_length"),
        "rms_norm_eps": a("attention.layer_norm_rms_epsilon"),
        "rope_theta": a("rope.freq_base", 10000.0),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "vocab_size": vocab,
        "bos_token_id": field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": field("tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_tokenizer(field, out):
    if field("tokenizer.ggml.model") != "gpt2":
        sys.exit("only byte-level BPE (gpt2) tokenizers are converted")
    pre = field("tokenizer.ggml.pre", "default")
    if pre not in PRE:
        sys.exit(f"pre-tokenizer {pre!r} has no tokenizer.json equivalent here")
    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, tok in enumerate(tokens) if types[i] in (3, 4)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": PRE[pre],
        "post_processor": byte_level(False),
        "decoder": byte_level(True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": pre == "llama-bpe",
                  "vocab": {tok: i for i, tok in enumerate(tokens)},
                  "merges": list(field("tokenizer.ggml.merges"))},
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)

    def tok(key):
        i = field(f"tokenizer.ggml.{key}")
        return None if i is None else tokens[i]

    tcfg = {"bos_token": tok("bos_token_id"), "eos_token": tok("eos_token_id"),
            "pad_token": tok("padding_token_id"), "unk_token": tok("unknown_token_id"),
            "add_bos_token": bool(field("tokenizer.ggml.add_bos_token", False))}
    template = field("tokenizer.chat_template")
    if template is not None:
        tcfg["chat_template"] = template
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2, ensure_ascii=False)


if __name__ == "__main__":
    args = sys.argv[1:]
    only = "--tokenizer-only" in args
    args = [a for a in args if a != "--tokenizer-only"]
    if len(args) != 2:
        sys.exit(__doc__)
    main(args[0], args[1], only)

"""`hanzo-edge serve --lookup` and `--lora` through the official openai client: prompt
lookup leaves a greedy reply as it is and reports its drafts (in the answer and in vLLM-named
metrics); a LoRA adapter (written by scripts/lora_adapters.py) changes the reply, and at
scale 0 does not.
"""

import os
import re
import subprocess
import sys

from conftest import Server

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
CODE = """def total_price(items, tax_rate):
    subtotal = 0
    for item in items:
        subtotal += item.price * item.quantity
    tax = subtotal * tax_rate
    return subtotal + tax
"""


def reply(server, content, max_tokens):
    return server.client().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": content}], temperature=0,
        max_tokens=max_tokens)


def metric(text, name):
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def test_prompt_lookup_keeps_the_reply_and_counts_its_drafts():
    ask = f"Rename `subtotal` to `net` in this function and show the whole function:\n\n{CODE}"
    plain = Server("--max-context-tokens", "1024")
    try:
        want = reply(plain, ask, 96).choices[0].message.content
    finally:
        plain.stop()
    fast = Server("--max-context-tokens", "1024", "--lookup", "3", "--draft-k", "8")
    try:
        got = reply(fast, ask, 96)
        assert got.choices[0].message.content == want
        edge = got.model_extra["hanzo_edge"]
        assert 0 < edge["accepted_tokens"] <= edge["drafted_tokens"], edge
        _, text = fast.request("GET", "/metrics")
        assert metric(text, "hanzo_edge_spec_decode_num_draft_tokens_total") == edge["drafted_tokens"]
        assert metric(text, "hanzo_edge_spec_decode_num_accepted_tokens_total") == edge["accepted_tokens"]
        rate = metric(text, "hanzo_edge_spec_decode_draft_acceptance_rate")
        assert abs(rate - edge["accepted_tokens"] / edge["drafted_tokens"]) < 1e-9
    finally:
        fast.stop()


def test_a_lora_adapter_changes_the_reply(tmp_path):
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "lora_adapters.py"), "write", str(tmp_path),
         os.path.join(ROOT, "crates", "hanzo-transformers", "tests", "reference",
                      "smollm2-135m-lora-peft.json")],
        check=True)
    answers = {}
    for name, args in [("plain", []), ("adapted", ["--lora", str(tmp_path / "attn")]),
                       ("scaled to 0", ["--lora", f"{tmp_path / 'attn.gguf'}:0"])]:
        s = Server("--max-context-tokens", "256", *args)
        try:
            answers[name] = reply(s, "Name three colours.", 24).choices[0].message.content
        finally:
            s.stop()
    assert answers["adapted"] != answers["plain"], answers
    assert answers["scaled to 0"] == answers["plain"], answers

"""LoRA adapters chosen per request (`serve --lora`, `"model": "MODEL+ADAPTER"`): each
adapter's greedy reply is the same alone and batched with requests for other adapters and
for the model alone; adapters' KV blocks never serve other adapters' prompts; unknown
adapters are 404s. The adapters are scripts/lora_adapters.py's, on SmolLM2."""

import concurrent.futures
import os
import subprocess
import sys

import pytest

from conftest import Server, wait_for

SMOLLM2 = os.environ["HANZO_SMOLLM2"]
SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "scripts")
PROMPTS = [
    "The capital of France is",
    "A short list of fruits: apples,",
    "def fibonacci(n):",
]


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    subprocess.run([sys.executable, os.path.join(SCRIPTS, "lora_adapters.py"), "write", str(d)],
                   check=True)
    s = Server("-m", f"smol={SMOLLM2}", "--kv-budget", "64M",
               "--lora", f"attn={d / 'attn'}", "--lora", f"smol+mlp={d / 'mlp.gguf'}:0.5",
               mcp=False)
    yield s
    s.stop()


def complete(server, model, prompt, max_tokens=16):
    r = server.client().completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0)
    return r.model, r.choices[0].text


def test_adapters_are_listed(lora_server):
    ids = [m.id for m in lora_server.client().models.list().data]
    assert ids == ["smol", "smol+attn", "smol+mlp"]
    assert lora_server.client().models.retrieve("smol+attn").id == "smol+attn"


def test_each_adapter_answers_alike_alone_and_batched(lora_server):
    models = ["smol", "smol+attn", "smol+mlp"]
    alone = {(m, p): complete(lora_server, m, p) for m in models for p in PROMPTS}
    for (m, p), (echoed, text) in alone.items():
        assert echoed == m
    for m in models[1:]:
        changed = [p for p in PROMPTS if alone[(m, p)][1] != alone[("smol", p)][1]]
        assert changed, f"{m} answers every prompt as the model does"
    # Every request at once, twice over: one batch mixes all three.
    jobs = [(m, p) for m in models for p in PROMPTS] * 2
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(lambda j: complete(lora_server, *j), jobs))
    for job, got in zip(jobs, together):
        assert got == alone[job], job


def test_prefix_blocks_stay_with_their_adapter(lora_server):
    # Several KV blocks of prompt: the prefix cache would serve them again.
    prompt = "The history of the city begins with a small settlement by the river. " * 6
    hits = lambda: lora_server.metric("hanzo_engine_prefix_cache_hits_total")
    assert wait_for(lambda: lora_server.metric("hanzo_engine_kv_blocks_used") == 0)
    base = complete(lora_server, "smol", prompt)
    before = hits()
    adapted = complete(lora_server, "smol+attn", prompt)
    assert hits() == before, "the adapter's prompt reused the model's own blocks"
    again = complete(lora_server, "smol+attn", prompt)
    assert hits() > before, "the adapter's prompt did not reuse its own blocks"
    assert again == adapted
    assert complete(lora_server, "smol", prompt) == base


def test_unknown_adapters_are_404s(lora_server):
    for name in ["smol+nope", "nope+attn"]:
        r = lora_server.request("POST", "/v1/completions",
                                {"model": name, "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["code"] == "model_not_found" and "smol+attn" in err["message"], err

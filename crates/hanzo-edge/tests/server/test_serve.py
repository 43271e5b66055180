"""`hanzo-edge serve`: the local OpenAI API, one conversation at a time, loopback only.

`tests/server.rs` runs this under `cargo test` with HANZO_EDGE_BIN (the binary) and
HANZO_SMOLLM (SmolLM2-135M-Instruct, GGUF) in the environment.
"""

import http.client
import json
import os
import re
import subprocess
import time

import openai
import pytest

from conftest import BIN, MODEL, Server


@pytest.fixture(scope="module")
def server():
    s = Server("--max-context-tokens", "512", "--max-queue", "0")
    yield s
    s.stop()


def chat(client, content, **kw):
    return client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": content}], temperature=0, **kw
    )


def test_the_openai_client_streams_a_chat(server):
    stream = chat(server.client(), "Name three colours.", max_tokens=24, stream=True)
    pieces, last = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        last = chunk
    assert len(pieces) > 3 and "".join(pieces).strip()
    assert last.choices[0].finish_reason in ("stop", "length")
    # The finishing chunk says what the context holds and whether anything was evicted.
    edge = last.model_extra["hanzo_edge"]
    assert edge["evictions"] == 0 and 0 < edge["context_tokens"] <= 512
    # The same answer without streaming (greedy, the same conversation again).
    whole = chat(server.client(), "Name three colours.", max_tokens=24)
    assert whole.choices[0].message.content == "".join(pieces)
    assert whole.usage.completion_tokens == len(pieces) or whole.usage.completion_tokens >= 3


def test_a_conversation_continues_without_recomputing_its_prompt(server):
    c = server.client()
    messages = [{"role": "user", "content": "Say hello."}]
    first = c.chat.completions.create(model="smol", messages=messages, temperature=0, max_tokens=12)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Now say goodbye."}]
    second = c.chat.completions.create(model="smol", messages=messages, temperature=0, max_tokens=12)
    edge = second.model_extra["hanzo_edge"]
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    assert edge["computed_prompt_tokens"] < second.usage.prompt_tokens - first.usage.prompt_tokens + 8


def test_a_long_conversation_evicts_and_says_so(server):
    c = server.client()
    messages = [{"role": "system", "content": "You are brief."}]
    evictions = 0
    for i in range(12):
        messages.append({"role": "user", "content": f"Tell me a fact about the number {i}, at length."})
        r = c.chat.completions.create(model="smol", messages=messages, temperature=0, max_tokens=60)
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
        edge = r.model_extra["hanzo_edge"]
        assert edge["context_tokens"] <= 512
        evictions += edge["evictions"]
    assert evictions >= 1
    assert r.usage.prompt_tokens > 512


def test_embeddings_through_the_openai_client(server):
    c = server.client()
    # The client asks for base64 by default; floats too.
    r = c.embeddings.create(model="smol", input=["The sea is wide.", "Bees make honey."])
    f = c.embeddings.create(model="smol", input="The sea is wide.", encoding_format="float")
    a, b = r.data[0].embedding, r.data[1].embedding
    assert len(a) == len(b) == len(f.data[0].embedding) == 576  # SmolLM2-135M's hidden size
    assert abs(sum(x * x for x in a) - 1.0) < 1e-4
    assert max(abs(x - y) for x, y in zip(a, f.data[0].embedding)) < 1e-6
    assert sum(x * y for x, y in zip(a, b)) < 0.999
    assert r.usage.prompt_tokens > 4
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="smol", input="x", dimensions=8)
    assert e.value.body["param"] == "dimensions"


def test_health_reports_memory_and_context(server):
    status, body = server.request("GET", "/health")
    h = json.loads(body)
    assert status == 200 and h["status"] == "ok" and h["model"] == "smol"
    m = h["memory"]
    assert 0 < m["used_bytes"] <= m["peak_bytes"]
    assert m["budget_bytes"] == sum(m["budget"].values())
    assert m["peak_bytes"] <= m["budget_bytes"] * 1.05
    assert h["context"]["max_tokens"] == 512
    assert h["context"]["kv_dtype"] == "f16"


def test_metrics_have_every_name_with_its_type(server):
    chat(server.client(), "Hi", max_tokens=4)
    status, text = server.request("GET", "/metrics")
    assert status == 200
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    want = {
        "hanzo_edge_tokens_generated_total": "counter",
        "hanzo_edge_inference_duration_seconds": "histogram",
        "hanzo_edge_time_to_first_token_seconds": "histogram",
        "hanzo_edge_tokens_per_second": "gauge",
        "hanzo_edge_memory_used_bytes": "gauge",
        "hanzo_edge_model_load_duration_seconds": "histogram",
        "hanzo_edge_cloud_fallback_total": "counter",
        "hanzo_edge_threads": "gauge",
    }
    for name, kind in want.items():
        assert types.get(name) == kind, (name, types.get(name))
    zones = os.path.isdir("/sys/class/thermal") and any(
        d.startswith("thermal_zone") for d in os.listdir("/sys/class/thermal"))
    assert ("hanzo_edge_thermal_state" in types) == zones
    assert "hanzo_edge_gpu_utilization" not in types
    used = float(re.search(r"^hanzo_edge_memory_used_bytes (\S+)$", text, re.M).group(1))
    assert used > 50e6
    assert float(re.search(r"^hanzo_edge_threads (\S+)$", text, re.M).group(1)) >= 1


def test_bad_requests_get_openai_errors(server):
    status, body = server.request("POST", "/v1/chat/completions", '{"model": "smol", "messages": [')
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    status, body = server.request("POST", "/v1/chat/completions", json.dumps(
        {"model": "other", "messages": [{"role": "user", "content": "hi"}]}))
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        chat(server.client(), "hi", n=2)
    with pytest.raises(openai.BadRequestError):
        chat(server.client(), "hi", response_format={"type": "json_object"})


def test_one_request_at_a_time_and_a_disconnect_frees_the_slot(server):
    c = http.client.HTTPConnection(server.host, int(server.port), timeout=60)
    c.request("POST", "/v1/chat/completions", json.dumps({
        "model": "smol", "stream": True, "max_tokens": 400, "temperature": 0,
        "messages": [{"role": "user", "content": "Write a very long story about a cat."}]}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    r.readline()  # the first chunk: it is generating
    # A second request while the first generates: no queue here (--max-queue 0), so 429.
    with pytest.raises(openai.RateLimitError):
        chat(server.client(), "hi", max_tokens=2)
    # The client goes away mid-stream: the slot is free again within a few tokens.
    c.close()
    deadline = time.time() + 10
    while True:
        try:
            chat(server.client(), "hi", max_tokens=2)
            break
        except openai.RateLimitError:
            assert time.time() < deadline, "the slot was not freed after the disconnect"
            time.sleep(0.1)


def test_only_loopback_hosts():
    for host in ["0.0.0.0", "192.168.1.10", "::"]:
        p = subprocess.run([BIN, "serve", "-m", MODEL, "--max-memory-bytes", "1GB", "--host", host],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode != 0
        assert "must be 127.0.0.1, ::1 or localhost" in p.stderr

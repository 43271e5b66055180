"""Embeddings against sentence-transformers and llama.cpp, /v1/models, /health, and every
error case as an OpenAI error object with the status the official client maps to its
exception types."""

import base64
import http.client
import json
import os
import struct
import threading
import urllib.parse

import openai
import pytest

from conftest import MINILM, REFERENCE, Server, wait_for

HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]


def test_models_and_health(server):
    c = server.client()
    ids = [m.id for m in c.models.list().data]
    assert ids == ["qwen", "minilm"]
    assert c.models.retrieve("minilm").id == "minilm"
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("nope")
    assert server.request("GET", "/health").json() == {"status": "ok"}


def test_embeddings_match_sentence_transformers(server):
    ref = json.load(
        open(os.path.join(REFERENCE, "all-minilm-l6-v2-embeddings-sentence-transformers.json"))
    )
    texts = [s["text"] for s in ref["sentences"]]
    c = server.client()
    # The client asks for base64 by default and decodes it.
    r = c.embeddings.create(model="minilm", input=texts)
    assert [d.index for d in r.data] == list(range(len(texts)))
    assert r.usage.prompt_tokens == sum(len(s["input_ids"]) for s in ref["sentences"])
    for d, s in zip(r.data, ref["sentences"]):
        assert len(d.embedding) == 384
        assert max(abs(a - b) for a, b in zip(d.embedding, s["embedding"])) < 1e-4
    # float and raw base64 carry the same numbers.
    f = c.embeddings.create(model="minilm", input=texts[0], encoding_format="float")
    raw = server.request(
        "POST",
        "/v1/embeddings",
        {"model": "minilm", "input": texts[0], "encoding_format": "base64"},
    ).json()
    b64 = raw["data"][0]["embedding"]
    assert isinstance(b64, str)
    floats = struct.unpack(f"<{len(base64.b64decode(b64)) // 4}f", base64.b64decode(b64))
    assert list(floats) == f.data[0].embedding
    assert f.data[0].embedding == pytest.approx(r.data[0].embedding, abs=1e-6)


def test_language_model_embeddings_match_llama_cpp(server):
    """A chat model embeds by last-token pooling, as llama.cpp's `--pooling last` does."""
    ref = json.load(
        open(os.path.join(REFERENCE, "qwen2.5-coder-0.5b-embeddings-last-llamacpp.json"))
    )
    texts = [s["text"] for s in ref["items"]]
    c = server.client()
    r = c.embeddings.create(model="qwen", input=texts)
    assert r.model == "qwen" and r.usage.prompt_tokens > len(texts)
    for d, s in zip(r.data, ref["items"]):
        v, want = d.embedding, s["embedding"]
        assert len(v) == 896
        assert abs(sum(x * x for x in v) - 1) < 1e-4
        cosine = sum(a * b for a, b in zip(v, want)) / sum(b * b for b in want) ** 0.5
        assert cosine > 0.999, (s["text"], cosine)
    # One text alone gives the vector it gave in the list.
    one = c.embeddings.create(model="qwen", input=texts[1], encoding_format="float")
    assert one.data[0].embedding == r.data[1].embedding
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="qwen", input="x", dimensions=64)
    assert e.value.param == "dimensions"
    # Qwen adds no BOS: an empty text has no token to embed.
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="qwen", input=["fine", ""])
    assert e.value.param == "input"


def error_of(resp):
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"]
    return body["error"]


def post(server, path, body):
    return server.request("POST", path, body)


def test_bad_requests_get_openai_errors(server):
    chat = "/v1/chat/completions"
    # Malformed JSON, a missing field, a wrong type.
    for body in [b"{not json", b"", b'{"model": "qwen"}', b'{"model": "qwen", "messages": 3}']:
        r = post(server, chat, body)
        assert r.status_code == 400, body
        assert error_of(r)["type"] == "invalid_request_error"
    # Out-of-range values name their field.
    for field, value in [
        ("temperature", 3),
        ("top_p", 1.5),
        ("n", 0),
        ("max_tokens", 0),
        ("presence_penalty", -5),
        ("top_logprobs", 4),
    ]:
        body = {"model": "qwen", "messages": HAIKU, field: value}
        r = post(server, chat, json.dumps(body))
        assert r.status_code == 400, (field, r.text)
        assert error_of(r)["param"] == field, r.text
    r = post(server, chat, json.dumps({"model": "qwen", "messages": [{"role": "robot", "content": "x"}]}))
    assert r.status_code == 400 and "role" in error_of(r)["param"]
    r = post(server, chat, json.dumps({"model": "qwen", "messages": HAIKU, "logit_bias": {"x": 1}}))
    assert r.status_code == 400 and error_of(r)["param"] == "logit_bias"
    # Unknown model: 404, naming what there is.
    c = server.client()
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-5", messages=HAIKU)
    assert "qwen" in str(e.value) and e.value.code == "model_not_found"
    # An embedding model cannot chat.
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="minilm", messages=HAIKU)
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="minilm", input="x", dimensions=128)
    assert e.value.param == "dimensions"
    # What this server cannot honour is refused, not ignored.
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="qwen", messages=HAIKU, response_format={"type": "xml"})
    assert e.value.param == "response_format"
    if "structured-output" not in os.environ.get("HANZO_FEATURES", "").split(","):
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(
                model="qwen", messages=HAIKU, response_format={"type": "json_object"}
            )
        assert "--features structured-output" in str(e.value)
    # Unknown endpoint.
    r = server.request("GET", "/v1/nope")
    assert r.status_code == 404 and error_of(r)
    # The server still answers.
    ok = c.chat.completions.create(model="qwen", messages=HAIKU, max_tokens=2, temperature=0)
    assert ok.choices[0].message.content


def test_prompts_longer_than_the_context_are_400():
    s = Server("-m", f"minilm={MINILM}", "-m", f"qwen={os.environ['HANZO_QWEN']}", "--ctx-size", "64")
    try:
        c = s.client()
        long = [{"role": "user", "content": "word " * 100}]
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model="qwen", messages=long)
        assert e.value.code == "context_length_exceeded"
        short = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model="qwen", messages=short, max_tokens=60)
        assert e.value.code == "context_length_exceeded"
        # Without max_tokens the reply stops at the context's end.
        r = c.chat.completions.create(model="qwen", messages=short, temperature=0)
        assert r.usage.total_tokens <= 64
        long_text = "word " * 300
        with pytest.raises(openai.BadRequestError) as e:
            c.embeddings.create(model="minilm", input=["fine", long_text])
        assert e.value.param == "input[1]"
        with pytest.raises(openai.BadRequestError) as e:
            c.embeddings.create(model="qwen", input=["fine", long_text])
        assert e.value.param == "input[1]" and "at most 64" in str(e.value)
    finally:
        s.stop()


def test_api_key_is_required_when_set():
    s = Server("-m", f"minilm={MINILM}", env={"HANZO_API_KEY": "sesame"})
    try:
        with pytest.raises(openai.AuthenticationError):
            s.client(api_key="wrong").models.list()
        r = s.request("GET", "/v1/models")
        assert r.status_code == 401 and error_of(r)["code"] == "invalid_api_key"
        assert s.request("GET", "/metrics").status_code == 401
        assert s.request("GET", "/health").status_code == 200
        assert [m.id for m in s.client(api_key="sesame").models.list().data] == ["minilm"]
        if s.mcp_url:  # the MCP endpoint sits behind the same key
            u = urllib.parse.urlparse(s.mcp_url)
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}
            for key, want in ((None, 401), ("wrong", 401), ("sesame", 200)):
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
                hdrs = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
                if key:
                    hdrs["Authorization"] = f"Bearer {key}"
                conn.request("POST", u.path, body=json.dumps(init), headers=hdrs)
                assert conn.getresponse().status == want, key
                conn.close()
    finally:
        s.stop()


def test_a_full_queue_answers_429_with_retry_after():
    s = Server("-m", f"qwen={os.environ['HANZO_QWEN']}", "--max-seqs", "1", "--max-queue", "1")
    try:
        body = {"model": "qwen", "messages": HAIKU, "max_tokens": 64, "temperature": 0}
        statuses = []

        def one():
            r = s.request("POST", "/v1/chat/completions", body)
            statuses.append((r.status_code, r.headers.get("retry-after"), r.json()))

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(code for code, _, _ in statuses)
        assert 200 in codes and 429 in codes, codes
        for code, retry, body in statuses:
            if code == 429:
                assert retry == "1"
                assert body["error"]["type"] == "rate_limit_error"
        assert wait_for(lambda: s.metric("hanzo_engine_num_requests_waiting") == 0)
    finally:
        s.stop()


def test_rerank_puts_the_relevant_documents_first(server):
    docs = [
        "Bananas are a good source of potassium.",
        "Paris is the capital and largest city of France.",
        {"text": "The stock market closed higher on Tuesday."},
        "France's capital, Paris, lies on the Seine.",
    ]
    body = {"model": "qwen", "query": "What is the capital of France?", "documents": docs}
    r = server.request("POST", "/v1/rerank", body)
    assert r.status_code == 200, r.text
    out = r.json()
    results = out["results"]
    assert sorted(x["index"] for x in results) == [0, 1, 2, 3]
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert {x["index"] for x in results[:2]} == {1, 3}, results
    assert results[0]["document"]["text"] in (docs[1], docs[3])
    assert out["usage"]["total_tokens"] > 0
    # top_n, no documents, and the same scores again (scoring is deterministic).
    again = server.request(
        "POST", "/v1/rerank", {**body, "top_n": 2, "return_documents": False}
    ).json()["results"]
    assert [(x["index"], x["relevance_score"]) for x in again] == [
        (x["index"], x["relevance_score"]) for x in results[:2]
    ]
    assert "document" not in again[0]
    for bad, param in [
        ({**body, "documents": []}, "documents"),
        ({**body, "model": "minilm"}, "model"),
    ]:
        r = server.request("POST", "/v1/rerank", bad)
        assert r.status_code == 400 and error_of(r)["param"] == param, r.text

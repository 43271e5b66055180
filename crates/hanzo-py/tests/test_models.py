"""hanzo.LLM and hanzo.Embedder on the fixture models: greedy text equal to the native
server's, streaming equal to whole replies, OpenAI-shaped chat with tool calls, tokenizer and
logits, sentence-transformers' vectors, the GIL released while a model runs, and errors."""

import asyncio
import json
import math
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

import numpy as np
import pytest

import hanzo
from conftest import REFERENCE

PROMPTS = {
    "smol": "The three primary colors are",
    "qwen": "def quicksort(items):",
    "gemma": "The capital of France is",
}


@pytest.fixture(scope="module")
def models(smollm2, qwen, gemma):
    return {"smol": smollm2, "qwen": qwen, "gemma": gemma}


@pytest.fixture(scope="module")
def llms(models):
    return {name: hanzo.LLM(path, threads=2) for name, path in models.items()}


@pytest.fixture(scope="module")
def server(engine_bin, models):
    """`hanzo-engine serve` with the three models: the native binary's replies."""
    args = [engine_bin, "-t", "2", "serve", "--host", "127.0.0.1", "--port", "0", "--kv-budget", "128M"]
    for name, path in models.items():
        args += ["-m", f"{name}={path}"]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    url, log = None, []
    deadline = time.time() + 120
    while url is None and time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"listening on (http://\S+)", line)
        url = m.group(1) if m else None
    if url is None:
        proc.kill()
        pytest.fail("server did not start:\n" + "".join(log))
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    yield url
    proc.terminate()
    proc.wait(30)


def post(url, path, body):
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("name", ["smol", "qwen", "gemma"])
def test_greedy_text_equals_the_native_servers(name, llms, server):
    ours = llms[name].generate(PROMPTS[name], max_tokens=64, temperature=0)
    theirs = post(server, "/v1/completions", {
        "model": name, "prompt": PROMPTS[name], "max_tokens": 64, "temperature": 0,
    })["choices"][0]["text"]
    assert ours == theirs
    assert len(ours) > 40
    # The same again: every call computes the same.
    assert llms[name].generate(PROMPTS[name], max_tokens=64, temperature=0) == ours


def test_chat_equals_the_native_servers(llms, server):
    ask = [{"role": "user", "content": "Name three colors."}]
    ours = llms["qwen"].chat(ask, max_tokens=40, temperature=0)
    theirs = post(server, "/v1/chat/completions", {
        "model": "qwen", "messages": ask, "max_tokens": 40, "temperature": 0,
    })
    assert ours["object"] == "chat.completion"
    assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    assert ours["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]
    assert ours["usage"] == theirs["usage"]


def test_a_batch_equals_its_prompts_alone(llms):
    llm = llms["qwen"]
    prompts = ["def quicksort(items):", "# A haiku about the sea\n", "class Stack:\n    "]
    together = llm.generate(prompts, max_tokens=32, temperature=0)
    assert together == [llm.generate(p, max_tokens=32, temperature=0) for p in prompts]
    assert len(set(together)) == 3
    chats = [[{"role": "user", "content": "Name a color."}], [{"role": "user", "content": "Name a fruit."}]]
    alone = [llm.generate(c, max_tokens=16, temperature=0) for c in chats]
    assert llm.generate(chats, max_tokens=16, temperature=0) == alone
    # Stop strings end each sequence on its own; a seed repeats a sampled batch.
    cut = llm.generate(prompts, max_tokens=32, temperature=0, stop=["\n"])
    assert cut == [t.split("\n")[0] for t in together]
    sampled = llm.generate(prompts, max_tokens=16, temperature=0.8, seed=3)
    assert sampled == llm.generate(prompts, max_tokens=16, temperature=0.8, seed=3)


def test_reranker_ranks_as_the_native_server(qwen, server):
    query = "How do I reverse a list in Python?"
    docs = [
        "The Eiffel Tower is in Paris.",
        "Use list.reverse() to reverse in place, or reversed(items) / items[::-1] for a copy.",
        "Python lists keep their items in order.",
    ]
    r = hanzo.Reranker(qwen, threads=2)
    ours = r.rank(query, docs)
    theirs = post(server, "/v1/rerank", {"model": "qwen", "query": query, "documents": docs})["results"]
    assert [x["index"] for x in ours] == [x["index"] for x in theirs]
    assert ours[0]["index"] == 1 and ours[0]["document"] == docs[1]
    # The server reads the shared instruction from its prefix cache (keys and values stored
    # as f16) where this reads every prompt whole: scores agree to about 1e-2.
    for a, b in zip(ours, theirs):
        assert abs(a["relevance_score"] - b["relevance_score"]) < 0.03
    # A document's score does not depend on the documents read beside it.
    for x in ours:
        alone = r.rank(query, [docs[x["index"]]])[0]["relevance_score"]
        assert alone == x["relevance_score"]
    assert r.rank(query, docs, top_n=1, return_documents=False) == [
        {"index": 1, "relevance_score": ours[0]["relevance_score"]}
    ]


def test_stream_pieces_join_to_the_whole_reply(llms):
    llm = llms["smol"]
    whole = llm.generate("Once upon a time", max_tokens=48, temperature=0)
    stream = llm.stream("Once upon a time", max_tokens=48, temperature=0)
    pieces = list(stream)
    assert len(pieces) > 10 and "".join(pieces) == whole
    assert stream.finish_reason == "length" and len(stream.tokens) == 48
    # Sampled: a seed repeats, and is honoured by both.
    a = llm.generate("Once upon a time", max_tokens=24, temperature=0.9, seed=7)
    b = "".join(llm.stream("Once upon a time", max_tokens=24, temperature=0.9, seed=7))
    assert a == b


def test_async_stream_matches(llms):
    llm = llms["smol"]

    async def collect():
        return [p async for p in hanzo.astream(llm, "Once upon a time", max_tokens=16, temperature=0)]

    assert "".join(asyncio.run(collect())) == llm.generate("Once upon a time", max_tokens=16, temperature=0)


def test_chat_calls_a_tool(llms):
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"],
            },
        },
    }
    ask = [{"role": "user", "content": "What is the weather like in Paris right now, in celsius?"}]
    r = llms["qwen"].chat(ask, tools=[weather], max_tokens=100, temperature=0)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert "paris" in json.loads(call["function"]["arguments"])["city"].lower()
    plain = llms["qwen"].chat(ask, tool_choice="none", tools=[weather], max_tokens=1, temperature=0)
    assert "tool_calls" not in plain["choices"][0]["message"]


def test_max_context_tokens_bounds_each_generation(smollm2):
    llm = hanzo.LLM(smollm2, threads=2, max_context_tokens=24)
    assert llm.info["max_context_tokens"] == 24
    prompt = "Once upon a time"
    n = len(llm.tokenize(prompt))
    stream = llm.stream(prompt, max_tokens=None, temperature=0)
    text = "".join(stream)
    # Up to the cap exactly (or an end of text before it).
    assert len(stream.tokens) == 24 - n or stream.finish_reason == "stop"
    assert stream.finish_reason == "length" and text
    with pytest.raises(ValueError, match="context"):
        llm.generate("word " * 40)
    with pytest.raises(ValueError, match="at least 2"):
        hanzo.LLM(smollm2, max_context_tokens=1)


def test_tokenizer_and_logits(llms):
    llm = llms["qwen"]
    ids = llm.tokenize("def add(a, b):\n    return a + b")
    assert llm.detokenize(ids) == "def add(a, b):\n    return a + b"
    logits = llm.logits(ids)
    assert logits.shape == (len(ids), llm.info["vocab_size"]) and logits.dtype == np.float32
    assert np.isfinite(logits).all()
    # The greedy continuation's first token is the last row's argmax.
    first = llm.generate("def add(a, b):\n    return a + b", max_tokens=1, temperature=0)
    assert llm.tokenize(first, add_special=False)[0] == int(logits[-1].argmax())


def test_perplexity_equals_the_native_binarys(llms, models, engine_bin):
    text = open(os.path.join(REFERENCE, "perplexity-text.txt")).read()
    ours = llms["smol"].perplexity(text, ctx=128)
    out = subprocess.run(
        [engine_bin, "-t", "2", "perplexity", "-m", models["smol"], "-f", os.path.join(REFERENCE, "perplexity-text.txt"), "-c", "128"],
        check=True, capture_output=True, text=True,
    ).stdout
    want = float(re.search(r"PPL = ([0-9.]+)", out).group(1))
    assert ours["chunks"] >= 2 and ours["scored"] == ours["chunks"] * 63
    assert round(ours["perplexity"], 4) == want
    with pytest.raises(ValueError, match="tokens"):
        llms["smol"].perplexity("too short", ctx=128)


def test_ctrl_c_interrupts_a_generation(llms):
    llm = llms["qwen"]
    # Counting goes on far past the signal (a reply that ends by itself could finish first).
    prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    started = time.time()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate(prompt, max_tokens=2000, temperature=0)
    finally:
        timer.cancel()
        timer.join()
    assert time.time() - started < 10
    assert llm.generate("def f():", max_tokens=4, temperature=0)


def test_the_gil_is_released_while_a_model_runs(llms):
    llm = llms["qwen"]
    done = threading.Event()
    t = threading.Thread(target=lambda: (llm.generate("def f(x):", max_tokens=24, temperature=0), done.set()))
    ticks = 0
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    assert ticks > 50


def test_embeddings_match_sentence_transformers(minilm):
    ref = json.load(open(os.path.join(REFERENCE, "all-minilm-l6-v2-embeddings-sentence-transformers.json")))
    texts = [s["text"] for s in ref["sentences"]]
    want = np.array([s["embedding"] for s in ref["sentences"]], dtype=np.float32)
    e = hanzo.Embedder(minilm, threads=2)
    got = e.encode(texts, batch_size=2)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.abs(got - want).max() < 1e-5
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.99999
    one = e.encode(texts[0])
    assert one.shape == (e.dimension,) and np.abs(one - want[0]).max() < 1e-5
    assert e.encode(texts, normalize_embeddings=True).shape == want.shape


def test_a_language_model_embeds_by_last_token_pooling_as_llama_cpp(qwen):
    ref = json.load(open(os.path.join(REFERENCE, "qwen2.5-coder-0.5b-embeddings-last-llamacpp.json")))
    texts = [i["text"] for i in ref["items"]]
    want = np.array([i["embedding"] for i in ref["items"]], dtype=np.float64)
    e = hanzo.Embedder(qwen, threads=2)
    got = e.encode(texts)
    assert got.shape == (len(texts), 896) == (len(texts), e.dimension)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = (got * want).sum(1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.999, cos


def test_bad_requests_raise_the_right_exceptions(llms, tmp_path):
    llm = llms["smol"]
    with pytest.raises(ValueError, match="max_tokens"):
        llm.generate("hi", max_tokens=-1)
    with pytest.raises(ValueError, match="max_tokens"):
        llm.generate("hi", max_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        llm.generate("hi", temperature=5.0)
    with pytest.raises(ValueError, match="role"):
        llm.chat([{"role": "wizard", "content": "hi"}])
    with pytest.raises(ValueError):
        llm.chat([])
    with pytest.raises(ValueError, match="out of range"):
        llm.logits([10**9])
    with pytest.raises(FileNotFoundError):
        hanzo.LLM(str(tmp_path / "missing.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(ValueError):
        hanzo.LLM(str(bad))
    with pytest.raises(ValueError):
        hanzo.Embedder(str(tmp_path))
    # Still serving after all of that.
    assert llm.generate("The sky is", max_tokens=4, temperature=0)

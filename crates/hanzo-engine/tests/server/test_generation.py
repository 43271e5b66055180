"""Chat and text completions through the official `openai` client, checked against the
command line's greedy output, the transformers reference and the SSE wire format."""

import json
import math
import os
import subprocess

from conftest import BIN, QWEN, REFERENCE

HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]


def cli_greedy_chat(prompt, n):
    """`hanzo-engine run --chat` greedy: the single-stream path the server must reproduce."""
    out = subprocess.run(
        [BIN, "-t", "2", "run", "-m", QWEN, "--chat", "--temp", "0", "-n", str(n), prompt],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.endswith("\n")
    return out[:-1]


def test_chat_equals_the_command_lines_greedy_reply(server):
    c = server.client()
    r = c.chat.completions.create(model="qwen", messages=HAIKU, max_tokens=24, temperature=0)
    want = cli_greedy_chat(HAIKU[0]["content"], 24)
    assert r.choices[0].message.content == want
    assert r.choices[0].message.role == "assistant"
    assert r.object == "chat.completion" and r.model == "qwen"
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    # ChatML around one user turn: the template adds Qwen's default system prompt.
    assert 20 < u.prompt_tokens < 60
    if r.choices[0].finish_reason == "length":
        assert u.completion_tokens == 24


def test_streamed_chat_with_usage_equals_the_whole_reply(server):
    c = server.client()
    whole = c.chat.completions.create(model="qwen", messages=HAIKU, max_tokens=20, temperature=0)
    chunks = list(
        c.chat.completions.create(
            model="qwen",
            messages=HAIKU,
            max_tokens=20,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == whole.choices[0].finish_reason
    assert all(f is None for f in finishes[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(ch.usage is None for ch in chunks[:-1])
    assert len({ch.id for ch in chunks}) == 1


def test_sse_framing_byte_for_byte(server):
    body = {
        "model": "qwen",
        "messages": HAIKU,
        "max_tokens": 5,
        "temperature": 0,
        "stream": True,
    }
    r = server.request("POST", "/v1/chat/completions", body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    raw = r.raw
    events = raw.split(b"\n\n")
    assert events[-1] == b"", "the stream ends with a blank line"
    events = [e for e in events[:-1] if not e.startswith(b":")]  # keep-alive comments
    assert events[-1] == b"data: [DONE]"
    for e in events[:-1]:
        assert e.startswith(b"data: ") and b"\n" not in e, e
        chunk = json.loads(e[len(b"data: ") :])
        assert chunk["object"] == "chat.completion.chunk"
    # Role chunk, 5 content chunks at most, the finish chunk.
    assert 3 <= len(events) - 1 <= 7


def test_n_choices_are_real_and_seeded(server):
    c = server.client()
    kw = dict(
        model="qwen", messages=HAIKU, max_tokens=12, temperature=1.0, seed=7, n=3, logprobs=True
    )
    a = c.chat.completions.create(**kw)
    b = c.chat.completions.create(**kw)
    assert [ch.index for ch in a.choices] == [0, 1, 2]
    texts = [ch.message.content for ch in a.choices]
    assert texts == [ch.message.content for ch in b.choices], "same seed, same choices"
    assert len(set(texts)) > 1, f"three samples at temperature 1 all equal: {texts}"
    assert a.usage.completion_tokens == sum(len(ch.logprobs.content) for ch in a.choices)
    # Streaming: every choice gets its role chunk and its finish.
    chunks = list(c.chat.completions.create(**kw, stream=True))
    streamed = ["", "", ""]
    for ch in chunks:
        for choice in ch.choices:
            streamed[choice.index] += choice.delta.content or ""
    assert streamed == texts


def test_logprobs_describe_the_greedy_tokens(server):
    c = server.client()
    r = c.chat.completions.create(
        model="qwen", messages=HAIKU, max_tokens=10, temperature=0, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token
        assert len(t.top_logprobs) == 3
        tops = [a.logprob for a in t.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert t.top_logprobs[0].token == t.token
        assert math.isclose(t.top_logprobs[0].logprob, t.logprob)
        assert sum(math.exp(x) for x in tops) <= 1.0 + 1e-5


def test_stop_strings_end_the_text_before_them(server):
    c = server.client()
    full = c.chat.completions.create(model="qwen", messages=HAIKU, max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    # A stop string from the middle of the reply, possibly spanning a token boundary.
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    want = text[: text.index(stop)]
    r = c.chat.completions.create(
        model="qwen", messages=HAIKU, max_tokens=24, temperature=0, stop=[stop, "zzzz"]
    )
    assert r.choices[0].message.content == want
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(
            model="qwen", messages=HAIKU, max_tokens=24, temperature=0, stop=stop, stream=True
        )
        if ch.choices
    )
    assert streamed == want


def test_text_completion_tracks_the_transformers_reference(server):
    ref = json.load(open(os.path.join(REFERENCE, "qwen2.5-coder-0.5b-q4_k_m-transformers.json")))
    c = server.client()
    r = c.completions.create(
        model="qwen", prompt=ref["prompt_ids"], max_tokens=8, temperature=0, logprobs=5
    )
    assert r.object == "text_completion"
    lp = r.choices[0].logprobs
    # The first token: the reference's top token, with a close probability (the fixture's
    # Q4_K_M weights against transformers' f32 dequantization of them).
    top = ref["next_token_top5"][0]
    assert lp.tokens[0] == top["text"]
    assert abs(lp.token_logprobs[0] - top["logprob"]) < 0.15
    assert set(lp.top_logprobs[0]) >= {t["text"] for t in ref["next_token_top5"][:2]}
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0])
    assert "".join(lp.tokens) == r.choices[0].text
    # The reference's greedy text starts the same way (its first steps are far from ties).
    assert ref["greedy_32_text"].startswith(r.choices[0].text[:12])
    # A text prompt gives the same as its ids.
    t = c.completions.create(model="qwen", prompt=ref["prompt"], max_tokens=8, temperature=0)
    assert t.choices[0].text == r.choices[0].text
    assert t.usage.prompt_tokens == len(ref["prompt_ids"])
    chunks = list(
        c.completions.create(
            model="qwen", prompt=ref["prompt"], max_tokens=8, temperature=0, stream=True
        )
    )
    assert "".join(ch.choices[0].text for ch in chunks) == r.choices[0].text


def test_logit_bias_and_penalties_change_the_choice(server):
    c = server.client()
    base = c.completions.create(model="qwen", prompt="1, 2, 3, 4,", max_tokens=1, temperature=0)
    tok = c.completions.create(
        model="qwen", prompt="1, 2, 3, 4,", max_tokens=1, temperature=0, logprobs=1
    ).choices[0].logprobs.tokens[0]
    ids = server.request(
        "POST",
        "/v1/completions",
        {"model": "qwen", "prompt": "1, 2, 3, 4,", "max_tokens": 1, "temperature": 0},
    ).json()
    assert ids["choices"][0]["text"] == base.choices[0].text == tok
    # Ban the greedy token: the answer changes.
    tokenized = subprocess.run(
        [BIN, "tokenize", "--no-bos", "-m", QWEN, tok], capture_output=True, text=True, check=True
    ).stdout
    (tid,) = json.loads(tokenized)
    banned = c.completions.create(
        model="qwen",
        prompt="1, 2, 3, 4,",
        max_tokens=1,
        temperature=0,
        logit_bias={str(tid): -100},
    )
    assert banned.choices[0].text != tok

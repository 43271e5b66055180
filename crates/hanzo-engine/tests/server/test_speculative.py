"""Speculative decoding inside continuous batching, by prompt lookup (`serve --lookup`) and
with a draft model (`serve --draft-model`, a Q2_K copy of the model made by `quantize`):
greedy replies equal the same requests on a server without it, alone and batched together;
the acceptance shows in /metrics; every KV block the turned-down drafts took comes back."""

import concurrent.futures
import subprocess

import pytest

from conftest import BIN, QWEN, Server, wait_for

CODE = """def summarize(values):
    count = 0
    for v in values:
        if v is None:
            continue
        count += v
    average = count / len(values) if values else 0
    print("count:", count)
    return count, average
"""

EDITS = [
    "Rename the variable `count` to `total` in this function and give the whole function back.",
    "Add a docstring to this function and give the whole function back.",
    "Rewrite this function with type hints and give the whole function back.",
]


@pytest.fixture(scope="module")
def lookup_server():
    s = Server("-m", f"qwen={QWEN}", "--kv-budget", "256M", "--lookup", "3", mcp=False)
    yield s
    s.stop()


def ask(server, i, max_tokens=112, **kw):
    r = server.client(timeout=300).chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": f"{EDITS[i]}\n\n```python\n{CODE}```"}],
        max_tokens=max_tokens,
        temperature=0,
        **kw,
    )
    return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens


def assert_sampled_replies_repeat(client, messages, max_tokens, seed):
    """Two sampled requests with the same seed and two choices get the same choices."""
    r = [
        client.chat.completions.create(
            model="qwen", messages=messages, max_tokens=max_tokens, temperature=0.8, seed=seed,
            n=2
        )
        for _ in range(2)
    ]
    assert [ch.message.content for ch in r[0].choices] == [
        ch.message.content for ch in r[1].choices
    ]
    assert r[0].usage.completion_tokens > 0


def test_greedy_replies_are_those_without_speculation(server, lookup_server):
    assert wait_for(lambda: lookup_server.metric("hanzo_engine_kv_blocks_used") == 0)
    plain = [ask(server, i) for i in range(len(EDITS))]
    alone = [ask(lookup_server, i) for i in range(len(EDITS))]
    assert alone == plain
    # The last check is counted after its reply went out, before its blocks go back.
    assert wait_for(lambda: lookup_server.metric("hanzo_engine_kv_blocks_used") == 0)
    m = lookup_server.metrics()
    drafted = m['hanzo_engine_spec_decode_num_draft_tokens_total{model_name="qwen"}']
    kept = m['hanzo_engine_spec_decode_num_accepted_tokens_total{model_name="qwen"}']
    # The replies repeat the listing: many drafted tokens are kept, not all.
    assert 0 < kept < drafted, (kept, drafted)
    assert kept > 0.3 * sum(n for _, _, n in plain), (kept, plain)
    rate = m['hanzo_engine_spec_decode_draft_acceptance_rate{model_name="qwen"}']
    assert rate == pytest.approx(kept / drafted)
    # Together in one batch, each reply is still its solo reply.
    with concurrent.futures.ThreadPoolExecutor(len(EDITS)) as pool:
        together = list(pool.map(lambda i: ask(lookup_server, i), range(len(EDITS))))
    assert together == plain
    # Every block a turned-down draft took went back to the pool.
    assert wait_for(lambda: lookup_server.metric("hanzo_engine_kv_blocks_used") == 0)
    assert lookup_server.metric("hanzo_engine_num_requests_running") == 0


def test_streams_sampling_and_grammars_run_beside_speculation(lookup_server):
    c = lookup_server.client(timeout=300)
    messages = [{"role": "user", "content": f"{EDITS[0]}\n\n```python\n{CODE}```"}]
    chunks = c.chat.completions.create(
        model="qwen", messages=messages, max_tokens=64, temperature=0, stream=True
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == ask(lookup_server, 0, max_tokens=64)[0]
    # Sampled replies repeat with their seed; n choices each draft on their own sequence.
    assert_sampled_replies_repeat(c, messages, max_tokens=48, seed=9)
    # max_tokens ends the reply where it would without drafts (drafts stop short of it).
    text, finish, n = ask(lookup_server, 0, max_tokens=7)
    assert (finish, n) == ("length", 7)
    assert wait_for(lambda: lookup_server.metric("hanzo_engine_kv_blocks_used") == 0)


@pytest.fixture(scope="module")
def draft_server(tmp_path_factory):
    draft = tmp_path_factory.mktemp("draft") / "qwen-q2k.gguf"
    subprocess.run([BIN, "quantize", QWEN, str(draft), "--type", "Q2_K"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s = Server("-m", f"qwen={QWEN}", "--kv-budget", "256M", "--draft-model", str(draft),
               "--draft-k", "6", mcp=False)
    yield s
    s.stop()


def test_a_draft_model_keeps_greedy_replies_alone_and_batched(server, draft_server):
    plain = [ask(server, i, max_tokens=64) for i in range(len(EDITS))]
    alone = [ask(draft_server, i, max_tokens=64) for i in range(len(EDITS))]
    assert alone == plain
    with concurrent.futures.ThreadPoolExecutor(len(EDITS)) as pool:
        together = list(pool.map(lambda i: ask(draft_server, i, max_tokens=64), range(len(EDITS))))
    assert together == plain
    assert wait_for(lambda: draft_server.metric("hanzo_engine_kv_blocks_used") == 0)
    m = draft_server.metrics()
    drafted = m['hanzo_engine_spec_decode_num_draft_tokens_total{model_name="qwen"}']
    kept = m['hanzo_engine_spec_decode_num_accepted_tokens_total{model_name="qwen"}']
    assert 0 < kept < drafted, (kept, drafted)
    # Sampled replies repeat with their seed (each choice's sampler draws its drafts too).
    messages = [{"role": "user", "content": f"{EDITS[1]}\n\n```python\n{CODE}```"}]
    assert_sampled_replies_repeat(draft_server.client(timeout=300), messages, max_tokens=32, seed=5)
    assert wait_for(lambda: draft_server.metric("hanzo_engine_kv_blocks_used") == 0)

"""Many clients at once, and clients that leave: every stream equals the same request run
alone, nothing hangs, and every KV block returns to the pool (as /metrics shows)."""

import concurrent.futures
import socket
import time

from conftest import wait_for

CLIENTS = 32
TOKENS = 16


def prompt(i):
    topics = ["rivers", "ants", "stars", "bread", "maps", "bells", "glass", "moss"]
    return [
        {
            "role": "user",
            "content": f"In one sentence, tell me fact number {i} about {topics[i % len(topics)]}.",
        }
    ]


def stream_text(client, i):
    chunks = client.chat.completions.create(
        model="qwen", messages=prompt(i), max_tokens=TOKENS, temperature=0, stream=True
    )
    text, finish = "", None
    for ch in chunks:
        for c in ch.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish


def test_concurrent_streams_equal_their_solo_runs_and_free_the_pool(server):
    c = server.client(timeout=300)
    assert wait_for(lambda: server.metric("hanzo_engine_kv_blocks_used") == 0)
    solo = [stream_text(c, i) for i in range(CLIENTS)]
    rss_before = server.rss_kib()
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        together = list(pool.map(lambda i: stream_text(c, i), range(CLIENTS)))
    elapsed = time.monotonic() - t0
    for i, (a, b) in enumerate(zip(solo, together)):
        assert a == b, f"client {i}: alone {a!r}, together {b!r}"
        assert b[1] in ("stop", "length")
    assert elapsed < 240
    assert wait_for(lambda: server.metric("hanzo_engine_kv_blocks_used") == 0)
    assert server.metric("hanzo_engine_num_requests_running") == 0
    assert server.metric("hanzo_engine_num_requests_waiting") == 0
    assert server.rss_kib() <= rss_before * 1.10, (rss_before, server.rss_kib())
    # The requests shared their chat template's prefix blocks.
    assert server.metric("hanzo_engine_prefix_cache_hits_total") > 0
    assert server.metric("hanzo_engine_time_to_first_token_seconds_count") >= 2 * CLIENTS


def raw_request(server, body):
    """Sends a chat request on a bare socket (so the test decides when to hang up)."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    data = body.encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_clients_that_leave_free_their_blocks_at_once(server):
    import json

    aborted = server.metric("hanzo_engine_request_success_total", finished_reason="abort")
    # Mid-decode, streaming: read a few chunks, hang up. Qwen's end tokens are banned so the
    # reply cannot end by itself before the hang-up is noticed.
    never_end = {"151643": -100, "151645": -100}
    body = {
        "model": "qwen",
        "messages": prompt(1),
        "max_tokens": 2000,
        "stream": True,
        "logit_bias": never_end,
    }
    sock = raw_request(server, json.dumps(body))
    got = b""
    while got.count(b"data: ") < 4:
        got += sock.recv(4096)
    assert wait_for(lambda: server.metric("hanzo_engine_kv_blocks_used") > 0)
    sock.close()
    assert wait_for(lambda: server.metric("hanzo_engine_kv_blocks_used") == 0, timeout=5)
    # Mid-decode, not streaming.
    body["stream"] = False
    sock = raw_request(server, json.dumps(body))
    assert wait_for(lambda: server.metric("hanzo_engine_generation_tokens_total") > 0)
    assert wait_for(lambda: server.metric("hanzo_engine_num_requests_running") == 1)
    time.sleep(0.3)
    sock.close()
    assert wait_for(lambda: server.metric("hanzo_engine_kv_blocks_used") == 0, timeout=5)
    # Mid-prefill: a prompt of three chunks; hang up during the first.
    long = [{"role": "user", "content": "tell me more " * 400}]
    body = {"model": "qwen", "messages": long, "max_tokens": 5, "stream": True}
    prefilled = server.metric("hanzo_engine_prompt_tokens_total")
    sock = raw_request(server, json.dumps(body))
    time.sleep(1.0)
    sock.close()
    assert wait_for(lambda: server.metric("hanzo_engine_prompt_tokens_total") > prefilled)
    assert wait_for(lambda: server.metric("hanzo_engine_kv_blocks_used") == 0, timeout=20)
    # It stopped after the chunk that was running when the client left.
    assert server.metric("hanzo_engine_prompt_tokens_total") - prefilled <= 512
    now = server.metric("hanzo_engine_request_success_total", finished_reason="abort")
    assert now == aborted + 3, (aborted, now, server.metrics())

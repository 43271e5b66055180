"""The cloud fallback against a real `hanzo-engine serve` on loopback (Qwen2.5-Coder as the
cloud, SmolLM2 on the device): a prompt longer than the device's context and a request for
the cloud's model are answered by the cloud with the reason said, token by token when
streamed; a zero entropy threshold sends everything there; the fallback counter moves by
exactly the number of fallbacks; with the cloud stopped, a request answered before comes from
the cache and a new one gets the device's answer, the failure reported, within the timeout."""

import os
import re
import tempfile
import time

import openai

from conftest import Engine, Server

CLOUD = "cloudqwen"
LONG = "Here are some notes about the sea. " * 40 + "\nIn one sentence, what are these notes about?"


def ask(client, model, content, **kw):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], temperature=0, max_tokens=24, **kw
    )


def extra(response):
    return response.model_extra["hanzo_edge"]


def fallbacks(server):
    status, text = server.request("GET", "/metrics")
    assert status == 200
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'hanzo_edge_cloud_fallback_total\{reason="(\w+)"\} (\S+)', text)
    }


def test_the_cloud_answers_what_the_device_should_not():
    engine = Engine(CLOUD)
    cache = tempfile.mkdtemp(prefix="hanzo-cloud-cache-")
    edge = Server("--max-context-tokens", "128", "--cloud-url", engine.url, "--cloud-model", CLOUD,
                  "--cloud-timeout", "20", "--cache-dir", cache)
    try:
        direct = openai.OpenAI(base_url=engine.url + "/v1", api_key="none", max_retries=0)
        client = edge.client()
        models = [m.id for m in client.models.list().data]
        assert models == ["smol", CLOUD], models
        # The cloud's model answers chats; a completion asked of it is refused plainly.
        try:
            client.completions.create(model=CLOUD, prompt="Hello", max_tokens=4)
            raise AssertionError("a completion from the cloud's model")
        except openai.BadRequestError as e:
            assert e.body["param"] == "model" and "chat/completions" in e.body["message"], e.body

        # A short prompt stays on the device.
        local = ask(client, "smol", "Name three colours.")
        assert extra(local)["source"] == "local" and extra(local)["fallback_reason"] is None

        # Longer than the device's 128 positions: the cloud answers, as the engine itself does.
        long = ask(client, "smol", LONG)
        assert extra(long)["source"] == "cloud", extra(long)
        assert extra(long)["fallback_reason"] == "context"
        assert extra(long)["cloud_error"] is None
        want = ask(direct, CLOUD, LONG).choices[0].message.content
        assert long.choices[0].message.content == want

        # Streamed: passed through piece by piece, the source in the last chunk.
        pieces, last = [], None
        for chunk in ask(client, "smol", LONG + " Answer briefly.", stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            last = chunk
        assert len(pieces) > 3, pieces
        assert last.model_extra["hanzo_edge"]["source"] == "cloud"

        # The cloud's model by name.
        named = ask(client, CLOUD, "Name three colours.")
        assert extra(named)["source"] == "cloud" and extra(named)["fallback_reason"] == "model"
        assert named.choices[0].message.content == ask(direct, CLOUD, "Name three colours.").choices[0].message.content

        counts = fallbacks(edge)
        assert counts == {"context": 2.0, "entropy": 0.0, "model": 1.0, "thermal": 0.0}, counts

        # The cloud goes away. What it answered before comes from the cache, offline.
        engine.stop()
        again = ask(client, "smol", LONG)
        assert extra(again)["source"] == "cloud" and extra(again)["cached"] is True
        assert again.choices[0].message.content == want
        # A new one gets the device's answer (evicting to fit), the failure reported, in time.
        t0 = time.time()
        fresh = ask(client, "smol", LONG.replace("sea", "mountains"))
        took = time.time() - t0
        assert extra(fresh)["source"] == "local", extra(fresh)
        assert extra(fresh)["fallback_reason"] == "context"
        assert extra(fresh)["cloud_error"], extra(fresh)
        assert fresh.choices[0].message.content
        assert took < 20 + 30, took  # the timeout, and the device's own answer
        status, text = edge.request("GET", "/metrics")
        assert re.search(r"hanzo_edge_cloud_errors_total 1\b", text), text
    finally:
        edge.stop()
        engine.stop()


def test_uncertain_drafts_go_to_the_cloud():
    engine = Engine(CLOUD)
    # A threshold of 0 nats: every draft is too uncertain.
    edge = Server("--max-context-tokens", "512", "--cloud-url", engine.url, "--cloud-model", CLOUD,
                  "--fallback-entropy", "0", "--entropy-window", "4")
    try:
        client = edge.client()
        r = ask(client, "smol", "Name three colours.")
        assert extra(r)["source"] == "cloud" and extra(r)["fallback_reason"] == "entropy", extra(r)
        direct = openai.OpenAI(base_url=engine.url + "/v1", api_key="none", max_retries=0)
        assert r.choices[0].message.content == ask(direct, CLOUD, "Name three colours.").choices[0].message.content
        assert fallbacks(edge)["entropy"] == 1.0
    finally:
        edge.stop()
        engine.stop()
    # And a threshold no draft reaches keeps them all on the device.
    engine = Engine(CLOUD)
    edge = Server("--max-context-tokens", "512", "--cloud-url", engine.url, "--cloud-model", CLOUD,
                  "--fallback-entropy", "1000")
    try:
        r = ask(edge.client(), "smol", "Name three colours.")
        assert extra(r)["source"] == "local" and extra(r)["fallback_reason"] is None, extra(r)
    finally:
        edge.stop()
        engine.stop()


def test_the_api_key_goes_to_the_cloud_and_nowhere_else():
    engine = Engine(CLOUD, env={"HANZO_API_KEY": "sesame-7f3a"})
    os.environ["TEST_CLOUD_KEY"] = "sesame-7f3a"
    edge = Server("--max-context-tokens", "128", "--cloud-url", engine.url, "--cloud-model", CLOUD,
                  "--cloud-api-key-env", "TEST_CLOUD_KEY")
    keyless = Server("--max-context-tokens", "128", "--cloud-url", engine.url, "--cloud-model", CLOUD)
    try:
        r = ask(edge.client(), CLOUD, "Name three colours.")
        assert extra(r)["source"] == "cloud" and extra(r)["cloud_error"] is None, extra(r)
        # Without the key the cloud refuses (401), and the device answers.
        r = ask(keyless.client(), CLOUD, "Name three colours.")
        assert extra(r)["source"] == "local" and "401" in extra(r)["cloud_error"], extra(r)
    finally:
        edge.stop()
        keyless.stop()
        engine.stop()
    assert "sesame" not in "".join(edge.log + keyless.log)

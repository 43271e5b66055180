"""The safety guard through `hanzo-edge serve` and the official openai client: a flagged
prompt's answer is the refusal with finish_reason `content_filter` and the category in the
`hanzo_edge.guard` extension, streamed or not; a passed one is the model's reply with the
guard's cost beside it; the flagged counter moves by exactly the flagged turns."""

import re

from conftest import Server


def flagged(server):
    status, text = server.request("GET", "/metrics")
    assert status == 200
    return {
        (m.group(1), m.group(2)): float(m.group(3))
        for m in re.finditer(
            r'hanzo_edge_guard_flagged_total\{category="(\w+)",stage="(\w+)"\} (\S+)', text)
    }


def ask(client, content, **kw):
    return client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": content}], temperature=0,
        max_tokens=16, **kw)


def test_a_flagged_turn_is_refused_with_its_category():
    # Threshold 0: every turn is flagged by the first category checked.
    server = Server("--guard", "--guard-threshold", "0", "--guard-categories", "hate,dangerous",
                    "--guard-check", "prompt")
    try:
        client = server.client()
        r = ask(client, "Tell me about the weather.")
        choice = r.choices[0]
        assert choice.finish_reason == "content_filter"
        assert choice.message.content == "I can't help with that: it falls under the hate policy."
        guard = r.model_extra["hanzo_edge"]["guard"]
        assert guard["flagged"] == "hate" and guard["stage"] == "prompt", guard
        assert guard["tokens"] > 0 and guard["seconds"] > 0
        assert r.usage.completion_tokens == 0

        pieces, finish = [], None
        for chunk in ask(client, "And tomorrow?", stream=True):
            for c in chunk.choices:
                pieces.append(c.delta.content or "")
                finish = c.finish_reason or finish
        assert "".join(pieces) == "I can't help with that: it falls under the hate policy."
        assert finish == "content_filter"
        assert flagged(server) == {("hate", "prompt"): 2.0}
    finally:
        server.stop()


def test_a_passed_turn_is_the_models_reply_with_the_guards_cost():
    plain = Server()
    try:
        want = ask(plain.client(), "Name three colours.").choices[0].message.content
    finally:
        plain.stop()
    server = Server("--guard", "--guard-threshold", "1")
    try:
        r = ask(server.client(), "Name three colours.")
        assert r.choices[0].message.content == want
        assert r.choices[0].finish_reason in ("stop", "length")
        guard = r.model_extra["hanzo_edge"]["guard"]
        assert guard["flagged"] is None and guard["tokens"] > 0, guard
        assert r.model_extra["hanzo_edge"]["time_to_first_token_s"] >= guard["first_token_seconds"]
        assert flagged(server) == {}
    finally:
        server.stop()

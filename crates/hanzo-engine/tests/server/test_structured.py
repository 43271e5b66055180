"""Structured output (`--features structured-output`): every reply parses and validates
against its schema, whatever the sampling; schemas that cannot be enforced are a 400."""

import json
import os

import openai
import pytest

from conftest import wait_for

FEATURES = os.environ.get("HANZO_FEATURES", "").split(",")
pytestmark = pytest.mark.skipif(
    "structured-output" not in FEATURES, reason="built without the structured-output feature"
)

jsonschema = pytest.importorskip("jsonschema") if "structured-output" in FEATURES else None

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "age", "address"],
        "additionalProperties": False,
    },
    "tags": {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"type": "string", "enum": ["red", "green", "blue"]},
                "minItems": 1,
                "maxItems": 3,
            },
            "score": {"type": "number"},
            "ok": {"type": "boolean"},
        },
        "required": ["tags", "score", "ok"],
        "additionalProperties": False,
    },
    "list": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"step": {"type": "integer"}, "text": {"type": "string", "maxLength": 30}},
            "required": ["step", "text"],
        },
        "minItems": 2,
        "maxItems": 3,
    },
}

ASK = {
    "person": "Describe a fictional person as JSON.",
    "tags": "Pick some colors for a flag, with a score and whether you like it.",
    "list": "List the steps to make tea.",
}


def fmt(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_replies_validate_against_their_schema(server, name, temperature):
    c = server.client()
    r = c.chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": ASK[name]}],
        response_format=fmt(name),
        temperature=temperature,
        seed=3,
        n=2,
        max_tokens=200,
    )
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), SCHEMAS[name])


def test_streamed_json_object_parses(server):
    c = server.client()
    text = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(
            model="qwen",
            messages=[{"role": "user", "content": "Say hello."}],
            response_format={"type": "json_object"},
            temperature=0,
            max_tokens=100,
            stream=True,
        )
        if ch.choices
    )
    assert isinstance(json.loads(text), dict), text


def test_unenforceable_schemas_are_400(server):
    c = server.client()
    for schema in [
        {"type": "object", "if": {"type": "object"}},
        {"type": "array", "unevaluatedItems": False},
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(
                model="qwen",
                messages=[{"role": "user", "content": "x"}],
                response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
            )
        assert e.value.param == "response_format"
        assert "Unimplemented" in str(e.value) or "unsupported" in str(e.value).lower()
    assert wait_for(lambda: server.metric("hanzo_engine_kv_blocks_used") == 0)

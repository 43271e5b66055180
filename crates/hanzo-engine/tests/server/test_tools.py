"""Tool calling with Qwen2.5-Coder's own `<tool_call>` format: calls parsed into `tool_calls`,
streamed in the shape the official client's stream helper assembles, `tool_choice` honoured,
and a tool result answered. With the `structured-output` feature the arguments are held to
each function's parameter schema, and validated here with `jsonschema`."""

import json
import os

import openai
import pytest

FEATURES = os.environ.get("HANZO_FEATURES", "").split(",")
GRAMMAR = "structured-output" in FEATURES

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA name, e.g. Europe/Paris"}},
            "required": ["timezone"],
        },
    },
}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather like in Paris right now, in celsius?"}]


def check_arguments(call):
    """The arguments parse as JSON and, under the grammar, validate against the schema."""
    args = json.loads(call.function.arguments)
    schema = next(t for t in TOOLS if t["function"]["name"] == call.function.name)
    if GRAMMAR:
        import jsonschema

        jsonschema.validate(args, schema["function"]["parameters"])
    return args


def test_the_model_calls_a_tool_in_its_own_format(server):
    c = server.client()
    r = c.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, temperature=0, max_tokens=100)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    args = check_arguments(call)
    assert "paris" in args["city"].lower()
    # The tools are in the prompt: the template lays them out.
    plain = c.chat.completions.create(model="qwen", messages=ASK, temperature=0, max_tokens=1)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 100


def test_streamed_call_assembled_by_the_clients_stream_helper(server):
    c = server.client()
    whole = c.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, temperature=0, max_tokens=100)
    helper = getattr(c.chat.completions, "stream", None) or c.beta.chat.completions.stream
    kinds = set()
    with helper(model="qwen", messages=ASK, tools=TOOLS, temperature=0, max_tokens=100) as stream:
        for event in stream:
            kinds.add(event.type)
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in kinds, kinds
    assert "tool_calls.function.arguments.done" in kinds, kinds
    got = final.choices[0]
    assert got.finish_reason == "tool_calls"
    want = whole.choices[0].message.tool_calls
    assert [(t.function.name, t.function.arguments) for t in got.message.tool_calls] == [
        (t.function.name, t.function.arguments) for t in want
    ]


def test_streamed_call_chunks_have_the_openai_shape(server):
    body = {"model": "qwen", "messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 100, "stream": True}
    r = server.request("POST", "/v1/chat/completions", body)
    assert r.status_code == 200
    chunks = [
        json.loads(line[len("data: "):])
        for line in r.text.split("\n")
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    deltas = [d for ch in chunks for d in ch["choices"][0]["delta"].get("tool_calls", [])]
    assert len(deltas) >= 2
    first, rest = deltas[0], deltas[1:]
    assert first["index"] == 0 and first["type"] == "function"
    assert first["id"].startswith("call_") and first["function"]["name"] == "get_weather"
    for d in rest:
        assert set(d) == {"index", "function"} and set(d["function"]) == {"arguments"}
    json.loads("".join(d["function"]["arguments"] for d in deltas))
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_tool_result_goes_back_to_the_model(server):
    c = server.client()
    first = c.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, temperature=0, max_tokens=100)
    call = first.choices[0].message.tool_calls[0]
    result = {"city": "Paris", "temperature": 17, "unit": "celsius", "sky": "sunny"}
    messages = ASK + [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)},
    ]
    # The history's call and result reach the template (tests/chat_tools.rs checks the
    # rendering against transformers'); "none" asks for a text reply, and this small model's
    # reply draws on the result ("sunny" is only there).
    r = c.chat.completions.create(
        model="qwen", messages=messages, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=60
    )
    answer = r.choices[0]
    assert answer.message.tool_calls is None
    assert "sunny" in answer.message.content


def test_tool_choice_is_honoured(server):
    c = server.client()
    # A named function is called even where another fits the question better.
    r = c.chat.completions.create(
        model="qwen",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        temperature=0,
        max_tokens=100,
    )
    assert [t.function.name for t in r.choices[0].message.tool_calls] == ["get_time"]
    check_arguments(r.choices[0].message.tool_calls[0])
    # "required": a call even for small talk.
    r = c.chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": "Hello there!"}],
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
        max_tokens=100,
    )
    assert r.choices[0].finish_reason == "tool_calls"
    assert len(r.choices[0].message.tool_calls) >= 1
    # "none": the tools are not offered at all.
    r = c.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=30)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")


def test_parallel_calls_only_when_allowed(server):
    c = server.client()
    two = [{"role": "user", "content": "What is the weather in Paris and what is the weather in Tokyo, in celsius?"}]
    r = c.chat.completions.create(
        model="qwen", messages=two, tools=TOOLS, temperature=0, max_tokens=200, parallel_tool_calls=False
    )
    assert r.choices[0].finish_reason == "tool_calls"
    assert len(r.choices[0].message.tool_calls) == 1
    r = c.chat.completions.create(model="qwen", messages=two, tools=TOOLS, temperature=0, max_tokens=200)
    calls = r.choices[0].message.tool_calls
    assert len({t.id for t in calls}) == len(calls)
    for t in calls:
        check_arguments(t)


def test_bad_tool_requests_are_400(server):
    c = server.client()
    cases = [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model="qwen", messages=ASK, max_tokens=5, **extra)
        assert e.value.body["param"] == param, (extra, e.value.body)

#!/usr/bin/env python3
"""Record how a GGUF's chat template renders a chat with tools, as Hugging Face transformers
renders it (jinja2 with `trim_blocks`, `lstrip_blocks` and a `tojson` that is Python's
`json.dumps`), for tests/chat_tools.rs.

    python3 scripts/reference/chat_template_tools.py MODEL.gguf OUT.json

Needs jinja2 and gguf; the output is committed under crates/hanzo-transformers/tests/reference/.
"""
import json
import sys

import jinja2
from gguf import GGUFReader

TOOLS = [
    {
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
            },
        },
    },
    {"type": "function", "function": {"name": "now", "description": "The time — «UTC»."}},
]
MESSAGES = [
    {"role": "user", "content": "Weather in Paris and in Köln?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Köln", "unit": "celsius"}}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 17}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "{\"temperature\": 12}"},
    {"role": "assistant", "content": "17 °C in Paris, 12 °C in Köln."},
    {"role": "user", "content": "And the time?"},
]


def main():
    path, out = sys.argv[1], sys.argv[2]
    reader = GGUFReader(path)
    field = reader.fields["tokenizer.chat_template"]
    source = bytes(field.parts[field.data[0]]).decode()
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    text = env.from_string(source).render(messages=MESSAGES, tools=TOOLS, add_generation_prompt=True)
    with open(out, "w") as f:
        json.dump({"tools": TOOLS, "messages": MESSAGES, "rendered": text}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()

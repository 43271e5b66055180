"""MCP (`--features mcp`) with the official `mcp` Python SDK as the client: the tools are
listed and called over stdio (`hanzo-engine mcp`) and over streamable HTTP (`serve`)."""

import asyncio
import json
import os

import pytest

from conftest import BIN, MINILM, QWEN

FEATURES = os.environ.get("HANZO_FEATURES", "").split(",")
pytestmark = pytest.mark.skipif("mcp" not in FEATURES, reason="built without the mcp feature")

if "mcp" in FEATURES:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

TOOLS = ["hanzo_embed", "hanzo_infer", "hanzo_list_models"]


async def exercise(session):
    await session.initialize()
    assert sorted(t.name for t in (await session.list_tools()).tools) == TOOLS
    listed = await session.call_tool("hanzo_list_models", {})
    models = json.loads(listed.content[0].text)["models"]
    assert [(m["id"], m["kind"]) for m in models] == [("qwen", "chat"), ("minilm", "embedding")]
    reply = await session.call_tool(
        "hanzo_infer", {"prompt": "Write a haiku about the sea.", "max_tokens": 24}
    )
    assert not reply.is_error, reply
    text = reply.content[0].text
    emb = await session.call_tool("hanzo_embed", {"input": ["one", "two"]})
    vectors = json.loads(emb.content[0].text)["embeddings"]
    assert len(vectors) == 2 and len(vectors[0]) == 384
    assert abs(sum(x * x for x in vectors[0]) - 1.0) < 1e-4
    bad = await session.call_tool("hanzo_infer", {"prompt": "x", "model": "nope"})
    assert bad.is_error and "nope" in bad.content[0].text
    return text


def test_mcp_over_stdio():
    async def go():
        params = StdioServerParameters(
            command=BIN, args=["-t", "2", "mcp", "-m", f"qwen={QWEN}", "-m", f"minilm={MINILM}"]
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                return await exercise(session)

    text = asyncio.run(go())
    # The tool's default is greedy: the same reply as the chat endpoint at temperature 0.
    from test_generation import cli_greedy_chat

    assert text == cli_greedy_chat("Write a haiku about the sea.", 24)


def test_mcp_over_streamable_http(server):
    assert server.mcp_url, "".join(server.log)

    async def go():
        async with streamable_http_client(server.mcp_url) as (read, write, *_):
            async with ClientSession(read, write) as session:
                return await exercise(session)

    c = server.client()
    r = c.chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": "Write a haiku about the sea."}],
        max_tokens=24,
        temperature=0,
    )
    assert asyncio.run(go()) == r.choices[0].message.content

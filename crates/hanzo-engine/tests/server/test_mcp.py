"""MCP (the `mcp` feature, in the default build) with the official `mcp` Python SDK as the
client: the tools are listed and called over stdio (`hanzo-engine mcp`) and over streamable
HTTP (`serve --mcp-port`); `serve` without it opens no second port, and the lean build
(`--no-default-features`) refuses the option with a message."""

import asyncio
import http.client
import json
import os
import socket
import subprocess
import urllib.parse

import pytest

from conftest import BIN, MINILM, QWEN, Server

FEATURES = os.environ.get("HANZO_FEATURES", "").split(",")
with_mcp = pytest.mark.skipif("mcp" not in FEATURES, reason="built without the mcp feature")

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


@with_mcp
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


@with_mcp
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
    # Stateless: one POST calls a tool, no session first, and the answer is a JSON body.
    u = urllib.parse.urlparse(server.mcp_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "hanzo_list_models", "arguments": {}}}
    conn.request("POST", u.path, body=json.dumps(call), headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("application/json")
    body = json.loads(resp.read())
    conn.close()
    assert body["id"] == 7 and not body["result"]["isError"]
    assert "qwen" in body["result"]["content"][0]["text"]


def listening_ports(pid):
    """The TCP ports process `pid` listens on (its socket inodes matched in /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def refused(port):
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_serve_alone_opens_one_port():
    s = Server("-m", f"qwen={QWEN}", "--kv-budget", "64M", mcp=False)
    try:
        api_port = int(s.url.rsplit(":", 1)[1])
        assert listening_ports(s.proc.pid) == {api_port}
        assert s.mcp_url is None and not any("MCP" in line for line in s.log)
        assert refused(3691)
    finally:
        s.stop()


@pytest.mark.skipif("mcp" in FEATURES, reason="this build has MCP")
def test_lean_build_refuses_the_mcp_options():
    for flag in (["--mcp-port", "0"], ["--mcp-enabled"]):
        p = subprocess.run(
            [BIN, "serve", "-m", f"qwen={QWEN}", "--port", "0", *flag],
            capture_output=True, text=True, timeout=60,
        )
        assert p.returncode != 0
        assert "leaves out MCP" in p.stderr and "--features mcp" in p.stderr, p.stderr


@with_mcp
def test_mcp_enabled_listens_on_3691():
    if not refused(3691):
        pytest.skip("something else listens on 3691")
    s = Server("-m", f"qwen={QWEN}", "--kv-budget", "64M", "--mcp-enabled", mcp=False)
    try:
        api_port = int(s.url.rsplit(":", 1)[1])
        assert s.mcp_url == "http://127.0.0.1:3691/mcp", "".join(s.log)
        assert listening_ports(s.proc.pid) == {api_port, 3691}

        async def go():
            async with streamable_http_client(s.mcp_url) as (read, write, *_):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return sorted(t.name for t in (await session.list_tools()).tools)

        assert asyncio.run(go()) == TOOLS
    finally:
        s.stop()

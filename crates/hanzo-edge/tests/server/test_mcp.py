"""`hanzo-edge mcp` with the official `mcp` Python SDK as the client: only the tools granted
with --allow are listed; a file is read, written and listed inside the sandbox; hostile paths
come back as tool errors (is_error), with nothing outside the sandbox read or written."""

import asyncio
import json
import os
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BIN = os.environ["HANZO_EDGE_BIN"]


def session_run(args, body):
    async def go():
        params = StdioServerParameters(command=BIN, args=["mcp", *args])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return asyncio.run(go())


def test_only_granted_tools_are_listed_and_they_stay_inside():
    with tempfile.TemporaryDirectory() as base:
        inside = os.path.join(base, "box")
        os.mkdir(inside)
        with open(os.path.join(base, "secret.txt"), "w") as f:
            f.write("SECRET")
        with open(os.path.join(inside, "notes.txt"), "w") as f:
            f.write("the word is lighthouse")
        os.symlink(os.path.join(base, "secret.txt"), os.path.join(inside, "link"))

        async def body(s):
            names = sorted(t.name for t in (await s.list_tools()).tools)
            assert names == ["file_list", "file_read", "file_write"], names
            r = await s.call_tool("file_read", {"path": "notes.txt"})
            assert not r.is_error and r.content[0].text == "the word is lighthouse"
            w = await s.call_tool("file_write", {"path": "out/answer.txt", "content": "42"})
            assert not w.is_error, w
            assert json.loads(w.content[0].text)["bytes_written"] == 2
            listing = json.loads((await s.call_tool("file_list", {})).content[0].text)
            assert {e["name"] for e in listing["entries"]} == {"notes.txt", "out", "link"}
            for path in ["../secret.txt", "link", "/etc/passwd", "out/../../secret.txt", "a\u0000b"]:
                r = await s.call_tool("file_read", {"path": path})
                assert r.is_error and "SECRET" not in r.content[0].text, (path, r)
                r = await s.call_tool("file_write", {"path": path, "content": "PWNED"})
                assert r.is_error, (path, r)
            r = await s.call_tool("clipboard_read", {})
            assert r.is_error and "no tool" in r.content[0].text

        session_run(["--sandbox", inside, "--allow", "file_read,file_write,file_list"], body)
        with open(os.path.join(inside, "out", "answer.txt")) as f:
            assert f.read() == "42"
        with open(os.path.join(base, "secret.txt")) as f:
            assert f.read() == "SECRET"
        assert sorted(os.listdir(base)) == ["box", "secret.txt"]

        async def read_only(s):
            names = [t.name for t in (await s.list_tools()).tools]
            assert names == ["file_read"], names
            r = await s.call_tool("file_write", {"path": "x.txt", "content": "y"})
            assert r.is_error

        session_run(["--sandbox", inside, "--allow", "file_read"], read_only)
        assert not os.path.exists(os.path.join(inside, "x.txt"))

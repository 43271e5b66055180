"""Starts real `hanzo-engine serve` processes on free loopback ports for the API tests.

`tests/openai_server.rs` runs this suite under `cargo test` with the binary and fixture
paths in the environment: HANZO_ENGINE_BIN, HANZO_QWEN (a chat GGUF), HANZO_MINILM (an
embedding model directory).
"""

import os
import re
import signal
import subprocess
import threading
import time

import http.client
import json as _json
import urllib.parse

import openai
import pytest

BIN = os.environ["HANZO_ENGINE_BIN"]
QWEN = os.environ["HANZO_QWEN"]
MINILM = os.environ["HANZO_MINILM"]
REFERENCE = os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "hanzo-transformers", "tests", "reference"
)


class Server:
    """One `hanzo-engine serve` process; its log is kept for assertions and failures."""

    def __init__(self, *args, env=None, mcp=True):
        cmd = [BIN, "-t", "2", "serve", "--host", "127.0.0.1", "--port", "0", *args]
        if mcp and "mcp" in os.environ.get("HANZO_FEATURES", "").split(","):
            cmd += ["--mcp-port", "0"]
        self.proc = subprocess.Popen(
            cmd,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.log = []
        self.url = None
        self.mcp_url = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line)
                mcp = re.search(r"MCP on (http://\S+/mcp)", line)
                if mcp:
                    self.mcp_url = mcp.group(1)
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(120) or self.url is None:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.log))

    def client(self, **kw):
        kw.setdefault("api_key", "none")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 120)
        return openai.OpenAI(base_url=self.url + "/v1", **kw)

    def metrics(self):
        """The /metrics samples as {'name{labels}': value}."""
        text = self.request("GET", "/metrics").text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def metric(self, name, **labels):
        want = {f'{k}="{v}"' for k, v in labels.items()}
        total = 0.0
        for key, value in self.metrics().items():
            base, _, rest = key.partition("{")
            if base == name and want <= set(rest.rstrip("}").split(",")):
                total += value
        return total

    def request(self, method, path, body=None, headers=None, timeout=120):
        """One HTTP request with the standard library; returns a `Reply`."""
        u = urllib.parse.urlparse(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = _json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        reply = Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        conn.close()
        return reply

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Reply:
    def __init__(self, status, headers, raw):
        self.status_code, self.headers, self.raw = status, headers, raw

    @property
    def text(self):
        return self.raw.decode()

    def json(self):
        return _json.loads(self.raw)


@pytest.fixture(scope="session")
def server():
    s = Server("-m", f"qwen={QWEN}", "-m", f"minilm={MINILM}", "--kv-budget", "256M")
    yield s
    s.stop()


def wait_for(cond, timeout=30.0, every=0.05):
    """Polls `cond` until it is true; returns its last value."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > end:
            return v
        time.sleep(every)

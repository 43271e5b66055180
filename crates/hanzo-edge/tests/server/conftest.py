"""Starting the servers the tests talk to: `hanzo-edge serve` (`Server`) and, as the cloud
fallback's cloud, `hanzo-engine serve` (`Engine`), each on a free loopback port.

`tests/server.rs` runs these tests under `cargo test` with HANZO_EDGE_BIN (the binary),
HANZO_SMOLLM (SmolLM2-135M-Instruct, GGUF), HANZO_ENGINE_BIN and HANZO_QWEN
(Qwen2.5-Coder-0.5B-Instruct, GGUF) in the environment.
"""

import http.client
import os
import re
import subprocess
import threading

import openai

BIN = os.environ["HANZO_EDGE_BIN"]
MODEL = os.environ["HANZO_SMOLLM"]


class Launched:
    """A server process, its log collected, ready once a line of its log gives its address."""

    def __init__(self, cmd, ready_pattern, env=None):
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env={**os.environ, **(env or {})})
        self.log, self.url = [], None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(ready_pattern, line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(120) or self.url is None:
            self.stop()
            raise RuntimeError(f"{cmd[0]} did not start:\n" + "".join(self.log))
        self.host, self.port = self.url[len("http://"):].rsplit(":", 1)

    def client(self):
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=120)

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection(self.host, int(self.port), timeout=120)
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
        c.close()
        return r.status, data

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Server(Launched):
    """`hanzo-edge serve` on SmolLM2 as `smol`, with `args` added."""

    def __init__(self, *args):
        cmd = [BIN, "serve", "-m", MODEL, "--max-memory-bytes", "1GB", "--threads", "2",
               "--port", "0", "--name", "smol", *args]
        super().__init__(cmd, r"on (http://\S+) ")


class Engine(Launched):
    """`hanzo-engine serve` with Qwen2.5-Coder as `name`."""

    def __init__(self, name, env=None):
        cmd = [os.environ["HANZO_ENGINE_BIN"], "-t", "2", "serve", "--host", "127.0.0.1", "--port", "0",
               "-m", f"{name}={os.environ['HANZO_QWEN']}"]
        super().__init__(cmd, r"listening on (http://\S+)", env)

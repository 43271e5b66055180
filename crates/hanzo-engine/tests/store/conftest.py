"""Runs `hanzo-engine pull / list / show / rm / run` against a fresh store per test, with the
loopback registries of `registries.py`.

`tests/model_store.rs` runs this suite under `cargo test` with HANZO_ENGINE_BIN and the fixture
paths HANZO_SMOLLM (a GGUF), HANZO_GEMMA (a GGUF) and HANZO_MINILM (a safetensors directory).
"""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from registries import Registry  # noqa: E402

BIN = os.environ["HANZO_ENGINE_BIN"]
SMOLLM = os.environ["HANZO_SMOLLM"]
GEMMA = os.environ["HANZO_GEMMA"]
MINILM = os.environ["HANZO_MINILM"]


class Engine:
    """The binary with a store of its own (HANZO_MODELS_DIR) and registry variables."""

    def __init__(self, store, env):
        self.store = store
        self.env = {**os.environ, "HANZO_MODELS_DIR": str(store), **env}
        self.env.pop("HF_TOKEN", None)

    def __call__(self, *args, check=True, env=None):
        p = subprocess.run(
            [BIN, "-t", "2", *args],
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=600,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"{args} failed ({p.returncode}):\n{p.stderr}")
        return p

    def blobs(self):
        d = self.store / "blobs"
        return sorted(os.listdir(d)) if d.exists() else []


@pytest.fixture
def registry():
    r = Registry()
    yield r
    r.close()


@pytest.fixture
def engine(tmp_path, registry):
    return Engine(
        tmp_path / "store",
        {"HF_ENDPOINT": registry.url, "OLLAMA_REGISTRY": registry.url},
    )

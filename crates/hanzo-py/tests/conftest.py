"""Shared pieces of the Python package's tests: fixture paths (fetched and verified by
scripts/fixtures.py, cached outside the tree) and the native binary to compare with
(HANZO_ENGINE_BIN, a `hanzo-engine` built from the same tree).

These tests run against the installed wheel (scripts/test_python.sh builds it with maturin
and installs it into a fresh virtual environment), never against the source tree.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
REFERENCE = os.path.join(ROOT, "crates", "hanzo-transformers", "tests", "reference")


def fixture(name):
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "fixtures.py"), "--print-path", name],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


@pytest.fixture(scope="session")
def smollm2():
    return fixture("smollm2")


@pytest.fixture(scope="session")
def qwen():
    return fixture("qwen2")


@pytest.fixture(scope="session")
def gemma():
    return fixture("gemma3")


@pytest.fixture(scope="session")
def minilm():
    return fixture("minilm")


@pytest.fixture(scope="session")
def engine_bin():
    path = os.environ.get("HANZO_ENGINE_BIN")
    if not path:
        pytest.fail("HANZO_ENGINE_BIN must name a hanzo-engine binary to compare with")
    return path

"""`list` and `show` say what the GGUF says, checked against the `gguf` Python package."""

import collections
import json

import gguf
import pytest

from conftest import GEMMA, SMOLLM

FILE_TYPES = {2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 15: "Q4_K_M", 18: "Q6_K"}


def reference(path):
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields.get(key)
        if f is None:
            return None
        v = f.contents()
        return v

    types = collections.Counter(t.tensor_type.name for t in r.tensors)
    params = sum(int(t.n_elements) for t in r.tensors)
    arch = field("general.architecture")
    return {
        "architecture": arch,
        "parameters": params,
        "quantization": FILE_TYPES[field("general.file_type")],
        "context_length": field(f"{arch}.context_length"),
        "types": dict(types),
        "bytes": {k: sum(int(t.n_bytes) for t in r.tensors if t.tensor_type.name == k)
                  for k in types},
        "chat_template": field("tokenizer.chat_template"),
        "tokenizer": field("tokenizer.ggml.model"),
        "vocab": len(r.fields["tokenizer.ggml.tokens"].data),
    }


@pytest.mark.parametrize("path,name", [(GEMMA, "gemma"), (SMOLLM, "smol")])
def test_list_and_show_match_the_gguf_package(engine, path, name):
    engine("pull", path, "--name", name)
    ref = reference(path)
    [m] = json.loads(engine("list", "--json").stdout)
    assert m["architecture"] == ref["architecture"]
    assert m["parameters"] == ref["parameters"]
    assert m["quantization"] == ref["quantization"]
    show = json.loads(engine("show", name, "--json").stdout)
    assert show["context_length"] == ref["context_length"]
    assert {k: v["tensors"] for k, v in show["tensor_types"].items()} == ref["types"]
    assert {k: v["bytes"] for k, v in show["tensor_types"].items()} == ref["bytes"]
    assert show["chat_template"] == ref["chat_template"]
    assert show["tokenizer"] == ref["tokenizer"] and show["vocab_size"] == ref["vocab"]
    assert show["manifest"]["name"] == name
    verbose = json.loads(engine("show", name, "--json", "--verbose").stdout)
    assert verbose["metadata"]["general.architecture"] == ref["architecture"]
    text = engine("show", name).stdout
    assert ref["architecture"] in text and ref["quantization"] in text
    table = engine("list").stdout.splitlines()
    assert table[0].split() == ["NAME", "ARCH", "PARAMS", "QUANT", "SIZE", "PATH"]
    assert table[1].split()[0] == name

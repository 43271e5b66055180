"""`hanzo-engine pull` from each kind of source, resuming, verifying, and failing cleanly."""

import hashlib
import json
import os
import subprocess
import sys

from conftest import BIN, GEMMA, MINILM, SMOLLM
from registries import sha256_file

SMOLLM_SHA = sha256_file(SMOLLM)
SMOLLM_SIZE = os.path.getsize(SMOLLM)


def listed(engine):
    return json.loads(engine("list", "--json").stdout)


def greedy(engine, model):
    out = engine("run", "--model", model, "-n", "8", "--temp", "0", "The capital of France is")
    return out.stdout


def test_url_pull_runs_and_is_listed(engine, registry):
    registry.add_file("/files/SmolLM2-135M-Instruct.Q4_1.gguf", SMOLLM)
    engine("pull", registry.url + "/files/SmolLM2-135M-Instruct.Q4_1.gguf", "--name", "smol")
    [m] = listed(engine)
    assert m["name"] == "smol"
    assert m["size"] == SMOLLM_SIZE
    manifest = json.load(open(engine.store / "models" / "smol" / "manifest.json"))
    assert manifest["files"][0]["sha256"] == SMOLLM_SHA
    assert manifest["files"][0]["verified"] is False  # a plain URL publishes no digest
    assert engine.blobs() == [f"sha256-{SMOLLM_SHA}"]
    # The stored model runs by name and says what the file at its path says.
    assert greedy(engine, "smol") == greedy(engine, SMOLLM)


def test_interrupted_transfer_resumes_from_the_partial_file(engine, registry):
    path = "/files/smol.gguf"
    registry.add_file(path, SMOLLM)
    half = SMOLLM_SIZE // 2
    registry.drop_after[path] = half
    first = engine("pull", registry.url + path, check=False)
    assert first.returncode != 0
    assert "run the same pull again to resume" in first.stderr, first.stderr
    assert listed(engine) == []
    assert engine.blobs() == []
    engine("pull", registry.url + path)
    second = registry.served(path)[-1]
    assert second["range"] == f"bytes={half}-"
    assert second["sent"] == SMOLLM_SIZE - half  # only the rest travelled
    [m] = listed(engine)
    assert m["name"] == "smol"
    assert engine.blobs() == [f"sha256-{SMOLLM_SHA}"]
    assert not os.listdir(engine.store / "partial")


def test_huggingface_gguf_repo_picks_the_quantization(engine, registry):
    repo = "tester/SmolLM2-135M-Instruct-GGUF"
    registry.add_hf_repo(repo, {
        "README.md": b"# SmolLM2\n",
        "SmolLM2-135M-Instruct-Q4_1.gguf": SMOLLM,
        "SmolLM2-135M-Instruct-Q8_0.gguf": b"GGUF-not-really",
    })
    # No Q4_K_M here: the error names what there is.
    none = engine("pull", repo, check=False)
    assert none.returncode != 0
    assert "no Q4_K_M GGUF" in none.stderr and "Q4_1" in none.stderr and "Q8_0" in none.stderr
    engine("pull", f"{repo}:Q4_1")
    [m] = listed(engine)
    assert m["name"] == "smollm2-135m-instruct:q4_1"
    manifest = json.load(open(engine.store / "models" / m["name"] / "manifest.json"))
    [f] = manifest["files"]
    assert f["name"] == "SmolLM2-135M-Instruct-Q4_1.gguf"
    assert f["verified"] is True and f["sha256"] == SMOLLM_SHA
    assert f["url"] == f"{registry.url}/{repo}/resolve/main/SmolLM2-135M-Instruct-Q4_1.gguf"
    # The same file under a second name (hf:// with an explicit file) is stored once.
    engine("pull", f"hf://{repo}/SmolLM2-135M-Instruct-Q4_1.gguf", "--name", "again")
    assert [m["name"] for m in listed(engine)] == ["again", "smollm2-135m-instruct:q4_1"]
    assert engine.blobs() == [f"sha256-{SMOLLM_SHA}"]


def test_huggingface_digest_from_the_redirect_headers(engine, registry):
    repo = "tester/nolisting"
    registry.add_hf_repo(repo, {"model-Q4_K_M.gguf": SMOLLM}, publish_sha=False)
    engine("pull", f"hf://{repo}")
    [m] = listed(engine)
    manifest = json.load(open(engine.store / "models" / m["name"] / "manifest.json"))
    assert manifest["files"][0]["verified"] is True  # X-Linked-Etag on the 302


def test_huggingface_token_goes_to_the_hub_only(engine, registry):
    repo = "tester/private"
    registry.add_hf_repo(repo, {"m-Q4_K_M.gguf": SMOLLM})
    engine("pull", f"hf://{repo}", env={"HF_TOKEN": "hf_secret"})
    info = registry.served(f"/api/models/{repo}")[-1]
    assert info["auth"] == "Bearer hf_secret"


def test_wrong_published_digest_is_rejected(engine, registry):
    repo = "tester/corrupt"
    registry.add_hf_repo(repo, {"m-Q4_K_M.gguf": SMOLLM}, wrong_sha=True)
    p = engine("pull", f"hf://{repo}", check=False)
    assert p.returncode != 0
    assert "checksum mismatch" in p.stderr and "nothing was stored" in p.stderr
    assert listed(engine) == []
    assert engine.blobs() == []
    assert not (engine.store / "partial").exists()


def tree(root):
    """Every folder and file under `root` (files with their sizes), for before/after checks."""
    out = {}
    for folder, _, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        out[rel + "/"] = None
        for f in files:
            out[os.path.join(rel, f)] = os.path.getsize(os.path.join(folder, f))
    return out


def test_pulls_that_receive_nothing_leave_the_store_as_it_was(engine, registry):
    registry.close_at_once.add("/files/closed.gguf")
    registry.add_file("/files/headers-only.gguf", SMOLLM)
    registry.add_hf_repo("tester/only-q8", {"m-Q8_0.gguf": b"GGUF-not-really"})
    url = registry.url
    failures = [
        (f"{url}/files/missing.gguf", [f"{url}/files/missing.gguf", "404 Not Found"]),
        (f"{url}/files/closed.gguf", [f"{url}/files/closed.gguf"]),
        (f"{url}/files/headers-only.gguf", ["headers-only.gguf", "stopped after 0 B"]),
        ("tester/only-q8", ["tester/only-q8", "no Q4_K_M GGUF", "Q8_0"]),
        ("tester/no-such-repo", ["tester/no-such-repo", "no such repository", "404"]),
        ("ollama://nothing:here", ["library/nothing:here", "no such model", "404"]),
    ]
    # First into a store that does not exist yet, then into one that holds a model.
    for _ in range(2):
        before = tree(engine.store)
        for source, words in failures:
            if "headers-only" in source:
                registry.drop_after["/files/headers-only.gguf"] = 0
            p = engine("pull", source, "--name", "nope", check=False)
            assert p.returncode != 0, source
            assert all(w in p.stderr for w in words), p.stderr
            assert tree(engine.store) == before, (source, p.stderr)
        engine("pull", f"{url}/files/headers-only.gguf", "--name", "smol")
    assert [m["name"] for m in listed(engine)] == ["smol"]


def test_a_file_gone_on_resume_removes_the_partial_file(engine, registry):
    path = "/files/vanishing.gguf"
    registry.add_file(path, SMOLLM)
    registry.drop_after[path] = SMOLLM_SIZE // 3
    first = engine("pull", registry.url + path, check=False)
    assert "run the same pull again to resume" in first.stderr, first.stderr
    [kept] = [f for f in os.listdir(engine.store / "partial") if f.endswith(".partial")]
    assert os.path.getsize(engine.store / "partial" / kept) == SMOLLM_SIZE // 3
    # A 5xx is transient: the bytes stay for the next try.
    registry.status[path] = 503
    busy = engine("pull", registry.url + path, check=False)
    assert busy.returncode != 0 and "503" in busy.stderr, busy.stderr
    assert kept in os.listdir(engine.store / "partial")
    # A 404 is definite: the partial file goes.
    del registry.status[path]
    del registry.files[path]
    gone = engine("pull", registry.url + path, check=False)
    assert gone.returncode != 0 and f"{registry.url}{path}: 404 Not Found" in gone.stderr
    assert os.listdir(engine.store / "partial") == []
    assert listed(engine) == [] and engine.blobs() == []


def test_huggingface_safetensors_repo_embeds(engine, registry):
    repo = "sentence-transformers/all-MiniLM-L6-v2"
    files = {}
    for name in sorted(os.listdir(MINILM)):
        if os.path.isfile(os.path.join(MINILM, name)):
            files[name] = os.path.join(MINILM, name)
    files["onnx/model.onnx"] = b"not wanted"
    registry.add_hf_repo(repo, files)
    engine("pull", f"hf://{repo}", "--name", "minilm")
    folder = engine.store / "models" / "minilm"
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert not (folder / "onnx").exists()
    a = json.loads(engine("embed", "--model", "minilm", "hello world").stdout)
    b = json.loads(engine("embed", "--model", MINILM, "hello world").stdout)
    assert a == b


def test_ollama_registry(engine, registry):
    template = b"{{ .System }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n"
    params = json.dumps({"stop": ["<|im_end|>"], "temperature": 0.2}).encode()
    registry.add_ollama("library/smollm2:135m", [
        ("model", SMOLLM), ("template", template), ("params", params),
        ("license", b"Apache-2.0"),
    ])
    engine("pull", "ollama://smollm2:135m")
    folder = engine.store / "models" / "smollm2:135m"
    assert (folder / "template").read_bytes() == template
    assert json.loads((folder / "params.json").read_bytes())["stop"] == ["<|im_end|>"]
    manifest = json.load(open(folder / "manifest.json"))
    assert all(f["verified"] for f in manifest["files"])
    assert greedy(engine, "smollm2:135m") == greedy(engine, SMOLLM)
    missing = engine("pull", "ollama://nothing:here", check=False)
    assert missing.returncode != 0 and "no such model" in missing.stderr


def test_local_file_and_directory(engine):
    engine("pull", GEMMA)
    engine("pull", MINILM, "--name", "minilm")
    names = [m["name"] for m in listed(engine)]
    assert names == ["gemma-3-270m-q4_k_m", "minilm"]


def test_bad_sources_fail_with_one_line_and_leave_the_store_alone(engine, registry):
    registry.add_file("/files/smol.gguf", SMOLLM)
    engine("pull", registry.url + "/files/smol.gguf")
    before = (listed(engine), engine.blobs())
    closed = engine("pull", "http://127.0.0.1:9/x.gguf", check=False)
    assert closed.returncode != 0 and "cannot connect to 127.0.0.1:9" in closed.stderr
    missing = engine("pull", registry.url + "/files/nope.gguf", check=False)
    assert missing.returncode != 0 and "404" in missing.stderr
    registry.add_file("/files/text.gguf", b"this is not a GGUF file at all")
    junk = engine("pull", registry.url + "/files/text.gguf", check=False)
    assert junk.returncode != 0 and "not a readable GGUF file" in junk.stderr
    no_repo = engine("pull", "nobody/nothing", check=False)
    assert no_repo.returncode != 0 and "no such repository" in no_repo.stderr
    for p in (closed, missing, junk, no_repo):
        lines = p.stderr.strip().splitlines()
        assert [l for l in lines if l.startswith("error:")] == lines[-1:], p.stderr  # one line
        assert "panicked" not in p.stderr
    assert (listed(engine), engine.blobs()) == before


def test_unknown_names_list_the_near_matches(engine, registry):
    registry.add_file("/files/smol.gguf", SMOLLM)
    engine("pull", registry.url + "/files/smol.gguf", "--name", "smollm2-135m")
    p = engine("run", "--model", "smollm2-13m", "-n", "1", "hi", check=False)
    assert p.returncode != 0
    assert "did you mean `smollm2-135m`" in p.stderr, p.stderr


def test_rm_frees_blobs_no_other_model_uses(engine, registry):
    registry.add_file("/files/smol.gguf", SMOLLM)
    engine("pull", registry.url + "/files/smol.gguf", "--name", "a")
    engine("pull", registry.url + "/files/smol.gguf", "--name", "b")
    assert len(engine.blobs()) == 1
    engine("rm", "a")
    assert [m["name"] for m in listed(engine)] == ["b"]
    assert len(engine.blobs()) == 1
    engine("rm", "b")
    assert listed(engine) == [] and engine.blobs() == []
    gone = engine("rm", "b", check=False)
    assert gone.returncode != 0 and "no model named `b`" in gone.stderr


def test_serve_finds_models_by_store_name(engine, registry):
    import re
    import subprocess
    import urllib.request

    registry.add_file("/files/smol.gguf", SMOLLM)
    engine("pull", registry.url + "/files/smol.gguf", "--name", "smollm2:135m")
    proc = subprocess.Popen(
        [BIN, "-t", "2", "serve", "--port", "0",
         "--model", "smollm2:135m", "--max-seqs", "2", "--kv-budget", "64M"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=engine.env,
    )
    try:
        url = None
        for line in proc.stderr:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url, "the server did not start"
        models = json.load(urllib.request.urlopen(url + "/v1/models", timeout=30))
        assert [m["id"] for m in models["data"]] == ["smollm2:135m"]
        req = urllib.request.Request(
            url + "/v1/completions",
            data=json.dumps({"model": "smollm2:135m", "prompt": "The capital of France is",
                             "max_tokens": 8, "temperature": 0}).encode(),
            headers={"Content-Type": "application/json"},
        )
        reply = json.load(urllib.request.urlopen(req, timeout=60))
        assert reply["choices"][0]["text"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_mlx_repo_pulls_and_runs_as_afq(engine, registry, tmp_path):
    # An MLX-layout repository as mlx-community publishes one: SmolLM2 as a Hugging Face
    # directory (scripts/gguf_to_hf.py), quantized to 4-bit AFQ by `quantize`.
    hf_dir, mlx_dir = tmp_path / "hf", tmp_path / "mlx"
    script = os.path.join(os.path.dirname(__file__), "../../../../scripts/gguf_to_hf.py")
    subprocess.run([sys.executable, script, SMOLLM, str(hf_dir)], check=True)
    engine("quantize", str(hf_dir), str(mlx_dir), "--type", "AFQ4")
    files = {n: str(mlx_dir / n) for n in sorted(os.listdir(mlx_dir))}
    files["chat_template.jinja"] = b"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    files["README.md"] = b"not wanted"
    registry.add_hf_repo("mlx-community/SmolLM2-135M-Instruct-4bit", files)
    engine("pull", "mlx://SmolLM2-135M-Instruct-4bit")
    folder = engine.store / "models" / "smollm2-135m-instruct-4bit"
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 4, "mode": "affine"}
    assert (folder / "chat_template.jinja").is_file() and not (folder / "README.md").exists()
    assert greedy(engine, "smollm2-135m-instruct-4bit") == greedy(engine, str(mlx_dir))

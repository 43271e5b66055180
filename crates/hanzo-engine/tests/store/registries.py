"""Loopback stand-ins for the places `hanzo-engine pull` fetches from, built for the tests:

* a plain file server with HTTP Range support, which can be told to drop the connection
  half-way through a body;
* a Hugging Face-shaped endpoint: `/api/models/ORG/REPO` (the model-info listing, with LFS
  sha256 digests when asked for `blobs`) and `/ORG/REPO/resolve/main/FILE`, which redirects
  to a CDN path with the LFS digest in `X-Linked-Etag` as the hub does;
* an Ollama-shaped registry: `/v2/NAMESPACE/NAME/manifests/TAG` and `/v2/.../blobs/DIGEST`.

Every request is recorded (path, Range header, bytes sent) for assertions.
"""

import hashlib
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Registry:
    def __init__(self):
        self.files = {}  # URL path -> (bytes source: path or bytes)
        self.hf_repos = {}  # "org/repo" -> {file name: (path-or-bytes, lfs sha256 or None)}
        self.ollama = {}  # "ns/name:tag" -> manifest dict
        self.blobs = {}  # "sha256:hex" -> path-or-bytes
        self.requests = []
        self.drop_after = {}  # URL path -> bytes to send before dropping, once
        self.close_at_once = set()  # URL paths whose connection closes before any reply
        self.status = {}  # URL path -> an error status to answer with instead
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                registry._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    # ---- content -------------------------------------------------------------------------

    def add_file(self, url_path, source):
        self.files[url_path] = source

    def add_hf_repo(self, repo, files, publish_sha=True, wrong_sha=False):
        entries = {}
        for name, source in files.items():
            sha = _sha(source)
            if wrong_sha:
                sha = "0" * 64
            entries[name] = (source, sha if publish_sha else None, _size(source))
        self.hf_repos[repo] = entries

    def add_ollama(self, ref, layers):
        """layers: [(media type suffix, path-or-bytes)]"""
        out = []
        for kind, source in layers:
            digest = "sha256:" + _sha(source)
            self.blobs[digest] = source
            out.append(
                {
                    "mediaType": f"application/vnd.ollama.image.{kind}",
                    "digest": digest,
                    "size": _size(source),
                }
            )
        config = json.dumps({"model_format": "gguf"}).encode()
        self.blobs["sha256:" + hashlib.sha256(config).hexdigest()] = config
        self.ollama[ref] = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
                "size": len(config),
            },
            "layers": out,
        }

    def served(self, path):
        return [r for r in self.requests if r["path"] == path]

    # ---- serving -------------------------------------------------------------------------

    def _handle(self, h):
        path = h.path.split("?")[0]
        record = {"path": path, "range": h.headers.get("Range"), "sent": 0,
                  "auth": h.headers.get("Authorization")}
        self.requests.append(record)
        if path in self.close_at_once:
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if path in self.status:
            return _send_json(h, self.status[path], {"error": "unavailable"})
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)", path)
        if m:
            repo = self.hf_repos.get(m.group(1))
            if repo is None:
                return _send_json(h, 404, {"error": "Repository not found"})
            siblings = []
            for name, (_, sha, size) in repo.items():
                s = {"rfilename": name, "size": size}
                if sha is not None:
                    s["lfs"] = {"sha256": sha, "size": size, "pointerSize": 134}
                siblings.append(s)
            return _send_json(h, 200, {"id": m.group(1), "siblings": siblings})
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/main/(.+)", path)
        if m:
            repo = self.hf_repos.get(m.group(1))
            if repo is None or m.group(2) not in repo:
                return _send_json(h, 404, {"error": "Entry not found"})
            source, _, size = repo[m.group(2)]
            # The true digest goes in X-Linked-Etag unless the test asked for a wrong one.
            listed = repo[m.group(2)][1]
            h.send_response(302)
            h.send_header("Location", f"/cdn/{m.group(1)}/{m.group(2)}")
            h.send_header("X-Linked-Size", str(size))
            if listed is not None:
                h.send_header("X-Linked-Etag", f'"{listed}"')
            else:
                h.send_header("X-Linked-Etag", f'"{_sha(source)}"')
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        m = re.fullmatch(r"/cdn/([^/]+/[^/]+)/(.+)", path)
        if m:
            source = self.hf_repos[m.group(1)][m.group(2)][0]
            return self._send_body(h, path, source, record)
        m = re.fullmatch(r"/v2/([^/]+/[^/]+)/manifests/([^/]+)", path)
        if m:
            manifest = self.ollama.get(f"{m.group(1)}:{m.group(2)}")
            if manifest is None:
                return _send_json(h, 404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
            return _send_json(h, 200, manifest)
        m = re.fullmatch(r"/v2/[^/]+/[^/]+/blobs/(sha256:[0-9a-f]{64})", path)
        if m and m.group(1) in self.blobs:
            return self._send_body(h, path, self.blobs[m.group(1)], record)
        if path in self.files:
            return self._send_body(h, path, self.files[path], record)
        _send_json(h, 404, {"error": "not found"})

    def _send_body(self, h, path, source, record):
        data = _bytes(source)
        start = 0
        rng = h.headers.get("Range")
        if rng:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
            if start >= len(data):
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{len(data)}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            h.send_response(200)
        body = data[start:]
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        limit = self.drop_after.pop(path, None)
        if limit is not None:
            h.wfile.write(body[:limit])
            h.wfile.flush()
            record["sent"] = limit
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.wfile.write(body)
        record["sent"] = len(body)


_cache = {}


def _bytes(source):
    if isinstance(source, bytes):
        return source
    if source not in _cache:
        with open(source, "rb") as f:
            _cache[source] = f.read()
    return _cache[source]


def _sha(source):
    return hashlib.sha256(_bytes(source)).hexdigest()


def _size(source):
    return len(source) if isinstance(source, bytes) else os.path.getsize(source)


def _send_json(h, status, obj):
    body = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)

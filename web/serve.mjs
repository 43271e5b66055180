// Serves the chat page and the WebAssembly package on loopback:
//   node web/serve.mjs [--port 8377]   then open http://127.0.0.1:8377/web/
// (build the package first: bash scripts/build_wasm.sh). Only files under the repository
// (and under the folders `mounts` adds, for tests and benchmarks) are served, GET/HEAD only.
import { createServer } from "node:http";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(new URL("..", import.meta.url)));
const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".png": "image/png",
};

/** Starts the server on loopback; `mounts` maps URL prefixes ("/fixtures/") to folders. */
export function serve(port = 0, mounts = {}) {
  const server = createServer(async (req, res) => {
    let path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    let base = root;
    for (const [prefix, dir] of Object.entries(mounts)) {
      if (path.startsWith(prefix)) {
        base = resolve(dir);
        path = path.slice(prefix.length - 1);
      }
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405).end();
      return;
    }
    if (path === "/") {
      res.writeHead(302, { location: "/web/" }).end();
      return;
    }
    let file = normalize(join(base, path));
    if (file !== base && !file.startsWith(base + sep)) {
      res.writeHead(403).end();
      return;
    }
    try {
      let s = await stat(file);
      if (s.isDirectory()) {
        file = join(file, "index.html");
        s = await stat(file);
      }
      res.writeHead(200, {
        "content-type": TYPES[extname(file)] ?? "application/octet-stream",
        "content-length": s.size,
        "cache-control": "no-cache",
      });
      if (req.method === "HEAD") res.end();
      else createReadStream(file).pipe(res);
    } catch {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    }
  });
  return new Promise((ok) => server.listen(port, "127.0.0.1", () => ok(server)));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf("--port");
  const server = await serve(at > 0 ? Number(process.argv[at + 1]) : 8377);
  console.log(`chat page: http://127.0.0.1:${server.address().port}/web/ (Ctrl-C stops)`);
}

// Where a model's bytes come from, read in two steps: a prefix (a file's header, for Hanzo
// Edge's budget) and then the whole, copied into WebAssembly memory piece by piece as it
// arrives from a `File` or a `fetch` stream, so the file is never held whole twice.

/**
 * Opens `source`: a Uint8Array, ArrayBuffer, `Blob`/`File`, fetch `Response`, or a URL to
 * fetch. Returns `{length, prefix(n), whole(Bytes), cancel()}`: `prefix` resolves to the
 * first `n` bytes (fewer where the source is shorter), `whole` to a `Bytes` of the module
 * holding them all, and `cancel` stops a download. `report(loadedBytes, totalBytes)` is
 * called as pieces arrive (`totalBytes` 0 while a download does not say its length).
 */
export async function openSource(source, report = () => {}) {
  if (typeof source === "string" || source instanceof URL) source = await fetch(source);
  if (source instanceof ArrayBuffer) source = new Uint8Array(source);
  if (source instanceof Uint8Array) {
    const bytes = source;
    return {
      length: bytes.length,
      prefix: async (n) => bytes.subarray(0, n),
      whole: async (Bytes) => {
        const out = Bytes.copyOf(bytes);
        report(bytes.length, bytes.length);
        return out;
      },
      cancel: () => {},
    };
  }
  if (typeof Blob !== "undefined" && source instanceof Blob) {
    const blob = source;
    return {
      length: blob.size,
      prefix: async (n) => new Uint8Array(await blob.slice(0, n).arrayBuffer()),
      whole: async (Bytes) => {
        const out = new Bytes(blob.size);
        const piece = 16 << 20;
        for (let at = 0; at < blob.size; at += piece) {
          const chunk = new Uint8Array(await blob.slice(at, at + piece).arrayBuffer());
          out.write(at, chunk);
          report(at + chunk.length, blob.size);
        }
        return out;
      },
      cancel: () => {},
    };
  }
  if (typeof Response !== "undefined" && source instanceof Response) {
    return openResponse(source, report);
  }
  throw new TypeError("a model source is a Uint8Array, ArrayBuffer, Blob, Response or URL");
}

/**
 * `openSource` for a fetch `Response`: the pieces read so far wait in JavaScript memory
 * until `whole` copies them in and streams the rest after them. A response that does not
 * say its length (or is compressed) is read to its end first, to learn it.
 */
async function openResponse(response, report) {
  if (!response.ok) throw new Error(`fetching ${response.url}: HTTP ${response.status}`);
  const reader = response.body.getReader();
  const chunks = [];
  let have = 0;
  const readUntil = async (n, onPiece) => {
    while (have < n) {
      const { done, value } = await reader.read();
      if (done) return true;
      chunks.push(value);
      have += value.length;
      onPiece();
    }
    return false;
  };
  let total = Number(response.headers.get("content-length"));
  const known = total > 0 && !response.headers.get("content-encoding");
  if (!known) {
    await readUntil(Infinity, () => report(have, 0));
    total = have;
  }
  return {
    length: total,
    prefix: async (n) => {
      await readUntil(n, () => {});
      const out = new Uint8Array(Math.min(n, have));
      let at = 0;
      for (const c of chunks) {
        if (at >= out.length) break;
        const part = c.subarray(0, out.length - at);
        out.set(part, at);
        at += part.length;
      }
      return out;
    },
    whole: async (Bytes) => {
      const out = new Bytes(total);
      let at = 0;
      const copyIn = () => {
        if (!chunks.length) return;
        for (const c of chunks.splice(0)) {
          out.write(at, c);
          at += c.length;
        }
        report(at, total);
      };
      copyIn();
      await readUntil(Infinity, copyIn);
      if (at !== total) throw new Error(`fetching ${response.url}: got ${at} of ${total} bytes`);
      return out;
    },
    cancel: () => reader.cancel().catch(() => {}),
  };
}

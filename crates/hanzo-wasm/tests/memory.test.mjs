// Memory: a model is one copy of its file in WebAssembly memory, the tensors viewing it (a
// fresh process, so nothing else has grown the memory before).
import { test } from "node:test";
import assert from "node:assert/strict";
import { open } from "node:fs/promises";
import { Model, init, memoryBytes } from "../js/index.js";
import { fixtures } from "./common.mjs";

await init({ simd: process.env.HANZO_WASM_BUILD !== "scalar" });

test("Gemma 3 takes one copy of its file, streamed in from a Blob", async (t) => {
  // Read as a Blob in pieces, as the page reads a File: no whole copy on the JS side either.
  const file = await open(fixtures.gemma3);
  const size = (await file.stat()).size;
  const pieces = [];
  for (let at = 0; at < size; at += 64 << 20) {
    const buf = Buffer.alloc(Math.min(64 << 20, size - at));
    await file.read(buf, 0, buf.length, at);
    pieces.push(buf);
  }
  await file.close();
  const progress = [];
  const model = await Model.load(new Blob(pieces), { onProgress: (got, total) => progress.push([got, total]) });
  const mib = (n) => `${(n / 2 ** 20).toFixed(1)} MiB`;
  const out = await model.generate(model.encode("Once upon a time"), { maxTokens: 8, temperature: 0 });
  t.diagnostic(`file ${mib(size)}, WebAssembly memory ${mib(memoryBytes())} after loading and 8 tokens`);
  assert.equal(out.tokens.length, 8);
  assert.ok(memoryBytes() < 1.2 * size, `${mib(memoryBytes())} for a ${mib(size)} file`);
  assert.deepEqual(progress.at(-1), [size, size]);
  assert.ok(progress.length > 1, "progress reported piece by piece");
  model.free();
});

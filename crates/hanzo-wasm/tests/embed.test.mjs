// MiniLM embeddings from the WebAssembly build against the native `hanzo-engine embed`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Embedder, init } from "../js/index.js";
import { fixtures, native } from "./common.mjs";

await init({ simd: process.env.HANZO_WASM_BUILD !== "scalar" });

const TEXTS = [
  "The quick brown fox jumps over the lazy dog.",
  "A sentence embedding maps text to a vector.",
  "naïve café — 日本語",
  "x",
];

async function optional(path) {
  try {
    return await readFile(path, "utf8");
  } catch {
    return undefined;
  }
}

test("MiniLM embeddings match the native ones (cosine ≥ 0.9999)", async (t) => {
  const dir = fixtures.minilm;
  const embedder = await Embedder.load({
    config: await readFile(join(dir, "config.json"), "utf8"),
    tokenizer: await readFile(join(dir, "tokenizer.json"), "utf8"),
    weights: await readFile(join(dir, "model.safetensors")),
    pooling: await optional(join(dir, "1_Pooling", "config.json")),
    modules: await optional(join(dir, "modules.json")),
    sentenceBert: await optional(join(dir, "sentence_bert_config.json")),
  });
  assert.equal(embedder.dimensions, 384);
  const got = embedder.embed(TEXTS);
  const want = JSON.parse(native("embed", "-m", dir, ...TEXTS));
  assert.equal(got.length, want.length);
  let worst = 1;
  for (let i = 0; i < TEXTS.length; i++) {
    assert.equal(got[i].length, 384);
    let [dot, ng, nw] = [0, 0, 0];
    for (let j = 0; j < 384; j++) {
      dot += got[i][j] * want[i][j];
      ng += got[i][j] ** 2;
      nw += want[i][j] ** 2;
    }
    const cos = dot / Math.sqrt(ng * nw);
    worst = Math.min(worst, cos);
    assert.ok(cos >= 0.9999, `${JSON.stringify(TEXTS[i])}: cosine ${cos}`);
    assert.ok(Math.abs(Math.sqrt(ng) - 1) < 1e-4, "normalised");
  }
  t.diagnostic(`lowest cosine ${worst}`);
  assert.throws(() => embedder.embed("not an array"), /texts/);
  embedder.free();
});

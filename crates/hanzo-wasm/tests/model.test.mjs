// The WebAssembly build against the native one on the real fixtures: token ids, greedy
// continuations, logits, streaming, cancellation and errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { Model, build, init, memoryBytes, repackedBytes } from "../js/index.js";
import { fixtures, native, nativeGreedy, agreeUpToNearTie } from "./common.mjs";

const simd = process.env.HANZO_WASM_BUILD !== "scalar";
await init({ simd });

const PROMPTS = {
  smollm2: ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"],
  gemma3: ["The capital of France is", "Once upon a time, in a small village,"],
};
const TEXTS = ["Hello, world!", "  leading spaces\tand tabs\n", "naïve café — 日本語 😀", "<|im_start|>user"];
const STEPS = 24;

test("the build is the one asked for", () => {
  assert.equal(build(), simd ? "simd" : "scalar");
});

// Each model as loaded by default (SIMD builds: its weights interleaved eight rows at a time
// where they lie, for the interleaved kernels), and with the file's layout kept.
const VARIANTS = [true, ...(simd ? [false] : [])].flatMap((repack) =>
  ["smollm2", "gemma3"].map((name) => [name, repack]),
);
for (const [name, repack] of VARIANTS) {
  const label = simd && !repack ? `${name} as stored` : name;
  test(`${label}: tokens, greedy text and streaming agree with the native build`, async (t) => {
    const bytes = await readFile(fixtures[name]);
    const repacked = repackedBytes();
    const t0 = performance.now();
    const model = await Model.load(bytes, { repack });
    t.diagnostic(`${label} loaded in ${((performance.now() - t0) / 1000).toFixed(2)} s: ${JSON.stringify(model.info)}`);

    for (const text of TEXTS) {
      const want = JSON.parse(native("tokenize", "-m", fixtures[name], text));
      assert.deepEqual(model.encode(text), want, `token ids of ${JSON.stringify(text)}`);
    }

    const memory = memoryBytes();
    for (const prompt of PROMPTS[name]) {
      const ids = model.encode(prompt);
      const pieces = [];
      const out = await model.generate(ids, { maxTokens: STEPS, temperature: 0 }, (p) => {
        pieces.push(p);
      });
      t.diagnostic(`${JSON.stringify(prompt)} → ${JSON.stringify(out.text)} (${out.tokensPerSecond.toFixed(1)} t/s)`);
      assert.equal(pieces.join(""), out.text, "the streamed pieces make the text");
      assert.equal(out.text, model.decode(out.tokens));
      assert.ok(["length", "stop"].includes(out.finishReason));
      agreeUpToNearTie(t, model, ids, out, nativeGreedy(fixtures[name], prompt, STEPS));
    }
    const moved = repackedBytes() - repacked;
    const grown = memoryBytes() - memory;
    t.diagnostic(`repacked ${(moved / 2 ** 20).toFixed(1)} MiB; memory ${(grown / 2 ** 20).toFixed(1)} MiB more after generating`);
    if (simd && repack) {
      // Gemma 3's Q5_0 and Q8_0 matrices, SmolLM2's Q4_1 and Q8_0 ones: most of each file,
      // rearranged where they lie, so generating adds no copy of them.
      assert.ok(moved > bytes.length / 2, `repacked ${moved} of ${bytes.length} bytes`);
      assert.ok(grown < bytes.length / 4, `memory grew ${grown} bytes for a ${bytes.length}-byte file`);
    } else {
      assert.equal(moved, 0, "nothing repacked");
    }

    model.free();
  });
}

test("generation: stop strings, cancellation, UTF-8 pieces, seeded sampling", async () => {
  const model = await Model.load(await readFile(fixtures.smollm2));
  const ids = model.encode("The capital of France is");

  const stopped = await model.generate(ids, { maxTokens: 24, temperature: 0, stop: ["."] });
  assert.equal(stopped.finishReason, "stop");
  assert.ok(!stopped.text.includes("."), stopped.text);

  let seen = 0;
  const byCallback = await model.generate(ids, { maxTokens: 24, temperature: 0 }, () => ++seen < 3);
  assert.equal(byCallback.finishReason, "cancelled");
  assert.equal(seen, 3);

  const controller = new AbortController();
  controller.abort();
  const aborted = await model.generate(ids, { maxTokens: 24, temperature: 0, signal: controller.signal });
  assert.equal(aborted.finishReason, "cancelled");
  assert.equal(aborted.tokens.length, 0);

  // Pieces are whole characters: a reply in Chinese streams no replacement characters.
  const zh = model.chatTokens([{ role: "user", content: "用中文写一句话。" }]);
  const pieces = [];
  const out = await model.generate(zh, { maxTokens: 16, temperature: 0 }, (p) => pieces.push(p));
  assert.equal(pieces.join(""), out.text);
  for (const p of pieces) assert.ok(!p.includes("\uFFFD"), JSON.stringify(pieces));

  const opts = { maxTokens: 12, temperature: 0.9, seed: 42 };
  const a = await model.generate(ids, opts);
  const b = await model.generate(ids, opts);
  assert.deepEqual(a.tokens, b.tokens, "the same seed gives the same tokens");

  // The template's turns, tokenized with their special tokens: the same ids as the native
  // tokenizer gives the rendered text.
  const rendered =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face" +
    "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const chat = model.chatTokens([{ role: "user", content: "Hi" }]);
  assert.deepEqual(chat, JSON.parse(native("tokenize", "-m", fixtures.smollm2, rendered)));
  model.free();
});

test("bad input is an Error with the library's message, and the module goes on", async () => {
  await assert.rejects(() => Model.load(new Uint8Array([1, 2, 3, 4])), /gguf|GGUF|magic|short/i);
  const garbage = new Uint8Array(4096);
  garbage.set([0x47, 0x47, 0x55, 0x46, 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
  await assert.rejects(() => Model.load(garbage), Error);

  const model = await Model.load(await readFile(fixtures.smollm2));
  assert.throws(() => model.decode([1 << 30]), /outside the vocabulary/);
  await assert.rejects(() => model.generate([1, 2], { maxTokens: 2, temprature: 0 }), /temprature/);
  await assert.rejects(() => model.generate([1, 2], { temperature: -1 }), /temperature/);
  await assert.rejects(() => model.generate([], { maxTokens: 2 }), /empty/);
  assert.throws(() => model.chatTokens("not an array"), /messages/);
  // Still usable after every error above.
  const out = await model.generate(model.encode("Hello"), { maxTokens: 2, temperature: 0 });
  assert.equal(out.tokens.length, 2);
  model.free();
});

// Hanzo Edge's JavaScript SDK (js/edge.js) against the native builds: a budget too small is
// refused having read only the file's header; a greedy chat is the native binary's reply; a
// conversation continues without recomputing its prompt; one longer than the context evicts
// as the native runtime does; the memory stays inside the budget; prompt lookup changes no
// greedy reply.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile, stat } from "node:fs/promises";
import { createReadStream } from "node:fs";
import { execFileSync } from "node:child_process";
import { Readable } from "node:stream";
import { BudgetError, HanzoEdge } from "../js/edge.js";
import { memoryBytes } from "../js/index.js";
import { fixtures, native } from "./common.mjs";

const build = process.env.HANZO_WASM_BUILD ?? "simd";
const MESSAGE = "Name three primary colors.";

/** The native `hanzo-edge` (scalar kernels, one thread, as `native` runs the engine). */
function nativeEdge(...args) {
  const bin = process.env.HANZO_EDGE_BIN;
  if (!bin) throw new Error("HANZO_EDGE_BIN must name the native hanzo-edge binary");
  return execFileSync(bin, [...args, "--threads", "1"], {
    env: { ...process.env, HANZO_ISA: "scalar", HANZO_LOG: "warn" },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
}

/** A fetch Response streaming `path`, counting the bytes it hands out. */
async function countingResponse(path) {
  const counter = { bytes: 0 };
  const nodeStream = createReadStream(path, { highWaterMark: 1 << 16 });
  nodeStream.on("data", (c) => (counter.bytes += c.length));
  const body = Readable.toWeb(nodeStream);
  const size = (await stat(path)).size;
  return { response: new Response(body, { headers: { "content-length": String(size) } }), counter, size };
}

async function collect(iter) {
  let text = "";
  for await (const piece of iter) text += piece;
  return text;
}

test("a budget too small is refused from the header alone, with the figures", async () => {
  const { response, counter, size } = await countingResponse(fixtures.gemma3);
  const before = memoryBytes();
  await assert.rejects(
    HanzoEdge.init({ model: response, maxMemoryBytes: 50_000_000, build }),
    (e) => {
      assert.ok(e instanceof BudgetError, String(e));
      assert.equal(e.limit, 50_000_000);
      assert.ok(e.needed > e.limit);
      const sum = Object.values(e.breakdown).reduce((a, b) => a + b, 0);
      assert.equal(sum, e.needed);
      assert.ok(e.breakdown.weights > 200_000_000, JSON.stringify(e.breakdown));
      assert.match(e.message, /over the limit of 50000000 bytes/);
      return true;
    },
  );
  // The header (Gemma 3's 262k-token vocabulary) and the stream's read-ahead, not the file.
  assert.ok(counter.bytes < size / 4, `read ${counter.bytes} of ${size} bytes`);
  assert.ok(memoryBytes() - before < size / 4, "the file was not copied in");
});

test("a greedy chat is the native reply, and the next turn computes only itself", async (t) => {
  const edge = await HanzoEdge.init({
    model: await readFile(fixtures.smollm2),
    maxContextTokens: 512,
    maxMemoryBytes: 400_000_000,
    build,
  });
  t.diagnostic(`budget ${JSON.stringify(edge.budget)}`);
  const messages = [{ role: "user", content: MESSAGE }];
  const reply = await collect(edge.chat(messages, { maxTokens: 24, temperature: 0 }));
  // `run --chat` ends the reply with a newline for the terminal.
  const want = native("run", "-m", fixtures.smollm2, "--chat", "--temp", "0", "-n", "24", MESSAGE);
  assert.equal(reply + "\n", want);
  const first = edge.summary;
  assert.ok(first.completionTokens > 3 && first.completionTokens <= 24, JSON.stringify(first));
  assert.equal(first.contextTokens, edge.contextTokens.length);

  messages.push({ role: "assistant", content: reply }, { role: "user", content: "And three more?" });
  await collect(edge.chat(messages, { maxTokens: 8, temperature: 0 }));
  const second = edge.summary;
  assert.ok(second.promptTokens > first.promptTokens);
  assert.ok(
    second.computedPromptTokens < second.promptTokens - first.promptTokens + 8,
    JSON.stringify(second),
  );
  // Everything the module holds, the model's bytes included, inside the budget.
  t.diagnostic(`memory ${memoryBytes()} of a ${edge.budget.total}-byte budget`);
  assert.ok(memoryBytes() <= edge.budget.total * 1.05, `${memoryBytes()} > ${edge.budget.total}`);

  // Leaving the loop early cancels the reply.
  for await (const _ of edge.chat(messages, { maxTokens: 50, temperature: 0 })) break;
  assert.equal(edge.summary.finishReason, "cancelled");
  edge.free();
});

test("prompt lookup leaves a greedy reply as it is", async () => {
  const model = await readFile(fixtures.smollm2);
  const code = "def area(width, height):\n    result = width * height\n    return result\n";
  const messages = [{ role: "user", content: `Rename result to size in this function:\n\n${code}` }];
  const replies = [];
  for (const lookup of [undefined, 3]) {
    const edge = await HanzoEdge.init({ model, maxContextTokens: 512, maxMemoryBytes: 400_000_000, build, lookup });
    replies.push(await collect(edge.chat(messages, { maxTokens: 48, temperature: 0 })));
    if (lookup) {
      const s = edge.summary;
      assert.ok(s.acceptedTokens > 0 && s.acceptedTokens <= s.draftedTokens, JSON.stringify(s));
    }
    edge.free();
  }
  assert.equal(replies[1], replies[0]);
});

test("a reply longer than the context evicts and goes on as the native runtime's", async (t) => {
  const ctx = 128;
  const prompt = "Once upon a time, in a small village,";
  const edge = await HanzoEdge.init({
    model: await readFile(fixtures.smollm2),
    maxContextTokens: ctx,
    maxMemoryBytes: 400_000_000,
    prefillChunk: 32,
    build,
  });
  const text = await collect(edge.complete(prompt, { maxTokens: 160, temperature: 0 }));
  const s = edge.summary;
  t.diagnostic(`${JSON.stringify(s)}`);
  assert.equal(s.completionTokens, 160);
  assert.ok(s.evictions >= 1 && s.evictedTokens > 0);
  assert.ok(s.contextTokens <= ctx);
  const args = ["run", "-m", fixtures.smollm2, "--max-memory-bytes", "1GB", "--max-context-tokens",
    String(ctx), "--prefill-chunk", "32", "--temp", "0"];
  // Before the first eviction the reply is the native one exactly.
  const before = nativeEdge(...args, "-n", String(ctx - s.promptTokens), prompt).trimEnd();
  assert.ok(text.startsWith(before), `${JSON.stringify(text)} vs ${JSON.stringify(before)}`);
  // After it, the same re-rotated keys (f32 sin and cos from another libm) agree as far as
  // near ties allow.
  const whole = nativeEdge(...args, "-n", "160", prompt).trimEnd();
  let same = 0;
  while (same < whole.length && text[same] === whole[same]) same++;
  t.diagnostic(`agrees with native for ${same} of ${whole.length} characters`);
  edge.free();
});

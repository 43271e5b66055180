// Hanzo Edge in JavaScript: one model and one conversation inside a memory budget fixed in
// advance, on the WebAssembly build, in Node and the browser. The budget is computed from
// the file's header before the rest is read or downloaded, and a model that does not fit is
// refused with the figures (`BudgetError`); a conversation longer than the context evicts
// its oldest turns after the kept prefix and goes on, as the native runtime does.
//
//   const edge = await HanzoEdge.init({ model, maxContextTokens: 2048, maxMemoryBytes: 300e6 });
//   for await (const piece of edge.chat([{ role: "user", content: "Hi!" }])) show(piece);

import { init } from "./index.js";
import { openSource } from "./source.js";
import { yieldToEventLoop } from "./tick.js";

/** The first bytes read for the header; four times more each time it runs past them. */
const FIRST_PROBE = 1 << 20;

/** The model does not fit `maxMemoryBytes`: what it needs, the limit and where it goes. */
export class BudgetError extends Error {
  constructor({ message, needed, limit, breakdown }) {
    super(message);
    this.name = "BudgetError";
    this.needed = needed;
    this.limit = limit;
    this.breakdown = breakdown;
  }
}

/** One model and its conversation inside a fixed memory budget. */
export class HanzoEdge {
  #inner;
  #budget;
  #summary = null;

  constructor(inner) {
    this.#inner = inner;
    this.#budget = JSON.parse(inner.budget());
  }

  /**
   * Loads `model` (a GGUF file: Uint8Array, ArrayBuffer, Blob/File, fetch Response, or URL)
   * if its budget fits `maxMemoryBytes`; throws `BudgetError` otherwise, having read only the
   * file's header. Options: maxContextTokens (2048), maxMemoryBytes, wasmUrl (where the
   * module's .wasm lies, if not in the package), build ("relaxed", "simd" or "scalar"),
   * eviction ("rerotate", "recompute" or "off"), keepTokens, maxKeepTokens, prefillChunk,
   * kvDtype ("f16" or "q8_0"), lookup (speculative decoding by prompt lookup: the n-gram
   * length) and draftK (tokens drafted at most per pass, 8), onProgress(loadedBytes, totalBytes).
   */
  static async init({ model, maxMemoryBytes, maxContextTokens = 2048, wasmUrl, build, onProgress, ...rest } = {}) {
    if (model === undefined) throw new TypeError("HanzoEdge.init needs a `model`");
    if (!(maxMemoryBytes > 0)) throw new TypeError("HanzoEdge.init needs `maxMemoryBytes`, a number of bytes");
    const b = await init({ build, wasmUrl });
    const settings = JSON.stringify({ maxContextTokens, maxMemoryBytes, ...rest });
    const source = await openSource(model, onProgress);
    let verdict;
    for (let n = FIRST_PROBE; ; n *= 4) {
      const prefix = await source.prefix(Math.min(n, source.length));
      verdict = JSON.parse(b.edgeBudget(prefix, source.length, settings));
      if (!verdict.more) break;
      if (prefix.length >= source.length) throw new Error("the file ends inside its GGUF header");
    }
    if (!verdict.fits) {
      source.cancel();
      throw new BudgetError(verdict);
    }
    const bytes = await source.whole(b.Bytes);
    return new HanzoEdge(b.EdgeRuntime.load(bytes, settings));
  }

  /** The budget: {total, breakdown: {weights, kvCache, activations, tokenizer, runtime}} in bytes. */
  get budget() {
    return this.#budget;
  }

  /** How the last finished reply went (null before one); see `edge.d.ts`. */
  get summary() {
    return this.#summary;
  }

  /** The token ids the KV cache holds, in position order. */
  get contextTokens() {
    return Array.from(this.#inner.contextTokens());
  }

  /**
   * The assistant's reply to `messages` (the whole conversation, `[{role, content}, …]`), as
   * an async iterator of text pieces. What the KV cache holds of the conversation already is
   * not computed again; older turns are evicted when the context is full. Options as
   * `Model.generate` takes them, and `signal` (an AbortSignal). Leaving the loop early
   * ends the reply; `summary` says how it went.
   */
  chat(messages, options = {}) {
    const { signal, ...rest } = options;
    return this.#pump(() => this.#inner.chat(JSON.stringify(messages), JSON.stringify(rest)), signal);
  }

  /** As `chat`, continuing raw text (no chat template). */
  complete(text, options = {}) {
    const { signal, ...rest } = options;
    return this.#pump(() => this.#inner.complete(text, JSON.stringify(rest)), signal);
  }

  async *#pump(start, signal) {
    this.#summary = null;
    start();
    try {
      for (;;) {
        if (signal?.aborted) break;
        const piece = this.#inner.step();
        if (piece === undefined) break;
        if (piece) yield piece;
        await yieldToEventLoop();
      }
    } finally {
      this.#inner.cancel();
      this.#summary = JSON.parse(this.#inner.summary());
    }
  }

  /** Unit vectors of `texts` by last-token pooling: one Float32Array per text. */
  embed(texts) {
    const flat = this.#inner.embed(JSON.stringify(texts));
    const d = flat.length / texts.length;
    return texts.map((_, i) => flat.slice(i * d, (i + 1) * d));
  }

  /** Forgets the conversation (the KV cache keeps its memory). */
  reset() {
    this.#inner.reset();
  }

  /** Frees the model's WebAssembly memory for reuse now rather than at garbage collection. */
  free() {
    this.#inner.free();
  }
}

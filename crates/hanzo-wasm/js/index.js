// Hanzo ML in WebAssembly: GGUF chat models and BERT-family embedders for Node and the
// browser. `init` loads the build that fits the engine (relaxed SIMD where it validates, else
// SIMD128, else scalar); `Model` and `Embedder` wrap the raw bindings of `../pkg/<build>/`.

import { openSource } from "./source.js";
import { yieldToEventLoop } from "./tick.js";

// A module whose one function returns `i8x16.splat(0)`: valid exactly where SIMD128 is.
const SIMD_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, // "\0asm", version 1
  1, 5, 1, 0x60, 0, 1, 0x7b, // types: () -> v128
  3, 2, 1, 0, // one function of type 0
  10, 8, 1, 6, 0, 0x41, 0, 0xfd, 0x0f, 0x0b, // body: i32.const 0; i8x16.splat; end
]);

// A module whose one function returns `i32x4.relaxed_dot_i8x16_i7x16_add_s` of three
// `i8x16.splat(0)`s: valid exactly where relaxed SIMD is.
const RELAXED_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, // "\0asm", version 1
  1, 5, 1, 0x60, 0, 1, 0x7b, // types: () -> v128
  3, 2, 1, 0, // one function of type 0
  10, 19, 1, 17, 0, // code: one body of 17 bytes, no locals
  0x41, 0, 0xfd, 0x0f, 0x41, 0, 0xfd, 0x0f, 0x41, 0, 0xfd, 0x0f, // three zero vectors
  0xfd, 0x93, 0x02, 0x0b, // i32x4.relaxed_dot_i8x16_i7x16_add_s; end
]);

const BUILDS = ["relaxed", "simd", "scalar"];

const isNode = typeof process !== "undefined" && !!process.versions?.node;
let bindings = null;
let exports = null;

/** Whether this engine runs WebAssembly SIMD128. */
export function simdSupported() {
  return WebAssembly.validate(SIMD_PROBE);
}

/**
 * Whether this engine runs relaxed SIMD (Chromium 114 and later, Node 22 and later), whose
 * 8-bit dot product the "relaxed" build's kernels use.
 */
export function relaxedSimdSupported() {
  return WebAssembly.validate(RELAXED_PROBE);
}

/**
 * Loads the WebAssembly module once (later calls return the same one). `build` picks one of
 * "relaxed", "simd" (SIMD128 alone) and "scalar"; `simd: true` or `false` is "simd" or
 * "scalar". By default the engine decides. All three compute the same numbers, bit for bit.
 * `wasmUrl` loads the module's `.wasm` from elsewhere than the package's `pkg/<build>/`.
 */
export async function init({ simd, build, wasmUrl } = {}) {
  if (bindings) return bindings;
  build ??= simd === undefined
    ? (relaxedSimdSupported() ? "relaxed" : simdSupported() ? "simd" : "scalar")
    : (simd ? "simd" : "scalar");
  if (!BUILDS.includes(build)) throw new Error(`unknown build ${build} (one of ${BUILDS})`);
  const glue = await import(`../pkg/${build}/hanzo_wasm.js`);
  const url = wasmUrl ? new URL(wasmUrl, import.meta.url) : new URL(`../pkg/${build}/hanzo_wasm_bg.wasm`, import.meta.url);
  if (isNode) {
    const { readFile } = await import("node:fs/promises");
    exports = await glue.default({ module_or_path: await readFile(url) });
  } else {
    exports = await glue.default({ module_or_path: url });
  }
  bindings = glue;
  return glue;
}

function loaded() {
  if (!bindings) throw new Error("call `await init()` (or `Model.load`) first");
  return bindings;
}

/** Which build is running: "relaxed", "simd" or "scalar" (null before `init`). */
export function build() {
  if (!bindings) return null;
  return bindings.relaxedSimd() ? "relaxed" : bindings.simd128() ? "simd" : "scalar";
}

/** Bytes of weights interleaved for faster decode (`repack` in `Model.load`), over the module's life. */
export function repackedBytes() {
  return bindings ? bindings.repackedBytes() : 0;
}

/** Bytes of WebAssembly memory the module holds now (it grows, never shrinks). */
export function memoryBytes() {
  return exports ? exports.memory.buffer.byteLength : 0;
}

/**
 * Copies a model's bytes into WebAssembly memory, piece by piece where the source allows it,
 * so the file is never held whole twice. `source`: Uint8Array, ArrayBuffer, a `Blob`/`File`,
 * a fetch `Response`, or a URL to fetch. `onProgress(loadedBytes, totalBytes)` is called as
 * pieces arrive.
 */
async function toBytes(source, onProgress) {
  const { Bytes } = loaded();
  return (await openSource(source, onProgress)).whole(Bytes);
}

const toIds = (ids) => Uint32Array.from(ids);

/** A GGUF language model with its tokenizer and chat template. */
export class Model {
  #inner;
  #info;

  constructor(inner) {
    this.#inner = inner;
    this.#info = JSON.parse(inner.info());
  }

  /** Loads a GGUF file (see `toBytes` above for the sources taken). */
  static async load(source, { onProgress, simd, repack = true } = {}) {
    const b = await init({ simd });
    const bytes = await toBytes(source, onProgress);
    return new Model(b.Model.load(bytes, repack));
  }

  /** architecture, contextLength, vocabSize, layers, hiddenSize, chatTemplateFromFile */
  get info() {
    return this.#info;
  }

  /** Token ids of raw text (BOS as the model wants it, special-token texts parsed). */
  encode(text) {
    return Array.from(this.#inner.encode(text));
  }

  /** The text of token ids. */
  decode(ids) {
    return this.#inner.decode(toIds(ids));
  }

  /** Token ids of a chat, `[{role, content}, …]`, through the model's chat template. */
  chatTokens(messages) {
    return Array.from(this.#inner.chatTokens(JSON.stringify(messages)));
  }

  /** The logits after every position of `ids`: one Float32Array of vocabSize per token. */
  logits(ids) {
    const flat = this.#inner.logits(toIds(ids));
    const v = flat.length / ids.length;
    return Array.from(ids, (_, i) => flat.subarray(i * v, (i + 1) * v));
  }

  /**
   * Generates from `ids`, calling `onToken(piece)` with each piece of text as it completes
   * (never half a UTF-8 character; return `false` to stop). Options: maxTokens (256),
   * temperature (0.8; 0 is greedy), topK (40), topP (0.95), minP (0.05), seed, stop (strings
   * that end the reply, left out of it), repeatPenalty, presencePenalty, frequencyPenalty,
   * and `signal`, an AbortSignal that cancels. Resolves to {text, tokens, finishReason,
   * promptTokens, promptSeconds, generateSeconds, tokensPerSecond}.
   */
  async generate(ids, options = {}, onToken = () => {}) {
    const { signal, ...rest } = options;
    const run = this.#inner.start(toIds(ids), JSON.stringify(rest));
    try {
      for (;;) {
        if (signal?.aborted) run.cancel();
        const piece = run.step();
        if (piece === undefined) break;
        if (piece && onToken(piece) === false) run.cancel();
        await yieldToEventLoop();
      }
      const out = JSON.parse(run.result());
      out.tokensPerSecond = out.generateSeconds > 0 ? out.tokens.length / out.generateSeconds : 0;
      return out;
    } finally {
      run.free();
    }
  }

  /** Frees the model's WebAssembly memory now rather than at garbage collection. */
  free() {
    this.#inner.free();
  }
}

/** A BERT-family sentence embedder (all-MiniLM-L6-v2 and the like). */
export class Embedder {
  #inner;

  constructor(inner) {
    this.#inner = inner;
  }

  /**
   * From a sentence-transformers directory's files: `config` and `tokenizer` are the texts of
   * config.json and tokenizer.json, `weights` model.safetensors (any model source); the
   * optional `pooling`, `modules` and `sentenceBert` are the texts of 1_Pooling/config.json,
   * modules.json and sentence_bert_config.json.
   */
  static async load({ config, tokenizer, weights, pooling, modules, sentenceBert }, { simd } = {}) {
    const b = await init({ simd });
    const bytes = await toBytes(weights);
    return new Embedder(b.Embedder.load(config, tokenizer, bytes, pooling, modules, sentenceBert));
  }

  get dimensions() {
    return this.#inner.dimensions;
  }

  /** One Float32Array per text (normalised where the model's modules say so). */
  embed(texts) {
    const flat = this.#inner.embed(JSON.stringify(texts));
    const d = this.dimensions;
    return texts.map((_, i) => flat.slice(i * d, (i + 1) * d));
  }

  free() {
    this.#inner.free();
  }
}

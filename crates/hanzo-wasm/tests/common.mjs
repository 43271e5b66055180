// What the Node tests share: the fixtures (fetched by scripts/fixtures.py), the native
// `hanzo-engine` they are compared with, and the near-tie rule for greedy decoding.
import { execFileSync } from "node:child_process";
import { homedir } from "node:os";
import { join } from "node:path";

const cache = process.env.HANZO_FIXTURES ?? join(homedir(), ".cache", "hanzo-ml", "fixtures");
export const fixtures = {
  smollm2: process.env.HANZO_SMOLLM2 ?? join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf"),
  gemma3: process.env.HANZO_GEMMA3 ?? join(cache, "gemma-3-270m-q4_k_m.gguf"),
  minilm: process.env.HANZO_MINILM ?? join(cache, "all-MiniLM-L6-v2"),
};

const engine = process.env.HANZO_ENGINE_BIN;

/**
 * Runs the native `hanzo-engine` (one thread) and returns its stdout. Its kernels are the
 * portable ones: the WebAssembly build runs the same code (its SIMD128 dot products give the
 * portable ones' bits), where the native SIMD sets sum in other orders. That is enough to
 * move a logit by a few tenths: activations are rounded to 8 bits before every quantized
 * product, and a last-bit difference that crosses a rounding step changes one of them.
 */
export function native(...args) {
  if (!engine) throw new Error("HANZO_ENGINE_BIN must name the native hanzo-engine binary");
  return execFileSync(engine, [...args, "-t", "1"], {
    env: { ...process.env, HANZO_ISA: "scalar" },
    encoding: "utf8",
    maxBuffer: 1 << 28,
    stdio: ["ignore", "pipe", "ignore"],
  });
}

/** The native greedy continuation of `prompt` (raw text, no chat template). */
export function nativeGreedy(model, prompt, tokens) {
  return native("run", "-m", model, "--temp", "0", "-n", String(tokens), prompt);
}

/**
 * Top-1 minus top-2 logit after `ids`: how near a tie the greedy choice there was.
 */
export function margin(model, ids) {
  const rows = model.logits(ids);
  const row = rows[rows.length - 1];
  let [a, b] = [-Infinity, -Infinity];
  for (const v of row) {
    if (v > a) [a, b] = [v, a];
    else if (v > b) b = v;
  }
  return a - b;
}

/**
 * Logit margins below this count as ties, which two correct builds may break differently:
 * activations are rounded to 8 bits before every quantized product, so a last-bit difference
 * (another summation order, libm's `expf` against glibc's) that crosses a rounding step moves
 * logits by tenths. The native build's own AVX2 and portable kernels flip greedy choices at
 * margins up to 0.35 on these prompts.
 */
export const NEAR_TIE = 0.5;

/**
 * Checks a WebAssembly greedy generation against the native text: equal throughout, or
 * equal up to a step where the choice was a near tie (then returns that step, else -1).
 */
export function agreeUpToNearTie(t, model, promptIds, out, nativeText) {
  let text = "";
  for (let k = 0; k < out.tokens.length; k++) {
    const next = model.decode(out.tokens.slice(0, k + 1));
    if (!nativeText.startsWith(next)) {
      const m = margin(model, [...promptIds, ...out.tokens.slice(0, k)]);
      t.diagnostic(`diverges from native at step ${k} (margin ${m.toFixed(4)}): ${JSON.stringify(text)}`);
      if (m >= NEAR_TIE) {
        throw new Error(
          `step ${k}: WebAssembly ${JSON.stringify(next)} vs native ${JSON.stringify(nativeText)}, ` +
            `margin ${m} is no near tie`,
        );
      }
      return k;
    }
    text = next;
  }
  if (text !== nativeText) {
    throw new Error(`WebAssembly ${JSON.stringify(text)} vs native ${JSON.stringify(nativeText)}`);
  }
  return -1;
}

// Type declarations of Hanzo Edge's JavaScript SDK (edge.js).

import type { Build, ChatMessage, GenerateOptions, ModelSource } from "./index.js";

export interface EdgeOptions {
  /** The GGUF file. */
  model: ModelSource;
  /** The most memory the model may take, in bytes. */
  maxMemoryBytes: number;
  /** Positions the KV cache holds, prompt and reply together (2048). */
  maxContextTokens?: number;
  /** Where the module's .wasm lies, if not in the package's `pkg/<build>/`. */
  wasmUrl?: string | URL;
  /** Force a build; by default the best one the engine validates. */
  build?: Build;
  /** When a conversation outgrows the context: move and re-rotate the kept keys (default), recompute them, or refuse. */
  eviction?: "rerotate" | "recompute" | "off";
  /** Tokens kept after the system prompt when older ones are evicted (0). */
  keepTokens?: number;
  /** The longest prefix evictions keep (a quarter of the context, at most 256). */
  maxKeepTokens?: number;
  /** Prompt tokens per forward pass (256, at most a quarter of the context). */
  prefillChunk?: number;
  /** How the KV cache holds keys and values ("f16"; "q8_0" takes 53% of the bytes). */
  kvDtype?: "f16" | "q8_0";
  /** Speculative decoding by prompt lookup: each pass also checks tokens copied from what followed the last earlier match of the newest `lookup` tokens (greedy replies stay the same). Off by default. */
  lookup?: number;
  /** Tokens drafted at most per pass with `lookup` (8; 1 to 16). */
  draftK?: number;
  /** Called as the model's bytes arrive. */
  onProgress?: (loadedBytes: number, totalBytes: number) => void;
}

/** The budget's terms, in bytes. */
export interface Breakdown {
  weights: number;
  kvCache: number;
  activations: number;
  tokenizer: number;
  runtime: number;
}

export interface Budget {
  total: number;
  breakdown: Breakdown;
}

/** Thrown by `HanzoEdge.init` when the model needs more than `maxMemoryBytes`. */
export class BudgetError extends Error {
  name: "BudgetError";
  needed: number;
  limit: number;
  breakdown: Breakdown;
}

/** How a reply went. */
export interface Summary {
  finishReason: "stop" | "length" | "cancelled";
  /** Tokens of the prompt (the whole conversation as sent). */
  promptTokens: number;
  /** Of those, the ones computed for this reply (the rest the KV cache held). */
  computedPromptTokens: number;
  completionTokens: number;
  /** Tokens evicted during this reply, and in how many evictions. */
  evictedTokens: number;
  evictions: number;
  /** The prefix evictions keep. */
  keptTokens: number;
  contextTokens: number;
  maxContextTokens: number;
  timeToFirstTokenSeconds: number;
  tokensPerSecond: number;
  /** Tokens prompt lookup drafted (`lookup`), and of those the ones the model kept. */
  draftedTokens: number;
  acceptedTokens: number;
}

export interface ChatOptions extends GenerateOptions {
  /** Cancels the reply. */
  signal?: AbortSignal;
}

export class HanzoEdge {
  /** Loads the model if its budget fits; throws `BudgetError` (having read only its header) if not. */
  static init(options: EdgeOptions): Promise<HanzoEdge>;
  readonly budget: Budget;
  /** How the last reply went; null before one. */
  readonly summary: Summary | null;
  /** The token ids the KV cache holds, in position order. */
  readonly contextTokens: number[];
  /** The reply to the whole conversation so far, piece by piece; only new turns are computed. */
  chat(messages: ChatMessage[], options?: ChatOptions): AsyncGenerator<string, void, undefined>;
  /** A continuation of raw text. */
  complete(text: string, options?: ChatOptions): AsyncGenerator<string, void, undefined>;
  /** Unit vectors by last-token pooling, one per text. */
  embed(texts: string[]): Float32Array[];
  /** Forgets the conversation. */
  reset(): void;
  free(): void;
}

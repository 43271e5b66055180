// Type declarations of the Hanzo ML WebAssembly API (index.js).

/** Where a model's bytes come from: copied into WebAssembly memory piece by piece. */
export type ModelSource = Uint8Array | ArrayBuffer | Blob | Response | URL | string;

/** The three builds: relaxed SIMD's 8-bit dot products, SIMD128 alone, no SIMD. */
export type Build = "relaxed" | "simd" | "scalar";

export interface InitOptions {
  /** Force a build; by default the best one the engine validates. */
  build?: Build;
  /** Force the SIMD128 build (true) or the scalar one (false). */
  simd?: boolean;
  /** Where the module's .wasm lies, if not in the package's `pkg/<build>/`. */
  wasmUrl?: string | URL;
}

/** Loads the WebAssembly module once; later calls return the same one. */
export function init(options?: InitOptions): Promise<unknown>;
/** Whether this engine runs WebAssembly SIMD128. */
export function simdSupported(): boolean;
/** Whether this engine runs relaxed SIMD. */
export function relaxedSimdSupported(): boolean;
/** The build in use; null before `init`. */
export function build(): Build | null;
/** Bytes of weights interleaved for faster decode (`repack` in `Model.load`), over the module's life. */
export function repackedBytes(): number;
/** Bytes of WebAssembly memory the module holds now (it grows, never shrinks). */
export function memoryBytes(): number;

export interface LoadOptions extends InitOptions {
  /** Called as the bytes arrive; `totalBytes` is 0 when the source does not say. */
  onProgress?: (loadedBytes: number, totalBytes: number) => void;
  /**
   * Rearrange the Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 weights eight rows at a time where they lie, for
   * the interleaved kernels (SIMD builds; no extra memory): 1.5–2x the decode speed. On by
   * default; `false` keeps the file's layout.
   */
  repack?: boolean;
}

export interface ModelInfo {
  architecture: string;
  contextLength: number;
  vocabSize: number;
  layers: number;
  hiddenSize: number;
  /** False when the file has no chat template and a built-in one for the architecture is used. */
  chatTemplateFromFile: boolean;
}

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | string;
  content: string;
}

export interface GenerateOptions {
  /** At most this many new tokens (256). */
  maxTokens?: number;
  /** 0 is greedy (0.8). */
  temperature?: number;
  /** 0 is off (40). */
  topK?: number;
  /** 1 is off (0.95). */
  topP?: number;
  /** 0 is off (0.05). */
  minP?: number;
  seed?: number;
  /** Strings that end the reply; they are left out of it. */
  stop?: string[];
  repeatPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  /** Cancels the generation. */
  signal?: AbortSignal;
}

export interface GenerateResult {
  text: string;
  tokens: number[];
  /** "stop": end of turn or a stop string; "length": maxTokens or the context; "cancelled". */
  finishReason: "stop" | "length" | "cancelled";
  promptTokens: number;
  promptSeconds: number;
  generateSeconds: number;
  tokensPerSecond: number;
}

/** A GGUF language model with its tokenizer and chat template. */
export class Model {
  private constructor(inner: unknown);
  static load(source: ModelSource, options?: LoadOptions): Promise<Model>;
  readonly info: ModelInfo;
  /** Token ids of raw text (BOS as the model wants it, special-token texts parsed). */
  encode(text: string): number[];
  /** The text of token ids. */
  decode(ids: ArrayLike<number>): string;
  /** Token ids of a chat through the model's chat template, ready for `generate`. */
  chatTokens(messages: ChatMessage[]): number[];
  /** The logits after every position of `ids`: one Float32Array of vocabSize per token. */
  logits(ids: ArrayLike<number>): Float32Array[];
  /**
   * Generates from `ids`, passing each piece of text as it completes (never half a UTF-8
   * character; return false to stop).
   */
  generate(
    ids: ArrayLike<number>,
    options?: GenerateOptions,
    onToken?: (piece: string) => boolean | void,
  ): Promise<GenerateResult>;
  /** Frees the model's WebAssembly memory now. */
  free(): void;
}

export interface EmbedderFiles {
  /** config.json's text. */
  config: string;
  /** tokenizer.json's text. */
  tokenizer: string;
  /** model.safetensors. */
  weights: ModelSource;
  /** 1_Pooling/config.json's text (mean pooling without it). */
  pooling?: string;
  /** modules.json's text (a Normalize module turns on L2 normalisation). */
  modules?: string;
  /** sentence_bert_config.json's text (its max_seq_length). */
  sentenceBert?: string;
}

/** A BERT-family sentence embedder (all-MiniLM-L6-v2 and the like). */
export class Embedder {
  private constructor(inner: unknown);
  static load(files: EmbedderFiles, options?: InitOptions): Promise<Embedder>;
  readonly dimensions: number;
  /** One vector per text. */
  embed(texts: string[]): Float32Array[];
  free(): void;
}

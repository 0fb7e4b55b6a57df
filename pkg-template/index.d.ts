// Types for the ferrolm browser package.

export type ProgressPhase = 'download' | 'cache' | 'upload' | 'compile';

export interface Progress {
  phase: ProgressPhase;
  /** download: bytes fetched (incl. what was cached before); cache: bytes read from the cache;
   *  upload: tensor bytes read and sent to the GPU; compile: pipelines compiled. For a model
   *  folder, download/cache count every file of the folder (config, tokenizer, all shards); their
   *  total grows while the files are opened (the index's total_size stands in for shards not
   *  opened yet) and is exact once every weight file is open, before the bulk of the download. */
  loaded: number;
  total: number;
}

export interface CreateEngineOptions {
  /**
   * A GGUF file: its URL (fetched with Range requests) or a File/Blob. A Hugging Face model
   * folder: its URL (config.json, model.safetensors or model.safetensors.index.json + shards,
   * tokenizer.json, tokenizer_config.json / chat_template.jinja, generation_config.json are read
   * relative to it), or its Files (a directory picker's FileList or an array of Files). An MLC-LLM
   * folder (what WebLLM runs: mlc-chat-config.json, tensor-cache.json or ndarray-cache.json,
   * params_shard_*.bin, tokenizer.json, tokenizer_config.json), by URL or Files the same way.
   * URL rule with `format: 'auto'`: a path ending in '/', '/config.json' or
   * '/mlc-chat-config.json' is a folder; one ending in '.gguf' (or a blob:/data: URL) is a GGUF
   * file; any other URL is probed for `<url>/config.json` and is a folder if that exists, else a
   * GGUF file. A folder without config.json is an MLC folder if it has mlc-chat-config.json.
   */
  model: string | URL | Blob | FileList | File[];
  /** Skip the detection above (default 'auto'). */
  format?: 'auto' | 'gguf' | 'hf' | 'mlc';
  /** An MLC folder given by URL: read the files WebLLM already downloaded from its Cache API
   *  caches ('webllm/config', 'webllm/model', keyed by the file URLs under the model URL as WebLLM
   *  writes them) instead of downloading them again (default true). Read-only: WebLLM's caches are
   *  never written, changed or created; files it does not have are fetched and cached as usual. */
  webllmCache?: boolean;
  /** Quantize a folder's F32/F16/BF16 matrices at load, like the CLI's --quantize (default
   *  'none'; matrices whose rows are not whole 32-element blocks stay as they are). GGUF files
   *  are already quantized: InvalidOptionError. */
  quantize?: 'none' | 'q8_0' | 'q4_0';
  onProgress?: (p: Progress) => void;
  /** Called once if the GPU device is lost later (the engine's 'devicelost' event). */
  onDeviceLost?: (error: DeviceLostError) => void;
  /** KV-cache length (default: the model's, capped by the engine). */
  contextLength?: number;
  /** Most prompt tokens one prefill step takes (default 512; fewer where the adapter's storage
   *  bindings cannot hold that many tokens' activations; longer prompts run in chunks). */
  maxBatch?: number;
  /** Run the engine in a dedicated module Worker (default true) or in this context. */
  worker?: boolean | Worker;
  /** Where downloaded chunks are kept (default 'auto': OPFS, else the Cache API). */
  cache?: 'auto' | 'opfs' | 'cache-api' | 'none';
  /** Expected sha256 (hex) of the whole file; checked while streaming, the cache entry is
   *  deleted and loading fails with an IntegrityError on a mismatch. For a model folder: a map
   *  from file name to digest (files not named are not checked). */
  sha256?: string | Record<string, string>;
  /** Network retries per chunk (default 2). */
  retries?: number;
  /** Download chunk size in bytes (default 16 MiB; fixed per cached model). */
  chunkSize?: number;
  /** Where to fetch ferrolm_bg.wasm from (default: next to the module). */
  wasm?: string | URL;
  /** Aborts the load, whatever phase it is in (download, upload, compile). */
  signal?: AbortSignal;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; /** JSON text. */ arguments: string };
}

export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool' | string;
  /** null only for an assistant message that holds tool_calls. */
  content: string | Array<{ type?: 'text'; text: string }> | null;
  name?: string;
  /** An assistant turn's calls (send them back as they came). */
  tool_calls?: ToolCall[];
  /** A tool result's call id (role 'tool'). */
  tool_call_id?: string;
}

export type GenerateInput = string | ChatMessage[] | { tokens: number[] };

export interface GenerateOptions {
  /** Default 256. */
  maxTokens?: number;
  /** 0 (default) is greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  /** OpenAI's penalties (-2..2), over the generated tokens. */
  frequencyPenalty?: number;
  presencePenalty?: number;
  /** Token id (decimal, as OpenAI writes it: "5", not "05" or "+5") -> bias added to its logit
   *  (-100..100). */
  logitBias?: Record<string, number>;
  seed?: number;
  /** Stop strings: generation ends when the text contains one; it is not returned. */
  stop?: string | string[];
  /** Stop token ids (default: the model's EOS/EOT ids). */
  stopIds?: number[];
  /** Report the largest logits of the first generated position in `result.topLogits`. */
  topLogits?: number;
  /** Report each token's log-probability with this many alternatives (0..20) in `chunk.logprob`
   *  and `result.logprobs`. */
  logprobs?: number;
  /** The output must be JSON valid under this schema. */
  jsonSchema?: object | boolean;
  /** The output must be a JSON object. */
  jsonObject?: boolean;
  /** The output must follow this Lark grammar (llguidance's dialect, `start` rule). */
  grammar?: string;
  /** Reuse the KV cache of the prefix shared with the previous generation (default true). */
  prefixCache?: boolean;
  signal?: AbortSignal;
}

export interface TokenLogprob {
  token: number;
  /** log-softmax of the raw logits (before temperature, penalties and constraints). */
  logprob: number;
  /** [token id, logprob] pairs, most likely first. */
  top: Array<[number, number]>;
}

export interface GenerateChunk {
  index: number;
  /** null only for a final chunk that flushes text held back while it might have started a stop string. */
  token: number | null;
  /** Text completed by this token (may be '' mid-character or while a stop string might start). */
  text: string;
  /** The token is a stop (EOS) token. */
  stop: boolean;
  logprob?: TokenLogprob;
}

export interface GenerationStats {
  prompt_tokens: number;
  /** Prompt tokens whose KV cache was reused from the previous sequence. */
  cached_tokens: number;
  generated_tokens: number;
  prefill_ms: number;
  /** From the start of the generation (its prefill included) to the first token. */
  first_token_ms: number;
  /** From the first token to the last; decode_tok_s is the tokens after the first over it. */
  decode_ms: number;
  prefill_tok_s: number;
  decode_tok_s: number;
  stop_reason: 'stop' | 'length' | 'context' | 'cancelled';
  seed: number;
  dispatches_per_token: number;
  /** Tokens after the first were chosen on the GPU (false: on the CPU, for logprobs or cpuSampling). */
  gpu_sampling: boolean;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export interface GenerateResult {
  text: string;
  tokens: number[];
  promptTokens: number;
  finishReason: 'stop' | 'length' | 'abort';
  usage: Usage;
  stats: GenerationStats;
  topLogits: Array<[number, number]>;
  logprobs: TokenLogprob[];
}

export interface GenerateStream extends AsyncIterableIterator<GenerateChunk> {
  /** Resolves when the generation ends (also after `break`, with finishReason 'abort'). */
  result: Promise<GenerateResult>;
}

export interface Tool {
  type: 'function';
  function: { name: string; description?: string; /** JSON schema of the arguments. */ parameters?: object; strict?: boolean };
}

export interface ChatCompletionRequest {
  messages: ChatMessage[];
  model?: string;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean } | null;
  /** Default 256. Either field; both must agree when both are given. */
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  /** Defaults come from the model (generation_config.json or GGUF general.sampling.*), else
   *  OpenAI's: temperature 1, top_p 1. */
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  min_p?: number | null;
  repetition_penalty?: number | null;
  frequency_penalty?: number | null;
  presence_penalty?: number | null;
  /** Token id (decimal) -> bias (-100..100). */
  logit_bias?: Record<string, number> | null;
  logprobs?: boolean | null;
  /** 0..20; needs logprobs: true. */
  top_logprobs?: number | null;
  seed?: number | null;
  /** Up to 4 stop strings. */
  stop?: string | string[] | null;
  /** Completions to generate (1..16; without stream). Choice i samples with seed + i. */
  n?: number | null;
  response_format?: { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; json_schema: { name?: string; description?: string; schema: object; strict?: boolean } } | null;
  tools?: Tool[] | null;
  tool_choice?: 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } } | null;
  parallel_tool_calls?: boolean | null;
  user?: string | null;
  /** ferrolm: a Lark grammar the output must follow. */
  grammar?: string | null;
  /** ferrolm: 'error' (default) or 'drop_oldest' turns (after a system message) until it fits. */
  context_overflow?: 'error' | 'drop_oldest' | null;
  /** ferrolm: reuse the KV cache of the prefix shared with the previous request (default true). */
  prefix_cache?: boolean | null;
  signal?: AbortSignal;
}

export interface ChatLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] };
    logprobs: { content: ChatLogprob[] } | null;
    finish_reason: 'stop' | 'length' | 'tool_calls';
  }>;
  usage: Usage;
  stats: GenerationStats;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: { role?: 'assistant'; content?: string; tool_calls?: Array<ToolCall & { index: number }> };
    logprobs: { content: ChatLogprob[] } | null;
    finish_reason: 'stop' | 'length' | 'tool_calls' | null;
  }>;
  usage?: Usage;
}

export type ChatCompletionStream = AsyncIterableIterator<ChatCompletionChunk> & { result: Promise<ChatCompletion> };

/** OpenAI's embeddings.create request, plus ferrolm's `prompt_name` / `prompt`. */
export interface EmbeddingRequest {
  /** A text, texts, token ids, or arrays of token ids (used as given: no special tokens added,
   * no prompt, not cut: more ids than the model embeds is an InvalidOptionError). */
  input: string | string[] | number[] | number[][];
  model?: string;
  /** Keep the first N dimensions (Matryoshka), re-normalized when the model normalizes. */
  dimensions?: number;
  /** 'float' (default) or 'base64' (little-endian float32 bytes). */
  encoding_format?: 'float' | 'base64';
  user?: string;
  /** ferrolm: one of the model's named prompts (config_sentence_transformers.json), e.g. 'query'. */
  prompt_name?: string;
  /** ferrolm: an instruction put before every text; wins over `prompt_name`. Either with
   * token-id inputs is an InvalidOptionError. */
  prompt?: string;
  /** Aborts between batches of 16 inputs. */
  signal?: AbortSignal;
  /** Inputs embedded so far. */
  onProgress?: (p: { done: number; total: number }) => void;
}

export interface EmbeddingResponse {
  object: 'list';
  data: Array<{ object: 'embedding'; index: number; embedding: number[] | string }>;
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export interface EngineInfo {
  source: string;
  adapter: {
    backend: string; device_type: string; driver: string; name: string;
    max_buffer_size: number; max_storage_buffer_binding_size: number; max_workgroup_storage_size: number;
    shader_f16: boolean; subgroups: boolean; integer_dot: boolean; fused_attention: boolean;
    /** Prefill matmuls on f16 cooperative matrices (native only; false in browsers). */
    matrix_units: boolean;
    /**
     * Prefill matmuls of quantized weights with 8-bit activations on 8-bit subgroup matrices
     * (browsers offering `chromium-experimental-subgroup-matrix` with i8 16x16x32, e.g.
     * Chromium on NVIDIA).
     */
    i8_prefill: boolean;
    timestamps: boolean; timestamps_in_passes: boolean;
  };
  config: Record<string, unknown>;
  contextLength: number;
  maxBatch: number;
  weightBytes: number;
  gpuBytes: number;
  dispatchesPerToken: number;
  eosIds: number[];
  hasChatTemplate: boolean;
  /** How embeddings.create pools: from the folder's sentence-transformers modules, a GGUF's
   *  pooling_type, or the defaults (last token for causal models, mean for bidirectional). */
  embedding: {
    dimensions: number; pooling: string[]; includePrompt: boolean; dense: Array<[number, number]>;
    normalize: boolean; prompts: Record<string, string>; defaultPromptName: string | null;
    maxSeqLength: number | null; source: 'sentence-transformers' | 'gguf' | 'default';
  };
  /** The engine's GPU device among those this page or worker opened. */
  deviceId: number;
  /** From navigator.gpu.requestAdapter() (vendor/architecture/description, features, limits). */
  adapterInfo: { vendor: string; architecture: string; device: string; description: string; features: string[]; limits: Record<string, number> } | null;
  load: {
    /** The file's URL, or for a model folder the folder's URL (ending in '/'); null for local files. */
    url: string | null; size: number; downloadedBytes: number; cachedBytesRead: number; networkRequests: number;
    cache: 'opfs' | 'cache-api' | 'none' | 'webllm'; sha256Verified: boolean; cacheWarning: string | null; ms: number;
    /** 'hf' for a Hugging Face model folder, 'mlc' for an MLC-LLM one (absent for a GGUF file). */
    format?: 'hf' | 'mlc';
    /** A model folder's files with the same statistics each; a file read from WebLLM's cache has
     *  `cache: 'webllm'` and its key there as `url`. */
    files?: Array<{ name: string; url: string | null; size: number; downloadedBytes: number; cachedBytesRead: number; networkRequests: number; cache: 'opfs' | 'cache-api' | 'none' | 'webllm'; sha256Verified: boolean; cacheWarning: string | null }>;
  };
}

/**
 * A loaded model. 'devicelost' fires (a CustomEvent, `detail.error` a DeviceLostError) when the
 * GPU device is lost (driver reset, GPU removed, the browser reclaimed it); every later call then
 * fails with that error, and a new engine must be created.
 */
export interface Engine extends EventTarget {
  readonly info: EngineInfo;
  /** Resolves with the DeviceLostError if the device is lost (like GPUDevice.lost). */
  readonly lost: Promise<DeviceLostError>;
  tokenize(text: string): Promise<number[]>;
  decode(ids: number[]): Promise<string>;
  generate(input: GenerateInput, options?: GenerateOptions): GenerateStream;
  chat: {
    completions: {
      create(req: ChatCompletionRequest & { stream: true }): Promise<ChatCompletionStream>;
      create(req: ChatCompletionRequest & { stream?: false | null }): Promise<ChatCompletion>;
      create(req: ChatCompletionRequest): Promise<ChatCompletion | ChatCompletionStream>;
    };
  };
  /** Text embeddings (no LM head runs). A bidirectional model (EmbeddingGemma) only embeds. */
  embeddings: {
    create(req: EmbeddingRequest): Promise<EmbeddingResponse>;
  };
  /** GPU self-check for bug reports (see DiagnoseReport). */
  diagnose(options?: { reference?: { tokens: number[]; top: Array<[number, number]>; tolerance?: number } }): Promise<DiagnoseReport>;
  /**
   * The engine's own speed on this device, measured as `ferrolm bench` does natively (random
   * prompt ids, decoding with the token chosen on the GPU; medians over `reps`). The context
   * must hold promptLen + gen + 1 tokens; afterwards the KV cache holds random tokens.
   */
  benchmark(options?: BenchmarkOptions): Promise<BenchmarkReport>;
  /**
   * Free the GPU memory (and end the worker). A generation in progress ends with finishReason
   * 'abort', queued ones reject with AbortError; later calls reject with EngineUnloadedError.
   */
  unload(): Promise<void>;
}

export interface BenchmarkOptions {
  /** Prompt ids prefilled in one chunk (default 512). */
  promptLen?: number;
  /** Tokens decoded (default 128). */
  gen?: number;
  /** Tokens in the cache when decoding starts (default promptLen). */
  depth?: number;
  /** Repetitions, after a warm-up (default 3). */
  reps?: number;
  /** Decode steps on the GPU before the oldest one's token is read back (default: as a generation keeps them). */
  inflight?: number;
  /** Any of these decodes by sampling on the GPU (seed 1 unless given); none: greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  frequencyPenalty?: number;
  presencePenalty?: number;
  logitBias?: Record<string, number>;
  seed?: number;
}

/** `ferrolm bench --json`'s report (snake_case as the CLI writes it). */
export interface BenchmarkReport {
  prompt_len: number;
  gen: number;
  depth: number;
  reps: number;
  /** Decode steps kept in flight. */
  inflight: number;
  prefill_tok_s: number;
  /** Median ms from the prompt's submission to its last position's logits: time to first token. */
  ttft_ms: number;
  decode_tok_s: number;
  ms_per_token: number;
  prefill_ms: number[];
  decode_ms: number[];
  dispatches_per_token: number;
  prefill_dispatches_per_chunk: number;
  submits_per_token: number;
  readbacks_per_token: number;
  weight_bytes_per_token: number;
  kv_bytes_per_token: number;
  effective_gb_s: number;
  gpu_memory_bytes: number;
  /** Median GPU time of one decode step (timestamp queries), where the adapter offers them. */
  gpu_ms_per_step: number | null;
  /** Median CPU time the engine spends recording and submitting one decode step. */
  cpu_ms_per_step: number;
  adapter: Record<string, unknown>;
  model: Record<string, unknown>;
  /** GPU time per kernel of one step: [kernel, dispatches, ms], slowest first, where the adapter
   *  offers `timestamp-query` (in browsers each dispatch is timed in a pass of its own). */
  decode_profile: Array<[string, number, number]> | null;
  prefill_profile: Array<[string, number, number]> | null;
}

export interface DiagnoseReport {
  adapter: { name: string; backend: string; deviceType: string; driver: string };
  limits: Record<string, number>;
  variants: { subgroups: boolean; integerDot: boolean; fusedAttention: boolean; matrixUnits: boolean; i8Prefill: boolean; shaderF16: boolean; timestamps: boolean };
  checks: Array<{ name: 'prefill' | 'decode' | 'model'; passed: boolean; maxError: number; tolerance: number; detail: string }>;
  passed: boolean;
  model: { source: string; arch: string };
}

export interface CachedModel {
  /** A GGUF file's URL, or a model folder's URL (ending in '/'). */
  url: string;
  /** 'hf' for any model folder (Hugging Face or MLC). */
  format: 'gguf' | 'hf';
  /** Bytes of the file, or of the folder's files cached so far. */
  size: number;
  cachedBytes: number;
  complete: boolean;
  backend: 'opfs' | 'cache-api';
  sha256: string | null;
  etag: string | null;
  updated: number;
  /** A model folder's cached files (config, tokenizer, shards), each described like a file. */
  files?: Array<{ name: string; url: string; size: number; cachedBytes: number; complete: boolean; sha256: string | null; etag: string | null; updated: number }>;
}

export function createEngine(options: CreateEngineOptions): Promise<Engine>;
export function listCachedModels(): Promise<CachedModel[]>;
/** Delete a cached GGUF file, or a model folder (its URL, with or without the trailing '/') with
 *  all of its files. */
export function deleteCachedModel(url: string): Promise<boolean>;
export function initWasm(wasm?: string | URL): Promise<unknown>;

/** Every error ferrolm throws is a FerrolmError subclass; `name` is the class name. */
export class FerrolmError extends Error {}
export class InvalidOptionError extends FerrolmError {}
export class ContextOverflowError extends FerrolmError {}
export class ModelFormatError extends FerrolmError {}
export class UnsupportedModelError extends FerrolmError {}
export class TokenizerError extends FerrolmError {}
export class TemplateError extends FerrolmError {}
/** An HTTP failure; `status` is the HTTP status when there was a response. */
export class DownloadError extends FerrolmError { status?: number; }
export class NetworkError extends FerrolmError {}
export class IntegrityError extends FerrolmError {}
export class CacheError extends FerrolmError {}
export class IoError extends FerrolmError {}
export class NoAdapterError extends FerrolmError {}
export class GpuError extends FerrolmError {}
export class GpuLimitsError extends FerrolmError {}
/** The GPU device was lost; the engine is unusable (create a new one). */
export class DeviceLostError extends FerrolmError {}
export class EngineCrashedError extends FerrolmError {}
export class EngineUnloadedError extends FerrolmError {}
export class WorkerError extends FerrolmError {}

// Types for the ferrolm browser package.

export type ProgressPhase = 'download' | 'cache' | 'upload' | 'compile';

export interface Progress {
  phase: ProgressPhase;
  /** download: bytes fetched (incl. what was cached before); cache: bytes read from the cache;
   *  upload: tensor bytes sent to the GPU; compile: pipelines compiled. */
  loaded: number;
  total: number;
}

export interface CreateEngineOptions {
  /** URL of a GGUF file (fetched with Range requests) or a File/Blob. */
  model: string | URL | Blob;
  onProgress?: (p: Progress) => void;
  /** KV-cache length (default: the model's, capped by the engine). */
  contextLength?: number;
  /** Largest prefill batch. */
  maxBatch?: number;
  /** Run the engine in a dedicated module Worker (default true) or in this context. */
  worker?: boolean | Worker;
  /** Where downloaded chunks are kept (default 'auto': OPFS, else the Cache API). */
  cache?: 'auto' | 'opfs' | 'cache-api' | 'none';
  /** Expected sha256 (hex) of the whole file; checked while streaming, the cache entry is
   *  deleted and loading fails with an IntegrityError on a mismatch. */
  sha256?: string;
  /** Network retries per chunk (default 2). */
  retries?: number;
  /** Download chunk size in bytes (default 16 MiB; fixed per cached model). */
  chunkSize?: number;
  /** Where to fetch ferrolm_bg.wasm from (default: next to the module). */
  wasm?: string | URL;
  /** Aborts the load. */
  signal?: AbortSignal;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | string;
  content: string | Array<{ type?: string; text?: string }>;
}

export type GenerateInput = string | ChatMessage[] | { tokens: number[] };

export interface GenerateOptions {
  maxTokens?: number;
  /** 0 (default) is greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  seed?: number;
  /** Stop strings: generation ends when the text contains one; it is not returned. */
  stop?: string | string[];
  /** Stop token ids (default: the model's EOS/EOT ids). */
  stopIds?: number[];
  /** Report the largest logits of the first generated position in `result.topLogits`. */
  topLogits?: number;
  signal?: AbortSignal;
}

export interface GenerateChunk {
  index: number;
  /** null only for a final chunk that flushes text held back while it might have started a stop string. */
  token: number | null;
  /** Text completed by this token (may be '' mid-character or while a stop string might start). */
  text: string;
  /** The token is a stop (EOS) token. */
  stop: boolean;
}

export interface GenerationStats {
  prompt_tokens: number;
  generated_tokens: number;
  prefill_ms: number;
  decode_ms: number;
  prefill_tok_s: number;
  decode_tok_s: number;
  stop_reason: 'stop' | 'length' | 'context' | 'cancelled';
  seed: number;
  dispatches_per_token: number;
}

export interface GenerateResult {
  text: string;
  tokens: number[];
  promptTokens: number;
  finishReason: 'stop' | 'length' | 'abort';
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  stats: GenerationStats;
  topLogits: Array<[number, number]>;
}

export interface GenerateStream extends AsyncIterableIterator<GenerateChunk> {
  /** Resolves when the generation ends (also after `break`, with finishReason 'abort'). */
  result: Promise<GenerateResult>;
}

export interface ChatCompletionRequest {
  messages: ChatMessage[];
  model?: string;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  max_tokens?: number;
  max_completion_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  seed?: number;
  stop?: string | string[];
  n?: 1;
  signal?: AbortSignal;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{ index: number; message: { role: 'assistant'; content: string }; logprobs: null; finish_reason: 'stop' | 'length' }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  stats: GenerationStats;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{ index: number; delta: { role?: 'assistant'; content?: string }; logprobs: null; finish_reason: 'stop' | 'length' | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

export interface EngineInfo {
  source: string;
  adapter: {
    backend: string; device_type: string; driver: string; name: string;
    max_buffer_size: number; max_storage_buffer_binding_size: number; max_workgroup_storage_size: number;
    shader_f16: boolean; subgroups: boolean; timestamps: boolean;
  };
  config: Record<string, unknown>;
  contextLength: number;
  maxBatch: number;
  weightBytes: number;
  gpuBytes: number;
  dispatchesPerToken: number;
  eosIds: number[];
  hasChatTemplate: boolean;
  /** From navigator.gpu.requestAdapter() (vendor/architecture/description, features, limits). */
  adapterInfo: { vendor: string; architecture: string; device: string; description: string; features: string[]; limits: Record<string, number> } | null;
  load: {
    url: string | null; size: number; downloadedBytes: number; cachedBytesRead: number; networkRequests: number;
    cache: 'opfs' | 'cache-api' | 'none'; sha256Verified: boolean; cacheWarning: string | null; ms: number;
  };
}

export interface Engine {
  readonly info: EngineInfo;
  tokenize(text: string): Promise<number[]>;
  decode(ids: number[]): Promise<string>;
  generate(input: GenerateInput, options?: GenerateOptions): GenerateStream;
  chat: {
    completions: {
      create(req: ChatCompletionRequest & { stream: true }): Promise<AsyncIterableIterator<ChatCompletionChunk> & { result: Promise<GenerateResult> }>;
      create(req: ChatCompletionRequest & { stream?: false }): Promise<ChatCompletion>;
    };
  };
  unload(): Promise<void>;
}

export interface CachedModel {
  url: string;
  size: number;
  cachedBytes: number;
  complete: boolean;
  backend: 'opfs' | 'cache-api';
  sha256: string | null;
  etag: string | null;
  updated: number;
}

export function createEngine(options: CreateEngineOptions): Promise<Engine>;
export function listCachedModels(): Promise<CachedModel[]>;
export function deleteCachedModel(url: string): Promise<boolean>;
export function initWasm(wasm?: string | URL): Promise<unknown>;

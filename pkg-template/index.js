// ferrolm: LLM inference in the browser on WebGPU. See README.md.
//
//   const engine = await createEngine({ model: url | File, onProgress });
//   for await (const c of engine.generate('Once upon a time', { maxTokens: 64 })) out += c.text;
//   const r = await engine.chat.completions.create({ messages, max_tokens: 128 });

import { LocalEngine, abortReason, initWasm } from './core.js';
import { typedError } from './errors.js';
export { listCachedModels, deleteCachedModel } from './cache.js';
export * from './errors.js';

// An error from the worker, as the class of its name (so `instanceof` works across the worker).
function rebuildError(d) {
  const e = typedError(d.name, d.message, d.fields);
  if (d.stack) e.stack = d.stack;
  return e;
}

/**
 * An async iterable of chunks with a `result` promise, driving `run(emit, signal)`.
 * Breaking out of `for await` stops the generation (result.finishReason = 'abort'); the caller's
 * `signal` makes the iteration (and `result`) reject with its reason, chunks already queued
 * included. After a `break`, `trim(result, handed)` makes the result agree with the chunks the
 * loop took (chunks arrive in batches, so more may have been made).
 */
function stream(run, userSignal, trim = (r) => r) {
  const ac = new AbortController();
  const onAbort = () => ac.abort();
  userSignal?.addEventListener('abort', onAbort, { once: true });
  const queue = [];
  const handed = []; // the chunks the consumer took
  let wake = null;
  let ended = false;
  let closed = false; // return() was called (a `break`): nothing more is handed out
  let failure = null;
  const result = run((chunk) => {
    if (closed) return;
    queue.push(chunk);
    wake?.();
  }, ac.signal).then(
    (r) => {
      if (userSignal?.aborted) throw abortReason(userSignal);
      return closed ? trim(r, handed) : r;
    },
  ).finally(() => {
    ended = true;
    userSignal?.removeEventListener('abort', onAbort);
    wake?.();
  });
  result.catch((e) => { failure = e; });
  result.catch(() => {}); // reported through iteration; avoid unhandled rejections
  const it = {
    result,
    async next() {
      for (;;) {
        if (closed) return { value: undefined, done: true };
        if (userSignal?.aborted) throw abortReason(userSignal);
        if (queue.length) {
          const value = queue.shift();
          handed.push(value);
          return { value, done: false };
        }
        if (ended) {
          await result.catch(() => {});
          if (failure) throw failure;
          return { value: undefined, done: true };
        }
        await new Promise((ok) => { wake = ok; });
        wake = null;
      }
    },
    async return(value) {
      closed = true;
      ac.abort();
      queue.length = 0;
      await result.catch(() => {});
      return { value, done: true };
    },
    [Symbol.asyncIterator]() { return this; },
  };
  return it;
}

// An aborted generation's result as far as its loop took chunks: their tokens and text.
function trimToHanded(r, handed) {
  const tokens = [];
  let text = '';
  for (const c of handed) {
    if (c.token != null) tokens.push(c.token);
    text += c.text;
  }
  if (r.finishReason !== 'abort' || r.tokens.length <= tokens.length) return r;
  const usage = { ...r.usage, completion_tokens: tokens.length, total_tokens: r.usage.prompt_tokens + tokens.length };
  return { ...r, text, tokens, usage, logprobs: r.logprobs?.slice(0, tokens.length) };
}

let seq = 0;
const newId = (p) => `${p}-${Date.now().toString(36)}${(seq++).toString(36)}`;

const invalid = (m) => typedError('InvalidOptionError', m);

// Token ids: integers in 0..2^32 (a string, a fraction or a larger number is refused, not
// converted: Uint32Array would wrap it).
function checkIds(where, ids) {
  if (!Array.isArray(ids) && !ArrayBuffer.isView(ids)) throw invalid(`${where}: token ids must be an array of integers`);
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i];
    if (!Number.isInteger(t) || t < 0 || t >= 2 ** 32) throw invalid(`${where}: token id ${i} must be an integer >= 0, got ${typeof t === 'string' ? JSON.stringify(t) : String(t)}`);
  }
}

// Options are data: a function cannot reach the worker (and would be dropped without one), and
// NaN or Infinity would reach the engine as null.
function checkData(where, o) {
  for (const [k, v] of Object.entries(o)) {
    if (typeof v === 'function') throw invalid(`${where}: option ${k} is a function; options are data (iterate the stream for tokens)`);
    if (typeof v === 'number' && !Number.isFinite(v)) throw invalid(`${where}: ${k} must be a finite number, got ${v}`);
  }
}

// generate()'s input: a prompt string, chat messages {role, content}, or {tokens}.
function checkInput(input) {
  if (Array.isArray(input)) {
    if (!input.length) throw invalid('generate: the list of chat messages is empty');
    input.forEach((m, i) => {
      if (!m || typeof m !== 'object') throw invalid(`generate: message ${i} must be an object {role, content}`);
      if (typeof m.role !== 'string' || !m.role) throw invalid(`generate: message ${i} needs a role (a non-empty string)`);
      const toolTurn = m.content == null && Array.isArray(m.tool_calls);
      if (typeof m.content !== 'string' && !Array.isArray(m.content) && !toolTurn) throw invalid(`generate: message ${i}'s content must be a string or an array of text parts`);
    });
  } else if (input && typeof input === 'object' && 'tokens' in input) {
    checkIds('generate', input.tokens);
  }
}

// createEngine's options, checked before anything loads (in this context, for both modes).
const LOAD_OPTIONS = ['model', 'format', 'webllmCache', 'quantize', 'onProgress', 'onDeviceLost', 'contextLength', 'maxBatch', 'worker', 'cache', 'sha256', 'retries', 'chunkSize', 'wasm', 'signal'];
const SHA256 = /^[0-9a-f]{64}$/i;
function checkLoadOptions(o) {
  if (!o || typeof o !== 'object' || Array.isArray(o)) throw invalid('createEngine: expected an options object {model, ...}');
  for (const k of Object.keys(o)) {
    if (!LOAD_OPTIONS.includes(k)) throw invalid(`createEngine: unknown option ${JSON.stringify(k)} (options: ${LOAD_OPTIONS.join(', ')})`);
  }
  const int = (k, min, max) => {
    const v = o[k];
    if (v != null && !(Number.isInteger(v) && v >= min && v <= max)) throw invalid(`createEngine: ${k} must be an integer from ${min} to ${max}, got ${typeof v === 'string' ? JSON.stringify(v) : String(v)}`);
  };
  int('retries', 0, 100);
  int('chunkSize', 4096, 2 ** 30);
  int('contextLength', 1, 2 ** 32 - 1);
  int('maxBatch', 1, 2 ** 32 - 1);
  for (const k of ['onProgress', 'onDeviceLost']) {
    if (o[k] != null && typeof o[k] !== 'function') throw invalid(`createEngine: ${k} must be a function`);
  }
  const sig = o.signal;
  if (sig != null && (typeof sig.aborted !== 'boolean' || typeof sig.addEventListener !== 'function')) throw invalid('createEngine: signal must be an AbortSignal');
  const sha = o.sha256;
  if (typeof sha === 'string' && !SHA256.test(sha)) throw invalid(`createEngine: sha256 must be 64 hexadecimal digits, got ${JSON.stringify(sha.slice(0, 80))}`);
  if (sha && typeof sha === 'object' && !Array.isArray(sha)) {
    for (const [f, d] of Object.entries(sha)) {
      if (typeof d !== 'string' || !SHA256.test(d)) throw invalid(`createEngine: sha256[${JSON.stringify(f)}] must be 64 hexadecimal digits`);
    }
  }
}

/**
 * A loaded model. An EventTarget: 'devicelost' fires (a CustomEvent whose `detail.error` is the
 * DeviceLostError) when the GPU device is lost; every later call then fails with that error and
 * a new engine must be created. `lost` is a promise of the same error, like GPUDevice.lost.
 */
class Engine extends EventTarget {
  constructor(backend, info) {
    super();
    this._b = backend;
    /** Adapter, model config, context length, memory use, load statistics. */
    this.info = info;
    this.lost = new Promise((resolve) => {
      backend.onLost = (error) => {
        resolve(error);
        this.dispatchEvent(new CustomEvent('devicelost', { detail: { error } }));
      };
    });
    const self = this;
    this.chat = {
      completions: {
        create(req) { return self._chatCreate(req); },
      },
    };
    this.embeddings = {
      create(req) { return self._embedCreate(req); },
    };
  }

  /**
   * OpenAI's embeddings.create: `{input}` (a string, an array of strings, token ids or arrays of
   * them) plus `dimensions`, `encoding_format`, and ferrolm's `prompt_name` / `prompt`; `signal`
   * aborts between batches of inputs, `onProgress({done, total})` reports inputs embedded.
   */
  async _embedCreate(req) {
    if (!req || typeof req !== 'object' || Array.isArray(req)) {
      throw typedError('InvalidOptionError', 'embeddings.create: expected a request object {input, ...}');
    }
    const { signal, onProgress, ...body } = req;
    if (signal?.aborted) throw abortReason(signal);
    const r = await this._b.embed(body, typeof onProgress === 'function' ? onProgress : () => {}, signal);
    if (signal?.aborted) throw abortReason(signal);
    return r;
  }

  /**
   * A GPU self-check for bug reports: a small random model through every kernel variant this
   * adapter selected against a CPU reference, and with `{reference: {tokens, top: [[id, logit]],
   * tolerance?}}` the loaded model's own logits. Resolves to the report ({adapter, limits,
   * variants, checks: [{name, passed, maxError, tolerance, detail}], passed}).
   */
  diagnose(options = {}) { return this._b.diagnose(options?.reference ?? null); }

  /**
   * The engine's own speed on this device, as `ferrolm bench` measures it natively: random
   * prompt ids, then decoding with the token chosen on the GPU, medians over repetitions.
   * Options {promptLen = 512, gen = 128, depth, reps = 3, temperature, topK, topP, minP,
   * repetitionPenalty, frequencyPenalty, presencePenalty, logitBias, seed = 1}; resolves to the report ({prefill_tok_s, decode_tok_s,
   * gpu_ms_per_step, dispatches_per_token, ...}). The model's context must hold promptLen +
   * gen + 1 tokens. Afterwards the KV cache holds random tokens, so the next generation
   * prefills its whole prompt.
   */
  benchmark(options = {}) { return this._b.benchmark(options); }

  /** Token ids of `text` (no BOS added). */
  async tokenize(text) {
    if (typeof text !== 'string') throw invalid('tokenize: text must be a string');
    return this._b.tokenize(text);
  }

  /** Text of token ids. */
  async decode(ids) {
    checkIds('decode', ids);
    return this._b.decode(ids);
  }

  /**
   * Stream a generation. `input`: a prompt string, an array of chat messages, or `{tokens}`.
   * Options: see GenerateOptions in index.d.ts (signal aborts). Returns an async iterable of
   * `{index, token, text, stop, logprob?}` with a `result` promise.
   */
  generate(input, options = {}) {
    const bad = !options || typeof options !== 'object' || Array.isArray(options);
    const { signal, ...rest } = bad ? {} : options;
    return stream(async (emit, s) => {
      if (bad) throw invalid('generate: options must be an object');
      checkInput(input);
      checkData('generate', rest);
      return this._b.run(input, rest, emit, s);
    }, signal, trimToHanded);
  }

  /**
   * OpenAI's chat completion. The request is checked by the engine (unknown or unsupported
   * fields are an InvalidOptionError naming them); `signal` aborts it. With `stream: true` the
   * result is an async iterable of chunks (breaking out of it stops the generation) whose
   * `result` promise resolves to the whole `chat.completion` object.
   */
  async _chatCreate(req) {
    if (!req || typeof req !== 'object' || !Array.isArray(req.messages)) {
      throw typedError('InvalidOptionError', 'chat.completions.create: `messages` must be an array');
    }
    const { signal, ...body } = req;
    checkData('chat.completions.create', body);
    const id = newId('chatcmpl');
    if (!body.stream) {
      if (signal?.aborted) throw abortReason(signal);
      const r = await this._b.chat(body, id, () => {}, signal);
      if (signal?.aborted) throw abortReason(signal);
      return r;
    }
    const it = stream((emit, s) => this._b.chat(body, id, emit, s), signal);
    // Errors in the request itself (bad fields) reject create() rather than the first next().
    const first = await it.next();
    const gen = {
      result: it.result,
      pending: first,
      async next() {
        if (this.pending) {
          const p = this.pending;
          this.pending = null;
          return p;
        }
        return it.next();
      },
      async return(v) {
        this.pending = null;
        return it.return(v);
      },
      [Symbol.asyncIterator]() { return this; },
    };
    return gen;
  }

  /** Free the GPU memory (and end the worker). */
  unload() { return this._b.unload(); }

  /** Make the wasm module panic (tests of crash recovery; not part of the API). */
  _crashForTesting() { return this._b.crashForTesting(); }

  /** Destroy the GPU device (tests of device loss; not part of the API). */
  _loseDeviceForTesting() { return this._b.loseDeviceForTesting(); }
}

class WorkerBackend {
  constructor(worker) {
    this.w = worker;
    this.pending = new Map();
    this.dead = null; // the error every call fails with once the worker crashed or failed
    worker.onmessage = (ev) => {
      const m = ev.data;
      if (m.type === 'crashed') {
        this.die(rebuildError(m.error));
        return;
      }
      if (m.type === 'devicelost') {
        const e = rebuildError(m.error);
        this.die(e);
        this.onLost?.(e);
        return;
      }
      const p = this.pending.get(m.id);
      if (!p) return;
      if (m.type === 'progress') p.onProgress?.(m.progress);
      else if (m.type === 'chunks') for (const c of m.chunks) p.onChunk?.(c);
      else if (m.type === 'chunk') p.onChunk?.(m.chunk); // a worker.js of an earlier version
      else {
        this.pending.delete(m.id);
        if (m.type === 'result') p.ok(m.value);
        else p.fail(rebuildError(m.error));
      }
    };
    worker.onerror = (ev) => {
      ev.preventDefault?.();
      this.die(typedError('WorkerError', `the ferrolm worker failed: ${ev.message || 'could not start it (module workers are needed)'}`));
    };
    worker.onmessageerror = () => this.failAll(typedError('WorkerError', 'a message from the ferrolm worker could not be read'));
  }
  // The worker cannot go on: fail what is pending and every later call, and end it.
  die(e) {
    this.dead = e;
    this.w.terminate();
    this.failAll(e);
  }
  failAll(e) {
    for (const p of this.pending.values()) p.fail(e);
    this.pending.clear();
  }
  req(msg, extra = {}) {
    if (this.dead) return Promise.reject(this.dead);
    const id = newId('r');
    return new Promise((ok, fail) => {
      this.pending.set(id, { ok, fail, ...extra });
      this.w.postMessage({ ...msg, id });
    });
  }
  crashForTesting() { return this.req({ op: 'crashForTesting' }); }
  loseDeviceForTesting() { return this.req({ op: 'loseDeviceForTesting' }); }
  load(options, onProgress) {
    return this.req({ op: 'load', options }, { onProgress });
  }
  tokenize(text) { return this.req({ op: 'tokenize', text: String(text) }); }
  decode(ids) { return this.req({ op: 'decode', ids: Array.from(ids) }); }
  // A streamed call: chunks go to `emit`; `signal` cancels it in the worker.
  streamed(msg, emit, signal) {
    if (this.dead) return Promise.reject(this.dead);
    const id = newId('g');
    return new Promise((ok, fail) => {
      const onAbort = () => { if (!this.dead) this.w.postMessage({ op: 'cancel', target: id }); };
      signal?.addEventListener('abort', onAbort, { once: true });
      const done = (f) => (v) => { signal?.removeEventListener('abort', onAbort); f(v); };
      this.pending.set(id, { ok: done(ok), fail: done(fail), onChunk: emit });
      this.w.postMessage({ ...msg, id });
      if (signal?.aborted) onAbort();
    });
  }
  run(input, options, emit, signal) { return this.streamed({ op: 'generate', input, options }, emit, signal); }
  chat(req, chatId, emit, signal) { return this.streamed({ op: 'chat', req, chatId }, emit, signal); }
  embed(req, emit, signal) { return this.streamed({ op: 'embed', req }, emit, signal); }
  diagnose(reference) { return this.req({ op: 'diagnose', reference }); }
  benchmark(options) { return this.req({ op: 'benchmark', options }); }
  async unload() {
    if (this.dead) return;
    const gone = typedError('EngineUnloadedError', 'the engine was unloaded');
    try {
      await this.req({ op: 'unload' });
    } finally {
      // Every later call fails at once instead of being posted to a terminated worker.
      this.dead = gone;
      this.w.terminate();
      this.failAll(gone);
    }
  }
}

class LocalBackend {
  constructor(e) {
    this.e = e;
    e.onLost = (err) => this.onLost?.(err);
  }
  tokenize(t) { return this.e.tokenize(t); }
  decode(ids) { return this.e.decode(ids); }
  run(input, options, emit, signal) { return this.e.run(input, options, emit, signal); }
  chat(req, id, emit, signal) { return this.e.chat(req, id, emit, signal); }
  embed(req, emit, signal) { return this.e.embed(req, emit, signal); }
  diagnose(reference) { return this.e.diagnose(reference); }
  benchmark(options) { return this.e.benchmark(options); }
  unload() { return this.e.unload(); }
  crashForTesting() { return this.e.crashForTesting(); }
  loseDeviceForTesting() { return this.e.loseDeviceForTesting(); }
}

function withLostHandler(engine, onDeviceLost) {
  if (typeof onDeviceLost === 'function') engine.addEventListener('devicelost', (ev) => onDeviceLost(ev.detail.error));
  return engine;
}

/**
 * Load a model (a GGUF file, or a Hugging Face safetensors folder) onto WebGPU.
 * @param {import('./index').CreateEngineOptions} options
 * @returns {Promise<Engine>}
 */
export async function createEngine(options = {}) {
  checkLoadOptions(options);
  const { onProgress, onDeviceLost, worker = true, signal, ...rest } = options;
  if (signal?.aborted) throw abortReason(signal);
  if (!globalThis.navigator?.gpu) {
    throw typedError('NoAdapterError', 'WebGPU is not available in this browser (navigator.gpu is missing); use a recent Chrome/Edge, Safari 26+ or Firefox 141+ on a secure (https or localhost) page');
  }
  let model = rest.model;
  if (model instanceof URL) model = model.href;
  if (typeof model === 'string' && typeof location !== 'undefined') model = new URL(model, location.href).href;
  const opts = { ...rest, model };
  if (rest.wasm instanceof URL) opts.wasm = rest.wasm.href;
  // A directory pick's paths (`webkitRelativePath`) do not survive the copy into the worker:
  // sent beside the Files, they find a sentence-transformers folder's module files.
  if ((typeof FileList !== 'undefined' && model instanceof FileList) || Array.isArray(model)) {
    opts.modelPaths = [...model].map((f) => f?.webkitRelativePath || '');
  }
  if (!worker) {
    const e = await LocalEngine.load({ ...opts, signal }, onProgress);
    return withLostHandler(new Engine(new LocalBackend(e), e.getInfo()), onDeviceLost);
  }
  const w = typeof worker === 'object' && worker instanceof Worker
    ? worker
    : new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'ferrolm' });
  const b = new WorkerBackend(w);
  const onAbort = () => { w.terminate(); b.failAll(abortReason(signal)); };
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const info = await b.load(opts, onProgress);
    return withLostHandler(new Engine(b, info), onDeviceLost);
  } catch (e) {
    w.terminate();
    throw signal?.aborted ? abortReason(signal) : e;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}

/** Instantiate the wasm module ahead of time (optional; for `worker: false`). */
export { initWasm };

// ferrolm: LLM inference in the browser on WebGPU. See README.md.
//
//   const engine = await createEngine({ model: url | File, onProgress });
//   for await (const c of engine.generate('Once upon a time', { maxTokens: 64 })) out += c.text;
//   const r = await engine.chat.completions.create({ messages, max_tokens: 128 });

import { LocalEngine, abortReason, initWasm } from './core.js';
export { listCachedModels, deleteCachedModel } from './store.js';

function rebuildError(d) {
  const e = new Error(d.message);
  e.name = d.name;
  if (d.stack) e.stack = d.stack;
  return e;
}

/**
 * An async iterable of chunks with a `result` promise, driving `run(emit, signal)`.
 * Breaking out of `for await` stops the generation (result.finishReason = 'abort'); the caller's
 * `signal` makes the iteration (and `result`) reject with its reason.
 */
function stream(run, userSignal) {
  const ac = new AbortController();
  const onAbort = () => ac.abort();
  userSignal?.addEventListener('abort', onAbort, { once: true });
  const queue = [];
  let wake = null;
  let ended = false;
  let failure = null;
  const result = run((chunk) => {
    queue.push(chunk);
    wake?.();
  }, ac.signal).then(
    (r) => {
      if (userSignal?.aborted) throw abortReason(userSignal);
      return r;
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
        if (queue.length) return { value: queue.shift(), done: false };
        if (ended) {
          await result.catch(() => {});
          if (failure) throw failure;
          return { value: undefined, done: true };
        }
        if (userSignal?.aborted) throw abortReason(userSignal);
        await new Promise((ok) => { wake = ok; });
        wake = null;
      }
    },
    async return(value) {
      ac.abort();
      queue.length = 0;
      await result.catch(() => {});
      return { value, done: true };
    },
    [Symbol.asyncIterator]() { return this; },
  };
  return it;
}

let seq = 0;
const newId = (p) => `${p}-${Date.now().toString(36)}${(seq++).toString(36)}`;

// Request fields of chat.completions.create: those it uses, and OpenAI's that it does not do yet,
// which are refused unless they hold their neutral value (clients often send the defaults).
const CHAT_FIELDS = new Set(['messages', 'model', 'stream', 'stream_options', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'repetition_penalty', 'seed', 'stop', 'signal', 'n', 'user']);
const CHAT_NOT_YET = {
  response_format: (v) => v?.type === 'text',
  tools: (v) => Array.isArray(v) && v.length === 0,
  tool_choice: (v) => v === 'none',
  functions: (v) => Array.isArray(v) && v.length === 0,
  function_call: (v) => v === 'none',
  parallel_tool_calls: () => false,
  logprobs: (v) => v === false,
  top_logprobs: (v) => v === 0,
  logit_bias: (v) => v && typeof v === 'object' && Object.keys(v).length === 0,
  frequency_penalty: (v) => v === 0,
  presence_penalty: (v) => v === 0,
};

function invalid(message) {
  const e = new Error(message);
  e.name = 'InvalidOptionError';
  return e;
}

function completionOptions(req) {
  for (const [k, v] of Object.entries(req)) {
    if (CHAT_FIELDS.has(k) || v == null) continue;
    if (k in CHAT_NOT_YET) {
      if (CHAT_NOT_YET[k](v)) continue;
      throw invalid(`chat.completions.create: ${k} is not supported yet (it would be ignored, so the request is refused)`);
    }
    throw invalid(`chat.completions.create: unknown field ${k}`);
  }
  const o = {
    maxTokens: req.max_completion_tokens ?? req.max_tokens ?? undefined,
    temperature: req.temperature ?? undefined,
    topP: req.top_p ?? undefined,
    topK: req.top_k ?? undefined,
    minP: req.min_p ?? undefined,
    repetitionPenalty: req.repetition_penalty ?? undefined,
    seed: req.seed ?? undefined,
    stop: req.stop ?? undefined,
    signal: req.signal,
  };
  if (req.n != null && req.n !== 1) throw invalid('chat.completions.create: only n = 1 is supported');
  return o;
}

class Engine {
  constructor(backend, info) {
    this._b = backend;
    /** Adapter, model config, context length, memory use, load statistics. */
    this.info = info;
    const self = this;
    this.chat = {
      completions: {
        create(req) { return self._chatCreate(req); },
      },
    };
  }

  /** Token ids of `text` (no BOS added). */
  tokenize(text) { return this._b.tokenize(text); }

  /** Text of token ids. */
  decode(ids) { return this._b.decode(ids); }

  /**
   * Stream a generation. `input`: a prompt string, an array of chat messages, or `{tokens}`.
   * Options: maxTokens, temperature, topK, topP, minP, repetitionPenalty, seed, stop, stopIds, signal.
   * Returns an async iterable of `{index, token, text, stop}` with a `result` promise.
   */
  generate(input, options = {}) {
    const { signal, ...rest } = options;
    return stream((emit, s) => this._b.run(input, rest, emit, s), signal);
  }

  async _chatCreate(req) {
    if (!req || !Array.isArray(req.messages)) {
      const e = new Error('chat.completions.create: `messages` must be an array');
      e.name = 'InvalidOptionError';
      throw e;
    }
    const { signal, ...opts } = completionOptions(req);
    const id = newId('chatcmpl');
    const created = Math.floor(Date.now() / 1000);
    const model = req.model || this.info?.source || 'ferrolm';
    const it = this.generate(req.messages, { ...opts, signal });
    const finish = (r) => (r.finishReason === 'abort' ? 'stop' : r.finishReason);
    if (!req.stream) {
      for await (const _ of it); // eslint-disable-line no-unused-vars
      const r = await it.result;
      return {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: r.text }, logprobs: null, finish_reason: finish(r) }],
        usage: r.usage,
        stats: r.stats,
      };
    }
    const base = { id, object: 'chat.completion.chunk', created, model };
    const includeUsage = !!req.stream_options?.include_usage;
    async function* chunks() {
      yield { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] };
      try {
        for await (const c of it) {
          if (c.text) yield { ...base, choices: [{ index: 0, delta: { content: c.text }, logprobs: null, finish_reason: null }] };
        }
      } finally {
        await it.return();
      }
      const r = await it.result;
      yield { ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: finish(r) }], ...(includeUsage ? {} : {}) };
      if (includeUsage) yield { ...base, choices: [], usage: r.usage };
    }
    const gen = chunks();
    gen.result = it.result;
    return gen;
  }

  /** Free the GPU memory (and end the worker). */
  unload() { return this._b.unload(); }

  /** Make the wasm module panic (tests of crash recovery; not part of the API). */
  _crashForTesting() { return this._b.crashForTesting(); }
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
      const p = this.pending.get(m.id);
      if (!p) return;
      if (m.type === 'progress') p.onProgress?.(m.progress);
      else if (m.type === 'chunk') p.onChunk?.(m.chunk);
      else {
        this.pending.delete(m.id);
        if (m.type === 'result') p.ok(m.value);
        else p.fail(rebuildError(m.error));
      }
    };
    worker.onerror = (ev) => {
      ev.preventDefault?.();
      this.die(Object.assign(new Error(`the ferrolm worker failed: ${ev.message || 'could not start it (module workers are needed)'}`), { name: 'WorkerError' }));
    };
    worker.onmessageerror = () => this.failAll(Object.assign(new Error('a message from the ferrolm worker could not be read'), { name: 'WorkerError' }));
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
  load(options, onProgress) {
    return this.req({ op: 'load', options }, { onProgress });
  }
  tokenize(text) { return this.req({ op: 'tokenize', text: String(text) }); }
  decode(ids) { return this.req({ op: 'decode', ids: Array.from(ids) }); }
  run(input, options, emit, signal) {
    if (this.dead) return Promise.reject(this.dead);
    const id = newId('g');
    return new Promise((ok, fail) => {
      const onAbort = () => this.w.postMessage({ op: 'cancel', target: id });
      signal?.addEventListener('abort', onAbort, { once: true });
      const done = (f) => (v) => { signal?.removeEventListener('abort', onAbort); f(v); };
      this.pending.set(id, { ok: done(ok), fail: done(fail), onChunk: emit });
      this.w.postMessage({ op: 'generate', id, input, options });
      if (signal?.aborted) onAbort();
    });
  }
  async unload() {
    if (this.dead) return;
    try {
      await this.req({ op: 'unload' });
    } finally {
      this.w.terminate();
      this.failAll(Object.assign(new Error('the engine was unloaded'), { name: 'EngineUnloadedError' }));
    }
  }
}

class LocalBackend {
  constructor(e) { this.e = e; }
  tokenize(t) { return this.e.tokenize(t); }
  decode(ids) { return this.e.decode(ids); }
  run(input, options, emit, signal) { return this.e.run(input, options, emit, signal); }
  unload() { return this.e.unload(); }
  crashForTesting() { return this.e.crashForTesting(); }
}

/**
 * Load a model (a GGUF file, or a Hugging Face safetensors folder) onto WebGPU.
 * @param {import('./index').CreateEngineOptions} options
 * @returns {Promise<Engine>}
 */
export async function createEngine(options = {}) {
  const { onProgress, worker = true, signal, ...rest } = options;
  if (!globalThis.navigator?.gpu) {
    const e = new Error('WebGPU is not available in this browser (navigator.gpu is missing); use a recent Chrome/Edge, Safari 26+ or Firefox 141+ on a secure (https or localhost) page');
    e.name = 'NoAdapterError';
    throw e;
  }
  let model = rest.model;
  if (model instanceof URL) model = model.href;
  if (typeof model === 'string' && typeof location !== 'undefined') model = new URL(model, location.href).href;
  const opts = { ...rest, model };
  if (rest.wasm instanceof URL) opts.wasm = rest.wasm.href;
  if (!worker) {
    const e = await LocalEngine.load({ ...opts, signal }, onProgress);
    return new Engine(new LocalBackend(e), e.getInfo());
  }
  const w = typeof worker === 'object' && worker instanceof Worker
    ? worker
    : new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'ferrolm' });
  const b = new WorkerBackend(w);
  const onAbort = () => { w.terminate(); b.failAll(abortReason(signal)); };
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const info = await b.load(opts, onProgress);
    return new Engine(b, info);
  } catch (e) {
    w.terminate();
    throw signal?.aborted ? abortReason(signal) : e;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}

/** Instantiate the wasm module ahead of time (optional; for `worker: false`). */
export { initWasm };

// The engine host: the wasm module, a model source, and the call queue. Runs in the page
// (`worker: false`) or inside worker.js; index.js wraps it in the public API.

import * as firstModule from './ferrolm.js';
import { cachedKind } from './cache.js';
import { namedError, retype } from './errors.js';
import { HF_TEXT_FILES, ModelFolder } from './folder.js';
import { ModelSource } from './source.js';
import { MLC_CHAT_CONFIG, MLC_TENSOR_CACHES, MLC_TOKENIZER_FILES, tensorCacheBytes } from './webllm.js';

// The wasm module. A panic inside it ends in a trap that leaves that instance unusable, so after
// a crash the next load instantiates a fresh copy of the module.
let mod = firstModule;
let ready = null;
let instances = 0;

/** Instantiate the wasm module once (`wasm` overrides where ferrolm_bg.wasm is fetched from). */
export function initWasm(wasm) {
  if (!ready) {
    ready = (async () => {
      if (instances++ > 0) {
        // A fresh module record (and wasm instance) after a crash. Only this path loads the glue
        // by URL; bundlers keep the static import above.
        mod = await import(/* @vite-ignore */ /* webpackIgnore: true */ new URL(`./ferrolm.js?instance=${instances}`, import.meta.url).href);
      }
      await mod.default(wasm ? { module_or_path: wasm } : undefined);
      return mod;
    })();
    ready.catch(() => { ready = null; });
  }
  return ready;
}

// Engines of the current module instance, and whoever wants to hear of a crash (worker.js).
// Inputs per call into the engine for embeddings.create: a signal is seen between calls.
const EMBED_BATCH = 16;

const live = new Set();
const crashListeners = new Set();

/** Call `cb(error)` when the wasm module crashes (a panic: a bug in ferrolm). */
export function onCrash(cb) {
  crashListeners.add(cb);
}

// Called by the module's panic hook (crate/src/web/mod.rs) just before the trap.
globalThis.__ferrolmPanic = (message) => {
  const err = namedError('EngineCrashedError', `the engine crashed (a bug in ferrolm; please report it): ${message}. Create a new engine to continue.`);
  ready = null;
  for (const e of live) e.crashed(err);
  live.clear();
  for (const cb of crashListeners) cb(err);
};

// Called by the module's device-lost callback (crate/src/gpu/mod.rs) with the device's id; an
// engine that was unloaded (its device dropped) is no longer in `live` and is not told.
globalThis.__ferrolmDeviceLost = (id, message) => {
  for (const e of live) {
    if (e.info.deviceId === id) e.deviceLost(namedError('DeviceLostError', `the GPU device was lost (${message}); create a new engine to continue`));
  }
};

function toError(e) {
  if (e instanceof Error) return retype(e);
  if (typeof e === 'string') return new Error(e);
  return new Error(String(e));
}

/** A FIFO lock whose waiters can give up when a signal aborts. */
class Lock {
  constructor() { this.held = false; this.waiters = []; }
  acquire(signal) {
    if (!this.held) {
      this.held = true;
      return Promise.resolve();
    }
    return new Promise((ok, fail) => {
      const w = { ok, fail };
      this.waiters.push(w);
      signal?.addEventListener('abort', () => {
        const i = this.waiters.indexOf(w);
        if (i >= 0) {
          this.waiters.splice(i, 1);
          fail(abortReason(signal));
        }
      }, { once: true });
    });
  }
  release() {
    const next = this.waiters.shift();
    if (next) next.ok();
    else this.held = false;
  }
}

export function abortReason(signal) {
  if (signal?.reason instanceof Error) return signal.reason;
  const e = new Error('the generation was aborted');
  e.name = 'AbortError';
  return e;
}

const FORMATS = ['auto', 'gguf', 'hf', 'mlc'];

/** {kind: 'mlc', folder, chatConfig}: the folder is an MLC-LLM one. */
function mlcFolder(folder, chatConfig) {
  folder.kind = 'mlc';
  return { kind: 'mlc', folder, chatConfig };
}

/**
 * What `model` is: {kind: 'gguf', model} (a URL or Blob for ModelSource), {kind: 'hf', folder,
 * config} (an opened ModelFolder and its config.json) or {kind: 'mlc', folder, chatConfig} (an
 * MLC-LLM folder and its mlc-chat-config.json). URL rule (format 'auto'): a URL whose path ends in
 * '/' or '/config.json' is a folder; one ending in '.gguf' (or not http/https) is a GGUF file; any
 * other URL is probed for `<url>/config.json` (no request when the cache knows it) and is a folder
 * if that exists, else a GGUF file. A folder without config.json is an MLC folder if it has
 * mlc-chat-config.json, looked for first in WebLLM's cache (so a model WebLLM has loads offline).
 */
async function resolveModel(model, format, srcOpts) {
  if (!FORMATS.includes(format)) throw namedError('InvalidOptionError', `createEngine: format must be 'auto', 'gguf', 'hf' or 'mlc', got ${JSON.stringify(format)}`);
  const isList = (typeof FileList !== 'undefined' && model instanceof FileList) || Array.isArray(model);
  if (isList) {
    const files = [...model];
    const ggufs = files.filter((f) => /\.gguf$/i.test(f?.name || ''));
    const hasConfig = files.some((f) => f?.name === 'config.json');
    const hasMlc = files.some((f) => f?.name === MLC_CHAT_CONFIG);
    if (format === 'gguf' || (format === 'auto' && !hasConfig && !hasMlc && ggufs.length === 1)) {
      const one = ggufs.length === 1 ? ggufs[0] : files.length === 1 ? files[0] : null;
      if (!one) throw namedError('InvalidOptionError', 'createEngine: a GGUF model given as a list must hold exactly one .gguf File');
      return { kind: 'gguf', model: one };
    }
    const folder = ModelFolder.fromFiles(files, srcOpts);
    if (format === 'mlc' || (format === 'auto' && !hasConfig && hasMlc)) {
      const chat = await folder.text(MLC_CHAT_CONFIG, { optional: true });
      if (chat == null) throw namedError('ModelFormatError', `the chosen files have no ${MLC_CHAT_CONFIG}: not an MLC model folder`);
      return mlcFolder(folder, chat);
    }
    const config = await folder.text('config.json', { optional: true });
    if (config == null) throw namedError('ModelFormatError', `the chosen files have no config.json: not a Hugging Face model folder (${files.length} files: ${files.slice(0, 5).map((f) => f.name).join(', ')}${files.length > 5 ? ', ...' : ''})`);
    return { kind: 'hf', folder, config };
  }
  if (typeof Blob !== 'undefined' && model instanceof Blob) {
    if (format === 'hf' || format === 'mlc') throw namedError('InvalidOptionError', "createEngine: a single File/Blob is read as a GGUF file; for a model folder pass its files (a FileList or an array of Files) or its URL");
    return { kind: 'gguf', model };
  }
  const url = new URL(String(model), typeof location !== 'undefined' ? location.href : undefined);
  if (format === 'gguf') return { kind: 'gguf', model: url.href };
  const path = url.pathname;
  const dir = (p) => new URL(p, url).href; // drops the query and hash
  let base;
  let explicit = true;
  if (path.endsWith('/')) base = dir(path);
  else if (/\/config\.json$/i.test(path)) base = dir(path.slice(0, -'config.json'.length));
  else if (/\/mlc-chat-config\.json$/i.test(path)) base = dir(path.slice(0, -MLC_CHAT_CONFIG.length));
  else if (format === 'hf' || format === 'mlc') base = dir(`${path}/`);
  else if (/\.gguf$/i.test(path) || !/^https?:$/.test(url.protocol)) return { kind: 'gguf', model: url.href };
  else {
    const cached = await cachedKind(url.href, srcOpts.cache);
    if (cached === 'gguf') return { kind: 'gguf', model: url.href };
    base = dir(`${path}/`);
    explicit = cached === 'hf';
  }
  const folder = await ModelFolder.open(base, srcOpts);
  let config;
  let chat;
  try {
    // WebLLM's copy first: no request at all for a model WebLLM downloaded.
    if (format !== 'hf' && await folder.webllmSource(MLC_CHAT_CONFIG)) return mlcFolder(folder, await folder.text(MLC_CHAT_CONFIG));
    if (format !== 'mlc') config = await folder.text('config.json', { optional: true });
    if (config == null && format !== 'hf') chat = await folder.text(MLC_CHAT_CONFIG, { optional: true });
  } catch (e) {
    await folder.discard();
    if (!explicit) return { kind: 'gguf', model: url.href }; // e.g. a server that refuses the probe
    throw e;
  }
  if (chat != null) return mlcFolder(folder, chat);
  if (config == null) {
    await folder.discard();
    if (!explicit) return { kind: 'gguf', model: url.href };
    const what = format === 'mlc' ? `no ${MLC_CHAT_CONFIG} (HTTP 404): not an MLC model folder` : `no config.json or ${MLC_CHAT_CONFIG} (HTTP 404): not a Hugging Face or MLC model folder`;
    throw namedError('ModelFormatError', `${base} has ${what}. For a folder on the Hugging Face Hub use its .../resolve/<revision>/ URL; for a GGUF file pass its URL or format: 'gguf'`);
  }
  return { kind: 'hf', folder, config };
}

/**
 * The text files of an MLC folder for the engine (see loadHfEngine in crate/src/web/mod.rs): the
 * tensor cache under either name (WebLLM's cache asked about both before the network), the
 * tokenizer files mlc-chat-config.json lists. Of a folder read from WebLLM's cache, a tokenizer
 * file WebLLM does not keep (tokenizer_config.json) that cannot be fetched is left out with a
 * warning instead of failing an offline load; the fallback chat template is used then.
 */
async function mlcTexts(folder, chatConfig) {
  const texts = { mlcChatConfig: chatConfig, name: folder.name };
  for (const n of MLC_TENSOR_CACHES) if (await folder.webllmSource(n)) { texts.tensorCacheName = n; break; }
  for (const n of texts.tensorCacheName ? [] : MLC_TENSOR_CACHES) {
    if (await folder.source(n, { optional: true })) { texts.tensorCacheName = n; break; }
  }
  if (!texts.tensorCacheName) throw namedError('ModelFormatError', `${folder.name} has ${MLC_CHAT_CONFIG} but neither ${MLC_TENSOR_CACHES.join(' nor ')}`);
  texts.tensorCache = await folder.text(texts.tensorCacheName);
  let listed = null;
  try { listed = JSON.parse(chatConfig).tokenizer_files; } catch {} // the engine reports bad JSON
  for (const [k, n] of Object.entries(MLC_TOKENIZER_FILES)) {
    if (Array.isArray(listed) && !listed.includes(n)) continue;
    try {
      texts[k] = await folder.text(n, { optional: true });
    } catch (e) {
      if (!folder.webllm.size || e.name === 'AbortError') throw e;
      folder.cacheWarning ||= `${n} could not be fetched (${e.name}: ${e.message}); loaded without it`;
    }
  }
  folder.sizeHint = tensorCacheBytes(texts.tensorCache) + [...folder.sources.values()].reduce((a, s) => a + s.size, 0);
  return texts;
}

// wgpu's WebGPU backend neither reports nor requests the `subgroups` feature. While `fn` loads an
// engine, adapters from navigator.gpu whose subgroups are exactly 32 wide (what the decode
// kernels' reductions assume, crate/src/gpu/mod.rs) ask for it with every device request, and
// `__ferrolmSubgroups32` tells the module so. Where such an adapter also offers Chromium's 8-bit
// subgroup matrices (i8 x i8 -> i32, 16x16x32: `adapter.info.subgroupMatrixConfigs`), the
// request adds `chromium-experimental-subgroup-matrix` and `__ferrolmSubgroupMatrixI8` says so,
// once a probe in the kernel's dialect has compiled: prefill matmuls of quantized weights then
// run on them (shaders/matmul_i8.wgsl). Setting
// `globalThis.FERROLM_NO_SUBGROUP_MATRIX = true` in the scope that loads the engine (the page, or
// the worker) keeps the portable matmul (for comparisons). Loads nest: the original is restored
// after the last.
const SUBGROUP_MATRIX = 'chromium-experimental-subgroup-matrix';
let sgLoads = 0;
let sgOriginal = null;

function offersI8Matrix(a) {
  if (!a.features.has(SUBGROUP_MATRIX) || globalThis.FERROLM_NO_SUBGROUP_MATRIX) return false;
  const configs = [...(a.info?.subgroupMatrixConfigs ?? [])];
  return configs.some((c) => c.componentType === 'i8' && c.resultComponentType === 'i32' && c.M === 16 && c.N === 16 && c.K === 32);
}

// The constructs shaders/i8_smx.wgsl uses, in the same dialect: the feature is experimental, so
// a browser that offers it but spells it otherwise keeps the portable matmul instead of failing
// to load.
const I8_MATRIX_PROBE = `enable subgroups;
enable chromium_experimental_subgroup_matrix;
diagnostic(off, chromium.subgroup_matrix_uniformity);
var<workgroup> a: array<i32, 1024>;
var<workgroup> o: array<i32, 1024>;
@group(0) @binding(0) var<storage, read_write> out: array<i32>;
@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) li: u32) {
  a[li] = i32(li);
  workgroupBarrier();
  let l = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a, (li / 32u) * 8u, 8u);
  let r = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&a, 0u, 8u);
  let z = subgroup_matrix_result<i32, 16, 16>();
  let m = subgroupMatrixMultiplyAccumulate(l, r, subgroupMatrixScalarMultiply(subgroupMatrixMultiplyAccumulate(l, r, z), 254));
  subgroupMatrixStore<row_major>(&o, (li / 32u) * 256u, m, 16u);
  workgroupBarrier();
  out[li] = o[li];
}`;

// Whether a device of this kind compiles the probe (on an adapter of its own: an adapter gives
// one device). Asked once a page or worker per adapter request (power preference).
const i8MatrixChecked = new Map();
function i8MatrixCompiles(gpu, opts) {
  const key = JSON.stringify(opts ?? {});
  if (!i8MatrixChecked.has(key)) i8MatrixChecked.set(key, (async () => {
    let dev = null;
    try {
      const a = await sgOriginal.call(gpu, opts);
      if (!a) return false;
      dev = await a.requestDevice({ requiredFeatures: ['subgroups', SUBGROUP_MATRIX] });
      dev.pushErrorScope('validation');
      const module = dev.createShaderModule({ code: I8_MATRIX_PROBE });
      const info = await module.getCompilationInfo();
      const compiled = !info.messages.some((m) => m.type === 'error');
      if (compiled) await dev.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } });
      return compiled && !(await dev.popErrorScope());
    } catch {
      return false;
    } finally {
      dev?.destroy();
    }
  })());
  return i8MatrixChecked.get(key);
}

async function withSubgroups(fn) {
  const gpu = globalThis.navigator?.gpu;
  if (!gpu || typeof GPUAdapter === 'undefined') return fn();
  if (sgLoads++ === 0) {
    sgOriginal = gpu.requestAdapter;
    globalThis.__ferrolmSubgroups32 = false;
    globalThis.__ferrolmSubgroupMatrixI8 = false;
    gpu.requestAdapter = async function (opts) {
      const a = await sgOriginal.call(this, opts);
      const info = a?.info;
      if (a && a.features.has('subgroups') && info?.subgroupMinSize === 32 && info?.subgroupMaxSize === 32) {
        const extra = ['subgroups'];
        if (offersI8Matrix(a) && (await i8MatrixCompiles(this, opts))) extra.push(SUBGROUP_MATRIX);
        const request = a.requestDevice;
        a.requestDevice = function (desc = {}) {
          return request.call(this, { ...desc, requiredFeatures: [...(desc.requiredFeatures ?? []), ...extra] });
        };
        // The module decides on its kernels before it asks for the device.
        globalThis.__ferrolmSubgroups32 = true;
        globalThis.__ferrolmSubgroupMatrixI8 = extra.includes(SUBGROUP_MATRIX);
      }
      return a;
    };
  }
  try {
    return await fn();
  } finally {
    if (--sgLoads === 0) gpu.requestAdapter = sgOriginal;
  }
}

/** The text files of a Hugging Face folder for the engine, and the progress total's first guess. */
async function hfTexts(folder, config) {
  const texts = { config, name: folder.name };
  // The text files are read in parallel: room for each one's chunks (they are small, except
  // a large tokenizer.json), then back to three chunks for the weights.
  folder.pool.max = 8;
  await Promise.all(Object.entries(HF_TEXT_FILES).map(async ([k, name]) => { texts[k] = await folder.text(name, { optional: true }); }));
  // A sentence-transformers folder: the module files its modules.json names (pooling and
  // dense configs, dense weights), for embeddings.
  if (texts.stModules) {
    texts.moduleFiles = {};
    for (const path of mod.stModuleFiles(texts.stModules)) texts.moduleFiles[path] = await folder.bytes(path);
  }
  folder.pool.max = 3;
  // Progress total before every shard is open: the text files plus the index's total_size.
  let hint = 0;
  try { hint = Number(JSON.parse(texts.index || '{}')?.metadata?.total_size) || 0; } catch {}
  for (const s of folder.sources.values()) hint += s.size;
  folder.sizeHint = hint;
  return texts;
}

/**
 * The engine `load()` makes, reading through `source` (a ModelSource or ModelFolder): on failure a
 * half-made engine is freed, and a failed read (which reaches us wrapped as an IoError) is
 * surfaced as the download error itself; the source is released either way. `signal` aborted by
 * the end is an abort, however far the load got.
 */
async function loadFrom(source, load, signal) {
  let wasm;
  try {
    wasm = await load();
    await source.finish();
    // An abort while the weights went up or the kernels compiled (no read left to fail) still
    // rejects, and the engine made meanwhile is freed; what was downloaded stays cached.
    if (signal?.aborted) throw abortReason(signal);
    return wasm;
  } catch (e) {
    wasm?.free();
    if (source.lastError && (e?.name === 'IoError' || !e?.name)) throw source.lastError;
    const err = toError(e);
    // A file that is not the one its sha256 names (changed on the server, damaged) can look
    // malformed before its digest is known: with a sha256 given, the digest decides.
    if (err.name === 'ModelFormatError' && source.expectedSha && !signal?.aborted) {
      try {
        await source.finish();
      } catch (ie) {
        if (ie?.name === 'IntegrityError') throw ie;
      }
    }
    throw err;
  } finally {
    source.release();
  }
}

export class LocalEngine {
  /**
   * @param {object} o  {model, format, quantize, contextLength, maxBatch, cache, sha256, retries, chunkSize, wasm}
   * @param {(p: {phase: string, loaded: number, total: number}) => void} onProgress
   */
  static async load(o, onProgress = () => {}) {
    await initWasm(o.wasm);
    if (o.model == null) throw namedError('InvalidOptionError', 'createEngine: `model` (a URL, a File/Blob, or a folder\'s Files) is required');
    const t0 = performance.now();
    if (o.webllmCache != null && typeof o.webllmCache !== 'boolean') throw namedError('InvalidOptionError', `createEngine: webllmCache must be true or false, got ${JSON.stringify(o.webllmCache)}`);
    const srcOpts = {
      webllmCache: o.webllmCache ?? true,
      cache: o.cache ?? 'auto',
      sha256: o.sha256,
      onProgress,
      retries: o.retries,
      chunkSize: o.chunkSize,
      Hasher: mod.Sha256Hasher,
      signal: o.signal,
      modelPaths: o.modelPaths,
    };
    const what = await resolveModel(o.model, o.format ?? 'auto', srcOpts);
    // null as 'not given', as generate()'s options (LoadOptions refuses a null count).
    const opts = JSON.stringify({ contextLength: o.contextLength, maxBatch: o.maxBatch, quantize: o.quantize }, (k, v) => (v === null ? undefined : v));
    const progress = (phase, done, total) => onProgress({ phase, loaded: done, total });
    let wasm;
    let source;
    if (what.kind === 'gguf') {
      if (o.sha256 != null && typeof o.sha256 !== 'string') throw namedError('InvalidOptionError', 'createEngine: sha256 of a GGUF file must be a hex string');
      source = await ModelSource.open(what.model, srcOpts);
      wasm = await loadFrom(source, () => withSubgroups(() => mod.loadEngine({ size: source.size, name: source.name, read: (off, len) => source.read(off, len) }, opts, progress)), o.signal);
    } else {
      const folder = what.folder;
      source = folder;
      wasm = await loadFrom(folder, async () => {
        if (o.sha256 != null && (typeof o.sha256 !== 'object' || Array.isArray(o.sha256))) {
          throw namedError('InvalidOptionError', "createEngine: sha256 of a model folder must map file names to hex digests, e.g. { 'model.safetensors': '...' }");
        }
        const texts = what.kind === 'mlc' ? await mlcTexts(folder, what.chatConfig) : await hfTexts(folder, what.config);
        await folder.saveManifest(false);
        return withSubgroups(() => mod.loadHfEngine(texts, (name) => folder.weights(name), opts, progress));
      }, o.signal);
    }
    const eng = new LocalEngine(wasm, source);
    eng.loadMs = performance.now() - t0;
    eng.info.adapterInfo = await adapterInfo();
    return eng;
  }

  constructor(wasm, source) {
    this.wasm = wasm;
    this.source = source;
    this.chain = Promise.resolve();
    this.genLock = new Lock();
    this.info = JSON.parse(wasm.info());
    this.info.load = { ...source.stats(), ms: 0 };
    this.dead = null; // the EngineCrashedError or DeviceLostError every call fails with
    this.inflight = null; // reject function of the call in progress
    this.onLost = null; // told of a lost device (index.js turns it into the 'devicelost' event)
    // unload() ends the generations running (finish 'abort') and queued (AbortError) before the
    // memory goes, with or without a worker around this engine.
    this.stopAll = new AbortController();
    this.mod = mod;
    live.add(this);
  }

  // The module crashed: fail the call in progress (an async export never settles after a trap)
  // and every later one.
  crashed(err) {
    this.dead = err;
    this.wasm = null;
    this.inflight?.(err);
  }

  // The GPU device is gone (driver reset, GPU removed, the browser reclaimed it): fail the call in
  // progress (its readback may never settle) and every later one; the module itself is fine.
  deviceLost(err) {
    if (this.dead) return;
    this.dead = err;
    this.inflight?.(err);
    live.delete(this);
    this.onLost?.(err);
  }

  /** Destroy the GPU device on purpose (the device-loss tests). */
  loseDeviceForTesting() {
    return this.call((w) => w.loseDeviceForTesting());
  }

  // Serialize every call into the wasm engine (it rejects overlapping calls).
  call(fn) {
    const p = this.chain.then(() => {
      if (this.dead) throw this.dead;
      if (!this.wasm) throw namedError('EngineUnloadedError', 'the engine was unloaded');
      return new Promise((ok, fail) => {
        this.inflight = fail;
        Promise.resolve()
          .then(() => fn(this.wasm))
          .then(ok, (e) => fail(this.dead || (e instanceof WebAssembly.RuntimeError ? namedError('EngineCrashedError', `the engine crashed: ${e.message}`) : toError(e))));
      }).finally(() => { this.inflight = null; });
    });
    this.chain = p.catch(() => {});
    return p;
  }

  /** Panic inside the wasm module on purpose (the crash-recovery tests). */
  crashForTesting() {
    return this.call(() => this.mod.crashForTesting('crash requested by the test'));
  }

  getInfo() {
    return { ...this.info, load: { ...this.info.load, ms: this.loadMs } };
  }

  tokenize(text) { return this.call((w) => Array.from(w.tokenize(String(text)))); }
  decode(ids) { return this.call((w) => w.decode(Uint32Array.from(ids))); }

  async inputIds(input) {
    if (typeof input === 'string') return this.call((w) => Array.from(w.promptIds(input)));
    if (Array.isArray(input)) {
      const msgs = input.map((m) => ({ role: String(m.role), content: typeof m.content === 'string' ? m.content : contentText(m.content) }));
      return this.call((w) => Array.from(w.chatIds(JSON.stringify(msgs))));
    }
    if (input && Array.isArray(input.tokens)) return input.tokens.map(Number);
    throw namedError('InvalidOptionError', 'generate: input must be a string, an array of chat messages, or {tokens: number[]}');
  }

  /**
   * Generate from `input`; calls `emit(chunk)` for every token and resolves to the result
   * ({text, tokens, finishReason, usage, stats, logprobs}). Generations queue behind each other.
   * Options are checked by the engine (an unknown one is an InvalidOptionError naming it).
   */
  async run(input, options = {}, emit = () => {}, signal) {
    signal = this.callSignal(signal);
    if (signal?.aborted) throw abortReason(signal);
    await this.genLock.acquire(signal);
    try {
      if (signal?.aborted) throw abortReason(signal);
      const ids = await this.inputIds(input);
      const opts = JSON.stringify(options, (k, v) => (v === null ? undefined : v));
      await this.call((w) => w.start(Uint32Array.from(ids), opts));
      let aborted = false;
      let index = 0;
      for (;;) {
        if (signal?.aborted) {
          aborted = true;
          break;
        }
        // The tokens that came back since the last call (one, or several when this thread fell
        // behind the GPU).
        const evs = await this.call((w) => w.next());
        if (evs == null) break;
        // After an abort, index.js hands out none of a batch's later chunks and trims the result
        // to the ones it did.
        for (const t of JSON.parse(evs)) {
          const chunk = { index: index++, token: t.token, text: t.text, stop: !!t.stop };
          if (t.logprob) chunk.logprob = t.logprob;
          emit(chunk);
        }
      }
      if (aborted) await this.call((w) => w.cancel());
      const r = JSON.parse(await this.call((w) => w.result()));
      const reason = aborted ? 'abort' : r.stats.stop_reason;
      return {
        text: r.text,
        tokens: r.tokens,
        promptTokens: r.prompt_ids.length,
        finishReason: reason === 'stop' ? 'stop' : reason === 'abort' || reason === 'cancelled' ? 'abort' : 'length',
        usage: usage(r.prompt_ids.length, r.tokens.length, r.stats.cached_tokens),
        stats: r.stats,
        topLogits: r.top_logits,
        logprobs: r.logprobs,
      };
    } finally {
      this.genLock.release();
    }
  }

  /**
   * An OpenAI chat completion (`req` without `signal`). Streamed requests call `emit(chunk)` for
   * each `chat.completion.chunk` and resolve to the final `chat.completion` object; others
   * resolve to it directly. Stops early (finish 'stop') when `signal` aborts.
   */
  async chat(req, id, emit = () => {}, signal) {
    signal = this.callSignal(signal);
    if (signal?.aborted) throw abortReason(signal);
    await this.genLock.acquire(signal);
    try {
      if (signal?.aborted) throw abortReason(signal);
      const body = JSON.stringify(req);
      const stream = await this.call((w) => w.chatStart(body, id));
      for (;;) {
        if (signal?.aborted) {
          await this.call((w) => w.cancel());
          break;
        }
        if (!stream) {
          if (!(await this.call((w) => w.chatStep()))) break;
          continue;
        }
        const cs = await this.call((w) => w.chatNext());
        if (cs == null) break;
        for (const c of JSON.parse(cs)) emit(c);
      }
      return JSON.parse(await this.call((w) => w.chatUsage()));
    } finally {
      this.genLock.release();
    }
  }

  /**
   * OpenAI embeddings for `req` (without `signal`): the inputs go to the engine in batches of
   * EMBED_BATCH, so `signal` takes effect between batches and `emit({done, total})` reports
   * progress. Resolves to the `list` object with every input's embedding.
   */
  async embed(req, emit = () => {}, signal) {
    signal = this.callSignal(signal);
    if (signal?.aborted) throw abortReason(signal);
    await this.genLock.acquire(signal);
    try {
      const single = typeof req.input === 'string' || (Array.isArray(req.input) && req.input.length > 0 && typeof req.input[0] === 'number');
      const items = single || !Array.isArray(req.input) ? null : req.input;
      if (!items || items.length <= EMBED_BATCH) {
        if (signal?.aborted) throw abortReason(signal);
        const r = JSON.parse(await this.call((w) => w.embed(JSON.stringify(req))));
        emit({ done: r.data.length, total: r.data.length });
        return r;
      }
      let out = null;
      for (let i = 0; i < items.length; i += EMBED_BATCH) {
        if (signal?.aborted) throw abortReason(signal);
        const body = JSON.stringify({ ...req, input: items.slice(i, i + EMBED_BATCH) });
        const r = JSON.parse(await this.call((w) => w.embed(body)));
        for (const d of r.data) d.index += i;
        if (!out) out = r;
        else {
          out.data.push(...r.data);
          out.usage.prompt_tokens += r.usage.prompt_tokens;
          out.usage.total_tokens += r.usage.total_tokens;
        }
        emit({ done: out.data.length, total: items.length });
      }
      return out;
    } finally {
      this.genLock.release();
    }
  }

  /** `ferrolm bench` inside the module: the engine's own prefill and decode speed. */
  async benchmark(options) {
    await this.genLock.acquire();
    try {
      const body = JSON.stringify(options ?? {}, (k, v) => (v === null ? undefined : v));
      return JSON.parse(await this.call((w) => w.benchmark(body)));
    } finally {
      this.genLock.release();
    }
  }

  /** The GPU self-check (and with `reference` {tokens, top, tolerance?} the model's own). */
  async diagnose(reference) {
    await this.genLock.acquire();
    try {
      const body = reference == null ? '' : JSON.stringify(reference);
      return JSON.parse(await this.call((w) => w.diagnose(body)));
    } finally {
      this.genLock.release();
    }
  }

  // A call's signal joined with unload()'s; after unload, EngineUnloadedError (or the crash).
  callSignal(signal) {
    if (this.dead) throw this.dead;
    if (!this.wasm) throw namedError('EngineUnloadedError', 'the engine was unloaded');
    return AbortSignal.any(signal ? [signal, this.stopAll.signal] : [this.stopAll.signal]);
  }

  async unload() {
    this.stopAll.abort(namedError('AbortError', 'the engine was unloaded during this call'));
    if (!this.dead) {
      await this.genLock.acquire();
      this.genLock.release();
    }
    await this.chain;
    // A crashed module must not be touched; after a device loss the engine's memory is freed
    // (unless a call still holds it, which the module reports by throwing).
    if (!this.dead || this.dead.name === 'DeviceLostError') {
      try { this.wasm?.free(); } catch {}
    }
    this.wasm = null;
    live.delete(this);
  }
}

// What the browser says about its default adapter (wgpu's WebGPU backend leaves the name empty).
async function adapterInfo() {
  try {
    const a = await navigator.gpu.requestAdapter();
    if (!a) return null;
    const i = a.info || (await a.requestAdapterInfo?.()) || {};
    const limits = {};
    for (const k of ['maxBufferSize', 'maxStorageBufferBindingSize', 'maxComputeWorkgroupStorageSize', 'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX', 'maxStorageBuffersPerShaderStage']) limits[k] = a.limits[k];
    return { vendor: i.vendor || '', architecture: i.architecture || '', device: i.device || '', description: i.description || '', features: [...a.features].sort(), limits };
  } catch {
    return null;
  }
}

function usage(prompt, completion, cached) {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
}

function contentText(c) {
  if (Array.isArray(c)) return c.map((p) => (typeof p === 'string' ? p : p?.text ?? '')).join('');
  return c == null ? '' : String(c);
}


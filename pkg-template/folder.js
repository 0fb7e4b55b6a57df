// A model folder (Hugging Face, or MLC-LLM's): its text files and weight files (safetensors
// shards, or an MLC tensor cache's shards), each a ModelSource.

import { namedError } from './errors.js';
import { MANIFEST_VERSION, holdModelLock, openBackend, urlKey } from './cache.js';
import { ChunkPool, ModelSource } from './source.js';
import { webllmFile } from './webllm.js';

/** The optional text files of a Hugging Face model folder (config.json is required). */
export const HF_TEXT_FILES = {
  generationConfig: 'generation_config.json',
  tokenizer: 'tokenizer.json',
  tokenizerConfig: 'tokenizer_config.json',
  chatTemplate: 'chat_template.jinja',
  index: 'model.safetensors.index.json',
  // sentence-transformers (embeddings): the module list and its settings.
  stModules: 'modules.json',
  stConfig: 'config_sentence_transformers.json',
  sbertConfig: 'sentence_bert_config.json',
};

/** A file name from a folder listing or an index: used to build a URL, so no paths. */
export function plainFileName(s) {
  return typeof s === 'string' && s !== '' && s !== '.' && s !== '..' && !/[/\\\0:]/.test(s) && !s.startsWith('~');
}

/** A file name, or one inside a sub-folder (`1_Pooling/config.json`): each part a plain name. */
export function plainPath(s) {
  if (typeof s !== 'string') return false;
  const parts = s.split('/');
  return parts.length <= 2 && parts.every(plainFileName);
}

/**
 * A Hugging Face model folder: text files and safetensors shards, each a ModelSource under its own
 * URL (`new URL(name, base)`) sharing one in-memory chunk pool, or the Files of a directory pick.
 * A folder manifest (under the folder's URL) records which files exist, so a cached folder loads
 * without probing for the optional ones.
 */
export class ModelFolder {
  /**
   * @param {string | null} base  the folder URL, ending in '/' (null with `files`)
   * @param {object} opts  ModelSource options plus `files` (Map name -> File) and `sha256` (a map
   *   file name -> hex digest)
   */
  constructor(base, opts) {
    this.base = base;
    this.opts = opts;
    this.files = opts.files || null;
    this.name = base || opts.name || 'model folder';
    this.pool = new ChunkPool(3);
    this.sources = new Map(); // name -> ModelSource
    this.absent = new Set();
    this.probes = 0; // requests for files that turned out absent
    this.sizeHint = 0; // the index's total_size: the shards not opened yet
    this.lastError = null;
    this.onProgress = opts.onProgress || (() => {});
    this.kind = 'hf'; // 'mlc' once the folder turns out to be an MLC-LLM one
    this.webllm = new Map(); // name -> WebLLM's cache key, for the files read from its cache
  }

  /** Open the folder's manifest (cached folders list their files). */
  static async open(base, opts) {
    const f = new ModelFolder(base, opts);
    f.key = await urlKey(base);
    try {
      f.backend = await openBackend(opts.cache ?? 'auto', f.key);
    } catch (e) {
      if (e.name === 'InvalidOptionError') throw e;
      f.backend = null;
    }
    // One load of a cached folder at a time across tabs and workers (its files take no locks of
    // their own: two loads holding one file each and waiting for the other's would never end).
    if (f.backend) f.releaseLock = await holdModelLock(f.key, opts.signal);
    const m = f.backend ? await f.backend.getManifest().catch(() => null) : null;
    f.manifest = m && m.version === MANIFEST_VERSION && m.format === 'hf' && m.url === base && m.files ? m : null;
    return f;
  }

  /** Not a model folder after all: drop the (empty) cache entry opening it created. */
  async discard() {
    if (!this.manifest) await this.backend?.remove().catch(() => {});
    this.release();
  }

  /** Let go of the folder's lock (idempotent; finish() and discard() do it too). */
  release() {
    this.releaseLock?.();
    this.releaseLock = null;
  }

  /** A folder of local Files (a directory picker's FileList or an array of Files). */
  static fromFiles(list, opts) {
    const files = new Map();
    const paths = new Map();
    [...list].forEach((f, i) => paths.set(f, (f && f.webkitRelativePath) || opts.modelPaths?.[i] || ''));
    const depth = (file) => (paths.get(file) || file.name).split('/').length;
    for (const file of list) {
      if (!(file instanceof Blob) || !file.name) throw namedError('InvalidOptionError', 'createEngine: `model` as a list must hold Files');
      const prev = files.get(file.name);
      if (!prev || depth(file) < depth(prev)) files.set(file.name, file); // the top-level copy wins
      // Files in sub-folders (sentence-transformers modules) also by their path below the top.
      const parts = paths.get(file).split('/');
      if (parts.length === 3) files.set(parts.slice(1).join('/'), file);
    }
    const top = [...paths.values()].find((p) => p.includes('/'));
    return new ModelFolder(null, { ...opts, cache: 'none', files, name: top ? top.split('/')[0] : 'model folder' });
  }

  // Escaped: '%', '?' and '#' are legal in a file name and must not change the URL's meaning.
  url(name) { return new URL(name.split('/').map(encodeURIComponent).join('/'), this.base).href; }

  sha256For(name) {
    const s = this.opts.sha256;
    return s && typeof s === 'object' ? s[name] || null : null;
  }

  /** Whether `name` is known (from the manifest) to be absent. */
  knownAbsent(name) {
    return !!(this.manifest?.complete && this.manifest.files[name] === false);
  }

  /**
   * The ModelSource of `name`, or null when `optional` and the file does not exist (HTTP 404/410,
   * or an HTML page where a file should be).
   */
  async source(name, { optional = false } = {}) {
    if (this.sources.has(name)) return this.sources.get(name);
    if (!plainPath(name)) throw namedError('ModelFormatError', `${this.name}: ${JSON.stringify(name)} is not a plain file name`);
    const missing = () => namedError('DownloadError', `${this.name}: the folder has no ${name}`);
    if (this.files) {
      const file = this.files.get(name);
      if (!file) {
        if (optional) return null;
        throw missing();
      }
      const s = await ModelSource.open(file, { ...this.opts, name, sha256: this.sha256For(name), pool: this.pool, onProgress: () => this.report('cache') });
      this.sources.set(name, s);
      return s;
    }
    if (await this.webllmSource(name)) return this.sources.get(name);
    if (optional && this.knownAbsent(name)) return null;
    try {
      const s = await ModelSource.open(this.url(name), {
        ...this.opts,
        sha256: this.sha256For(name),
        pool: this.pool,
        folder: this.base,
        onProgress: (p) => this.report(p.phase),
      });
      this.sources.set(name, s);
      this.report('download');
      return s;
    } catch (e) {
      const absent = e.status === 404 || e.status === 410 || (e.name === 'ModelFormatError' && /HTML/.test(e.message));
      if (optional && absent) {
        this.absent.add(name);
        this.probes++;
        return null;
      }
      throw e;
    }
  }

  /**
   * `name` from WebLLM's Cache API copy of this folder, read-only, when the load allows it
   * (`webllmCache`, default true) and WebLLM has the file (webllm.js): the source, else null.
   */
  async webllmSource(name) {
    if (this.sources.has(name)) return this.webllm.has(name) ? this.sources.get(name) : null;
    if (!this.base || this.opts.webllmCache === false) return null;
    const hit = await webllmFile(this.base, name);
    if (!hit) return null;
    const s = await ModelSource.open(hit.blob, { ...this.opts, cache: 'none', name, sha256: this.sha256For(name), pool: this.pool, onProgress: () => this.report('cache') });
    this.sources.set(name, s);
    this.webllm.set(name, hit.url);
    return s;
  }

  /** The whole text of `name` (null if optional and absent). */
  async text(name, opts) {
    const s = await this.source(name, opts);
    if (!s) return null;
    const bytes = await s.read(0, s.size);
    return new TextDecoder().decode(bytes);
  }

  /** The whole content of `name` as bytes. */
  async bytes(name) {
    const s = await this.source(name);
    return s.read(0, s.size);
  }

  /** The byte source the engine reads a weight file through; remembers a failure for the caller. */
  async weights(name) {
    try {
      const s = await this.source(name);
      return { size: s.size, name, read: (off, len) => s.read(off, len).catch((e) => { this.lastError = e; throw e; }) };
    } catch (e) {
      this.lastError = e;
      throw e;
    }
  }

  report(phase) {
    let size = 0;
    let down = 0;
    let cached = 0;
    for (const [name, s] of this.sources) {
      size += s.size;
      // A file in WebLLM's cache is as good as downloaded.
      down += this.webllm.has(name) ? s.size : Math.min(s.size, (s.cachedAtOpen || 0) + s.downloaded);
      cached += s.fromCache;
    }
    const total = Math.max(size, this.sizeHint);
    if (!total) return;
    if (phase === 'cache') this.onProgress({ phase, loaded: cached, total });
    else if (this.base) this.onProgress({ phase: 'download', loaded: down, total });
  }

  async saveManifest(complete) {
    if (!this.backend) return;
    const files = {};
    for (const n of this.sources.keys()) files[n] = true;
    for (const n of this.absent) files[n] = false;
    if (this.manifest?.files) for (const [n, v] of Object.entries(this.manifest.files)) if (!(n in files)) files[n] = v;
    this.manifest = { version: MANIFEST_VERSION, format: 'hf', url: this.base, files, complete, updated: Date.now() };
    try {
      await this.backend.putManifest(this.manifest);
    } catch (e) {
      this.cacheWarning = `the folder manifest could not be written (${e.name}: ${e.message})`;
    }
  }

  /** After the engine loaded: finish every file (digests, uncached chunks), then the manifest. */
  async finish() {
    for (const s of this.sources.values()) await s.finish();
    await this.saveManifest(true);
    this.release();
  }

  stats() {
    const files = [];
    let size = 0;
    let downloadedBytes = 0;
    let cachedBytesRead = 0;
    let networkRequests = this.probes;
    let warning = this.cacheWarning || null;
    const expected = this.opts.sha256 && typeof this.opts.sha256 === 'object' ? Object.keys(this.opts.sha256) : [];
    for (const [name, s] of this.sources) {
      const st = s.stats();
      // Read from WebLLM's cache: its key, and 'webllm' as the cache it came from.
      if (this.webllm.has(name)) Object.assign(st, { url: this.webllm.get(name), cache: 'webllm' });
      files.push({ name, ...st });
      size += st.size;
      downloadedBytes += st.downloadedBytes;
      cachedBytesRead += st.cachedBytesRead;
      networkRequests += st.networkRequests;
      warning ||= st.cacheWarning;
    }
    const kinds = new Set(files.map((f) => f.cache));
    return {
      url: this.base,
      format: this.kind,
      size,
      downloadedBytes,
      cachedBytesRead,
      networkRequests,
      cache: kinds.size === 1 ? [...kinds][0] : kinds.has('none') ? 'none' : [...kinds][0] || 'none',
      sha256Verified: expected.length > 0 && expected.every((n) => this.sources.get(n)?.verified),
      cacheWarning: warning,
      files,
    };
  }
}

// Model byte store: a file (a GGUF, or one file of a Hugging Face model folder) read in
// fixed-size chunks over HTTP Range requests (or from a File/Blob), with the chunks cached in OPFS
// or the Cache API so a reload needs no network and an interrupted download resumes. A chunk is
// recorded in the per-file manifest only after it has been written completely; the manifest also
// remembers size, ETag and a verified sha256. A model folder (ModelFolder) is a set of such files,
// each cached under its own URL, plus a folder manifest that lists which files it has.

import { typedError } from './errors.js';

export const CHUNK_SIZE = 16 << 20;
/** Reads up to this size whose chunk is not at hand fetch just their bytes (see readInner). */
export const SMALL_READ = 256 << 10;
const OPFS_DIR = 'ferrolm-models';
const CACHE_NAME = 'ferrolm-models-v1';
const MANIFEST_VERSION = 1;

export function namedError(name, message, cause) {
  return typedError(name, message, undefined, cause);
}

/** The optional text files of a Hugging Face model folder (config.json is required). */
export const HF_TEXT_FILES = {
  generationConfig: 'generation_config.json',
  tokenizer: 'tokenizer.json',
  tokenizerConfig: 'tokenizer_config.json',
  chatTemplate: 'chat_template.jinja',
  index: 'model.safetensors.index.json',
};

/** A file name from a folder listing or an index: used to build a URL, so no paths. */
export function plainFileName(s) {
  return typeof s === 'string' && s !== '' && s !== '.' && s !== '..' && !/[/\\\0:]/.test(s) && !s.startsWith('~');
}

/** In-memory chunks shared by the sources of one load (a folder's shards): at most `max`. */
export class ChunkPool {
  constructor(max = 3) { this.max = max; this.map = new Map(); }
  get(k) { return this.map.get(k); }
  set(k, p) {
    this.map.set(k, p);
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value);
  }
  delete(k) { this.map.delete(k); }
  dropOwner(prefix) { for (const k of [...this.map.keys()]) if (k.startsWith(prefix)) this.map.delete(k); }
}
let sourceSeq = 0;

const isWorker = typeof WorkerGlobalScope !== 'undefined' && self instanceof WorkerGlobalScope;

async function urlKey(url) {
  const d = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(url));
  return Array.from(new Uint8Array(d).slice(0, 16), (b) => b.toString(16).padStart(2, '0')).join('');
}

// ---------------------------------------------------------------------------------------------
// Cache backends: { kind, getManifest(), putManifest(m), readChunk(i, len), writeChunk(i, bytes),
// remove() }. Both write a chunk atomically from the manifest's point of view: the chunk is
// written and closed first, then the manifest lists it.

function opfsAvailable() {
  return typeof navigator !== 'undefined' && !!navigator.storage?.getDirectory;
}

function cacheApiAvailable() {
  return typeof caches !== 'undefined';
}

async function opfsRoot(create) {
  const root = await navigator.storage.getDirectory();
  return root.getDirectoryHandle(OPFS_DIR, { create });
}

async function readOpfsJson(dir, name) {
  try {
    const fh = await dir.getFileHandle(name);
    const text = await (await fh.getFile()).text();
    return JSON.parse(text);
  } catch {
    return null;
  }
}

async function writeOpfsFile(dir, name, bytes, atomic = false) {
  const fh = await dir.getFileHandle(name, { create: true });
  // The sync handle writes in place (a crash midway leaves a truncated file); a manifest goes
  // through createWritable, which commits the whole file at once.
  if (isWorker && fh.createSyncAccessHandle && !(atomic && fh.createWritable)) {
    const h = await fh.createSyncAccessHandle();
    try {
      h.truncate(0);
      let at = 0;
      while (at < bytes.length) at += h.write(bytes.subarray(at), { at });
      h.flush();
    } finally {
      h.close();
    }
    return;
  }
  const w = await fh.createWritable({ keepExistingData: false });
  try {
    await w.write(bytes);
    await w.close(); // commits atomically
  } catch (e) {
    try { await w.abort(); } catch {}
    throw e;
  }
}

class OpfsBackend {
  constructor(dir) { this.kind = 'opfs'; this.dir = dir; }
  static async open(key, create = true) {
    const root = await opfsRoot(create);
    return new OpfsBackend(await root.getDirectoryHandle(key, { create }));
  }
  getManifest() { return readOpfsJson(this.dir, 'manifest.json'); }
  putManifest(m) { return writeOpfsFile(this.dir, 'manifest.json', new TextEncoder().encode(JSON.stringify(m)), true); }
  async readChunk(i, len) {
    const fh = await this.dir.getFileHandle(`chunk-${i}.bin`);
    if (isWorker && fh.createSyncAccessHandle) {
      let h;
      try {
        h = await fh.createSyncAccessHandle();
      } catch {
        h = null; // locked elsewhere (another tab): fall back to the async API
      }
      if (h) {
        try {
          const out = new Uint8Array(len);
          const n = h.read(out, { at: 0 });
          if (n !== len) throw new Error(`cached chunk ${i} has ${n} bytes, expected ${len}`);
          return out;
        } finally {
          h.close();
        }
      }
    }
    const buf = new Uint8Array(await (await fh.getFile()).arrayBuffer());
    if (buf.length !== len) throw new Error(`cached chunk ${i} has ${buf.length} bytes, expected ${len}`);
    return buf;
  }
  writeChunk(i, bytes) { return writeOpfsFile(this.dir, `chunk-${i}.bin`, bytes); }
  async removeChunk(i) { try { await this.dir.removeEntry(`chunk-${i}.bin`); } catch {} }
  async remove() {
    const root = await opfsRoot(false).catch(() => null);
    if (root) await root.removeEntry(this.dir.name, { recursive: true }).catch(() => {});
  }
}

class CacheApiBackend {
  constructor(cache, key) { this.kind = 'cache-api'; this.cache = cache; this.key = key; }
  static async open(key) { return new CacheApiBackend(await caches.open(CACHE_NAME), key); }
  u(name) { return new URL(`/__ferrolm__/${this.key}/${name}`, location.href).href; }
  async getManifest() {
    const r = await this.cache.match(this.u('manifest'));
    return r ? r.json().catch(() => null) : null;
  }
  putManifest(m) {
    return this.cache.put(this.u('manifest'), new Response(JSON.stringify(m), { headers: { 'Content-Type': 'application/json' } }));
  }
  async readChunk(i, len) {
    const r = await this.cache.match(this.u(`chunk-${i}`));
    if (!r) throw new Error(`chunk ${i} is missing from the Cache API store`);
    const buf = new Uint8Array(await r.arrayBuffer());
    if (buf.length !== len) throw new Error(`cached chunk ${i} has ${buf.length} bytes, expected ${len}`);
    return buf;
  }
  writeChunk(i, bytes) {
    return this.cache.put(this.u(`chunk-${i}`), new Response(bytes, { headers: { 'Content-Length': String(bytes.length) } }));
  }
  async removeChunk(i) { await this.cache.delete(this.u(`chunk-${i}`)).catch(() => {}); }
  async remove() {
    for (const req of await this.cache.keys()) {
      if (new URL(req.url).pathname.startsWith(`/__ferrolm__/${this.key}/`)) await this.cache.delete(req);
    }
  }
}

async function openBackend(mode, key) {
  if (mode === 'none') return null;
  if ((mode === 'auto' || mode === 'opfs') && opfsAvailable()) {
    try {
      return await OpfsBackend.open(key);
    } catch (e) {
      if (mode === 'opfs') throw namedError('CacheError', `OPFS is not usable here: ${e.message}`, e);
    }
  }
  if ((mode === 'auto' || mode === 'cache-api') && cacheApiAvailable()) {
    try {
      return await CacheApiBackend.open(key);
    } catch (e) {
      if (mode === 'cache-api') throw namedError('CacheError', `the Cache API is not usable here: ${e.message}`, e);
    }
  }
  if (mode === 'opfs' || mode === 'cache-api') throw namedError('CacheError', `cache backend '${mode}' is not available in this context`);
  if (mode !== 'auto') throw namedError('InvalidOptionError', `cache must be 'auto', 'opfs', 'cache-api' or 'none', got ${JSON.stringify(mode)}`);
  return null;
}

// Every manifest in both stores: [{m, backend, key}] (key: the OPFS directory / Cache API prefix).
async function allManifests() {
  const out = [];
  if (opfsAvailable()) {
    try {
      const root = await opfsRoot(false);
      for await (const [name, h] of root.entries()) {
        if (h.kind !== 'directory') continue;
        const m = await readOpfsJson(h, 'manifest.json');
        if (m?.url) out.push({ m, backend: 'opfs', key: name });
      }
    } catch {}
  }
  if (cacheApiAvailable()) {
    try {
      const cache = await caches.open(CACHE_NAME);
      for (const req of await cache.keys()) {
        if (!req.url.endsWith('/manifest')) continue;
        const m = await (await cache.match(req))?.json().catch(() => null);
        const key = new URL(req.url).pathname.split('/').at(-2);
        if (m?.url) out.push({ m, backend: 'cache-api', key });
      }
    } catch {}
  }
  return out;
}

function describeFile(m, backend) {
  const n = Math.ceil(m.size / m.chunkSize);
  let cachedBytes = 0;
  for (const i of m.chunks) cachedBytes += Math.min(m.chunkSize, m.size - i * m.chunkSize);
  return { url: m.url, size: m.size, cachedBytes, complete: m.chunks.length === n, backend, sha256: m.sha256 || null, etag: m.etag || null, updated: m.updated };
}

/**
 * Every cached model in both stores: [{url, format, size, cachedBytes, complete, backend, sha256,
 * etag, updated}]. A model folder is one entry (format 'hf', url = the folder's URL ending in '/')
 * whose `files` lists its cached files; its size counts the files cached so far.
 */
export async function listCachedModels() {
  const all = await allManifests();
  const out = [];
  const folders = new Map(); // backend + url -> entry
  const folder = (url, backend) => {
    const k = `${backend} ${url}`;
    if (!folders.has(k)) {
      const e = { url, format: 'hf', size: 0, cachedBytes: 0, complete: false, backend, sha256: null, etag: null, updated: 0, files: [], listed: false };
      folders.set(k, e);
      out.push(e);
    }
    return folders.get(k);
  };
  for (const { m, backend } of all) {
    if (m.format === 'hf') {
      const f = folder(m.url, backend);
      f.listed = !!m.complete;
      f.updated = Math.max(f.updated, m.updated || 0);
    } else if (m.folder) {
      const d = describeFile(m, backend);
      const f = folder(m.folder, backend);
      f.files.push({ name: m.url.slice(m.folder.length), ...d });
      f.size += d.size;
      f.cachedBytes += d.cachedBytes;
      f.updated = Math.max(f.updated, d.updated || 0);
    } else {
      out.push({ ...describeFile(m, backend), format: 'gguf' });
    }
  }
  for (const f of folders.values()) {
    f.complete = f.listed && f.files.length > 0 && f.files.every((x) => x.complete);
    delete f.listed;
    f.files.sort((a, b) => a.name.localeCompare(b.name));
  }
  return out;
}

/**
 * Delete a cached model from both stores: a file's chunks and manifest, or, for a model folder
 * (its URL, with or without the trailing '/'), every file of the folder and its manifest.
 * Resolves to true if anything was removed.
 */
export async function deleteCachedModel(url) {
  const abs = new URL(String(url), typeof location !== 'undefined' ? location.href : undefined).href;
  const base = abs.endsWith('/') ? abs : `${abs}/`;
  const keys = { opfs: new Set([await urlKey(abs)]), 'cache-api': new Set([await urlKey(abs)]) };
  for (const { m, backend, key } of await allManifests()) {
    if (m.url === abs || m.url === base || m.folder === base) keys[backend].add(key);
  }
  let removed = false;
  if (opfsAvailable()) {
    try {
      const root = await opfsRoot(false);
      for (const key of keys.opfs) {
        try {
          await root.removeEntry(key, { recursive: true });
          removed = true;
        } catch {}
      }
    } catch {}
  }
  if (cacheApiAvailable()) {
    for (const key of keys['cache-api']) {
      try {
        const b = await CacheApiBackend.open(key);
        if (await b.getManifest()) removed = true;
        await b.remove();
      } catch {}
    }
  }
  return removed;
}

/** What the cache knows about `url` without a request: 'gguf' (a cached file), 'hf' (a cached
 *  folder at url + '/'), or null. */
export async function cachedKind(url, mode = 'auto') {
  if (mode === 'none') return null;
  for (const { m } of await allManifests()) {
    if (m.url === url && m.format !== 'hf' && !m.folder) return 'gguf';
    if (m.format === 'hf' && m.complete && (m.url === url || m.url === `${url}/`)) return 'hf';
  }
  return null;
}

// ---------------------------------------------------------------------------------------------

function isQuotaError(e) {
  return e && (e.name === 'QuotaExceededError' || /quota/i.test(e.message || ''));
}

/**
 * A random-access byte source `{size, name, read(offset, length)}` over a URL or a Blob, fetching
 * `CHUNK_SIZE` chunks (with a read-ahead of one chunk), caching them, and hashing the file in
 * order when a sha256 is given. Call `finish()` after the engine has loaded: it hashes what the
 * engine skipped and checks the digest.
 */
export class ModelSource {
  static async open(model, opts) {
    const s = new ModelSource(opts);
    if (typeof Blob !== 'undefined' && model instanceof Blob) {
      s.blob = model;
      s.size = model.size;
      s.name = opts?.name || model.name || 'model.gguf';
      s.url = null;
      s.mode = 'none';
    } else {
      const url = new URL(String(model), typeof location !== 'undefined' ? location.href : undefined).href;
      s.url = url;
      const last = new URL(url).pathname.split('/').pop() || 'model.gguf';
      try { s.name = decodeURIComponent(last); } catch { s.name = last; } // "%ZZ" stays as it is
      await s.openUrl();
    }
    s.nChunks = Math.ceil(s.size / s.chunkSize);
    return s;
  }

  constructor({ cache = 'auto', sha256 = null, onProgress = () => {}, fetch: f, retries = 2, signal, chunkSize = CHUNK_SIZE, onWarning, Hasher, pool, folder = null } = {}) {
    this.Hasher = Hasher;
    this.mode = cache;
    this.expectedSha = sha256 ? String(sha256).toLowerCase() : null;
    this.onProgress = onProgress;
    this.fetch = f || ((...a) => fetch(...a));
    this.retries = retries;
    this.signal = signal;
    this.chunkSize = chunkSize;
    this.warn = onWarning || ((m) => console.warn(`ferrolm: ${m}`));
    // Chunks in memory (the last few), shared with the other files of a folder.
    this.pool = pool || new ChunkPool(3);
    this.id = `${sourceSeq++}:`;
    this.folder = folder; // the folder URL when this file is part of a model folder
    this.hasher = null;
    this.hashNext = 0;
    this.downloaded = 0; // bytes fetched over the network this session
    this.fromCache = 0;
    this.networkRequests = 0;
  }

  async openUrl() {
    const key = await urlKey(this.url);
    try {
      this.backend = await openBackend(this.mode, key);
    } catch (e) {
      if (e.name === 'InvalidOptionError') throw e;
      this.warn(`${e.message}; continuing without a cache`);
      this.backend = null;
    }
    let m = null;
    if (this.backend) {
      m = await this.backend.getManifest().catch(() => null);
      if (m && (m.version !== MANIFEST_VERSION || m.url !== this.url || !(m.size > 0) || !Array.isArray(m.chunks))) m = null;
    }
    if (m) {
      // Trust the manifest: no request at all when every chunk is cached.
      this.size = m.size;
      this.etag = m.etag || null;
      this.chunkSize = m.chunkSize;
      this.done = new Set(m.chunks);
      this.manifest = m;
      if (this.expectedSha && m.sha256 && m.sha256 !== this.expectedSha) {
        // A verified file with another digest: the caller wants a different file.
        await this.backend.remove();
        this.backend = await openBackend(this.mode, key);
        m = null;
      }
    }
    if (!m) {
      this.done = new Set();
      // The first chunk's response tells the size (Content-Range) and whether ranges work.
      let first;
      try {
        first = await this.fetchRange(0, this.chunkSize - 1, true);
      } catch (e) {
        // Nothing was cached: leave no empty entry behind (e.g. a folder file that is absent).
        await this.backend?.remove().catch(() => {});
        throw e;
      }
      this.first = first;
      this.manifest = { version: MANIFEST_VERSION, url: this.url, size: this.size, etag: this.etag, chunkSize: this.chunkSize, chunks: [], sha256: null, updated: Date.now() };
      if (this.folder) this.manifest.folder = this.folder;
      if (this.backend) await this.saveManifest();
    }
    this.cachedAtOpen = 0;
    for (const i of this.done) this.cachedAtOpen += this.chunkLen(i);
    this.verified = !!(this.expectedSha && this.manifest.sha256 === this.expectedSha);
    if (this.expectedSha && !this.verified) this.hasher = 'pending';
  }

  // Manifest writes are chained: a chunk and its read-ahead neighbour finish together, and two
  // overlapping writes could land out of order, leaving a stale list that forgets a cached chunk.
  // Each write in the chain takes the chunk set as it is when it runs, so the last one is complete.
  saveManifest() {
    this.manifestWrite = (this.manifestWrite || Promise.resolve()).then(async () => {
      if (!this.backend) return;
      this.manifest.chunks = [...this.done].sort((a, b) => a - b);
      this.manifest.updated = Date.now();
      try {
        await this.backend.putManifest(this.manifest);
      } catch (e) {
        this.cacheFailed(e);
      }
    });
    return this.manifestWrite;
  }

  cacheFailed(e) {
    if (!this.backend) return;
    const why = isQuotaError(e) ? 'the storage quota is exhausted' : `the cache write failed (${e.name}: ${e.message})`;
    this.warn(`${why}; the model keeps loading without caching the rest`);
    this.cacheWarning = why;
    this.backend = null;
  }

  chunkLen(i) {
    return Math.min(this.chunkSize, this.size - i * this.chunkSize);
  }

  // One HTTP request for bytes [start, end]; the first also establishes size/etag. A broken
  // connection, a server error (5xx) or a "too many requests" (429) is tried again after a
  // growing pause (a 429's or 503's Retry-After when it is short).
  async fetchRange(start, end, first = false) {
    let lastErr;
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      if (attempt) {
        const asked = Number(lastErr?.retryAfter);
        const ms = asked > 0 && asked <= 30 ? asked * 1000 : 250 * 2 ** attempt;
        await new Promise((ok) => setTimeout(ok, ms));
      }
      try {
        return await this.fetchRangeOnce(start, end, first);
      } catch (e) {
        lastErr = e;
        const transient = e.name === 'NetworkError' || (e.name === 'DownloadError' && (e.status >= 500 || e.status === 429));
        if (!transient || this.signal?.aborted) break;
      }
    }
    throw lastErr;
  }

  async fetchRangeOnce(start, end, first) {
    const headers = { Range: `bytes=${start}-${end}` };
    // If-Range only with a strong validator: a weak ETag never matches there (RFC 9110 13.1.5),
    // so every range would come back whole.
    if (!first && this.etag && !this.etag.startsWith('W/')) headers['If-Range'] = this.etag;
    let res;
    this.networkRequests++;
    try {
      res = await this.fetch(this.url, { headers, signal: this.signal, cache: 'no-store' });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw namedError('NetworkError', `could not fetch ${this.url}: ${e.message}`, e);
    }
    if (!res.ok) {
      res.body?.cancel().catch(() => {});
      const e = namedError('DownloadError', `fetching ${this.url} failed: HTTP ${res.status} ${res.statusText}`.trim());
      e.status = res.status;
      e.retryAfter = res.headers.get('Retry-After');
      throw e;
    }
    const type = res.headers.get('Content-Type') || '';
    if (/text\/html/i.test(type)) {
      res.body?.cancel().catch(() => {});
      throw namedError('ModelFormatError', `${this.url} returned an HTML page (Content-Type: ${type}), not a GGUF file; check the model URL (a "blob" page instead of a "resolve"/raw download link?)`);
    }
    let total = null;
    let gotStart = 0;
    if (res.status === 206) {
      const cr = /bytes\s+(\d+)-(\d+)\/(\d+|\*)/.exec(res.headers.get('Content-Range') || '');
      if (!cr) throw namedError('DownloadError', `${this.url}: 206 response without a usable Content-Range`);
      gotStart = Number(cr[1]);
      if (cr[3] !== '*') total = Number(cr[3]);
      if (gotStart !== start) throw namedError('DownloadError', `${this.url}: asked for bytes from ${start}, got from ${gotStart}`);
      // Every part must come from the same version of the file.
      const etag = res.headers.get('ETag');
      if (!first && etag && this.etag && etag !== this.etag) {
        res.body?.cancel().catch(() => {});
        throw namedError('DownloadError', `${this.url} changed on the server while it was being downloaded (ETag ${this.etag} -> ${etag}); delete the cached copy (deleteCachedModel) and load again`);
      }
    } else {
      // 200: the server ignored the range (or If-Range failed: the file changed).
      const len = res.headers.get('Content-Length');
      total = len != null ? Number(len) : null;
      if (!first) {
        res.body?.cancel().catch(() => {});
        throw namedError('DownloadError', `${this.url} changed on the server or stopped honouring Range requests while it was being downloaded; delete the cached copy (deleteCachedModel) and load again`);
      }
      if (total == null) throw namedError('DownloadError', `${this.url}: the server supports neither Range requests nor Content-Length`);
      this.noRanges = true;
    }
    if (first) {
      if (total == null) throw namedError('DownloadError', `${this.url}: the server did not report the file size`);
      this.size = total;
      this.etag = res.headers.get('ETag');
    } else if (total != null && total !== this.size) {
      throw namedError('DownloadError', `${this.url} changed size on the server (${this.size} -> ${total} bytes); delete the cached copy and load again`);
    }
    const want = Math.min(end, this.size - 1) - start + 1;
    if (this.noRanges && first) {
      // Keep the response stream: chunks are taken from it in order.
      this.stream = res.body.getReader();
      this.streamPos = 0;
      this.streamBuf = [];
      return null;
    }
    const out = new Uint8Array(want);
    let at = 0;
    const reader = res.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (at + value.length > want) throw namedError('DownloadError', `${this.url}: the server sent more bytes than asked for`);
        out.set(value, at);
        at += value.length;
        this.downloaded += value.length;
        this.report();
      }
    } catch (e) {
      if (e.name === 'DownloadError' || e.name === 'AbortError') throw e;
      throw namedError('NetworkError', `the download of ${this.url} was interrupted at byte ${start + at}: ${e.message}`, e);
    }
    if (at !== want) throw namedError('NetworkError', `the download of ${this.url} was cut short: got ${at} of ${want} bytes from byte ${start}`);
    return out;
  }

  report() {
    if (this.url) this.onProgress({ phase: 'download', loaded: Math.min(this.size, (this.cachedAtOpen || 0) + this.downloaded), total: this.size });
  }

  // The next chunk from a server without Range support.
  async streamChunk(i) {
    if (i * this.chunkSize !== this.streamPos) {
      throw namedError('DownloadError', `${this.url}: the server does not support Range requests, so the file can only be read in order; enable the cache or use a server with Range support`);
    }
    const want = this.chunkLen(i);
    const out = new Uint8Array(want);
    let at = 0;
    while (at < want) {
      const piece = this.streamBuf.shift() || (await this.stream.read()).value;
      if (!piece) throw namedError('NetworkError', `the download of ${this.url} ended early at byte ${this.streamPos + at}`);
      const take = Math.min(piece.length, want - at);
      out.set(piece.subarray(0, take), at);
      if (take < piece.length) this.streamBuf.unshift(piece.subarray(take));
      at += take;
      this.downloaded += take;
      this.report();
    }
    this.streamPos += want;
    return out;
  }

  async loadChunk(i) {
    const len = this.chunkLen(i);
    if (this.blob) {
      const start = i * this.chunkSize;
      return new Uint8Array(await this.blob.slice(start, start + len).arrayBuffer());
    }
    if (this.backend && this.done.has(i)) {
      try {
        const b = await this.backend.readChunk(i, len);
        this.fromCache += len;
        this.onProgress({ phase: 'cache', loaded: this.fromCache, total: this.size });
        return b;
      } catch (e) {
        this.warn(`cached chunk ${i} is unreadable (${e.message}); downloading it again`);
        this.done.delete(i);
      }
    }
    if (!this.url) throw namedError('DownloadError', 'no source for the model bytes');
    let bytes;
    if (i === 0 && this.first) {
      bytes = this.first;
      this.first = null;
    } else if (this.noRanges) {
      bytes = await this.streamChunk(i);
    } else {
      bytes = await this.fetchRange(i * this.chunkSize, i * this.chunkSize + len - 1);
    }
    if (this.noRanges && i === 0 && !bytes) bytes = await this.streamChunk(0);
    if (this.backend) {
      try {
        await this.backend.writeChunk(i, bytes);
        this.done.add(i);
        await this.saveManifest();
      } catch (e) {
        await this.backend?.removeChunk(i);
        this.cacheFailed(e);
      }
    }
    return bytes;
  }

  // Chunk i, from memory or loaded once; keeps the last few and reads one ahead.
  chunk(i) {
    const k = this.id + i;
    let p = this.pool.get(k);
    if (!p) {
      p = this.loadChunk(i).then((b) => this.hashChunk(i, b));
      p.catch(() => this.pool.delete(k));
      this.pool.set(k, p);
    }
    return p;
  }

  // The digest needs the chunks in order, but a read-ahead can finish before the chunk it follows:
  // hold up to two early chunks instead of reading them again in finish().
  hashChunk(i, bytes) {
    if (!this.hasher || i < this.hashNext) return bytes;
    this.hashEarly ||= new Map();
    if (i > this.hashNext) {
      if (this.hashEarly.size < 2) this.hashEarly.set(i, bytes);
      return bytes;
    }
    if (this.hasher === 'pending') this.hasher = new this.Hasher();
    this.hasher.update(bytes);
    this.hashNext++;
    while (this.hashEarly.has(this.hashNext)) {
      const b = this.hashEarly.get(this.hashNext);
      this.hashEarly.delete(this.hashNext);
      this.hasher.update(b);
      this.hashNext++;
    }
    return bytes;
  }

  /** The engine's read callback (remembers its last failure: the engine wraps it as an IoError). */
  async read(offset, length) {
    try {
      return await this.readInner(offset, length);
    } catch (e) {
      this.lastError = e;
      throw e;
    }
  }

  async readInner(offset, length) {
    if (offset < 0 || length < 0 || offset + length > this.size) {
      throw namedError('ModelFormatError', `read past the end of the model file (bytes ${offset}..${offset + length} of ${this.size}): is the file truncated?`);
    }
    // A small read far from the chunks at hand (a norm vector stored away from its layer's
    // weights) fetches just its bytes: taking in its whole chunk would push out the chunks the
    // loader is working through, which would then be fetched again (once a layer, in files that
    // keep the norms together at the start).
    const i0 = Math.floor(offset / this.chunkSize);
    if (length > 0 && length <= SMALL_READ && this.url && !this.noRanges && !this.blob
        && Math.floor((offset + length - 1) / this.chunkSize) === i0 && !this.pool.get(this.id + i0)
        && !(this.backend && this.done.has(i0)) && !(i0 === 0 && this.first)) {
      return this.fetchRange(offset, offset + length - 1);
    }
    const out = new Uint8Array(length);
    let at = 0;
    while (at < length) {
      const pos = offset + at;
      const i = Math.floor(pos / this.chunkSize);
      // Read ahead, except for small reads at the start (a header: the data may come much later).
      const header = i === 0 && length < 1 << 20;
      if (i + 1 < this.nChunks && !this.noRanges && !this.blob && !header) this.chunk(i + 1).catch(() => {});
      const c = await this.chunk(i);
      const from = pos - i * this.chunkSize;
      const take = Math.min(c.length - from, length - at);
      out.set(c.subarray(from, from + take), at);
      at += take;
    }
    return out;
  }

  /** After the engine loaded: hash the rest of the file (if needed) and check the digest. */
  async finish() {
    if (this.hasher) {
      while (this.hashNext < this.nChunks) await this.hashChunk(this.hashNext, await this.loadChunk(this.hashNext));
      const got = this.hasher.digestHex();
      if (got !== this.expectedSha) {
        if (this.backend) await this.backend.remove().catch(() => {});
        throw namedError('IntegrityError', `sha256 mismatch for ${this.url || this.name}: expected ${this.expectedSha}, got ${got}; the cached copy was deleted`);
      }
      this.manifest.sha256 = got;
      this.verified = true;
    }
    this.pool.dropOwner(this.id);
    this.stream?.cancel().catch(() => {});
    if (this.backend && this.url) {
      // Also cache chunks the engine never read (padding at the end) so the entry is complete.
      for (let i = 0; i < this.nChunks && this.backend; i++) if (!this.done.has(i)) await this.loadChunk(i).catch(() => {});
      await this.saveManifest();
    }
  }

  stats() {
    return { url: this.url, size: this.size, downloadedBytes: this.downloaded, cachedBytesRead: this.fromCache, networkRequests: this.networkRequests, cache: this.backend?.kind || 'none', sha256Verified: this.verified, cacheWarning: this.cacheWarning || null };
  }
}

// ---------------------------------------------------------------------------------------------

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
    const m = f.backend ? await f.backend.getManifest().catch(() => null) : null;
    f.manifest = m && m.version === MANIFEST_VERSION && m.format === 'hf' && m.url === base && m.files ? m : null;
    return f;
  }

  /** Not a model folder after all: drop the (empty) cache entry opening it created. */
  async discard() {
    if (!this.manifest) await this.backend?.remove().catch(() => {});
  }

  /** A folder of local Files (a directory picker's FileList or an array of Files). */
  static fromFiles(list, opts) {
    const files = new Map();
    const depth = (file) => (file.webkitRelativePath || file.name).split('/').length;
    for (const file of list) {
      if (!(file instanceof Blob) || !file.name) throw namedError('InvalidOptionError', 'createEngine: `model` as a list must hold Files');
      const prev = files.get(file.name);
      if (!prev || depth(file) < depth(prev)) files.set(file.name, file); // the top-level copy wins
    }
    const top = [...files.values()].map((x) => x.webkitRelativePath || '').find((p) => p.includes('/'));
    return new ModelFolder(null, { ...opts, cache: 'none', files, name: top ? top.split('/')[0] : 'model folder' });
  }

  url(name) { return new URL(name, this.base).href; }

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
    if (!plainFileName(name)) throw namedError('ModelFormatError', `${this.name}: ${JSON.stringify(name)} is not a plain file name`);
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

  /** The whole text of `name` (null if optional and absent). */
  async text(name, opts) {
    const s = await this.source(name, opts);
    if (!s) return null;
    const bytes = await s.read(0, s.size);
    return new TextDecoder().decode(bytes);
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
    for (const s of this.sources.values()) {
      size += s.size;
      down += Math.min(s.size, (s.cachedAtOpen || 0) + s.downloaded);
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
      format: 'hf',
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

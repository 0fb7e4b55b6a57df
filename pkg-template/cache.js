// Where downloaded model bytes are kept: OPFS or the Cache API, one entry per file URL (a chunk
// store plus a manifest), and the listing and deleting of entries. Both backends write a chunk
// completely before the manifest lists it, and replace a manifest atomically.
//
// Backend interface: { kind, getManifest(), putManifest(m), readChunk(i, len), writeChunk(i,
// bytes), removeChunk(i), remove() }.

import { namedError } from './errors.js';

const OPFS_DIR = 'ferrolm-models';
const CACHE_NAME = 'ferrolm-models-v1';
export const MANIFEST_VERSION = 1;

const isWorker = typeof WorkerGlobalScope !== 'undefined' && self instanceof WorkerGlobalScope;

/** The cache key of a URL: its sha256, shortened. */
export async function urlKey(url) {
  const d = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(url));
  return hex(new Uint8Array(d).slice(0, 16));
}

function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** sha256 of a chunk (hex), kept in the manifest and checked whenever the chunk is read back. */
export async function chunkDigest(bytes) {
  return hex(new Uint8Array(await crypto.subtle.digest('SHA-256', bytes)));
}

/**
 * Hold the Web Lock `ferrolm:<key>` (one per cached model) until the returned function is called:
 * two tabs or workers loading the same model take turns, so the second one reads what the first
 * downloaded instead of downloading it again (and neither deletes chunks the other is writing).
 * Without the Web Locks API this does nothing.
 */
export async function holdModelLock(key, signal) {
  const locks = typeof navigator !== 'undefined' ? navigator.locks : null;
  if (!locks?.request) return () => {};
  let release;
  const held = new Promise((ok) => { release = ok; });
  await new Promise((granted, fail) => {
    locks.request(`ferrolm:${key}`, signal ? { signal } : {}, () => {
      granted();
      return held;
    }).catch(fail);
  });
  return release;
}

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

export async function openBackend(mode, key) {
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

export function isQuotaError(e) {
  return e && (e.name === 'QuotaExceededError' || /quota/i.test(e.message || ''));
}


// A model file as a random-access byte source: fetched in fixed-size chunks over HTTP Range
// requests (or read from a File/Blob), each chunk cached (cache.js) so a reload needs no network
// and an interrupted download resumes.

import { namedError } from './errors.js';
import { MANIFEST_VERSION, chunkDigest, holdModelLock, isQuotaError, openBackend, urlKey } from './cache.js';

// The engine's largest read (READ_CHUNK, crate/src/weights/safetensors.rs): one chunk serves it.
export const CHUNK_SIZE = 16 << 20;
/** Reads up to this size whose chunk is not at hand fetch just their bytes (see readInner). */
export const SMALL_READ = 256 << 10;
/** From a server without Range support and without a cache, streamed chunks kept in memory. */
export const NO_RANGE_KEEP = 1 << 30;

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

/**
 * A random-access byte source `{size, name, read(offset, length)}` over a URL or a Blob, fetching
 * `CHUNK_SIZE` chunks (with a read-ahead of one chunk) and caching them. Call `finish()` after the
 * engine has loaded (it completes the cache entry and checks the digest), and `release()` in every
 * case (it lets another tab at the model).
 *
 * Integrity: each cached chunk's sha256 is kept in the manifest and checked whenever the chunk is
 * read back (same-length corruption on disk is fetched again, never served). With a file sha256,
 * the file is hashed in order and the digest covers exactly the bytes the engine was given: a
 * chunk hashed later than it was used must have the digest it had when used, and small reads
 * must match the chunk they lie in.
 */
export class ModelSource {
  static async open(model, opts) {
    const s = new ModelSource(opts);
    try {
      await s.openInner(model, opts);
    } catch (e) {
      s.release();
      throw e;
    }
    return s;
  }

  async openInner(model, opts) {
    const s = this;
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
  }

  /** Let go of the model's lock (idempotent; finish() does it too). */
  release() {
    this.releaseLock?.();
    this.releaseLock = null;
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
    this.hashNext = 0; // chunks before this one are in the digest
    this.hashEarly = new Map(); // a read-ahead that finished before the chunk it follows
    this.used = new Map(); // chunk -> digest of the bytes the engine was given (while hashing)
    this.smallReads = []; // {offset, bytes} the engine was given outside whole chunks (while hashing)
    this.digests = []; // chunk -> sha256 hex, for the manifest
    this.stash = new Map(); // without Range support and a cache: streamed chunks kept (LRU)
    this.streamed = []; // without Range support: chunk -> digest when it was streamed
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
    // One load of a cached model at a time across tabs and workers: the second waits and then
    // reads the first one's chunks. A folder's files are under the folder's lock.
    if (this.backend && !this.folder) this.releaseLock = await holdModelLock(key, this.signal);
    let m = null;
    if (this.backend) {
      m = await this.backend.getManifest().catch(() => null);
      if (m && (m.version !== MANIFEST_VERSION || m.url !== this.url || !(m.size > 0) || !Array.isArray(m.chunks))) m = null;
    }
    if (m) {
      // Trust the manifest: no request at all when every chunk is cached.
      this.size = m.size;
      this.etag = m.etag || null;
      this.lastModified = m.lastModified || null;
      this.chunkSize = m.chunkSize;
      this.done = new Set(m.chunks);
      this.digests = Array.isArray(m.digests) ? m.digests.slice() : [];
      this.manifest = m;
      if (this.expectedSha && m.sha256 && m.sha256 !== this.expectedSha) {
        // A verified file with another digest: the caller wants a different file.
        await this.backend.remove();
        this.backend = await openBackend(this.mode, key);
        this.digests = [];
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
      this.manifest = { version: MANIFEST_VERSION, url: this.url, size: this.size, etag: this.etag, lastModified: this.lastModified, chunkSize: this.chunkSize, chunks: [], sha256: null, updated: Date.now() };
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
      this.manifest.digests = this.manifest.chunks.reduce((d, i) => { d[i] = this.digests[i] || null; return d; }, []);
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
      // Every part must come from the same version of the file: the ETag, or without one the
      // Last-Modified date, must not change (a same-size new file would mix with the old chunks).
      const etag = res.headers.get('ETag');
      const modified = res.headers.get('Last-Modified');
      const was = this.etag ? `ETag ${this.etag}` : `Last-Modified ${this.lastModified}`;
      const now = this.etag ? etag && `ETag ${etag}` : modified && `Last-Modified ${modified}`;
      if (!first && now && (this.etag || this.lastModified) && now !== was) {
        res.body?.cancel().catch(() => {});
        // The chunks cached so far are of the old version: drop them so the next load starts over.
        await this.backend?.remove().catch(() => {});
        this.backend = null;
        throw namedError('DownloadError', `${this.url} changed on the server while it was being downloaded (${was} -> ${now}); the cached part was deleted, load again to download the new version`);
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
      this.lastModified = res.headers.get('Last-Modified');
    } else if (total != null && total !== this.size) {
      throw namedError('DownloadError', `${this.url} changed size on the server (${this.size} -> ${total} bytes); delete the cached copy and load again`);
    }
    const want = Math.min(end, this.size - 1) - start + 1;
    if (this.noRanges && first) {
      // Keep the response stream: chunks are taken from it in order.
      this.stream = res.body.getReader();
      this.streamNext = 0; // the chunk the stream delivers next
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

  // Chunk i from a server without Range support, which sends the file once, in order. Streamed
  // chunks are kept in the cache, or without one in `stash` (up to NO_RANGE_KEEP bytes, least
  // recently used out first), so reads out of order or repeated need no second download of
  // files up to that size. The file digest is taken here, in stream order, so it covers exactly
  // the bytes handed out. A chunk needed again after it left restarts the stream.
  async streamChunk(i) {
    const kept = this.stash.get(i);
    if (kept) {
      this.stash.delete(i);
      this.stash.set(i, kept);
      return kept;
    }
    if (i < this.streamNext) await this.restartStream();
    for (;;) {
      const j = this.streamNext;
      const bytes = await this.streamRead(this.chunkLen(j));
      this.streamNext++;
      const digest = await chunkDigest(bytes);
      if (this.streamed[j] && this.streamed[j] !== digest) {
        throw namedError('DownloadError', `${this.url} changed on the server while it was being downloaded (chunk ${j} differs when read again); load again`);
      }
      this.streamed[j] = digest;
      if (this.hasher && j === this.hashNext) {
        if (this.hasher === 'pending') this.hasher = new this.Hasher();
        this.hasher.update(bytes);
        this.hashNext++;
      }
      if (this.backend && !this.done.has(j)) await this.cacheChunk(j, bytes, digest);
      if (!(this.backend && this.done.has(j))) this.keep(j, bytes);
      if (j === i) return bytes;
    }
  }

  keep(j, bytes) {
    this.stash.set(j, bytes);
    this.stashBytes = (this.stashBytes || 0) + bytes.length;
    for (const [k, b] of this.stash) {
      if (this.stashBytes <= NO_RANGE_KEEP) break;
      this.stash.delete(k);
      this.stashBytes -= b.length;
    }
  }

  async streamRead(want) {
    const out = new Uint8Array(want);
    let at = 0;
    while (at < want) {
      const piece = this.streamBuf.shift() || (await this.stream.read()).value;
      if (!piece) throw namedError('NetworkError', `the download of ${this.url} ended early at byte ${this.streamNext * this.chunkSize + at}`);
      const take = Math.min(piece.length, want - at);
      out.set(piece.subarray(0, take), at);
      if (take < piece.length) this.streamBuf.unshift(piece.subarray(take));
      at += take;
      this.downloaded += take;
      this.report();
    }
    return out;
  }

  async restartStream() {
    this.stream?.cancel().catch(() => {});
    if ((await this.fetchRange(0, this.chunkSize - 1, true)) !== null) {
      throw namedError('DownloadError', `${this.url}: the server began honouring Range requests midway; load again`);
    }
  }

  async cacheChunk(i, bytes, digest) {
    try {
      await this.backend.writeChunk(i, bytes);
      this.digests[i] = digest;
      this.done.add(i);
      await this.saveManifest();
    } catch (e) {
      await this.backend?.removeChunk(i);
      this.cacheFailed(e);
    }
  }

  // Chunk i as {bytes, digest}: from the Blob, the cache (checked against its digest) or the
  // network (cached on the way).
  async loadChunk(i) {
    const len = this.chunkLen(i);
    if (this.blob) {
      const start = i * this.chunkSize;
      const bytes = new Uint8Array(await this.blob.slice(start, start + len).arrayBuffer());
      return { bytes, digest: this.hasher ? await chunkDigest(bytes) : null };
    }
    if (this.backend && this.done.has(i)) {
      try {
        const bytes = await this.backend.readChunk(i, len);
        const digest = await chunkDigest(bytes);
        if (this.digests[i] && this.digests[i] !== digest) throw new Error('its bytes differ from those downloaded (damaged on disk)');
        this.digests[i] = digest;
        this.fromCache += len;
        this.onProgress({ phase: 'cache', loaded: this.fromCache, total: this.size });
        return { bytes, digest };
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
    const digest = await chunkDigest(bytes);
    if (this.digests[i] && this.digests[i] !== digest) {
      // Fetched again after the cached copy failed its check, and the server's bytes are not the
      // ones cached: the other chunks may be of another version too.
      if (this.backend) await this.backend.remove().catch(() => {});
      throw namedError('DownloadError', `${this.url} changed on the server since it was cached (chunk ${i} differs); the cached copy was deleted, load again`);
    }
    if (this.backend && !this.done.has(i)) await this.cacheChunk(i, bytes, digest);
    return { bytes, digest };
  }

  // Chunk i's bytes, from memory or loaded once; keeps the last few and reads one ahead.
  chunk(i) {
    const k = this.id + i;
    let p = this.pool.get(k);
    if (!p) {
      p = this.loadChunk(i).then((c) => this.consume(i, c));
      p.catch(() => this.pool.delete(k));
      this.pool.set(k, p);
    }
    return p;
  }

  // A chunk about to be handed to the engine: while a digest is being taken, remember what the
  // engine was given and hash in order (a stream without Range is hashed as it arrives).
  consume(i, { bytes, digest }) {
    if (this.hasher && !this.noRanges) {
      if (!this.used.has(i)) this.used.set(i, digest);
      this.hashInOrder(i, bytes);
    }
    return bytes;
  }

  // The digest needs the chunks in order, but a read-ahead can finish before the chunk it follows:
  // hold up to two early chunks instead of reading them again in finish().
  hashInOrder(i, bytes) {
    if (i < this.hashNext) return;
    if (i > this.hashNext) {
      if (this.hashEarly.size < 2) this.hashEarly.set(i, bytes);
      return;
    }
    if (this.hasher === 'pending') this.hasher = new this.Hasher();
    for (;;) {
      this.checkSmallReads(this.hashNext, bytes);
      this.hasher.update(bytes);
      this.hashNext++;
      bytes = this.hashEarly.get(this.hashNext);
      if (!bytes) break;
      this.hashEarly.delete(this.hashNext);
    }
  }

  // Bytes the engine read outside whole chunks must be those of the chunk that is hashed.
  checkSmallReads(i, bytes) {
    const base = i * this.chunkSize;
    for (const r of this.smallReads) {
      if (Math.floor(r.offset / this.chunkSize) !== i) continue;
      const at = r.offset - base;
      if (!r.bytes.every((b, k) => b === bytes[at + k])) {
        throw this.changed(`bytes ${r.offset}..${r.offset + r.bytes.length}`);
      }
    }
  }

  changed(what) {
    if (this.backend) this.backend.remove().catch(() => {});
    return namedError('IntegrityError', `${this.url || this.name} changed while the model was loading (${what} differ from those read before); the cached copy was deleted, load again`);
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
      const bytes = await this.fetchRange(offset, offset + length - 1);
      if (this.hasher && this.hashNext <= i0) this.smallReads.push({ offset, bytes: bytes.slice() });
      return bytes;
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
      while (this.hashNext < this.nChunks) {
        const i = this.hashNext;
        if (this.noRanges) {
          await this.streamChunk(Math.max(i, this.streamNext));
          continue;
        }
        const { bytes, digest } = await this.loadChunk(i);
        if (this.used.has(i) && this.used.get(i) !== digest) throw this.changed(`chunk ${i}`);
        this.hashInOrder(i, bytes);
      }
      if (this.hasher === 'pending') this.hasher = new this.Hasher(); // an empty file
      const got = this.hasher.digestHex();
      if (got !== this.expectedSha) {
        if (this.backend) await this.backend.remove().catch(() => {});
        throw namedError('IntegrityError', `sha256 mismatch for ${this.url || this.name}: expected ${this.expectedSha}, got ${got}; the cached copy was deleted`);
      }
      this.manifest.sha256 = got;
      this.verified = true;
    }
    this.pool.dropOwner(this.id);
    if (this.backend && this.url) {
      // Also cache chunks the engine never read (padding at the end) so the entry is complete.
      for (let i = 0; i < this.nChunks && this.backend; i++) if (!this.done.has(i)) await this.loadChunk(i).catch(() => {});
      await this.saveManifest();
    }
    this.stash.clear();
    this.stashBytes = 0;
    this.stream?.cancel().catch(() => {});
    this.release();
  }

  stats() {
    return { url: this.url, size: this.size, downloadedBytes: this.downloaded, cachedBytesRead: this.fromCache, networkRequests: this.networkRequests, cache: this.backend?.kind || 'none', sha256Verified: this.verified, cacheWarning: this.cacheWarning || null };
  }
}


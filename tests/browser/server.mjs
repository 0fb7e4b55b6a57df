// A tiny static file server with HTTP Range support, used by `make demo` and the browser tests.
//
//   node tests/browser/server.mjs [--port 8080] [--host 127.0.0.1] [--mount /=www] [--mount /pkg=pkg] ...
//
// Each --mount URLPREFIX=DIR serves DIR under URLPREFIX (longest prefix wins; symlinks followed).
// Single byte ranges (`bytes=a-b`, `bytes=a-`, `bytes=-n`) get 206 + Content-Range; HEAD works;
// ETag/Last-Modified come from size+mtime. The tests import `startServer` to count requests
// (`server.log`) and inject faults (`server.faults`), e.g. drop the connection after N bytes.

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.ts': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.gguf': 'application/octet-stream',
  '.svg': 'image/svg+xml',
};

/**
 * @param {{port?: number, host?: string, mounts: Record<string,string>, quiet?: boolean}} opts
 * @returns {Promise<{url: string, port: number, log: object[], faults: Map<string, object>,
 *   routes: Map<string, Function>, close(): Promise<void>, resetLog(): void}>}
 */
export async function startServer({ port = 0, host = '127.0.0.1', mounts, quiet = true }) {
  const entries = Object.entries(mounts)
    .map(([prefix, dir]) => [prefix.endsWith('/') ? prefix : prefix + '/', path.resolve(dir)])
    .sort((a, b) => b[0].length - a[0].length);
  const log = [];
  // path -> { dropAfterBytes, times }: cut the connection once that many body bytes went out;
  // { status, times, retryAfter }: answer that many requests with that status instead.
  const faults = new Map();
  // path -> (req, res) handler overriding the file system (for HTML/404 "models").
  const routes = new Map();
  const served = new Map(); // path -> body bytes sent (for faults)

  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const p = decodeURIComponent(url.pathname);
    const rec = { method: req.method, path: p, range: req.headers.range || null, status: 0, bytes: 0, t: Date.now() };
    log.push(rec);
    res.on('finish', () => { rec.status = res.statusCode; });
    res.setHeader('Cache-Control', 'no-store');
    if (routes.has(p)) return routes.get(p)(req, res, rec);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { Allow: 'GET, HEAD' });
      return res.end();
    }
    const bad = faults.get(p);
    if (bad?.status && bad.times > 0) {
      bad.times -= 1;
      res.writeHead(bad.status, bad.retryAfter ? { 'Retry-After': String(bad.retryAfter) } : {});
      return res.end();
    }
    const file = resolve(entries, p);
    if (!file) return notFound(res);
    let st;
    try {
      st = fs.statSync(file);
      if (st.isDirectory()) {
        if (!p.endsWith('/')) {
          res.writeHead(301, { Location: p + '/' });
          return res.end();
        }
        st = fs.statSync(path.join(file, 'index.html'));
        return sendFile(req, res, path.join(file, 'index.html'), st, p, rec);
      }
    } catch {
      return notFound(res);
    }
    return sendFile(req, res, file, st, p, rec);
  });

  function sendFile(req, res, file, st, p, rec) {
    const size = st.size;
    const etag = `"${size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
    const headers = {
      'Content-Type': TYPES[path.extname(file).toLowerCase()] || 'application/octet-stream',
      'Accept-Ranges': faults.get(p)?.noRange ? 'none' : 'bytes',
      ETag: etag,
      'Last-Modified': st.mtime.toUTCString(),
    };
    let start = 0;
    let end = size - 1;
    let status = 200;
    // { noRange: true }: answer like a server without Range support (200, the whole file).
    const range = faults.get(p)?.noRange ? undefined : req.headers.range;
    if (range) {
      const m = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
      if (!m || (m[1] === '' && m[2] === '')) {
        res.writeHead(416, { 'Content-Range': `bytes */${size}` });
        return res.end();
      }
      if (m[1] === '') {
        start = Math.max(0, size - Number(m[2]));
      } else {
        start = Number(m[1]);
        if (m[2] !== '') end = Math.min(end, Number(m[2]));
      }
      if (start >= size || start > end) {
        res.writeHead(416, { 'Content-Range': `bytes */${size}` });
        return res.end();
      }
      status = 206;
      headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
    }
    headers['Content-Length'] = String(end - start + 1);
    res.writeHead(status, headers);
    if (req.method === 'HEAD') return res.end();
    const fault = faults.get(p);
    const stream = fs.createReadStream(file, { start, end });
    stream.on('data', (buf) => {
      const before = served.get(p) || 0;
      if (fault && fault.times > 0 && before + buf.length > fault.dropAfterBytes) {
        const keep = Math.max(0, fault.dropAfterBytes - before);
        fault.times -= 1;
        stream.destroy();
        rec.dropped = true;
        res.write(buf.subarray(0, keep), () => res.socket?.destroy());
        rec.bytes += keep;
        served.set(p, before + keep);
        return;
      }
      served.set(p, before + buf.length);
      rec.bytes += buf.length;
      if (!res.write(buf)) {
        stream.pause();
        res.once('drain', () => stream.resume());
      }
    });
    stream.on('end', () => res.end());
    stream.on('error', () => res.destroy());
    res.on('close', () => stream.destroy());
  }

  await new Promise((ok) => server.listen(port, host, ok));
  const actual = server.address().port;
  if (!quiet) console.log(`serving on http://${host === '0.0.0.0' ? 'localhost' : host}:${actual}/`);
  return {
    url: `http://${host === '127.0.0.1' ? 'localhost' : host}:${actual}`,
    port: actual,
    log,
    faults,
    routes,
    resetLog() { log.length = 0; served.clear(); },
    close: () => new Promise((ok) => { server.closeAllConnections?.(); server.close(() => ok()); }),
  };
}

function resolve(entries, p) {
  for (const [prefix, dir] of entries) {
    if (p === prefix.slice(0, -1) || p.startsWith(prefix)) {
      const rel = p.slice(prefix.length);
      const full = path.join(dir, rel);
      if (full !== dir && !full.startsWith(dir + path.sep)) return null; // no ../ escapes
      return full;
    }
  }
  return null;
}

function notFound(res) {
  res.writeHead(404, { 'Content-Type': 'text/plain' });
  res.end('not found\n');
}

// CLI
if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const args = process.argv.slice(2);
  let port = 8080;
  let host = '127.0.0.1';
  const mounts = {};
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--port') port = Number(args[++i]);
    else if (args[i] === '--host') host = args[++i];
    else if (args[i] === '--mount') {
      const [prefix, dir] = args[++i].split('=');
      mounts[prefix] = dir;
    } else {
      console.error(`unknown argument ${args[i]}`);
      process.exit(2);
    }
  }
  if (!Object.keys(mounts).length) mounts['/'] = '.';
  const s = await startServer({ port, host, mounts, quiet: false });
  for (const [k, v] of Object.entries(mounts)) console.log(`  ${k} -> ${path.resolve(v)}`);
  process.on('SIGINT', async () => { await s.close(); process.exit(0); });
}

// The module Worker behind `createEngine({worker: true})`: hosts the engine (core.js) and
// answers index.js's messages. Protocol: requests {id, op, ...}; replies {id, type: 'result' |
// 'error' | 'chunks' | 'progress'}; {op: 'cancel', target} aborts the generation `target`.

import { LocalEngine, onCrash } from './core.js';

let engine = null;
const running = new Map(); // generation id -> AbortController

// An error as a message: its class name, message, and own fields such as DownloadError.status.
function errorData(e) {
  const fields = {};
  if (e && typeof e === 'object') for (const [k, v] of Object.entries(e)) if (v == null || ['string', 'number', 'boolean'].includes(typeof v)) fields[k] = v;
  return { name: e?.name || 'Error', message: e?.message || String(e), stack: e?.stack, fields };
}

// A crash (a panic in the wasm module) leaves this worker's module unusable: tell the page, which
// fails every pending call and terminates the worker.
onCrash((e) => postMessage({ type: 'crashed', error: errorData(e) }));

// A call whose chunks go back as messages while it runs; {op: 'cancel', target: m.id} aborts it.
// Chunks emitted together (a batch of tokens that came back at once) travel in one message,
// posted before anything this call does next (its result comes after them).
async function streamed(m, run) {
  const ac = new AbortController();
  running.set(m.id, ac);
  let batch = null;
  const flush = () => {
    if (!batch) return;
    postMessage({ id: m.id, type: 'chunks', chunks: batch });
    batch = null;
  };
  const emit = (chunk) => {
    if (!batch) {
      batch = [];
      queueMicrotask(flush);
    }
    batch.push(chunk);
  };
  try {
    return await run(emit, ac.signal);
  } finally {
    flush();
    running.delete(m.id);
  }
}

const ops = {
  async load(m) {
    if (engine) throw Object.assign(new Error('this worker already holds an engine'), { name: 'InvalidOptionError' });
    engine = await LocalEngine.load(m.options, (progress) => postMessage({ id: m.id, type: 'progress', progress }));
    // A lost device ends this worker's usefulness: the page fails every call and ends it.
    engine.onLost = (e) => postMessage({ type: 'devicelost', error: errorData(e) });
    return engine.getInfo();
  },
  tokenize: (m) => engine.tokenize(m.text),
  crashForTesting: () => engine.crashForTesting(),
  diagnose: (m) => engine.diagnose(m.reference),
  benchmark: (m) => engine.benchmark(m.options),
  loseDeviceForTesting: () => engine.loseDeviceForTesting(),
  decode: (m) => engine.decode(m.ids),
  generate: (m) => streamed(m, (emit, signal) => engine.run(m.input, m.options, emit, signal)),
  chat: (m) => streamed(m, (emit, signal) => engine.chat(m.req, m.chatId, emit, signal)),
  embed: (m) => streamed(m, (emit, signal) => engine.embed(m.req, emit, signal)),
  async unload() {
    for (const ac of running.values()) ac.abort();
    await engine?.unload();
    engine = null;
  },
};

self.onmessage = async (ev) => {
  const m = ev.data;
  if (m.op === 'cancel') {
    running.get(m.target)?.abort();
    return;
  }
  try {
    const op = ops[m.op];
    if (!op) throw new Error(`unknown op ${m.op}`);
    if (m.op !== 'load' && !engine) throw Object.assign(new Error('the engine is not loaded'), { name: 'EngineUnloadedError' });
    postMessage({ id: m.id, type: 'result', value: await op(m) });
  } catch (e) {
    postMessage({ id: m.id, type: 'error', error: errorData(e) });
  }
};

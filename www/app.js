// The ferrolm demo chat page: no bundler, the package is imported straight from ./pkg/.
import { createEngine, listCachedModels, deleteCachedModel } from './pkg/index.js';

const $ = (id) => document.getElementById(id);
let engine = null;
let messages = [];
let abort = null;

function say(cls, text) {
  const el = document.createElement('div');
  el.className = cls;
  el.textContent = text;
  $('log').append(el);
  $('log').scrollTop = $('log').scrollHeight;
  return el;
}

const mb = (n) => `${(n / 1048576).toFixed(1)} MiB`;

async function showCached() {
  const list = await listCachedModels();
  $('cached').replaceChildren(...list.map((m) => {
    const row = document.createElement('div');
    const what = m.format === 'hf' ? ` (folder, ${m.files.length} files)` : '';
    row.textContent = `cached (${m.backend}): ${m.url}${what} — ${mb(m.cachedBytes)} / ${mb(m.size)}${m.complete ? '' : ' (partial)'} `;
    const del = document.createElement('button');
    del.textContent = 'delete';
    del.onclick = async () => { await deleteCachedModel(m.url); showCached(); };
    row.append(del);
    return row;
  }));
}

async function load(model) {
  if (engine) { await engine.unload(); engine = null; }
  $('send').disabled = true;
  $('load').disabled = true;
  const t0 = performance.now();
  try {
    engine = await createEngine({
      model,
      worker: $('worker').checked,
      cache: $('cache').value,
      quantize: $('quantize').value,
      onProgress: ({ phase, loaded, total }) => {
        $('bar').max = total || 1;
        $('bar').value = loaded;
        $('status').textContent = `${phase}: ${phase === 'compile' ? `${loaded}/${total}` : `${mb(loaded)} / ${mb(total)}`}`;
      },
    });
    const i = engine.info;
    $('status').textContent = `loaded ${i.source} in ${((performance.now() - t0) / 1000).toFixed(1)} s (${i.load.cache === 'none' ? 'no cache' : i.load.cache}; ${mb(i.load.downloadedBytes)} downloaded)`;
    const a = i.adapter;
    const ai = i.adapterInfo || {};
    const name = a.name || [ai.vendor, ai.architecture, ai.description].filter(Boolean).join(' ') || '(unnamed)';
    $('device').textContent = `adapter: ${name} ${a.driver || ''} [${a.backend}, ${a.device_type}] — maxBuffer ${mb(a.max_buffer_size)}, maxStorageBinding ${mb(a.max_storage_buffer_binding_size)}, workgroup storage ${a.max_workgroup_storage_size} B, f16 ${a.shader_f16 ? 'yes' : 'no'}, subgroups ${a.subgroups ? 'yes' : 'no'} · model ${i.config.arch} ${i.config.n_layers}L/${i.config.hidden}d · ctx ${i.contextLength} · GPU ${mb(i.gpuBytes)}`;
    $('send').disabled = false;
  } catch (e) {
    $('status').textContent = `${e.name}: ${e.message}`;
  } finally {
    $('load').disabled = false;
    showCached();
  }
}

async function send() {
  const text = $('prompt').value.trim();
  if (!text || !engine) return;
  $('prompt').value = '';
  // This turn belongs to this conversation even if "New chat" starts another meanwhile.
  const conv = messages;
  conv.push({ role: 'user', content: text });
  say('user', `> ${text}`);
  const out = say('assistant', '');
  abort = new AbortController();
  $('stop').disabled = false;
  $('send').disabled = true;
  const t0 = performance.now();
  let n = 0;
  let first = 0;
  let reply = '';
  try {
    const it = engine.generate(conv, { maxTokens: Number($('max').value), temperature: Number($('temp').value), signal: abort.signal });
    for await (const c of it) {
      // Count tokens, not chunks (a last chunk may only flush held-back text).
      if (c.token != null && !n++) first = performance.now();
      reply += c.text;
      out.textContent = reply;
      const dt = (performance.now() - first) / 1000;
      $('speed').textContent = `${n} tokens · ${n > 1 ? ((n - 1) / dt).toFixed(2) : '–'} tok/s · first token after ${((first - t0) / 1000).toFixed(1)} s`;
      $('log').scrollTop = $('log').scrollHeight;
    }
    const r = await it.result;
    if (conv === messages) $('speed').textContent += ` · prefill ${r.stats.prefill_tok_s.toFixed(1)} tok/s (${r.stats.cached_tokens} of ${r.stats.prompt_tokens} prompt tokens reused), decode ${r.stats.decode_tok_s.toFixed(2)} tok/s (${r.finishReason})`;
  } catch (e) {
    // A reply stopped by "New chat" says nothing in the new chat.
    if (conv === messages) say('sys', e.name === 'AbortError' ? '(stopped)' : `${e.name}: ${e.message}`);
  } finally {
    conv.push({ role: 'assistant', content: reply });
    $('stop').disabled = true;
    $('send').disabled = false;
  }
}

$('load').onclick = () => load(new URL($('url').value, location.href).href);
$('file').onchange = () => $('file').files[0] && load($('file').files[0]);
$('folder').onchange = () => $('folder').files.length && load($('folder').files);
$('send').onclick = send;
$('stop').onclick = () => abort?.abort();
// A new chat stops the reply in progress; that reply stays with the old conversation.
$('clear').onclick = () => { abort?.abort(); messages = []; $('log').replaceChildren(); $('speed').textContent = ''; };
$('prompt').addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); } });
const drop = $('drop');
drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  const f = e.dataTransfer.files[0];
  if (f) load(f);
});
if (!navigator.gpu) $('status').textContent = 'WebGPU is not available in this browser (try Chrome/Edge 113+, or enable it).';
showCached();

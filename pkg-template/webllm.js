// MLC-LLM folders (what WebLLM runs) and the copies WebLLM keeps of them: a file WebLLM already
// downloaded is read from its Cache API cache, read-only (no put, delete or open of a cache that
// does not exist: `caches.open` would create one), so the same model is not downloaded twice.
//
// Where WebLLM keeps them (web-llm src/cache_util.ts, engine.ts; the TVM web runtime's
// ArtifactCache, web/src/artifact_cache.ts): Cache API caches named "webllm/config"
// (mlc-chat-config.json) and "webllm/model" (the tensor cache, its params_shard_*.bin and
// tokenizer.json), keyed by each file's full URL under the model URL as WebLLM's
// `cleanModelUrl` (support.ts) writes it: a '/' appended, then `resolve/main/` unless the URL
// already has a `/resolve/<revision>/` part.

/** The text files of an MLC folder (mlc-chat-config.json is required, and one tensor cache). */
export const MLC_CHAT_CONFIG = 'mlc-chat-config.json';
/** The tensor cache's names: MLC-LLM's since September 2025, and the one before (the folders
 *  published until then, and older WebLLM releases). */
export const MLC_TENSOR_CACHES = ['tensor-cache.json', 'ndarray-cache.json'];
/** Tokenizer files ferrolm reads, as `mlc-chat-config.json`'s `tokenizer_files` lists them. */
export const MLC_TOKENIZER_FILES = { tokenizer: 'tokenizer.json', tokenizerConfig: 'tokenizer_config.json' };

const CONFIG_CACHE = 'webllm/config';
const MODEL_CACHE = 'webllm/model';

/** The files WebLLM caches (and so the only ones looked up there). */
function webllmCacheOf(name) {
  if (name === MLC_CHAT_CONFIG) return CONFIG_CACHE;
  if (MLC_TENSOR_CACHES.includes(name) || name === 'tokenizer.json' || /^params_shard_\d+\.bin$/.test(name)) return MODEL_CACHE;
  return null;
}

/** WebLLM's `cleanModelUrl`: the URL its cache keys of a model folder start with. */
export function webllmModelUrl(base) {
  let u = base.endsWith('/') ? base : `${base}/`;
  if (!/.+\/resolve\/.+\//.test(u)) u += 'resolve/main/';
  return new URL(u).href;
}

/**
 * WebLLM's cached copy of `name` in the folder at `base`: `{blob, url}` (the cache key), or null
 * when WebLLM has none (or the Cache API is not there). Only reads.
 */
export async function webllmFile(base, name) {
  const cacheName = webllmCacheOf(name);
  if (!cacheName || typeof caches === 'undefined') return null;
  try {
    if (!(await caches.has(cacheName))) return null;
    const url = new URL(name, webllmModelUrl(base)).href;
    const r = await (await caches.open(cacheName)).match(url);
    // WebLLM stores what `cache.add` accepted: whole 200 responses.
    if (!r || r.status !== 200) return null;
    return { blob: await r.blob(), url };
  } catch {
    return null; // a cache we cannot read is one we do not have
  }
}

/** The total size of the shards a tensor cache lists (a progress total before they are open). */
export function tensorCacheBytes(text) {
  try {
    return JSON.parse(text).records.reduce((n, s) => n + (Number(s.nbytes) || 0), 0);
  } catch {
    return 0; // the engine reports the broken file
  }
}

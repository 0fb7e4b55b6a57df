//! wasm-bindgen exports: the engine for JavaScript. The npm package (pkg-template/) wraps these
//! in `createEngine`, a Web Worker protocol and an async token iterator; structured values cross
//! the boundary as JSON strings so the Rust side needs no JS object plumbing.
//!
//! Errors reject with a JS `Error` whose `name` is `Error::kind()` (e.g. `ContextOverflowError`).

mod hash;

use crate::chat_template::ChatMessage;
use crate::engine::{Engine, GenerateOptions, Generation, LoadOptions};
use crate::error::{Error, Result};
use crate::model::hf::{HfFiles, Quantize};
use crate::weights::source::{AsyncSource, ReadFuture};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// Most tokens (or chat chunks) one `next` / `chatNext` hands over. A batch holds at most the
/// steps in flight (`engine::PIPELINE_DEPTH`) and what a step's text splits into; this only
/// bounds a call.
const READY_BATCH: usize = 64;

fn js_err(e: Error) -> JsValue {
    let err = js_sys::Error::new(&e.to_string());
    err.set_name(e.kind());
    err.into()
}

fn busy() -> JsValue {
    js_err(Error::InvalidOption("the engine is busy with another call; await it first".into()))
}

/// A byte source backed by a JS object `{ size, name, read(offset, length) -> Promise<Uint8Array> }`
/// (the package implements it over HTTP range requests and the OPFS/Cache API store).
struct JsSource {
    obj: JsValue,
    size: u64,
    name: String,
}

impl JsSource {
    fn new(obj: JsValue) -> Result<JsSource> {
        let get = |k: &str| js_sys::Reflect::get(&obj, &JsValue::from_str(k)).ok();
        let size = get("size").and_then(|v| v.as_f64()).filter(|s| *s >= 0.0 && s.fract() == 0.0);
        let size = size.ok_or_else(|| Error::InvalidOption("model source has no numeric `size`".into()))? as u64;
        let name = get("name").and_then(|v| v.as_string()).unwrap_or_else(|| "model".into());
        let read_ok = get("read").map(|f| f.is_function()).unwrap_or(false);
        if !read_ok {
            return Err(Error::InvalidOption("model source has no `read(offset, length)` function".into()));
        }
        Ok(JsSource { obj, size, name })
    }

    async fn read_js(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let io = |m: String| Error::io(self.name.clone(), std::io::Error::other(m));
        let f: js_sys::Function =
            js_sys::Reflect::get(&self.obj, &"read".into()).map_err(|_| io("no read()".into()))?.into();
        let p = f
            .call2(&self.obj, &JsValue::from_f64(offset as f64), &JsValue::from_f64(len as f64))
            .map_err(|e| io(format!("{e:?}")))?;
        let v = JsFuture::from(js_sys::Promise::resolve(&p)).await.map_err(|e| io(js_message(&e)))?;
        let arr = js_sys::Uint8Array::new(&v);
        if arr.length() as usize != len {
            return Err(io(format!("read at byte {offset} returned {} bytes, expected {len}", arr.length())));
        }
        Ok(arr.to_vec())
    }
}

impl AsyncSource for JsSource {
    fn total_len(&self) -> u64 {
        self.size
    }
    fn source_name(&self) -> String {
        self.name.clone()
    }
    fn read<'a>(&'a self, offset: u64, len: usize) -> ReadFuture<'a> {
        Box::pin(self.read_js(offset, len))
    }
}

/// A JS error value's message (an `Error`'s message, else its debug form).
fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).unwrap_or_else(|| format!("{e:?}"))
}

fn progress_fn(on_progress: JsValue) -> impl FnMut(&str, u64, u64) {
    let cb = on_progress.dyn_into::<js_sys::Function>().ok();
    move |phase: &str, done: u64, total: u64| {
        if let Some(f) = &cb {
            let _ = f.call3(&JsValue::NULL, &phase.into(), &(done as f64).into(), &(total as f64).into());
        }
    }
}

fn random_seed() -> u64 {
    (js_sys::Math::random() * 9.007e15) as u64
}

struct State {
    engine: Engine,
    gen: Option<Generation>,
    chat: Option<crate::chat::ChatRun>,
}

#[wasm_bindgen]
pub struct WasmEngine {
    inner: Rc<RefCell<State>>,
}

/// Runs when the module is instantiated. A panic in wasm ends in a trap that leaves the module
/// unusable (and an async call's promise never settling); the hook reports the panic first to
/// `globalThis.__ferrolmPanic(message)` when the package defined it, which then fails every
/// pending and later call of that module with an `EngineCrashedError` instead of hanging.
#[wasm_bindgen(start)]
pub fn install_panic_hook() {
    crate::warnings::install();
    std::panic::set_hook(Box::new(|info| {
        let msg = info.to_string();
        if let Ok(f) = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("__ferrolmPanic")) {
            if let Some(f) = f.dyn_ref::<js_sys::Function>() {
                let _ = f.call1(&JsValue::NULL, &JsValue::from_str(&msg));
            }
        }
    }));
}

/// Panics on purpose: the package's tests check with it that a crashed engine fails its calls
/// cleanly and that a new one can be created. Not part of the API.
#[wasm_bindgen(js_name = crashForTesting)]
pub fn crash_for_testing(message: &str) {
    panic!("{message}");
}

/// Load a GGUF model through `source` onto the browser's WebGPU device.
/// `on_progress(phase, done, total)` is called during the upload and pipeline compilation.
#[wasm_bindgen(js_name = loadEngine)]
pub async fn load_engine(source: JsValue, options_json: String, on_progress: JsValue) -> Result<WasmEngine, JsValue> {
    let src = JsSource::new(source).map_err(js_err)?;
    let opts = LoadOptions::from_json(&options_json).map_err(js_err)?;
    if opts.quantize != Quantize::None {
        return Err(js_err(Error::InvalidOption(
            "quantize applies to Hugging Face (safetensors) model folders; GGUF files are already quantized".into(),
        )));
    }
    let mut progress = progress_fn(on_progress);
    let engine = Engine::load(&src, &opts, &mut progress).await.map_err(js_err)?;
    Ok(WasmEngine { inner: Rc::new(RefCell::new(State { engine, gen: None, chat: None })) })
}

/// The files inside module folders that a sentence-transformers `modules.json` needs (paths
/// relative to the model folder, e.g. `1_Pooling/config.json`), for the package to fetch.
#[wasm_bindgen(js_name = stModuleFiles)]
pub fn st_module_files(modules_json: &str) -> Result<Vec<String>, JsValue> {
    crate::embed::module_files(modules_json).map_err(js_err)
}

/// The sentence-transformers files of `files` (`stModules`, `stConfig`, `sbertConfig`, and
/// `moduleFiles`: an object from relative path to Uint8Array).
fn st_files(files: &JsValue, text: &dyn Fn(&str) -> Option<String>) -> Result<Option<crate::embed::StFiles>, JsValue> {
    let Some(modules) = text("stModules") else { return Ok(None) };
    let bytes = js_sys::Reflect::get(files, &JsValue::from_str("moduleFiles")).unwrap_or(JsValue::UNDEFINED);
    let mut module_files = Vec::new();
    for path in crate::embed::module_files(&modules).map_err(js_err)? {
        let v = js_sys::Reflect::get(&bytes, &JsValue::from_str(&path)).unwrap_or(JsValue::UNDEFINED);
        if let Some(a) = v.dyn_ref::<js_sys::Uint8Array>() {
            module_files.push((path, a.to_vec()));
        }
    }
    Ok(Some(crate::embed::StFiles { modules, config: text("stConfig"), sbert: text("sbertConfig"), module_files }))
}

/// Load a Hugging Face model folder onto the browser's WebGPU device, through the same loader as
/// the native CLI. `files`: the text files as strings (`config` required; `generationConfig`,
/// `tokenizer`, `tokenizerConfig`, `chatTemplate`, `index` may be null), and `name` (the folder's
/// URL). `open(fileName)` resolves to a byte source `{size, name, read}` for `model.safetensors`
/// or for each shard the index names (names are checked to be plain file names first).
/// An MLC-LLM folder instead gives `mlcChatConfig`, `tensorCache` (its text) and
/// `tensorCacheName`, with `tokenizer` and `tokenizerConfig`; `open` then yields its shards.
#[wasm_bindgen(js_name = loadHfEngine)]
pub async fn load_hf_engine(
    files: JsValue,
    open: JsValue,
    options_json: String,
    on_progress: JsValue,
) -> Result<WasmEngine, JsValue> {
    let text = |k: &str| -> Option<String> {
        js_sys::Reflect::get(&files, &JsValue::from_str(k)).ok().and_then(|v| v.as_string())
    };
    let files_rs = match text("mlcChatConfig") {
        // An MLC folder: its tensor cache (`tensorCacheName` says which of the two names it had)
        // stands in for the safetensors index.
        Some(chat) => {
            let cache = text("tensorCache").ok_or_else(|| {
                js_err(Error::Model("an MLC folder without tensor-cache.json or ndarray-cache.json".into()))
            })?;
            let cache_name = text("tensorCacheName").unwrap_or_else(|| crate::model::mlc::TENSOR_CACHE_FILES[0].into());
            crate::model::mlc::hf_files(
                &chat,
                cache.into_bytes(),
                &cache_name,
                text("tokenizer"),
                text("tokenizerConfig"),
            )
            .map_err(js_err)?
        }
        None => HfFiles {
            config: text("config")
                .ok_or_else(|| js_err(Error::Model("no config.json (not a Hugging Face model folder)".into())))?,
            generation_config: text("generationConfig"),
            tokenizer: text("tokenizer"),
            tokenizer_config: text("tokenizerConfig"),
            chat_template: text("chatTemplate"),
            index: text("index").map(String::into_bytes),
            st: st_files(&files, &text)?,
            mlc: None,
        },
    };
    let name = text("name").unwrap_or_else(|| "model folder".into());
    let open_fn = open
        .dyn_into::<js_sys::Function>()
        .map_err(|_| js_err(Error::InvalidOption("open must be a function (file name) -> source".into())))?;
    let opts = LoadOptions::from_json(&options_json).map_err(js_err)?;
    let open = |file: String| {
        let f = open_fn.clone();
        async move {
            let io = |m: String| Error::io(file.clone(), std::io::Error::other(m));
            let p = f.call1(&JsValue::NULL, &JsValue::from_str(&file)).map_err(|e| io(js_message(&e)))?;
            let v = JsFuture::from(js_sys::Promise::resolve(&p)).await.map_err(|e| io(js_message(&e)))?;
            JsSource::new(v)
        }
    };
    let mut progress = progress_fn(on_progress);
    let engine = Engine::load_hf(&files_rs, open, name, &opts, &mut progress).await.map_err(js_err)?;
    Ok(WasmEngine { inner: Rc::new(RefCell::new(State { engine, gen: None, chat: None })) })
}

/// A step of the current chat completion, borrowing the engine and the run.
type ChatStep<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<JsValue, JsValue>> + 'a>>;

impl WasmEngine {
    /// Run `f` on the engine and the current chat completion (an error naming `call` before
    /// `chatStart`).
    fn with_chat(
        &self,
        call: &'static str,
        f: impl for<'a> FnOnce(&'a mut Engine, &'a mut crate::chat::ChatRun) -> ChatStep<'a> + 'static,
    ) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut guard = inner.try_borrow_mut().map_err(|_| busy())?;
            let State { engine, chat, .. } = &mut *guard;
            let run =
                chat.as_mut().ok_or_else(|| js_err(Error::InvalidOption(format!("{call}() before chatStart()"))))?;
            f(engine, run).await
        })
    }
}

#[wasm_bindgen]
impl WasmEngine {
    /// JSON: adapter, model config, context length, memory and dispatch counts.
    pub fn info(&self) -> Result<String, JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        Ok(s.engine.info().to_string())
    }

    /// Destroys the GPU device on purpose: the package's tests check with it that a lost device
    /// fails every call with a DeviceLostError and fires its event. Not part of the API.
    #[wasm_bindgen(js_name = loseDeviceForTesting)]
    pub fn lose_device_for_testing(&self) -> Result<(), JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        s.engine.rt.gpu.destroy_for_testing();
        Ok(())
    }

    /// Token ids of `text` (special-token text matched, nothing added).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        s.engine.tokenizer().and_then(|t| t.encode(text)).map_err(js_err)
    }

    /// Token ids for a raw prompt (BOS first when the model asks for it).
    #[wasm_bindgen(js_name = promptIds)]
    pub fn prompt_ids(&self, text: &str) -> Result<Vec<u32>, JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        s.engine.prompt_ids(text).map_err(js_err)
    }

    /// Token ids for chat messages (JSON `[{role, content}]`) rendered with the chat template.
    #[wasm_bindgen(js_name = chatIds)]
    pub fn chat_ids(&self, messages_json: &str) -> Result<Vec<u32>, JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        let msgs: Vec<ChatMessage> =
            serde_json::from_str(messages_json).map_err(|e| js_err(Error::InvalidOption(format!("messages: {e}"))))?;
        s.engine.chat_ids(&msgs).map_err(js_err)
    }

    pub fn decode(&self, ids: Vec<u32>) -> Result<String, JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        s.engine.tokenizer().and_then(|t| t.decode(&ids)).map_err(js_err)
    }

    /// Begin a generation (runs the prompt). Options JSON: `GenerateOptions` in camelCase
    /// (`GenerateOptions::from_json`; no seed: a random one).
    pub fn start(&self, prompt_ids: Vec<u32>, options_json: String) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let opts = GenerateOptions::from_json(&options_json, random_seed).map_err(js_err)?;
            let mut s = inner.try_borrow_mut().map_err(|_| busy())?;
            let g = s.engine.start(&prompt_ids, &opts).await.map_err(js_err)?;
            s.gen = Some(g);
            Ok(JsValue::UNDEFINED)
        })
    }

    /// The next tokens as a JSON array of `{token, text, stop}`, or `null` when the generation
    /// has ended: waits for one, then takes those that are ready without waiting (at most
    /// `READY_BATCH`). When the page's JavaScript falls behind the GPU, a call then carries
    /// several tokens instead of a round trip each.
    pub fn next(&self) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut guard = inner.try_borrow_mut().map_err(|_| busy())?;
            let State { engine, gen, .. } = &mut *guard;
            let Some(g) = gen.as_mut() else {
                return Err(js_err(Error::InvalidOption("next() before start()".into())));
            };
            let mut events = Vec::new();
            loop {
                match engine.step(g).await {
                    Ok(Some(ev)) => events.push(ev),
                    Ok(None) => break,
                    Err(e) if events.is_empty() => return Err(js_err(e)),
                    // The tokens before it were accepted: hand them out, then the error.
                    Err(e) => {
                        g.defer(e);
                        break;
                    }
                }
                if events.len() >= READY_BATCH || !engine.step_ready(g) {
                    break;
                }
            }
            if events.is_empty() {
                return Ok(JsValue::NULL);
            }
            Ok(JsValue::from_str(&serde_json::to_string(&events).unwrap_or_default()))
        })
    }

    /// End the current generation (or chat completion) early.
    pub fn cancel(&self) -> Result<(), JsValue> {
        let mut guard = self.inner.try_borrow_mut().map_err(|_| busy())?;
        let State { engine, gen, chat } = &mut *guard;
        if let Some(g) = gen.as_mut() {
            engine.cancel(g);
        }
        if let Some(c) = chat.as_mut() {
            c.cancel(engine);
        }
        Ok(())
    }

    /// Begin an OpenAI chat completion (the request as JSON, without `signal`). Checks the
    /// request and renders the prompt; generation runs in `chatNext` / `chatComplete`.
    #[wasm_bindgen(js_name = chatStart)]
    pub fn chat_start(&self, request_json: &str, id: String) -> Result<bool, JsValue> {
        let mut guard = self.inner.try_borrow_mut().map_err(|_| busy())?;
        let State { engine, chat, .. } = &mut *guard;
        let req = crate::chat::ChatRequest::from_json(request_json).map_err(js_err)?;
        let created = (js_sys::Date::now() / 1000.0) as u64;
        let run = crate::chat::ChatRun::new(engine, &req, random_seed(), created, id).map_err(js_err)?;
        let stream = run.is_stream();
        *chat = Some(run);
        Ok(stream)
    }

    /// The next chunks of a streamed chat completion as a JSON array, or `null` at its end:
    /// waits for one, then takes those ready without waiting (as `next`).
    #[wasm_bindgen(js_name = chatNext)]
    pub fn chat_next(&self) -> js_sys::Promise {
        self.with_chat("chatNext", |engine, run| {
            Box::pin(async move {
                let Some(first) = run.next_chunk(engine).await.map_err(js_err)? else {
                    return Ok(JsValue::NULL);
                };
                let mut chunks = vec![first];
                run.ready_chunks(engine, &mut chunks, READY_BATCH).await;
                Ok(JsValue::from_str(&serde_json::Value::Array(chunks).to_string()))
            })
        })
    }

    /// One token of a (non-streamed) chat completion; resolves to false once it is done.
    #[wasm_bindgen(js_name = chatStep)]
    pub fn chat_step(&self) -> js_sys::Promise {
        self.with_chat("chatStep", |engine, run| {
            Box::pin(async move { Ok(JsValue::from_bool(run.step(engine).await.map_err(js_err)?)) })
        })
    }

    /// The current chat completion's `chat.completion` object (with usage and stats), as JSON.
    #[wasm_bindgen(js_name = chatUsage)]
    pub fn chat_usage(&self) -> Result<String, JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        let run = s.chat.as_ref().ok_or_else(|| js_err(Error::InvalidOption("no chat completion yet".into())))?;
        Ok(run.response().to_string())
    }

    /// The GPU self-check (see `diagnose.rs`); `reference_json`: `{tokens, top, tolerance?}` or
    /// empty. Resolves to the report JSON.
    pub fn diagnose(&self, reference_json: String) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let reference: Option<crate::diagnose::Reference> = if reference_json.is_empty() {
                None
            } else {
                let r = serde_json::from_str(&reference_json)
                    .map_err(|e| Error::InvalidOption(format!("diagnose reference: {e}")));
                Some(r.map_err(js_err)?)
            };
            let mut s = inner.try_borrow_mut().map_err(|_| busy())?;
            let r = s.engine.diagnose(reference.as_ref()).await.map_err(js_err)?;
            Ok(JsValue::from_str(&r.to_string()))
        })
    }

    /// `ferrolm bench` on the loaded model (`bench::BenchOptions::from_json`); resolves to the
    /// report JSON. The KV cache is left holding random tokens (prefix reuse starts over).
    pub fn benchmark(&self, options_json: String) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let o = crate::bench::BenchOptions::from_json(&options_json).map_err(js_err)?;
            let mut s = inner.try_borrow_mut().map_err(|_| busy())?;
            s.gen = None;
            let r = crate::bench::run(&mut s.engine, &o).await.map_err(js_err)?;
            Ok(JsValue::from_str(&serde_json::to_string(&r).unwrap_or_default()))
        })
    }

    /// Embeddings for an OpenAI `embeddings.create` request (JSON); resolves to the response JSON.
    pub fn embed(&self, request_json: String) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let req = crate::embed::EmbedRequest::from_json(&request_json).map_err(js_err)?;
            let mut s = inner.try_borrow_mut().map_err(|_| busy())?;
            let r = s.engine.embed(&req).await.map_err(js_err)?;
            Ok(JsValue::from_str(&r.to_string()))
        })
    }

    /// JSON of the current (or last) generation: prompt_ids, tokens, text, top_logits, stats.
    pub fn result(&self) -> Result<String, JsValue> {
        let s = self.inner.try_borrow().map_err(|_| busy())?;
        let g = s.gen.as_ref().ok_or_else(|| js_err(Error::InvalidOption("no generation yet".into())))?;
        Ok(serde_json::to_string(&g.result(s.engine.dispatches_of(g))).unwrap_or_default())
    }
}

//! The engine: a loaded model on a GPU with its tokenizer and chat template, and generation.

use crate::chat_template::{ChatMessage, ChatTemplate};
use crate::constrain::{Constraint, ConstraintSpec};
use crate::error::{Error, Result};
use crate::generation::TextOut;
pub use crate::generation::{
    GenStats, GenerateOptions, GenerationResult, StopReason, TokenEvent, TokenLogprob, DEFAULT_MAX_TOKENS,
};
use crate::gpu::Gpu;
use crate::model::forward::Pick;
use crate::model::weights;
use crate::model::ModelConfig;
pub use crate::runtime::Runtime;
use crate::runtime::StepQueue;
use crate::sampler::{self, Sampler, SamplingDefaults};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::weights::{read_gguf_header, AsyncSource};

/// Progress of a long operation: `phase` ("read", "upload", "compile"), bytes done and total.
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Decode steps on the GPU when the oldest one's token is read back (greedy and GPU-sampled;
/// constrained decoding keeps one). Natively two suffice (the CPU side of a step is short); in
/// Chromium the GPU process works through each step's ~100 dispatches at several µs each, and on
/// the H100 (session 9, page API greedy tok/s, readbacks then requested only when needed)
/// depths 2 / 3 / 4 gave SmolLM2 661 / 760 / 760 and Llama-3.2-1B 804 / 825 / 901. A generation
/// that stops early has computed at most this many steps too many.
pub const PIPELINE_DEPTH: usize = 4;

/// How to load a model. The package's load options deserialize straight into it (camelCase,
/// unknown fields refused; `from_json`).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadOptions {
    /// KV cache length in tokens; default min(model's training context, 4096), grown when a
    /// prompt does not fit (to the prompt plus up to 4096 tokens to generate).
    pub context_length: Option<usize>,
    /// Most tokens one prefill step processes (longer prompts run in chunks; fewer where the
    /// adapter's storage bindings cannot hold that many tokens' FFN activations). Default 512:
    /// in Chromium on the H100 (session 15) 512-token prompts prefilled 1.4x faster for
    /// SmolLM2-135M (26-28k -> 37-39k tok/s) and 1.05x for Llama-3.2-1B than in two chunks of
    /// 256, each chunk's ~400 dispatches costing the browser's GPU process as much as the
    /// kernels. Activations take twice those of 256 tokens (~80 MB for the 1B shape).
    pub max_batch: usize,
    /// Quantize F32/F16/BF16 safetensors weights at load (model folders only). JSON: "q8_0",
    /// "q4_0" or "none".
    #[serde(deserialize_with = "quantize_name")]
    pub quantize: crate::model::hf::Quantize,
}

fn quantize_name<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<crate::model::hf::Quantize, D::Error> {
    let name: String = serde::Deserialize::deserialize(d)?;
    name.parse().map_err(|e: Error| match e {
        Error::InvalidOption(m) => serde::de::Error::custom(m),
        e => serde::de::Error::custom(e),
    })
}

impl LoadOptions {
    /// Load options as the package passes them (empty: defaults).
    pub fn from_json(json: &str) -> Result<LoadOptions> {
        crate::generation::from_js(json, "load options")
    }

    /// Refuse bad options before anything is read or uploaded.
    fn validate(&self) -> Result<()> {
        if self.max_batch == 0 {
            return Err(Error::InvalidOption("max batch must be at least 1".into()));
        }
        let most = crate::model::forward::MAX_CONTEXT;
        match self.context_length {
            Some(0) => Err(Error::InvalidOption("context length must be at least 1".into())),
            Some(c) if c > most => Err(Error::InvalidOption(format!(
                "context length {c} is more than {most} tokens, the most decode attention merges"
            ))),
            _ => Ok(()),
        }
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { context_length: None, max_batch: 512, quantize: Default::default() }
    }
}

pub struct Engine {
    pub rt: Runtime,
    /// `None` for a model folder without tokenizer.json (token ids in and out still work).
    pub tokenizer: Option<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// Tokens that end generation by default.
    pub eos_ids: Vec<u32>,
    pub source_name: String,
    /// The tokens whose KV entries are in the cache (valid up to `rt.pos`), for prefix reuse.
    pub(crate) kv_tokens: Vec<u32>,
    /// Counts `start`s; a generation steps only while it is the latest.
    serial: u64,
    /// The vocabulary as the constraint engine sees it, built on first use.
    vocab_env: Option<crate::constrain::VocabEnv>,
    /// The model's sampling defaults, for the chat API.
    pub sampling_defaults: SamplingDefaults,
    /// How `embed` turns hidden states into embeddings.
    pub embedding: std::sync::Arc<crate::embed::Pipeline>,
}

impl Engine {
    fn assemble(
        rt: Runtime,
        tokenizer: Option<Tokenizer>,
        template: Option<ChatTemplate>,
        eos_ids: Vec<u32>,
        source_name: String,
        sampling_defaults: SamplingDefaults,
        embedding: crate::embed::Pipeline,
    ) -> Engine {
        if eos_ids.is_empty() && rt.cfg.causal && tokenizer.is_some() {
            log::warn!(
                "{source_name} names no end-of-sequence token in its vocabulary: generation stops only at \
                 maxTokens, a stop string or stopIds"
            );
        }
        Engine {
            embedding: std::sync::Arc::new(embedding),
            rt,
            tokenizer,
            template,
            eos_ids,
            source_name,
            kv_tokens: Vec::new(),
            serial: 0,
            vocab_env: None,
            sampling_defaults,
        }
    }

    /// Load a GGUF model from a byte source (onto the device `Gpu::for_load` gives).
    pub async fn load(src: &dyn AsyncSource, opts: &LoadOptions, progress: Progress<'_>) -> Result<Engine> {
        opts.validate()?;
        let gguf = read_gguf_header(src).await?;
        let mut cfg = ModelConfig::from_gguf(&gguf)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let template = ChatTemplate::from_gguf(&gguf)?;
        let defaults = SamplingDefaults::from_gguf(&gguf);
        let (gpu, scope) = Gpu::for_load().await?;
        // Refuse before downloading anything if the adapter cannot hold the model's buffers.
        use crate::model::load;
        let tensors = weights::GgufSource { gguf: &gguf, src };
        load::check_fits(&gpu, &tensors, &cfg)?;
        let total: u64 = gguf.tensors.iter().map(|t| t.n_bytes).sum();
        let weights = load::load(&gpu, &tensors, &mut cfg, &mut |done| progress("upload", done, total)).await?;
        // Tensors the model does not use (a multimodal file's vision tower, say) are never read.
        progress("upload", total, total);
        let mut embedding = crate::embed::Pipeline::from_gguf(&gguf, &cfg)?;
        embedding.load_gguf_dense(&gguf, src, cfg.hidden).await?;
        let rt = Runtime::new(gpu, cfg, weights, opts, progress)?;
        scope.finish().await?;
        let eos_ids = tokenizer.eos_ids();
        Ok(Engine::assemble(rt, Some(tokenizer), template, eos_ids, src.source_name(), defaults, embedding))
    }

    /// Load a Hugging Face model folder (config.json + safetensors, tokenizer files optional), or
    /// an MLC-LLM folder (mlc-chat-config.json + tensor cache and shards; `model::mlc`).
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn load_hf_dir(dir: &std::path::Path, opts: &LoadOptions, progress: Progress<'_>) -> Result<Engine> {
        use crate::weights::FileSource;
        let files = crate::model::hf::read_dir_files(dir)?;
        let open = |f: String| {
            let path = dir.join(f);
            async move { FileSource::open(path) }
        };
        Self::load_hf(&files, open, dir.display().to_string(), opts, progress).await
    }

    /// Load a Hugging Face model from its text files and weight files: `open(file name)` gives the
    /// source of `model.safetensors` or of each shard the index names (natively a file, in the
    /// browser a cached download). The one loader for both.
    pub async fn load_hf<S, F, Fut>(
        files: &crate::model::hf::HfFiles,
        open: F,
        source_name: String,
        opts: &LoadOptions,
        progress: Progress<'_>,
    ) -> Result<Engine>
    where
        S: AsyncSource,
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<S>>,
    {
        use crate::model::hf::HfModel;
        use crate::model::hf_config::TokenizerConfig;
        use crate::model::load;
        opts.validate()?;
        // Everything that can be checked without weights first: config (inside HfModel::open,
        // before any weight file is opened), tokenizer, chat template.
        files.configs()?;
        let tokenizer = files
            .tokenizer
            .as_deref()
            .map(|t| Tokenizer::from_hf_json(t, files.tokenizer_config.as_deref()))
            .transpose()?;
        let tc = files.tokenizer_config.as_deref().map(TokenizerConfig::from_json).transpose()?;
        let source = files.chat_template.clone().or_else(|| tc.as_ref().and_then(|tc| tc.chat_template.clone()));
        let template = match (source, &tokenizer) {
            (Some(src), Some(tok)) => {
                let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
                let bos = tc.as_ref().and_then(|tc| tc.bos_token.clone()).unwrap_or_else(|| text(tok.bos_id()));
                let eos = tc.as_ref().and_then(|tc| tc.eos_token.clone()).unwrap_or_else(|| text(tok.eos_id()));
                Some(ChatTemplate::new(&src, &bos, &eos)?)
            }
            _ => None,
        };
        let model = HfModel::open(files, open).await?;
        let embedding = crate::embed::Pipeline::from_hf(files, &model.cfg)?;
        let (gpu, scope) = Gpu::for_load().await?;
        // Refuse before reading any weight if a tensor is missing or a buffer cannot fit.
        let (tensors, mut cfg) = (model.tensors(opts.quantize), model.cfg.clone());
        let total = load::check_fits(&gpu, &tensors, &cfg)?;
        progress("upload", 0, total);
        let weights = load::load(&gpu, &tensors, &mut cfg, &mut |done| progress("upload", done, total)).await?;
        let mut eos_ids = model.eos_ids();
        if let Some(t) = &tokenizer {
            for id in t.eos_ids() {
                if !eos_ids.contains(&id) {
                    eos_ids.push(id);
                }
            }
        }
        let rt = Runtime::new(gpu, cfg, weights, opts, progress)?;
        scope.finish().await?;
        let defaults =
            files.generation_config.as_deref().map(SamplingDefaults::from_generation_config).unwrap_or_default();
        Ok(Engine::assemble(rt, tokenizer, template, eos_ids, source_name, defaults, embedding))
    }

    /// Load a GGUF file, a Hugging Face model folder or an MLC-LLM folder from disk.
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn load_path(path: &std::path::Path, opts: &LoadOptions, progress: Progress<'_>) -> Result<Engine> {
        if path.is_dir() {
            return Self::load_hf_dir(path, opts, progress).await;
        }
        if opts.quantize != crate::model::hf::Quantize::None {
            return Err(Error::InvalidOption(
                "--quantize applies to safetensors model folders; GGUF files are already quantized".into(),
            ));
        }
        let src = crate::weights::FileSource::open(path)?;
        Self::load(&src, opts, progress).await
    }

    /// The tokenizer, or an error naming why text cannot be used with this model.
    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            Error::Tokenizer(format!("{} has no tokenizer (tokenizer.json); pass token ids instead", self.source_name))
        })
    }

    /// What a user or benchmark wants to know about the loaded engine.
    pub fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "source": self.source_name,
            "adapter": self.rt.gpu.summary,
            "deviceId": self.rt.gpu.id,
            "config": self.rt.cfg,
            "contextLength": self.rt.context,
            "maxBatch": self.rt.max_batch,
            "weightBytes": self.rt.weights.bytes,
            "gpuBytes": self.rt.weights.bytes + self.rt.bufs.bytes,
            "dispatchesPerToken": self.rt.decode_dispatches(),
            "eosIds": self.eos_ids,
            "hasChatTemplate": self.template.is_some(),
            "embedding": self.embedding.info(self.rt.cfg.hidden),
        })
    }

    /// Render chat messages with the model's template (generation prompt appended) and tokenize.
    pub fn chat_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let messages = serde_json::to_value(messages).map_err(|e| Error::Template(e.to_string()))?;
        self.chat_ids_json(&messages, None)
    }

    /// `chat_ids` for messages in OpenAI's JSON shape, with `tools` for a template that renders
    /// them (see `chat::tools`).
    pub fn chat_ids_json(&self, messages: &serde_json::Value, tools: Option<&serde_json::Value>) -> Result<Vec<u32>> {
        let text = match &self.template {
            Some(t) => t.render_json(messages, tools, true)?,
            None => {
                let tok = self.tokenizer()?;
                let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
                let fallback = ChatTemplate::fallback(&self.rt.cfg.arch, &text(tok.bos_id()), &text(tok.eos_id()));
                // ChatML spelled out in characters is no chat format the model knows: its
                // answer would be noise. transformers refuses such a model's chat too.
                let chatml = fallback.source() == crate::chat_template::CHATML;
                if chatml && ["<|im_start|>", "<|im_end|>"].iter().any(|t| tok.token_id(t).is_none()) {
                    return Err(Error::Template(format!(
                        "{} has no chat template, and its vocabulary has no ChatML tokens to fall back on: give a prompt (or token ids) instead of chat messages",
                        self.source_name
                    )));
                }
                fallback.render_json(messages, tools, true)?
            }
        };
        let ids = self.embeddable(self.tokenizer()?.encode(&text)?)?;
        if ids.is_empty() {
            // Which of the two dropped everything is worth saying: the fix is in one file.
            let msg = if text.is_empty() {
                "the chat template rendered these messages as empty text".to_string()
            } else {
                format!("the tokenizer turned the chat template's text ({} bytes) into no tokens", text.len())
            };
            return Err(Error::Template(msg));
        }
        Ok(ids)
    }

    /// The longest prompt plus generation this engine can hold: its context when fixed, else
    /// what decode attention can merge (the context grows to it).
    pub fn context_limit(&self) -> usize {
        if self.rt.context_fixed {
            self.rt.context
        } else {
            crate::model::forward::MAX_CONTEXT
        }
    }

    /// Tokenize a raw prompt, with BOS first when the model asks for it.
    pub fn prompt_ids(&self, text: &str) -> Result<Vec<u32>> {
        let tok = self.tokenizer()?;
        let mut ids = Vec::new();
        if tok.add_bos() {
            if let Some(b) = tok.bos_id() {
                ids.push(b);
            }
        }
        ids.extend(tok.encode(text)?);
        self.embeddable(ids)
    }

    /// Text's ids, refused where the tokenizer gave one the model has no embedding for: the
    /// pair of files does not match (the same ids given directly are an invalid option).
    fn embeddable(&self, ids: Vec<u32>) -> Result<Vec<u32>> {
        match ids.iter().find(|&&id| id as usize >= self.rt.cfg.vocab) {
            Some(id) => Err(Error::Model(format!(
                "the tokenizer gave token id {id}, but the model has {} token embeddings: its tokenizer does not match its weights",
                self.rt.cfg.vocab
            ))),
            None => Ok(ids),
        }
    }

    /// Start generating from `prompt` (ids): runs the prompt through the model, reusing the KV
    /// cache of the longest prefix it shares with the previous sequence (`prefix_cache`). Then
    /// call `step` until it returns `None`. A later `start` ends this generation.
    pub async fn start(&mut self, prompt: &[u32], opts: &GenerateOptions) -> Result<Generation> {
        opts.validate()?;
        if !self.rt.cfg.causal {
            return Err(Error::Unsupported(format!(
                "{} attends bidirectionally (an embedding model): it makes embeddings, not text",
                self.source_name
            )));
        }
        // Stop strings match decoded text, which needs the vocabulary's text.
        if !opts.stop.is_empty() && self.tokenizer.is_none() {
            return Err(Error::InvalidOption(format!(
                "{} has no tokenizer (tokenizer.json), so stop strings cannot match; stop on token ids instead",
                self.source_name
            )));
        }
        if let Some(&(id, _)) = opts.sampling.logit_bias.iter().find(|(id, _)| *id as usize >= self.rt.cfg.vocab) {
            return Err(Error::InvalidOption(format!(
                "logit bias names token {id}, outside the vocabulary ({} tokens)",
                self.rt.cfg.vocab
            )));
        }
        let sampler = Sampler::new(opts.sampling.clone())?;
        let constraint = match &opts.constraint {
            Some(spec) => Some(self.constraint(spec)?),
            None => None,
        };
        self.serial += 1;
        // The GPU picks every token after the first (which comes from the prompt's logits, read
        // back anyway): by argmax, or sampled when there is anything to sample, penalize or
        // bias. A constraint's mask is applied by the sampler too (which then also does greedy).
        let gpu_sampled = !opts.sampling.is_plain_greedy() || opts.constraint.is_some();
        // A default-sized context grows to hold a longer prompt and the tokens asked for (up to
        // 4096 more, rounded up to a power of two; the cached prefix is kept; the model's
        // training context is not a limit: transformers does not enforce it either). A prompt that fits keeps the context, and generation stops at its end.
        // Never past what decode attention can merge: a prompt that fits below that limit grows
        // the context to it, and a longer one gets ContextOverflow below.
        let most = crate::model::forward::MAX_CONTEXT;
        if prompt.len() >= self.rt.context && !self.rt.context_fixed && prompt.len() < most {
            // To a power of two: the next turns of a chat fit without growing again.
            let needed = (prompt.len() + opts.max_tokens.clamp(1, 4096)).min(most);
            self.rt.grow_context(needed.next_power_of_two().min(most))?;
        }
        if prompt.len() >= self.rt.context {
            // The limit that stopped it: the context asked for, or the most it could grow to.
            let context = self.context_limit();
            return Err(Error::ContextOverflow { tokens: prompt.len(), max_new: opts.max_tokens, context });
        }
        let stop = opts.stop_ids.clone().unwrap_or_else(|| self.eos_ids.clone());
        let reused = if opts.prefix_cache { self.reusable_prefix(prompt) } else { 0 };
        self.kv_tokens.truncate(reused);
        self.rt.pos = reused;
        let t0 = now_ms();
        let logits = self.rt.forward(&prompt[reused..]).await?;
        self.kv_tokens.extend_from_slice(&prompt[reused..]);
        let prefill_ms = now_ms() - t0;
        let top_logits = if opts.top_logits > 0 { sampler::top_k(&logits, opts.top_logits) } else { Vec::new() };
        Ok(Generation {
            serial: self.serial,
            sampler,
            stop,
            max_tokens: opts.max_tokens,
            history: prompt.to_vec(),
            prompt_len: prompt.len(),
            cached_tokens: reused,
            tokens: Vec::new(),
            out: TextOut::new(opts.stop.clone()),
            logits: Some(logits),
            gpu: !opts.needs_cpu(),
            gpu_sampled,
            feed: None,
            queue: StepQueue::default(),
            decoder: self.tokenizer.as_ref().map(|t| t.stream()),
            top_logits,
            logprobs_k: opts.logprobs,
            logprobs: Vec::new(),
            constraint,
            stop_reason: None,
            deferred: None,
            prefill_ms,
            start_ms: t0,
            first_token_ms: 0.0,
            decode_start_ms: now_ms(),
            decode_ms: 0.0,
        })
    }

    /// How many leading tokens of `prompt` already have their KV entries in the cache: the
    /// common prefix with the cached sequence, less one (the last prompt token is always run, for
    /// its logits), and none when the rotary table the prompt needs differs from the cached one.
    fn reusable_prefix(&self, prompt: &[u32]) -> usize {
        if self.rt.cfg.rope_table_key(prompt.len()) != self.rt.rope_key {
            return 0;
        }
        let cached = &self.kv_tokens[..self.rt.pos.min(self.kv_tokens.len())];
        let common = cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        // A recurrent state (Gated DeltaNet) holds exactly the tokens run so far and cannot be
        // rewound: only a prompt that extends all of them continues it.
        if self.rt.cfg.recurrent() && (common != self.rt.pos || common >= prompt.len()) {
            return 0;
        }
        common.min(prompt.len().saturating_sub(1))
    }

    /// A matcher for `spec` over this model's vocabulary (the vocabulary's trie is built once).
    fn constraint(&mut self, spec: &ConstraintSpec) -> Result<Constraint> {
        if self.vocab_env.is_none() {
            let tok = self.tokenizer()?;
            self.vocab_env = Some(crate::constrain::VocabEnv::new(tok, &self.eos_ids)?);
        }
        Constraint::new(spec, self.vocab_env.as_ref().expect("built above"))
    }

    /// Forget what the KV cache holds and end any generation in progress: for work that writes
    /// the cache outside a generation (`bench::run`).
    pub(crate) fn invalidate(&mut self) {
        self.kv_tokens.clear();
        self.serial += 1;
    }

    /// Produce the next token, or `None` once generation has ended (see `Generation::stop_reason`).
    /// A stop token ends generation; it is recorded in `tokens` but adds no text.
    pub async fn step(&mut self, g: &mut Generation) -> Result<Option<TokenEvent>> {
        if let Some(e) = g.deferred.take() {
            return Err(e);
        }
        if g.stop_reason.is_some() {
            return Ok(None);
        }
        if g.serial != self.serial {
            return Err(Error::InvalidOption("this generation was ended by a later start() on the same engine".into()));
        }
        if g.tokens.len() >= g.max_tokens {
            return Ok(g.end(StopReason::Length));
        }
        // Phi-3 longrope: the step that reaches original + 1 positions recomputes the whole
        // sequence with the long factors, as transformers' generate() does (it drops its cache
        // there); its logits then give this step's token.
        if g.logits.is_none()
            && g.queue.is_empty()
            && self.rt.pos + 1 == g.history.len()
            && self.rt.pos < self.rt.context
            && self.rt.cfg.rope_recompute_at(self.rt.rope_key, g.history.len())
        {
            self.rt.pos = 0;
            g.logits = Some(self.rt.forward(&g.history).await?);
        }
        let (id, logprob) = if let Some(logits) = g.logits.take() {
            // The first token comes from the prompt's logits (which also give top_logits).
            let (id, lp) = g.pick(logits)?;
            g.feed = Some(id);
            (id, lp)
        } else if g.gpu {
            // Keep a few steps queued on the GPU: each one's token feeds the next, and the CPU
            // reads the chosen ids back one step behind.
            // After a token chosen on the CPU (the first; the one after a longrope recompute) the
            // GPU's penalty set and counts are made whole again from the context.
            if g.gpu_sampled && g.feed.is_some() && g.queue.is_empty() {
                self.rt.set_sampling(&g.sampler.params, &g.history, &g.tokens)?;
            }
            // A constraint's next mask depends on the token just chosen: no steps queued ahead.
            let depth = if g.constraint.is_some() { 1 } else { PIPELINE_DEPTH };
            let pick = Pick { sampled: g.gpu_sampled, masked: g.constraint.is_some(), hidden: false };
            while g.queue.len() < depth
                && g.tokens.len() + g.queue.len() < g.max_tokens
                && self.rt.pos < self.rt.context
                && !self.rt.cfg.rope_recompute_at(self.rt.rope_key, self.rt.pos + 1)
            {
                if let Some(c) = g.constraint.as_mut() {
                    self.rt.set_mask(&c.allowed_bits(self.rt.cfg.vocab)?);
                }
                g.queue.push(&mut self.rt, g.feed.take(), pick)?;
            }
            let Some(id) = g.queue.pop(&self.rt).await? else {
                return Ok(g.end(StopReason::Context));
            };
            if id as usize >= self.rt.cfg.vocab {
                // What argmax.wgsl and sample.wgsl return where no logit is a number (NaN in every
                // one; an infinite logit among NaNs still wins the argmax).
                return Err(Error::Gpu(format!(
                    "the model produced non-finite logits (NaN or infinity): no token to pick (the GPU returned {id})"
                )));
            }
            if let Some(c) = g.constraint.as_mut() {
                c.commit(id)?;
            }
            (id, None)
        } else {
            if self.rt.pos >= self.rt.context {
                return Ok(g.end(StopReason::Context));
            }
            let last = *g.history.last().expect("history holds the prompt");
            let logits = self.rt.forward(&[last]).await?;
            g.pick(logits)?
        };
        self.kv_tokens.push(id);
        g.accept(id, logprob).map(Some)
    }

    /// Whether `step(g)` would finish without waiting for the GPU: the generation has ended, its
    /// first token's logits are at hand, or the oldest queued step's token has come back (in a
    /// browser, after the engine's thread was busy for a while). A caller that hands tokens
    /// across threads takes all such tokens in one go (`WasmEngine::next`), so a token costs
    /// the page's JavaScript less than a round trip.
    pub fn step_ready(&self, g: &Generation) -> bool {
        g.deferred.is_some()
            || g.stop_reason.is_some()
            || g.tokens.len() >= g.max_tokens
            || g.logits.is_some()
            || (g.gpu && g.queue.front_answered())
    }

    /// Dispatches of one of this generation's decode steps (sampling on the GPU takes more than
    /// argmax), for its stats.
    pub fn dispatches_of(&self, g: &Generation) -> usize {
        let pick = Pick { sampled: g.gpu && g.gpu_sampled, masked: g.gpu && g.constraint.is_some(), hidden: false };
        self.rt.dispatches_at(self.rt.pos, pick)
    }

    /// Stop a generation early (the caller broke out of its loop).
    pub fn cancel(&mut self, g: &mut Generation) {
        if g.stop_reason.is_none() {
            g.stop_reason = Some(StopReason::Cancelled);
        }
    }

    /// Generate to the end, handing each token and its text to `on_token`, which returns false
    /// to stop early.
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(Option<u32>, &str) -> bool,
    ) -> Result<GenerationResult> {
        let mut g = self.start(prompt, opts).await?;
        while let Some(ev) = self.step(&mut g).await? {
            if !on_token(ev.token, &ev.text) {
                self.cancel(&mut g);
                break;
            }
        }
        Ok(g.result(self.dispatches_of(&g)))
    }
}

/// The state of one generation between steps.
pub struct Generation {
    /// Which `start` of the engine made it (a later one ends it).
    serial: u64,
    sampler: Sampler,
    stop: Vec<u32>,
    max_tokens: usize,
    history: Vec<u32>,
    prompt_len: usize,
    cached_tokens: usize,
    pub tokens: Vec<u32>,
    out: TextOut,
    logits: Option<Vec<f32>>,
    /// Tokens after the first are chosen on the GPU, by argmax or (`gpu_sampled`) sampling; else
    /// on the CPU from read-back logits.
    gpu: bool,
    gpu_sampled: bool,
    /// A CPU-chosen token the next GPU step must embed.
    feed: Option<u32>,
    queue: StepQueue,
    decoder: Option<StreamDecoder>,
    pub top_logits: Vec<(u32, f32)>,
    logprobs_k: Option<usize>,
    logprobs: Vec<TokenLogprob>,
    constraint: Option<Constraint>,
    pub stop_reason: Option<StopReason>,
    /// An error a caller met after tokens it had not handed out yet (`defer`): the next `step`
    /// reports it.
    deferred: Option<Error>,
    prefill_ms: f64,
    /// When `start` began (before the prefill).
    start_ms: f64,
    first_token_ms: f64,
    /// When the first token was accepted: decode time counts from there, so that it holds the
    /// steps after the first token only (the first comes from the prompt's logits).
    decode_start_ms: f64,
    decode_ms: f64,
}

impl Generation {
    /// End with `why`, handing out text held back for a stop string that did not come.
    fn end(&mut self, why: StopReason) -> Option<TokenEvent> {
        self.stop_reason = Some(why);
        let text = self.out.flush();
        (!text.is_empty()).then_some(TokenEvent { token: None, text, stop: false, logprob: None })
    }

    /// Keep `e` for the next `step`: a caller that takes tokens in batches hands out the ones
    /// before the error first.
    pub fn defer(&mut self, e: Error) {
        self.deferred = Some(e);
    }

    /// The generated text so far (cut before a stop string).
    pub fn text(&self) -> &str {
        &self.out.text
    }

    /// The part of `text` the events have handed out: the rest may still turn out to be the
    /// start of a stop string.
    pub fn text_handed_out(&self) -> &str {
        self.out.handed_out()
    }

    /// Choose a token on the CPU: log-probabilities from the raw logits, then OpenAI's bias and
    /// penalties, the constraint's mask, and the sampler.
    fn pick(&mut self, mut logits: Vec<f32>) -> Result<(u32, Option<TokenLogprob>)> {
        let raw = self.logprobs_k.map(|_| logits.clone());
        self.sampler.params.adjust(&mut logits, &self.tokens);
        if let Some(c) = self.constraint.as_mut() {
            c.mask(&mut logits)?;
        }
        let id = self.sampler.sample(&logits, &self.history);
        if let Some(c) = self.constraint.as_mut() {
            c.commit(id)?;
        }
        let lp = raw.map(|raw| sampler::logprob(&raw, id, self.logprobs_k.unwrap_or(0)));
        Ok((id, lp))
    }

    /// Record a chosen token: stop tokens, the constraint's end, stop strings, its text.
    fn accept(&mut self, id: u32, logprob: Option<TokenLogprob>) -> Result<TokenEvent> {
        self.tokens.push(id);
        self.history.push(id);
        let now = now_ms();
        if self.tokens.len() == 1 {
            self.first_token_ms = now - self.start_ms;
            self.decode_start_ms = now;
        }
        self.decode_ms = now - self.decode_start_ms;
        if let Some(lp) = &logprob {
            self.logprobs.push(lp.clone());
        }
        let stop_token = self.stop.contains(&id);
        let mut piece = String::new();
        if let Some(d) = self.decoder.as_mut() {
            if !stop_token {
                piece = d.push(id)?;
            }
            if stop_token || self.tokens.len() >= self.max_tokens {
                piece.push_str(&d.finish()?);
            }
        }
        let (mut text, hit) = self.out.push(&piece);
        let done = self.constraint.as_ref().is_some_and(Constraint::is_done);
        if stop_token || hit || done {
            self.stop_reason = Some(StopReason::Stop);
        }
        if self.stop_reason.is_some() || self.tokens.len() >= self.max_tokens {
            text.push_str(&self.out.flush());
        }
        Ok(TokenEvent { token: Some(id), text, stop: stop_token, logprob })
    }

    /// The logits of the prompt's last position, from `start` until the first `step` takes
    /// them for the first token.
    pub fn prompt_logits(&self) -> Option<&[f32]> {
        self.logits.as_deref()
    }

    pub fn result(&self, dispatches_per_token: usize) -> GenerationResult {
        let steps = self.tokens.len().saturating_sub(1);
        let prefilled = self.prompt_len - self.cached_tokens;
        GenerationResult {
            prompt_ids: self.history[..self.prompt_len].to_vec(),
            tokens: self.tokens.clone(),
            text: self.out.text.clone(),
            top_logits: self.top_logits.clone(),
            logprobs: self.logprobs.clone(),
            stats: GenStats {
                prompt_tokens: self.prompt_len,
                cached_tokens: self.cached_tokens,
                generated_tokens: self.tokens.len(),
                prefill_ms: self.prefill_ms,
                first_token_ms: self.first_token_ms,
                decode_ms: self.decode_ms,
                prefill_tok_s: prefilled as f64 / (self.prefill_ms / 1e3),
                decode_tok_s: if steps > 0 { steps as f64 / (self.decode_ms / 1e3) } else { 0.0 },
                stop_reason: self.stop_reason.unwrap_or(StopReason::Length),
                seed: self.sampler.params.seed,
                dispatches_per_token,
                gpu_sampling: self.gpu,
            },
        }
    }
}

pub fn now_ms() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
    }
    // performance.now(), not Date.now(): the date has whole milliseconds, 5% of a
    // 20 ms prefill (browser prefill rates came out quantized to 512 / 19, / 20, / 21 ms).
    #[cfg(target_arch = "wasm32")]
    {
        #[wasm_bindgen::prelude::wasm_bindgen]
        extern "C" {
            #[wasm_bindgen(js_namespace = performance, js_name = now)]
            fn performance_now() -> f64;
        }
        performance_now()
    }
}

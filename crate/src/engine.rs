//! The engine: a loaded model on a GPU with its tokenizer and chat template, and generation.

use crate::chat_template::{ChatMessage, ChatTemplate};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::forward::{self, Buffers, Program};
use crate::model::weights::{self, ModelWeights};
use crate::model::ModelConfig;
use crate::sampler::{self, Sampler, SamplingParams};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::weights::{read_gguf_header, AsyncSource};

/// Timestamp queries around one compute pass.
struct Timer {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl Timer {
    fn new(gpu: &Gpu) -> Timer {
        let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("step timer"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Timer { queries, resolve, readback: gpu.readback_buffer("timestamps readback", 16) }
    }
}

/// Greedy decode steps queued on the GPU ahead of the one being read back.
const PIPELINE_DEPTH: usize = 2;

#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// KV cache length in tokens; default min(model's training context, 4096), grown when a
    /// prompt does not fit (to the prompt plus up to 4096 tokens to generate).
    pub context_length: Option<usize>,
    /// Most tokens one prefill step processes (longer prompts run in chunks).
    pub max_batch: usize,
    /// Quantize F32/F16/BF16 safetensors weights at load (model folders only).
    pub quantize: crate::model::hf::Quantize,
}

impl LoadOptions {
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
        LoadOptions { context_length: None, max_batch: 256, quantize: Default::default() }
    }
}

/// Progress of a long operation: `phase` ("read", "upload", "compile"), bytes done and total.
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// The model on the GPU: weights, activations, KV cache and the two recorded programs.
pub struct Runtime {
    pub gpu: Gpu,
    pub cfg: ModelConfig,
    pub weights: ModelWeights,
    pub bufs: Buffers,
    decode: Program,
    prefill: Program,
    readback: wgpu::Buffer,
    token_readback: Vec<wgpu::Buffer>,
    pub context: usize,
    pub max_batch: usize,
    /// Tokens currently in the KV cache.
    pub pos: usize,
    /// The context length was chosen by the caller (else a prompt that does not fit grows it).
    context_fixed: bool,
    /// The caller's max_batch before it was limited to the context.
    max_batch_opt: usize,
    /// `ModelConfig::rope_table_key` of the rotary table in `bufs.rope`.
    rope_key: usize,
}

pub struct Engine {
    pub rt: Runtime,
    /// `None` for a model folder without tokenizer.json (token ids in and out still work).
    pub tokenizer: Option<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// Tokens that end generation by default.
    pub eos_ids: Vec<u32>,
    pub source_name: String,
}

impl Runtime {
    /// Size the context, build activations and both programs for loaded weights.
    fn new(
        gpu: Gpu,
        cfg: ModelConfig,
        weights: ModelWeights,
        opts: &LoadOptions,
        progress: Progress<'_>,
    ) -> Result<Runtime> {
        let context = match opts.context_length {
            Some(0) => return Err(Error::InvalidOption("context length must be at least 1".into())),
            Some(c) => c,
            None => cfg.context_train.clamp(1, 4096),
        };
        let max_batch = opts.max_batch.min(context);
        let bufs = Buffers::new(&gpu, &cfg, max_batch, context)?;
        progress("compile", 0, 2);
        let decode = forward::build(&gpu, &cfg, &weights, &bufs, context, false)?;
        progress("compile", 1, 2);
        let prefill = forward::build(&gpu, &cfg, &weights, &bufs, context, true)?;
        progress("compile", 2, 2);
        let readback = gpu.readback_buffer("logits readback", cfg.vocab as u64 * 4);
        let token_readback = (0..forward::TOKEN_SLOTS).map(|i| gpu.readback_buffer(&format!("token {i}"), 4)).collect();
        gpu.check()?;
        let rope_key = cfg.rope_table_key(1);
        Ok(Runtime {
            gpu,
            cfg,
            weights,
            bufs,
            decode,
            prefill,
            readback,
            token_readback,
            context,
            max_batch,
            pos: 0,
            context_fixed: opts.context_length.is_some(),
            max_batch_opt: opts.max_batch,
            rope_key,
        })
    }

    /// Reallocate activations and the KV cache for a longer context (the cache is emptied) and
    /// rebuild both programs.
    pub fn grow_context(&mut self, context: usize) -> Result<()> {
        let max_batch = self.max_batch_opt.min(context);
        let bufs = Buffers::new(&self.gpu, &self.cfg, max_batch, context)?;
        let decode = forward::build(&self.gpu, &self.cfg, &self.weights, &bufs, context, false)?;
        let prefill = forward::build(&self.gpu, &self.cfg, &self.weights, &bufs, context, true)?;
        (self.bufs, self.decode, self.prefill) = (bufs, decode, prefill);
        (self.context, self.max_batch, self.pos) = (context, max_batch, 0);
        self.rope_key = self.cfg.rope_table_key(1);
        self.gpu.check()
    }

    /// Before a new sequence of `prompt_len` tokens: the rotary table it needs, when the model's
    /// frequencies depend on the length (longrope, dynamic NTK; `forward::rope_table_for`).
    fn prepare_rope(&mut self, prompt_len: usize) {
        let key = self.cfg.rope_table_key(prompt_len);
        if key != self.rope_key {
            let table = forward::rope_table_for(&self.cfg, prompt_len, self.context);
            self.gpu.queue.write_buffer(&self.bufs.rope, 0, bytemuck::cast_slice(&table));
            self.rope_key = key;
        }
    }
}

impl Engine {
    /// Load a GGUF model from a byte source onto a fresh GPU device.
    pub async fn load(src: &dyn AsyncSource, opts: &LoadOptions, progress: Progress<'_>) -> Result<Engine> {
        opts.validate()?;
        let gguf = read_gguf_header(src).await?;
        let mut cfg = ModelConfig::from_gguf(&gguf)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let template = ChatTemplate::from_gguf(&gguf)?;
        let gpu = Gpu::new().await?;
        // Refuse before downloading anything if the adapter cannot hold the model's buffers.
        weights::check_gguf_fits(&gpu, &gguf)?;
        let total: u64 = gguf.tensors.iter().map(|t| t.n_bytes).sum();
        let weights =
            weights::load_gguf(&gpu, &gguf, src, &mut cfg, &mut |done| progress("upload", done, total)).await?;
        let rt = Runtime::new(gpu, cfg, weights, opts, progress)?;
        let eos_ids = tokenizer.eos_ids();
        Ok(Engine { rt, tokenizer: Some(tokenizer), template, eos_ids, source_name: src.source_name() })
    }

    /// Load a Hugging Face model folder (config.json + safetensors, tokenizer files optional).
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
        opts.validate()?;
        // Everything that can be checked without weights first: config (inside HfModel::open,
        // before any weight file is opened), tokenizer, chat template.
        crate::model::ModelConfig::from_hf(&crate::model::hf_config::HfConfig::from_json(&files.config)?)?;
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
        let gpu = Gpu::new().await?;
        // Refuse before reading any weight if a tensor is missing or a buffer cannot fit.
        let total = model.check_fits(&gpu, opts.quantize)?;
        progress("upload", 0, total);
        let weights = model.load(&gpu, opts.quantize, &mut |done| progress("upload", done, total)).await?;
        let mut eos_ids = model.eos_ids();
        if let Some(t) = &tokenizer {
            for id in t.eos_ids() {
                if !eos_ids.contains(&id) {
                    eos_ids.push(id);
                }
            }
        }
        let rt = Runtime::new(gpu, model.cfg, weights, opts, progress)?;
        Ok(Engine { rt, tokenizer, template, eos_ids, source_name })
    }

    /// Load a GGUF file or a Hugging Face model folder from disk.
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
            "config": self.rt.cfg,
            "contextLength": self.rt.context,
            "maxBatch": self.rt.max_batch,
            "weightBytes": self.rt.weights.bytes,
            "gpuBytes": self.rt.weights.bytes + self.rt.bufs.bytes,
            "dispatchesPerToken": self.rt.decode_dispatches(),
            "eosIds": self.eos_ids,
            "hasChatTemplate": self.template.is_some(),
        })
    }

    /// Render chat messages with the model's template (generation prompt appended) and tokenize.
    pub fn chat_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let fallback;
        let template = match &self.template {
            Some(t) => t,
            None => {
                let tok = self.tokenizer()?;
                let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
                fallback = ChatTemplate::fallback(&self.rt.cfg.arch, &text(tok.bos_id()), &text(tok.eos_id()));
                &fallback
            }
        };
        let text = template.render(messages, true)?;
        self.tokenizer()?.encode(&text)
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
        Ok(ids)
    }

    /// Start generating from `prompt` (ids) with an empty KV cache: runs the prompt through the
    /// model. Then call `step` until it returns `None`.
    pub async fn start(&mut self, prompt: &[u32], opts: &GenerateOptions) -> Result<Generation> {
        let sampler = Sampler::new(opts.sampling.clone())?;
        // The GPU picks every token after the first (which comes from the prompt's logits, read
        // back anyway): by argmax, or sampled when there is anything to sample or penalize.
        let gpu_sampled = !(opts.sampling.is_greedy() && opts.sampling.repetition_penalty == 1.0);
        // A default-sized context grows to hold a longer prompt and the tokens asked for (up to
        // 4096 more; the model's training context is not a limit: transformers does not enforce
        // it either). A prompt that fits keeps the context, and generation stops at its end.
        // Never past what decode attention can merge: a prompt that fits below that limit grows
        // the context to it, and a longer one gets ContextOverflow below.
        let most = crate::model::forward::MAX_CONTEXT;
        if prompt.len() >= self.rt.context && !self.rt.context_fixed && prompt.len() < most {
            self.rt.grow_context((prompt.len() + opts.max_tokens.clamp(1, 4096)).min(most))?;
        }
        if prompt.len() >= self.rt.context {
            return Err(Error::ContextOverflow {
                tokens: prompt.len(),
                max_new: opts.max_tokens,
                context: self.rt.context,
            });
        }
        let stop = opts.stop_ids.clone().unwrap_or_else(|| self.eos_ids.clone());
        self.rt.pos = 0;
        let t0 = now_ms();
        let logits = self.rt.forward(prompt).await?;
        let prefill_ms = now_ms() - t0;
        let top_logits = if opts.top_logits > 0 { sampler::top_k(&logits, opts.top_logits) } else { Vec::new() };
        Ok(Generation {
            sampler,
            stop,
            max_tokens: opts.max_tokens,
            history: prompt.to_vec(),
            prompt_len: prompt.len(),
            tokens: Vec::new(),
            text: String::new(),
            logits: Some(logits),
            gpu: !opts.cpu_sampling,
            gpu_sampled,
            feed: None,
            inflight: std::collections::VecDeque::new(),
            submitted: 0,
            decoder: self.tokenizer.as_ref().map(|t| t.stream()),
            top_logits,
            stop_reason: None,
            prefill_ms,
            decode_start_ms: now_ms(),
            decode_ms: 0.0,
        })
    }

    /// Produce the next token, or `None` once generation has ended (see `Generation::stop_reason`).
    /// A stop token ends generation; it is recorded in `tokens` but adds no text.
    pub async fn step(&mut self, g: &mut Generation) -> Result<Option<TokenEvent>> {
        if g.stop_reason.is_some() {
            return Ok(None);
        }
        if g.tokens.len() >= g.max_tokens {
            return Ok(g.finish(StopReason::Length));
        }
        // Phi-3 longrope: the step that reaches original + 1 positions recomputes the whole
        // sequence with the long factors, as transformers' generate() does (it drops its cache
        // there); its logits then give this step's token.
        if g.logits.is_none()
            && g.inflight.is_empty()
            && self.rt.pos + 1 == g.history.len()
            && self.rt.pos < self.rt.context
            && self.rt.cfg.rope_recompute_at(self.rt.rope_key, g.history.len())
        {
            self.rt.pos = 0;
            g.logits = Some(self.rt.forward(&g.history).await?);
        }
        let id = if let Some(logits) = g.logits.take() {
            // The first token comes from the prompt's logits (which also give top_logits).
            let id = g.sampler.sample(&logits, &g.history);
            g.feed = Some(id);
            id
        } else if g.gpu {
            // Keep a few steps queued on the GPU: each one's token feeds the next, and the CPU
            // reads the chosen ids back one step behind.
            if g.gpu_sampled && g.submitted == 0 {
                self.rt.set_sampling(&g.sampler.params, &g.history)?;
            }
            while g.inflight.len() < PIPELINE_DEPTH
                && g.tokens.len() + g.inflight.len() < g.max_tokens
                && self.rt.pos < self.rt.context
                && !self.rt.cfg.rope_recompute_at(self.rt.rope_key, self.rt.pos + 1)
            {
                let slot = g.submitted % forward::TOKEN_SLOTS;
                let sub = self.rt.submit_token(g.feed.take(), slot, g.gpu_sampled)?;
                g.inflight.push_back((slot, sub));
                g.submitted += 1;
            }
            let Some((slot, sub)) = g.inflight.pop_front() else {
                return Ok(g.finish(StopReason::Context));
            };
            let id = self.rt.read_token(slot, sub).await?;
            if id as usize >= self.rt.cfg.vocab {
                return Err(Error::Gpu(format!("the GPU sampler returned token {id}, outside the vocabulary")));
            }
            id
        } else {
            if self.rt.pos >= self.rt.context {
                return Ok(g.finish(StopReason::Context));
            }
            let last = *g.history.last().expect("history holds the prompt");
            let logits = self.rt.forward(&[last]).await?;
            g.sampler.sample(&logits, &g.history)
        };
        g.tokens.push(id);
        g.history.push(id);
        g.decode_ms = now_ms() - g.decode_start_ms;
        if g.stop.contains(&id) {
            g.stop_reason = Some(StopReason::Stop);
            let text = match g.decoder.as_mut() {
                Some(d) => d.finish()?,
                None => String::new(),
            };
            g.text.push_str(&text);
            return Ok(Some(TokenEvent { token: id, text, stop: true }));
        }
        let mut text = String::new();
        if let Some(d) = g.decoder.as_mut() {
            text = d.push(id)?;
            if g.tokens.len() >= g.max_tokens {
                text.push_str(&d.finish()?);
            }
        }
        g.text.push_str(&text);
        Ok(Some(TokenEvent { token: id, text, stop: false }))
    }

    /// Dispatches of one of this generation's decode steps (sampling on the GPU takes more than
    /// argmax), for its stats.
    pub fn dispatches_of(&self, g: &Generation) -> usize {
        if g.gpu && g.gpu_sampled {
            self.rt.sampled_dispatches_at(self.rt.pos)
        } else {
            self.rt.decode_dispatches()
        }
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
        on_token: &mut dyn FnMut(u32, &str) -> bool,
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

/// One generated token and the text it completes (may be empty mid-character).
#[derive(Clone, Debug, serde::Serialize)]
pub struct TokenEvent {
    pub token: u32,
    pub text: String,
    /// This token is a stop token (end of generation).
    pub stop: bool,
}

/// The state of one generation between steps.
pub struct Generation {
    sampler: Sampler,
    stop: Vec<u32>,
    max_tokens: usize,
    history: Vec<u32>,
    prompt_len: usize,
    pub tokens: Vec<u32>,
    pub text: String,
    logits: Option<Vec<f32>>,
    /// Greedy decoding with the token chosen on the GPU (no logits read back per token).
    /// Tokens after the first are chosen on the GPU, by argmax or (`gpu_sampled`) sampling.
    gpu: bool,
    gpu_sampled: bool,
    /// A CPU-chosen token the next GPU step must embed.
    feed: Option<u32>,
    inflight: std::collections::VecDeque<(usize, wgpu::SubmissionIndex)>,
    submitted: usize,
    decoder: Option<StreamDecoder>,
    pub top_logits: Vec<(u32, f32)>,
    pub stop_reason: Option<StopReason>,
    prefill_ms: f64,
    decode_start_ms: f64,
    decode_ms: f64,
}

impl Generation {
    fn finish(&mut self, why: StopReason) -> Option<TokenEvent> {
        self.stop_reason = Some(why);
        None
    }

    pub fn result(&self, dispatches_per_token: usize) -> GenerationResult {
        let steps = self.tokens.len().saturating_sub(1);
        GenerationResult {
            prompt_ids: self.history[..self.prompt_len].to_vec(),
            tokens: self.tokens.clone(),
            text: self.text.clone(),
            top_logits: self.top_logits.clone(),
            stats: GenStats {
                prompt_tokens: self.prompt_len,
                generated_tokens: self.tokens.len(),
                prefill_ms: self.prefill_ms,
                decode_ms: self.decode_ms,
                prefill_tok_s: self.prompt_len as f64 / (self.prefill_ms / 1e3),
                decode_tok_s: if steps > 0 { steps as f64 / (self.decode_ms / 1e3) } else { 0.0 },
                stop_reason: self.stop_reason.unwrap_or(StopReason::Length),
                seed: self.sampler.params.seed,
                dispatches_per_token,
            },
        }
    }
}

impl Runtime {
    /// Record and submit one step over `ids` (or, with `None`, over the token the GPU sampled
    /// in the previous step), copying the sampled token to readback `slot` and, if asked, the
    /// logits to the logits readback buffer.
    fn submit(&mut self, ids: Option<&[u32]>, slot: usize, copy_logits: bool, sampled: bool) -> wgpu::SubmissionIndex {
        self.submit_timed(ids, slot, copy_logits, sampled, None)
    }

    fn submit_timed(
        &mut self,
        ids: Option<&[u32]>,
        slot: usize,
        copy_logits: bool,
        sampled: bool,
        timer: Option<&Timer>,
    ) -> wgpu::SubmissionIndex {
        let n = ids.map_or(1, |i| i.len()) as u32;
        let gpu = &self.gpu;
        if let Some(ids) = ids {
            gpu.queue.write_buffer(&self.bufs.ids, 0, bytemuck::cast_slice(ids));
        }
        gpu.queue.write_buffer(&self.bufs.step, 0, bytemuck::cast_slice(&[n, self.pos as u32, slot as u32, 0]));
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        {
            let timestamp_writes = timer.map(|t| wgpu::ComputePassTimestampWrites {
                query_set: &t.queries,
                beginning_of_pass_write_index: Some(0),
                end_of_pass_write_index: Some(1),
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
            let program = if n == 1 { &self.decode } else { &self.prefill };
            program.record(&mut pass, n, self.pos as u32, sampled);
        }
        if let Some(t) = timer {
            enc.resolve_query_set(&t.queries, 0..2, &t.resolve, 0);
            enc.copy_buffer_to_buffer(&t.resolve, 0, &t.readback, 0, 16);
        }
        if copy_logits {
            enc.copy_buffer_to_buffer(&self.bufs.logits, 0, &self.readback, 0, self.cfg.vocab as u64 * 4);
        }
        enc.copy_buffer_to_buffer(&self.bufs.tokens, slot as u64 * 4, &self.token_readback[slot], 0, 4);
        self.pos += n as usize;
        gpu.queue.submit([enc.finish()])
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::InvalidOption("the prompt is empty: at least one token is needed".into()));
        }
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= self.cfg.vocab) {
            return Err(Error::InvalidOption(format!(
                "token id {bad} is outside the vocabulary (size {})",
                self.cfg.vocab
            )));
        }
        if self.pos + ids.len() > self.context {
            return Err(Error::ContextOverflow { tokens: self.pos + ids.len(), max_new: 0, context: self.context });
        }
        Ok(())
    }

    /// Run `ids` through the model after the tokens already cached, returning the logits of
    /// the last one. Long inputs go through in chunks of `max_batch`.
    pub async fn forward(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        self.check_ids(ids)?;
        if self.pos == 0 {
            self.prepare_rope(ids.len());
        }
        let chunks: Vec<&[u32]> = ids.chunks(self.max_batch).collect();
        let mut last = None;
        for (i, chunk) in chunks.iter().enumerate() {
            last = Some(self.submit(Some(chunk), 0, i + 1 == chunks.len(), false));
        }
        let bytes = self.gpu.read_mapped_after(&self.readback, self.cfg.vocab as u64 * 4, last).await?;
        let logits: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
        if logits.iter().any(|v| !v.is_finite()) {
            return Err(Error::Gpu("the model produced non-finite logits (NaN or infinity)".into()));
        }
        Ok(logits)
    }

    /// Queue one decode step whose token is chosen on the GPU: by argmax, or (`sampled`) drawn
    /// with the parameters of the last `set_sampling`. `first`: the token to feed, when the CPU
    /// chose it. Returns the step's submission; its token lands in readback `slot`.
    pub fn submit_token(&mut self, first: Option<u32>, slot: usize, sampled: bool) -> Result<wgpu::SubmissionIndex> {
        if let Some(t) = first {
            self.check_ids(&[t])?;
        } else if self.pos + 1 > self.context {
            return Err(Error::ContextOverflow { tokens: self.pos + 1, max_new: 0, context: self.context });
        }
        Ok(self.submit(first.as_ref().map(std::slice::from_ref), slot, false, sampled))
    }

    /// The parameters of the GPU sampler for the next `submit_token(.., true)` steps, and the
    /// context so far for its repetition penalty (the sampler adds each token it draws).
    pub fn set_sampling(&mut self, p: &SamplingParams, history: &[u32]) -> Result<()> {
        p.validate()?;
        let layout = crate::model::sampling::SampleLayout::new(self.cfg.vocab);
        let q = &self.gpu.queue;
        q.write_buffer(&self.bufs.sample_params, 0, &crate::model::sampling::params_bytes(p));
        q.write_buffer(
            &self.bufs.sample_state,
            layout.pen_offset_bytes(),
            bytemuck::cast_slice(&layout.pen_bits(history)),
        );
        Ok(())
    }

    /// The token a greedy step put in `slot`.
    pub async fn read_token(&self, slot: usize, after: wgpu::SubmissionIndex) -> Result<u32> {
        let bytes = self.gpu.read_mapped_after(&self.token_readback[slot], 4, Some(after)).await?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// GPU time of one decode step in milliseconds, from timestamp queries; `None` when the
    /// adapter has no timestamps. The step runs at the current position and advances it.
    pub async fn time_decode_step(&mut self) -> Result<Option<f64>> {
        if !self.gpu.summary.timestamps {
            return Ok(None);
        }
        let timer = Timer::new(&self.gpu);
        let sub = self.submit_timed(None, 0, false, false, Some(&timer));
        let bytes = self.gpu.read_mapped_after(&timer.readback, 16, Some(sub)).await?;
        let t: [u64; 2] = bytemuck::pod_read_unaligned(&bytes);
        let ns = t[1].saturating_sub(t[0]) as f64 * self.gpu.queue.get_timestamp_period() as f64;
        Ok(Some(ns / 1e6))
    }

    /// GPU time per kernel of one step over `n` tokens (decode when `n == 1`), from timestamps
    /// written between dispatches: (kernel, dispatches, total ms), slowest first. `None` when
    /// the adapter cannot write timestamps inside passes. The step advances the position.
    pub async fn profile_step(&mut self, n: usize) -> Result<Option<Vec<(String, usize, f64)>>> {
        if !self.gpu.summary.timestamps_in_passes {
            return Ok(None);
        }
        let program = if n == 1 { &self.decode } else { &self.prefill };
        let count = program.dispatches(n, self.pos, false) as u32 + 1;
        let qs = self.gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let size = count as u64 * 8;
        let resolve = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile"),
            size,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let readback = self.gpu.readback_buffer("profile readback", size);
        let ids = vec![1u32; n];
        self.gpu.queue.write_buffer(&self.bufs.ids, 0, bytemuck::cast_slice(&ids));
        self.gpu.queue.write_buffer(&self.bufs.step, 0, bytemuck::cast_slice(&[n as u32, self.pos as u32, 0, 0]));
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        let kernels = {
            let mut pass = enc.begin_compute_pass(&Default::default());
            program.record_profiled(&mut pass, n as u32, self.pos as u32, false, &qs)
        };
        enc.resolve_query_set(&qs, 0..count, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &readback, 0, size);
        let sub = self.gpu.queue.submit([enc.finish()]);
        self.pos += n;
        let bytes = self.gpu.read_mapped_after(&readback, size, Some(sub)).await?;
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        let period = self.gpu.queue.get_timestamp_period() as f64;
        let mut agg: Vec<(String, usize, f64)> = Vec::new();
        for (i, k) in kernels.iter().enumerate() {
            let ms = t[i + 1].saturating_sub(t[i]) as f64 * period / 1e6;
            let name = k.to_string();
            match agg.iter_mut().find(|a| a.0 == name) {
                Some(a) => {
                    a.1 += 1;
                    a.2 += ms;
                }
                None => agg.push((name, 1, ms)),
            }
        }
        agg.sort_by(|a, b| b.2.total_cmp(&a.2));
        Ok(Some(agg))
    }

    /// Bytes of GPU memory the runtime holds: weights, activations, KV cache, readback.
    pub fn gpu_bytes(&self) -> u64 {
        self.weights.bytes + self.bufs.bytes + self.cfg.vocab as u64 * 4 + forward::TOKEN_SLOTS as u64 * 4
    }

    /// Weight bytes one decode step reads: every layer matrix, the LM head, one embedding row.
    pub fn weight_bytes_per_token(&self) -> u64 {
        let w = &self.weights;
        let layers: u64 = w
            .layers
            .iter()
            .map(|l| l.wqkv.bytes + l.wo.bytes + l.w_gate_up.bytes + l.w_down.bytes + l.vecs.size())
            .sum();
        layers + w.lm_head().bytes + w.embed.bytes / w.embed.rows.max(1) as u64
    }

    /// Dispatches of a decode step at the current position (deep caches take one more per layer).
    pub fn decode_dispatches(&self) -> usize {
        self.decode_dispatches_at(self.pos)
    }

    /// Dispatches of a greedy decode step at cache position `pos`.
    pub fn decode_dispatches_at(&self, pos: usize) -> usize {
        self.decode.dispatches(1, pos, false)
    }

    /// Dispatches of a decode step whose token the GPU samples, at cache position `pos`.
    pub fn sampled_dispatches_at(&self, pos: usize) -> usize {
        self.decode.dispatches(1, pos, true)
    }

    /// Dispatches of a full prefill chunk.
    pub fn prefill_dispatches(&self) -> usize {
        self.prefill.dispatches(self.max_batch, 0, false)
    }
}

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Token ids that end generation; default: the model's EOS/EOT tokens.
    pub stop_ids: Option<Vec<u32>>,
    /// Report this many of the largest raw logits of the first generated position.
    pub top_logits: usize,
    /// Choose every token on the CPU from read-back logits (`sampler::Sampler`) instead of on
    /// the GPU (slower: a readback a token and no pipelining; for checking the GPU sampler).
    pub cpu_sampling: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop_ids: None,
            top_logits: 0,
            cpu_sampling: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// A stop token was generated.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The KV cache is full.
    Context,
    /// The caller asked to stop.
    Cancelled,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct GenStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    pub stop_reason: StopReason,
    pub seed: u64,
    pub dispatches_per_token: usize,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct GenerationResult {
    pub prompt_ids: Vec<u32>,
    pub tokens: Vec<u32>,
    pub text: String,
    pub top_logits: Vec<(u32, f32)>,
    pub stats: GenStats,
}

pub fn now_ms() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
    }
    #[cfg(target_arch = "wasm32")]
    {
        js_sys::Date::now()
    }
}

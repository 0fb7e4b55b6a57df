//! The model on the GPU: weights, activations, KV cache, the recorded decode and prefill programs,
//! and the submissions that run them.

use crate::engine::{LoadOptions, Progress};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, PendingMap};
use crate::model::forward::{self, Buffers, Pick, Program};
use crate::model::weights::ModelWeights;
use crate::model::ModelConfig;
use crate::sampler::SamplingParams;
use std::sync::atomic::{AtomicBool, Ordering};

/// `count` timestamp queries written during a submission, resolved and read back after it.
struct Timer {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    count: u32,
}

impl Timer {
    fn new(gpu: &Gpu, count: u32) -> Timer {
        let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("step timer"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let size = count as u64 * 8;
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Timer { queries, resolve, readback: gpu.readback_buffer("timestamps readback", size), count }
    }

    /// Copy the timestamps out at the end of `enc`.
    fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.queries, 0..self.count, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, self.count as u64 * 8);
    }

    /// Milliseconds between consecutive timestamps, once `sub` is done.
    async fn read_ms(&self, gpu: &Gpu, sub: wgpu::SubmissionIndex) -> Result<Vec<f64>> {
        let bytes = gpu.read_mapped_after(&self.readback, self.count as u64 * 8, Some(sub)).await?;
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        let period = gpu.queue.get_timestamp_period() as f64;
        Ok(t.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64 * period / 1e6).collect())
    }
}

/// Decode steps queued on the GPU, each choosing its token there, read back oldest first (one
/// step behind, so the GPU never waits for the CPU): the pipelined decode loop of `Engine::step`
/// and of the benchmark.
#[derive(Default)]
pub struct StepQueue {
    inflight: std::collections::VecDeque<(usize, wgpu::SubmissionIndex, PendingMap)>,
    submitted: usize,
}

impl StepQueue {
    /// Steps queued and not read back yet.
    pub fn len(&self) -> usize {
        self.inflight.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inflight.is_empty()
    }

    /// Steps queued so far.
    pub fn submitted(&self) -> usize {
        self.submitted
    }

    /// Queue one step (`Runtime::submit_token`) into the next readback slot, and ask for that
    /// slot's readback at once: in a browser the answer then comes while the GPU process still
    /// works through the steps queued after it, instead of after them (the GPU process would
    /// idle for the round trip to the page every token).
    pub fn push(&mut self, rt: &mut Runtime, feed: Option<u32>, pick: Pick) -> Result<()> {
        let slot = self.submitted % forward::TOKEN_SLOTS;
        let sub = rt.submit_token(feed, slot, pick)?;
        let map = rt.gpu.start_map(&rt.token_readback[slot], 4);
        rt.token_requested[slot].store(true, Ordering::Relaxed);
        self.inflight.push_back((slot, sub, map));
        self.submitted += 1;
        Ok(())
    }

    /// The oldest queued step's token has come back: `pop` would not wait.
    pub fn front_answered(&self) -> bool {
        self.inflight.front().is_some_and(|(_, _, map)| map.is_answered())
    }

    /// The token of the oldest queued step; `None` when none is queued.
    pub async fn pop(&mut self, rt: &Runtime) -> Result<Option<u32>> {
        match self.inflight.pop_front() {
            Some((slot, sub, map)) => rt.read_token(slot, sub, map).await.map(Some),
            None => Ok(None),
        }
    }
}

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
    /// Slots of `token_readback` whose map `StepQueue::push` requested and nobody read back.
    token_requested: Vec<AtomicBool>,
    pub context: usize,
    pub max_batch: usize,
    /// Tokens currently in the KV cache.
    pub pos: usize,
    /// The context length was chosen by the caller (else a prompt that does not fit grows it).
    pub(crate) context_fixed: bool,
    /// The caller's max_batch before it was limited to the context.
    max_batch_opt: usize,
    /// `ModelConfig::rope_table_key` of the rotary table in `bufs.rope`.
    pub(crate) rope_key: usize,
    /// Readback of a prefill chunk's hidden states (`hidden_states`), made on first use.
    hidden_readback: Option<wgpu::Buffer>,
}

/// What a step copies out besides its token: nothing, the logits, or the hidden states of its
/// tokens (`Pick::hidden`).
#[derive(Clone, Copy, PartialEq)]
enum CopyOut {
    Nothing,
    Logits,
    Hidden,
}

/// Tokens one prefill step takes: the caller's batch, at most the context and at most what
/// keeps the widest activation (the FFN's gate and up rows) within one storage binding; a
/// bidirectional model's whole input must be one step (its tokens all see each other), so the
/// whole context.
fn batch_for(cfg: &ModelConfig, max_batch: usize, context: usize, binding: u64) -> usize {
    if cfg.causal {
        let row = 4 * (2 * cfg.ffn).max(cfg.proj_rows()).max(cfg.mix_width()).max(cfg.hidden) as u64;
        let fits = (binding / row.max(1)).max(1) as usize;
        max_batch.min(context).min(fits)
    } else {
        context
    }
}

/// Activations and KV cache for `context` tokens and both programs recorded over them; returns
/// the prefill batch too.
fn build(
    gpu: &Gpu,
    cfg: &ModelConfig,
    weights: &ModelWeights,
    max_batch: usize,
    context: usize,
    progress: Progress<'_>,
) -> Result<(usize, Buffers, Program, Program)> {
    let max_batch = batch_for(cfg, max_batch, context, gpu.limits.max_storage_buffer_binding_size);
    let bufs = Buffers::new(gpu, cfg, max_batch, context)?;
    progress("compile", 0, 2);
    let decode = forward::build(gpu, cfg, weights, &bufs, context, false)?;
    progress("compile", 1, 2);
    let prefill = forward::build(gpu, cfg, weights, &bufs, context, true)?;
    progress("compile", 2, 2);
    Ok((max_batch, bufs, decode, prefill))
}

/// Dispatches a prefill submit holds (`Runtime::submit_timed`). H200, pp512, one submit -> parts
/// of 48 (browser, Chromium's page) or 32-64 (native): SmolLM2-135M 57.3k -> 63.7-66.1k and
/// 81.6k -> 89.1-90.6k tok/s, Llama-3.2-1B +3%, Phi-3-mini +2% (BENCHMARKS.md session 23).
const PREFILL_PART: usize = 48;

impl Runtime {
    /// Size the context, build activations and both programs for loaded weights.
    pub(crate) fn new(
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
        let (max_batch, bufs, decode, prefill) = build(&gpu, &cfg, &weights, opts.max_batch, context, progress)?;
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
            token_requested: (0..forward::TOKEN_SLOTS).map(|_| AtomicBool::new(false)).collect(),
            context,
            max_batch,
            pos: 0,
            context_fixed: opts.context_length.is_some(),
            max_batch_opt: opts.max_batch,
            rope_key,
            hidden_readback: None,
        })
    }

    /// Reallocate activations and the KV cache for a longer context and rebuild both programs.
    /// The cached positions are copied over (so a longer chat keeps its prefix), unless the
    /// rotary table they were computed with is not the one a fresh cache starts with.
    pub fn grow_context(&mut self, context: usize) -> Result<()> {
        let (max_batch, bufs, decode, prefill) =
            build(&self.gpu, &self.cfg, &self.weights, self.max_batch_opt, context, &mut |_, _, _| {})?;
        let fresh_key = self.cfg.rope_table_key(1);
        let keep = if fresh_key == self.rope_key { self.pos.min(context) } else { 0 };
        if keep > 0 {
            // KV layout per layer: [k|v][kv head][slot][head_dim] f16, slot = position % cap.
            let row = self.cfg.head_dim as u64 * 2;
            let blocks = 2 * self.cfg.n_kv_heads as u64;
            let mut enc = self.gpu.device.create_command_encoder(&Default::default());
            for (i, (old, new)) in self.bufs.kv.iter().zip(&bufs.kv).enumerate() {
                let (oc, nc) = (self.bufs.kv_cap[i] as u64, bufs.kv_cap[i] as u64);
                if oc == nc {
                    enc.copy_buffer_to_buffer(old, 0, new, 0, old.size());
                } else {
                    // A cap that grew held every position so far in slot = position.
                    for b in 0..blocks {
                        enc.copy_buffer_to_buffer(old, b * oc * row, new, b * nc * row, keep as u64 * row);
                    }
                }
            }
            // A Gated DeltaNet layer's state holds the sequence so far whatever the context.
            let states = self
                .bufs
                .conv_state
                .iter()
                .zip(&bufs.conv_state)
                .chain(self.bufs.delta_state.iter().zip(&bufs.delta_state));
            for (old, new) in states {
                if let (Some(old), Some(new)) = (old, new) {
                    enc.copy_buffer_to_buffer(old, 0, new, 0, old.size());
                }
            }
            self.gpu.queue.submit([enc.finish()]);
        }
        (self.bufs, self.decode, self.prefill) = (bufs, decode, prefill);
        self.hidden_readback = None;
        (self.context, self.max_batch, self.pos) = (context, max_batch, keep);
        self.rope_key = fresh_key;
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

impl Runtime {
    /// Record and submit one step over `ids` (or, with `None`, over the token the GPU sampled
    /// in the previous step), copying the sampled token to readback `slot` and, if asked, the
    /// logits to the logits readback buffer.
    fn submit(&mut self, ids: Option<&[u32]>, slot: usize, copy: CopyOut, pick: Pick) -> wgpu::SubmissionIndex {
        self.submit_timed(ids, slot, copy, pick, None)
    }

    fn submit_timed(
        &mut self,
        ids: Option<&[u32]>,
        slot: usize,
        copy: CopyOut,
        pick: Pick,
        timer: Option<&Timer>,
    ) -> wgpu::SubmissionIndex {
        let n = ids.map_or(1, |i| i.len()) as u32;
        let gpu = &self.gpu;
        let mut enc = self.begin_step(ids, n, slot);
        let (program, pos) = (self.program(n, pick), self.pos as u32);
        // A prefill step goes to the GPU in parts, each submitted as soon as it is recorded, so
        // that the GPU works while the rest is recorded (and, in browsers, checked and
        // translated by the GPU process) instead of after all of it. Decode steps overlap that
        // work with the steps in flight; timed steps stay whole.
        let mut first = 0;
        if timer.is_none() && n > 1 {
            let live = program.dispatches(n as usize, pos as usize, pick);
            while live - first > PREFILL_PART {
                let mut e = gpu.device.create_command_encoder(&Default::default());
                let range = first..first + PREFILL_PART;
                program.record_range(&mut e.begin_compute_pass(&Default::default()), n, pos, pick, range);
                gpu.queue.submit([e.finish()]);
                first += PREFILL_PART;
            }
        }
        {
            let timestamp_writes = timer.map(|t| wgpu::ComputePassTimestampWrites {
                query_set: &t.queries,
                beginning_of_pass_write_index: Some(0),
                end_of_pass_write_index: Some(1),
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
            program.record_range(&mut pass, n, pos, pick, first..usize::MAX);
        }
        if let Some(t) = timer {
            t.resolve(&mut enc);
        }
        match copy {
            CopyOut::Nothing => {}
            CopyOut::Logits => {
                enc.copy_buffer_to_buffer(&self.bufs.logits, 0, &self.readback, 0, self.cfg.vocab as u64 * 4)
            }
            CopyOut::Hidden => {
                let bytes = n as u64 * self.cfg.hidden as u64 * 4;
                if let Some(rb) = &self.hidden_readback {
                    enc.copy_buffer_to_buffer(&self.bufs.xn, 0, rb, 0, bytes);
                }
            }
        }
        // A generation that ended with steps in flight (a stop token, a cancel) leaves their
        // readbacks requested: let go of the slot before it is written again.
        let rb = &self.token_readback[slot];
        if self.token_requested[slot].swap(false, Ordering::Relaxed) {
            rb.unmap();
        }
        enc.copy_buffer_to_buffer(&self.bufs.tokens, slot as u64 * 4, rb, 0, 4);
        self.pos += n as usize;
        gpu.queue.submit([enc.finish()])
    }

    /// Write a step over `n` tokens at the current position (`ids`, or with `None` the token the
    /// GPU chose last) and start its encoder.
    fn begin_step(&self, ids: Option<&[u32]>, n: u32, slot: usize) -> wgpu::CommandEncoder {
        if let Some(ids) = ids {
            self.gpu.queue.write_buffer(&self.bufs.ids, 0, bytemuck::cast_slice(ids));
        }
        let step = [n, self.pos as u32, slot as u32, 0];
        self.gpu.queue.write_buffer(&self.bufs.step, 0, bytemuck::cast_slice(&step));
        self.gpu.device.create_command_encoder(&Default::default())
    }

    /// The program a step over `n` tokens runs: decode for one token (unless it wants hidden
    /// states), else prefill.
    fn program(&self, n: u32, pick: Pick) -> &Program {
        if n == 1 && !pick.hidden {
            &self.decode
        } else {
            &self.prefill
        }
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
            let copy = if i + 1 == chunks.len() { CopyOut::Logits } else { CopyOut::Nothing };
            last = Some(self.submit(Some(chunk), 0, copy, Pick::GREEDY));
        }
        let bytes = self.gpu.read_mapped_after(&self.readback, self.cfg.vocab as u64 * 4, last).await?;
        let logits: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
        if logits.iter().any(|v| !v.is_finite()) {
            return Err(Error::Gpu("the model produced non-finite logits (NaN or infinity)".into()));
        }
        Ok(logits)
    }

    /// Queue one decode step whose token is chosen on the GPU: by argmax, or (`pick.sampled`)
    /// drawn with the parameters of the last `set_sampling`, among the tokens of the last
    /// `set_mask` when `pick.masked`. `first`: the token to feed, when the CPU
    /// chose it. Returns the step's submission; its token lands in readback `slot`.
    pub fn submit_token(&mut self, first: Option<u32>, slot: usize, pick: Pick) -> Result<wgpu::SubmissionIndex> {
        if let Some(t) = first {
            self.check_ids(&[t])?;
        } else if self.pos + 1 > self.context {
            return Err(Error::ContextOverflow { tokens: self.pos + 1, max_new: 0, context: self.context });
        }
        Ok(self.submit(first.as_ref().map(std::slice::from_ref), slot, CopyOut::Nothing, pick))
    }

    /// The final-norm hidden states of `ids` run from position 0 (`[token][hidden]`), for
    /// embeddings: no LM head runs. Long inputs of causal models go through in chunks; a
    /// bidirectional model's input must fit one step (`max_batch`). Leaves the cache holding
    /// `ids`.
    pub async fn hidden_states(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        self.pos = 0;
        self.check_ids(ids)?;
        if ids.len() > self.max_batch && !self.cfg.causal {
            return Err(Error::ContextOverflow { tokens: ids.len(), max_new: 0, context: self.max_batch });
        }
        self.prepare_rope(ids.len());
        let h = self.cfg.hidden;
        let bytes = (self.max_batch * h * 4) as u64;
        if self.hidden_readback.as_ref().is_none_or(|b| b.size() < bytes) {
            self.hidden_readback = Some(self.gpu.readback_buffer("hidden readback", bytes));
        }
        let mut out = Vec::with_capacity(ids.len() * h);
        for chunk in ids.chunks(self.max_batch) {
            let sub = self.submit(Some(chunk), 0, CopyOut::Hidden, Pick::HIDDEN);
            let len = (chunk.len() * h * 4) as u64;
            let rb = self.hidden_readback.as_ref().expect("made above");
            let bytes = self.gpu.read_mapped_after(rb, len, Some(sub)).await?;
            out.extend_from_slice(&bytemuck::pod_collect_to_vec::<u8, f32>(&bytes));
        }
        if out.iter().any(|v| !v.is_finite()) {
            return Err(Error::Gpu("the model produced non-finite hidden states (NaN or infinity)".into()));
        }
        Ok(out)
    }

    /// The tokens the next masked step may choose: one bit per token id (`cfg.vocab` bits).
    pub fn set_mask(&self, bits: &[u32]) {
        let n = self.cfg.vocab.div_ceil(32).min(bits.len());
        self.gpu.queue.write_buffer(&self.bufs.mask_bits, 0, bytemuck::cast_slice(&bits[..n]));
    }

    /// The parameters of the GPU sampler for the next `submit_token(.., true)` steps, the
    /// context so far for its repetition penalty and the tokens generated so far for the
    /// frequency and presence penalties (the sampler adds each token it draws to both).
    pub fn set_sampling(&mut self, p: &SamplingParams, history: &[u32], generated: &[u32]) -> Result<()> {
        p.validate()?;
        let layout = crate::ops::sample::SampleLayout::new(self.cfg.vocab);
        let (q, state) = (&self.gpu.queue, &self.bufs.sample_state);
        q.write_buffer(&self.bufs.sample_params, 0, &crate::ops::sample::params_bytes(p));
        q.write_buffer(state, layout.pen_offset_bytes(), bytemuck::cast_slice(&layout.pen_bits(history)));
        // What the parameters leave off is never read: no upload for it.
        if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
            q.write_buffer(state, layout.cnt_offset_bytes(), bytemuck::cast_slice(&layout.counts(generated)));
        }
        if !p.logit_bias.is_empty() {
            q.write_buffer(state, layout.bias_offset_bytes(), bytemuck::cast_slice(&layout.bias(&p.logit_bias)));
        }
        Ok(())
    }

    /// The token a step put in `slot`, once `map` (`StepQueue::push`) is answered.
    async fn read_token(&self, slot: usize, after: wgpu::SubmissionIndex, map: PendingMap) -> Result<u32> {
        let read = self.gpu.finish_map(&self.token_readback[slot], 4, map, Some(after)).await;
        // `finish_map` leaves the buffer unmapped on every path.
        self.token_requested[slot].store(false, Ordering::Relaxed);
        let bytes = read?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// GPU time of one decode step in milliseconds, from timestamp queries; `None` when the
    /// adapter has no timestamps. The step (choosing its token as `pick` says) runs at the
    /// current position and advances it.
    pub async fn time_decode_step(&mut self, pick: Pick) -> Result<Option<f64>> {
        if !self.gpu.summary.timestamps {
            return Ok(None);
        }
        let timer = Timer::new(&self.gpu, 2);
        let sub = self.submit_timed(None, 0, CopyOut::Nothing, pick, Some(&timer));
        Ok(timer.read_ms(&self.gpu, sub).await?.first().copied())
    }

    /// GPU time per kernel of one step over `n` tokens (decode when `n == 1`): (kernel,
    /// dispatches, total ms), slowest first. Timestamps between the dispatches of one pass where
    /// the adapter writes them inside passes (natively); else each dispatch in a pass of its own
    /// timed at its beginning and end (browsers offer only that). Either way each dispatch's
    /// time includes a few µs of the timing itself: compare kernels, not the sum with a step.
    /// `None` without timestamps or past 4,096 queries. The step advances the position; `pick`
    /// says how it chooses its token.
    pub async fn profile_step(&mut self, n: usize, pick: Pick) -> Result<Option<Vec<(String, usize, f64)>>> {
        let (inside, any) = (self.gpu.summary.timestamps_in_passes, self.gpu.summary.timestamps);
        if !any {
            return Ok(None);
        }
        let n32 = n as u32;
        let program = self.program(n32, pick);
        let dispatches = program.dispatches(n, self.pos, pick) as u32;
        let queries = if inside { dispatches + 1 } else { 2 * dispatches };
        // WebGPU's most queries in one set.
        if queries > 4096 {
            return Ok(None);
        }
        let timer = Timer::new(&self.gpu, queries);
        let ids = vec![1u32; n];
        let mut enc = self.begin_step(Some(&ids), n32, 0);
        let kernels = if inside {
            let mut pass = enc.begin_compute_pass(&Default::default());
            program.record_profiled(&mut pass, n32, self.pos as u32, pick, &timer.queries)
        } else {
            program.record_passes_timed(&mut enc, n32, self.pos as u32, pick, &timer.queries)
        };
        timer.resolve(&mut enc);
        let sub = self.gpu.queue.submit([enc.finish()]);
        self.pos += n;
        let ms = timer.read_ms(&self.gpu, sub).await?;
        // Between passes: each pass's end minus its beginning, every other interval.
        let ms: Vec<f64> = if inside { ms } else { ms.into_iter().step_by(2).collect() };
        let mut agg: Vec<(String, usize, f64)> = Vec::new();
        for (k, &ms) in kernels.iter().zip(&ms) {
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

    /// Dispatches of a greedy decode step at the current position (deep caches take one more per
    /// layer).
    pub fn decode_dispatches(&self) -> usize {
        self.dispatches_at(self.pos, Pick::GREEDY)
    }

    /// Dispatches of a decode step at cache position `pos` that picks its token as `pick` says.
    pub fn dispatches_at(&self, pos: usize, pick: Pick) -> usize {
        self.decode.dispatches(1, pos, pick)
    }

    /// Dispatches of a full prefill chunk.
    pub fn prefill_dispatches(&self) -> usize {
        self.prefill.dispatches(self.max_batch, 0, Pick::GREEDY)
    }
}

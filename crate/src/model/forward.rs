//! THE forward pass: one straight-line description of a transformer step for every supported
//! architecture, recorded once at load (`ops::Recorder`) into a list of dispatches with their
//! bind groups. A step then only writes a 16-byte uniform (token count, position, readback
//! slot) and replays the list in one compute pass and one submit (a prefill step in several, so
//! that the GPU starts before all of it is recorded: `runtime.rs` PREFILL_PART).
//!
//! Two programs come from the same description: single-token decode (`decode_layer`, fused: 5
//! dispatches per layer, 4 where the FFN is small enough to split) and batched prefill
//! (`prefill_layer`: tiled matmuls, separate norm/rope/activation kernels). Each kernel's
//! constants, grid and bindings live in `ops/`.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::family::QkNorm;
use crate::model::weights::{GpuMatrix, LayerWeights, ModelWeights};
use crate::model::ModelConfig;
use crate::ops::attention::{self, Heads};
use crate::ops::deltanet::{self, DeltaNet};
use crate::ops::elementwise::{self, NormRows};
use crate::ops::matmul::{self, MatMul, Ready};
use crate::ops::matvec::{self, Act, Epilogue, MatVec, Merge, Norm, RowRange};
use crate::ops::sample::{self, Sample, SampleLayout};
use crate::ops::{Recorder, When};

pub use crate::ops::attention::{MAX_ATTENTION_SPLITS, MAX_CONTEXT};
pub use crate::ops::{Pick, Program};

/// Token ids the GPU sampler can hold for the CPU to read back, one per in-flight step.
pub const TOKEN_SLOTS: usize = 8;

/// Elements of `Buffers::mm_part`: the split-K partial products of the prefill matmuls.
pub fn part_elems(cfg: &ModelConfig, max_tokens: usize) -> usize {
    let (h, ff, mix) = (cfg.hidden, cfg.ffn, cfg.mix_width());
    matmul::part_elems(&[(cfg.proj_rows(), h), (h, mix), (2 * ff, h), (ff, h), (h, ff)], max_tokens)
}

/// The widest prefill matmul input (the hidden state, the attention or token-mixer output, the
/// FFN activation): what `Buffers::a16` and `Buffers::a8` hold a token of.
fn matmul_input_width(cfg: &ModelConfig) -> usize {
    cfg.hidden.max(cfg.mix_width()).max(cfg.ffn)
}

/// Elements of `Buffers::a16`: every prefill matmul input of up to `max_tokens` tokens.
pub fn a16_elems(cfg: &ModelConfig, max_tokens: usize) -> usize {
    matmul::a16_elems(matmul_input_width(cfg), max_tokens)
}

/// Decode steps merge the split attention (64 positions a split) inside the output projection
/// (rowdot.wgsl MERGE) while every workgroup of it reads at most this many partial values
/// (hidden size x splits), and in attn_combine's own dispatch beyond (adapters whose splits do
/// not merge themselves: browsers, non-Vulkan). Natively on the H100 at 10 splits: SmolLM2 (5.8k
/// values) +1.4%, Qwen2.5-0.5B (9k) +2.3%, Llama-3.2-1B (20k) -1.5%, Phi-3-mini (31k) -3%.
/// Browsers take more: a dispatch costs Chromium's GPU process more than the merge's extra reads
/// cost the GPU. Chromium on the H100, session 15, the 1B shape at 512-640 positions with
/// 32,768, two rounds interleaved: 16 dispatches a step fewer, GPU time a step +2.5%, decode
/// 1,047 / 1,098 -> 1,178 / 1,189 tok/s (session 10 had seen the GPU time only).
const MERGE_MAX_VALUES: usize = if cfg!(target_arch = "wasm32") { 32768 } else { 12288 };

/// Activations for up to `max_tokens` tokens per step, the KV cache and the rope table.
pub struct Buffers {
    pub ids: wgpu::Buffer,
    pub x: wgpu::Buffer,
    pub xn: wgpu::Buffer,
    /// Per token: [q; k; v] (q rotated in place).
    pub qkv: wgpu::Buffer,
    pub attn: wgpu::Buffer,
    /// Per token: [gate; up].
    pub gu: wgpu::Buffer,
    pub h: wgpu::Buffer,
    /// Projection outputs that go through a post-norm before the residual add (Gemma).
    pub tmp: wgpu::Buffer,
    /// Split-KV attention partials: [heads][splits][head_dim + 4] (acc, max, sum, padding).
    pub part: wgpu::Buffer,
    /// Per head: decode attention splits finished this layer (attn_decode.wgsl FUSED; the last
    /// one resets it to 0).
    pub done: wgpu::Buffer,
    pub xlast: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    /// GPU-sampled token ids, one slot per in-flight step.
    pub tokens: wgpu::Buffer,
    /// Sampling (model/sampling.rs): scratch with the penalty set, list lengths, parameters.
    pub sample_state: wgpu::Buffer,
    pub sample_counters: wgpu::Buffer,
    pub sample_params: wgpu::Buffer,
    /// A constraint's allowed tokens, one bit each (mask.wgsl).
    pub mask_bits: wgpu::Buffer,
    pub step: wgpu::Buffer,
    pub rope: wgpu::Buffer,
    /// Rope table of sliding-window layers when their frequencies differ (Gemma 3).
    pub rope_local: Option<wgpu::Buffer>,
    /// The rotary table of NoPE layers: cos 1, sin 0 (rotating by it leaves q and k as they are).
    pub rope_none: Option<wgpu::Buffer>,
    /// Per layer: [k | v][kv_head][slot][head_dim / 2] packed f16 pairs; position p is in slot
    /// p % kv_cap[layer] (a 16-byte placeholder for Gated DeltaNet layers).
    pub kv: Vec<wgpu::Buffer>,
    /// Gated DeltaNet layers: the convolution's last inputs ([tap][channel]) and the recurrent
    /// state ([value head][key dim][value dim]), the sequence so far in place of a KV cache.
    pub conv_state: Vec<Option<wgpu::Buffer>>,
    pub delta_state: Vec<Option<wgpu::Buffer>>,
    /// Per token: the convolution's outputs (q | k | v of every head).
    pub lin: wgpu::Buffer,
    /// Per token and value head: the DeltaNet state's decay and beta (delta_prep.wgsl).
    pub gates: wgpu::Buffer,
    /// The prefill matmul's input in f16 on matrix units (to_f16.wgsl): whole 128-token tiles of
    /// the widest input row (a 16-byte placeholder elsewhere).
    pub a16: wgpu::Buffer,
    /// Split-K partial products of the wide matrix-unit matmuls (matrix units only).
    pub mm_part: wgpu::Buffer,
    /// The prefill matmul's input in 8 bits and its blocks' pairs (quant_rows.wgsl), where
    /// quantized matmuls run on 8-bit subgroup matrices (16-byte placeholders elsewhere).
    pub a8: wgpu::Buffer,
    pub a8s: wgpu::Buffer,
    /// The down projection's 8-bit input where the gate+up matmul writes it (its GLU epilogue),
    /// apart from `a8` and `a8s`, which that matmul is still reading.
    pub h8: wgpu::Buffer,
    pub h8s: wgpu::Buffer,
    /// Prefill attention's key splits on matrix units (`key_splits`; a 16-byte placeholder
    /// where the context needs one split or the adapter has no matrix units), of this many keys.
    pub attn_part: wgpu::Buffer,
    pub attn_split_keys: usize,
    pub max_tokens: usize,
    /// Cache slots per layer: the context, or on sliding-window layers just the window plus one
    /// prefill chunk (a chunk writes all its keys before any of its queries read).
    pub kv_cap: Vec<usize>,
    pub bytes: u64,
}

impl Buffers {
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, max_tokens: usize, context: usize) -> Result<Buffers> {
        let t = max_tokens as u64;
        let f = 4u64;
        let (a8_bytes, a8s_bytes) =
            if gpu.pipelines.i8_prefill { matmul::a8_bytes(matmul_input_width(cfg), max_tokens) } else { (16, 16) };
        let (h8_bytes, h8s_bytes) =
            if gpu.pipelines.i8_prefill { matmul::a8_bytes(cfg.ffn, max_tokens) } else { (16, 16) };
        let mut bytes = 0u64;
        let mut buf = |label: &str, n: u64| -> Result<wgpu::Buffer> {
            bytes += n;
            gpu.buffer(label, n)
        };
        let (h, ff) = (cfg.hidden as u64, cfg.ffn as u64);
        if context.div_ceil(64) > MAX_ATTENTION_SPLITS {
            return Err(Error::InvalidOption(format!(
                "a {context}-token context has {} attention splits of 64 positions; decode attention merges at most {MAX_ATTENTION_SPLITS} ({} tokens)",
                context.div_ceil(64),
                MAX_CONTEXT
            )));
        }
        let split_keys = attention::split_keys(context, cfg.n_heads, max_tokens);
        let kv_cap: Vec<usize> = (0..cfg.n_layers)
            .map(|i| {
                if cfg.layer_linear[i] {
                    0
                } else if cfg.layer_sliding[i] && cfg.sliding_window > 0 {
                    context.min(cfg.sliding_window + max_tokens)
                } else {
                    // Whole 64-slot chunks: prefill attention on matrix units reads keys a chunk at a time.
                    context.next_multiple_of(64)
                }
            })
            .collect();
        let mut kv = Vec::with_capacity(cfg.n_layers);
        for (i, &cap) in kv_cap.iter().enumerate() {
            let kv_bytes = (2 * cfg.n_kv_heads as u64 * cap as u64 * cfg.head_dim as u64 * 2).max(16);
            if kv_bytes > gpu.limits.max_storage_buffer_binding_size {
                return Err(Error::Limits(format!(
                    "a {cap}-token KV cache needs {} MiB per layer in one binding; the adapter allows {} MiB (use a shorter context)",
                    kv_bytes >> 20,
                    gpu.limits.max_storage_buffer_binding_size >> 20
                )));
            }
            kv.push(buf(&format!("kv.{i}"), kv_bytes)?);
        }
        let mut conv_state = Vec::with_capacity(cfg.n_layers);
        let mut delta_state = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let lin = cfg.linear.filter(|_| cfg.layer_linear[i]);
            let (c, d) = match lin {
                Some(l) => (
                    Some(buf(&format!("conv state {i}"), (l.conv_dim() * l.conv.saturating_sub(1).max(1)) as u64 * f)?),
                    Some(buf(&format!("delta state {i}"), (l.value_heads * l.key_dim * l.value_dim) as u64 * f)?),
                ),
                None => (None, None),
            };
            conv_state.push(c);
            delta_state.push(d);
        }
        let table = rope_table_for(cfg, 1, context);
        let local = match &cfg.rope_local_inv {
            Some(inv) => {
                let t = rope_table(inv, 1.0, context);
                let b = buf("rope local", t.len() as u64 * 4)?;
                gpu.queue.write_buffer(&b, 0, bytemuck::cast_slice(&t));
                Some(b)
            }
            None => None,
        };
        let none = match cfg.layer_nope.contains(&true) {
            true => {
                let t: Vec<f32> = (0..table.len()).map(|i| if i % 2 == 0 { 1.0 } else { 0.0 }).collect();
                let b = buf("rope none", t.len() as u64 * 4)?;
                gpu.queue.write_buffer(&b, 0, bytemuck::cast_slice(&t));
                Some(b)
            }
            false => None,
        };
        let b = Buffers {
            ids: buf("ids", t.max(4) * 4)?,
            // Past the hidden state of a decode step: a split FFN's partials (matvec::ffn_split).
            x: buf("x", (t * h).max(h + matvec::FFN_SPLIT_MAX_VALUES as u64) * f)?,
            xn: buf("xn", t * h * f)?,
            qkv: buf("qkv", t * cfg.proj_rows() as u64 * f)?,
            attn: buf("attn", t * cfg.mix_width() as u64 * f)?,
            lin: buf("conv out", t * cfg.linear.map_or(1, |l| l.conv_dim()) as u64 * f)?,
            gates: buf("delta gates", t * cfg.linear.map_or(1, |l| 2 * l.value_heads) as u64 * f)?,
            conv_state,
            delta_state,
            gu: buf("gu", t * 2 * ff * f)?,
            h: buf("h", t * ff * f)?,
            a16: buf("a16", if gpu.pipelines.matrix_units { a16_elems(cfg, max_tokens) as u64 * 2 } else { 16 })?,
            mm_part: buf(
                "matmul parts",
                if gpu.pipelines.matrix_units { part_elems(cfg, max_tokens).max(4) as u64 * 4 } else { 16 },
            )?,
            attn_part: {
                let floats = attention::part_floats(context, cfg.n_heads, cfg.head_dim, split_keys, max_tokens);
                buf(
                    "attn key splits",
                    if gpu.pipelines.matrix_units && context > split_keys { floats as u64 * 4 } else { 16 },
                )?
            },
            attn_split_keys: split_keys,
            max_tokens,
            a8: buf("a8", a8_bytes.max(16))?,
            a8s: buf("a8 scales", a8s_bytes.max(16))?,
            h8: buf("h8", h8_bytes.max(16))?,
            h8s: buf("h8 scales", h8s_bytes.max(16))?,
            tmp: buf("tmp", t * h * f)?,
            part: buf("attn partials", (cfg.n_heads * context.div_ceil(64) * (cfg.head_dim + 4)) as u64 * f)?,
            done: buf("attn splits done", cfg.n_heads as u64 * 4)?,
            xlast: buf("xlast", h * f)?,
            // After the logits: the LM head workgroups' argmax partials (at most one per 4 rows
            // of each of its row ranges).
            logits: buf("logits", (cfg.vocab + 2 * (cfg.vocab / 4 + 64)) as u64 * f)?,
            tokens: buf("tokens", TOKEN_SLOTS as u64 * 4)?,
            sample_state: buf("sample state", SampleLayout::new(cfg.vocab).words as u64 * 4)?,
            sample_counters: buf("sample counters", 16)?,
            sample_params: gpu.uniform("sample params", crate::ops::sample::PARAMS_BYTES as u64),
            mask_bits: buf("mask bits", cfg.vocab.div_ceil(32) as u64 * 4)?,
            rope: buf("rope", table.len() as u64 * 4)?,
            rope_local: local,
            rope_none: none,
            kv_cap,
            step: gpu.uniform("step", 16),
            kv,
            bytes: 0,
        };
        gpu.queue.write_buffer(&b.rope, 0, bytemuck::cast_slice(&table));
        Ok(Buffers { bytes: bytes + 16 + 32, ..b })
    }
}

impl Buffers {
    /// Where prefill attention on matrix units leaves its key splits.
    fn key_splits(&self) -> attention::KeySplits<'_> {
        attention::KeySplits { part: &self.attn_part, keys: self.attn_split_keys, max_tokens: self.max_tokens }
    }
}

/// cos/sin of position * inverse frequency for every cached position, computed in f64 and
/// scaled by `factor` (longrope's attention factor).
pub fn rope_table(inv: &[f64], factor: f64, context: usize) -> Vec<f32> {
    let mut t = Vec::with_capacity(context * inv.len() * 2);
    for p in 0..context {
        for &f in inv {
            let a = p as f64 * f;
            t.push((a.cos() * factor) as f32);
            t.push((a.sin() * factor) as f32);
        }
    }
    t
}

/// The rotary table of full-attention layers for a generation whose prompt has `prompt_len`
/// tokens. transformers evaluates length-dependent rope types (longrope, dynamic NTK) once per
/// forward call at s = last position + 1: the prompt in one call, then one call per generated
/// token, whose keys stay in the cache as they were rotated. So position p rotates with the
/// frequencies for s = max(prompt_len, p + 1).
pub fn rope_table_for(cfg: &ModelConfig, prompt_len: usize, context: usize) -> Vec<f32> {
    if cfg.rope_dynamic.is_none() {
        return rope_table(&cfg.rope_inv_freq(), cfg.rope_attn_factor, context);
    }
    let mut t = Vec::with_capacity(context * cfg.rope_dim);
    let (mut key, mut inv) = (usize::MAX, Vec::new());
    for p in 0..context {
        let s = prompt_len.max(p + 1);
        if cfg.rope_table_key(s) != key {
            key = cfg.rope_table_key(s);
            inv = cfg.rope_inv_freq_at(s);
        }
        for &f in &inv {
            let a = p as f64 * f;
            t.push((a.cos() * cfg.rope_attn_factor) as f32);
            t.push((a.sin() * cfg.rope_attn_factor) as f32);
        }
    }
    t
}

/// The model's side of every step: what each layer reads and writes.
struct Model<'a> {
    cfg: &'a ModelConfig,
    w: &'a ModelWeights,
    bf: &'a Buffers,
    context: usize,
}

impl<'a> Model<'a> {
    fn norm(&self, at: usize) -> Norm {
        Norm { at, eps: self.cfg.rms_eps, offset: self.cfg.norm_offset }
    }

    fn act(&self) -> Act {
        Act { gelu: self.cfg.gelu, relu2: self.cfg.relu2, ungated: !self.cfg.gated }
    }

    /// A decode matvec with the model's activation.
    fn mv(
        &self,
        label: &'static str,
        w: &'a crate::model::weights::GpuMatrix,
        x: &'a wgpu::Buffer,
        y: &'a wgpu::Buffer,
        vecs: &'a wgpu::Buffer,
    ) -> MatVec<'a> {
        MatVec { act: self.act(), ..MatVec::new(label, w, x, y, vecs) }
    }

    /// A prefill matmul.
    fn mm(
        &self,
        label: &'static str,
        w: &'a crate::model::weights::GpuMatrix,
        a: &'a wgpu::Buffer,
        c: &'a wgpu::Buffer,
        vecs: &'a wgpu::Buffer,
    ) -> MatMul<'a> {
        MatMul {
            label,
            w,
            a,
            c,
            vecs,
            bias: None,
            accumulate: false,
            scale: 1.0,
            a16: &self.bf.a16,
            a_ready: false,
            part: &self.bf.mm_part,
            a8: &self.bf.a8,
            a8s: &self.bf.a8s,
            tile: None,
            glu: None,
        }
    }

    /// Prefill: y = norm(x) over rows of `width` (struct update for `add` and `ready`).
    fn norm_rows<'b>(
        &self,
        label: &'static str,
        (x, vecs, at, y): (&'b wgpu::Buffer, &'b wgpu::Buffer, usize, &'b wgpu::Buffer),
        width: usize,
    ) -> NormRows<'b> {
        let norm = self.norm(at);
        NormRows { label, x, vecs, y, width, norm, last_only: false, add: false, ready: None }
    }

    /// The form the producer of a prefill matmul's input (rmsnorm, glu) also writes it in for
    /// the matmul's kernel, sparing the conversion pass: f16 on matrix units (rows of even
    /// width), 8-bit planes for the 8-bit kernel.
    fn ready_for(&self, r: &Recorder, w: &crate::model::weights::GpuMatrix) -> Option<Ready<'a>> {
        match matmul::tile_for(r, w) {
            matmul::Tile::Coop | matmul::Tile::Wide if w.cols.is_multiple_of(2) => Some(Ready::F16(&self.bf.a16)),
            matmul::Tile::I8 => Some(Ready::I8(&self.bf.a8, &self.bf.a8s)),
            _ => None,
        }
    }

    /// Layer `i`'s attention geometry.
    fn heads(&self, i: usize) -> Heads {
        let c = self.cfg;
        let sliding = c.layer_sliding[i] && c.sliding_window > 0;
        Heads {
            head_dim: c.head_dim,
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            context: self.context,
            cap: self.bf.kv_cap[i],
            scale: c.attn_scale,
            softcap: c.attn_softcap,
            window: if sliding { c.sliding_window } else { 0 },
            q_stride: c.attn_rows(),
        }
    }

    fn rope(&self, i: usize) -> &'a wgpu::Buffer {
        let bf = self.bf;
        if let Some(none) = bf.rope_none.as_ref().filter(|_| self.cfg.layer_nope[i]) {
            none
        } else if self.cfg.layer_sliding[i] {
            bf.rope_local.as_ref().unwrap_or(&bf.rope)
        } else {
            &bf.rope
        }
    }

    /// Where the token mixer or the FFN leaves its output: added to the residual, or stored for
    /// its post-norm (at `post`) that adds it.
    fn residual(&self, post: Option<usize>) -> (&'a wgpu::Buffer, Epilogue) {
        match post {
            Some(_) => (&self.bf.tmp, Epilogue::Store),
            None => (&self.bf.x, Epilogue::Add),
        }
    }

    /// The norm of a token mixer's input (None: it reads x as it is).
    fn attn_norm(&self) -> Option<Norm> {
        self.w.offsets.attn_norm.map(|at| self.norm(at))
    }

    /// Prefill: the input of a layer's first matmul, `w`: the rows of x normalised by the norm
    /// at `at` (written as `w`'s kernel reads them) into xn, or x itself where the layer has no
    /// such norm. Returns the input and whether it is matmul-ready.
    fn prefill_input(
        &self,
        r: &mut Recorder,
        lw: &'a LayerWeights,
        at: Option<usize>,
        w: &GpuMatrix,
    ) -> (&'a wgpu::Buffer, bool) {
        let bf = self.bf;
        let Some(at) = at else { return (&bf.x, false) };
        let ready = self.ready_for(r, w);
        elementwise::rmsnorm(
            r,
            NormRows { ready, ..self.norm_rows("norm", (&bf.x, &lw.vecs, at, &bf.xn), self.cfg.hidden) },
        );
        (&bf.xn, ready.is_some())
    }

    /// OLMo 2's norms of q and of k over their whole projections, in place in [q; k; v].
    fn qk_norm_whole(&self, r: &mut Recorder, lw: &LayerWeights) {
        let (c, off) = (self.cfg, self.w.offsets);
        if let (QkNorm::Whole, Some(qn), Some(kn)) = (c.qk_norm, off.q_norm, off.k_norm) {
            let stride = c.attn_rows();
            elementwise::rmsnorm_in_place(r, &self.bf.qkv, &lw.vecs, self.norm(qn), (0, c.q_dim(), stride));
            elementwise::rmsnorm_in_place(r, &self.bf.qkv, &lw.vecs, self.norm(kn), (c.q_dim(), c.kv_dim(), stride));
        }
    }

    /// A post-norm of a projection's output, added to the residual.
    fn post_norm(&self, r: &mut Recorder, lw: &LayerWeights, at: Option<usize>) {
        if let Some(at) = at {
            let rows = self.norm_rows("norm", (&self.bf.tmp, &lw.vecs, at, &self.bf.x), self.cfg.hidden);
            elementwise::rmsnorm(r, NormRows { add: true, ..rows });
        }
    }

    /// A Gated DeltaNet layer's buffers (Qwen3.5).
    fn deltanet(&self, i: usize, lw: &'a LayerWeights) -> DeltaNet<'a> {
        let (bf, off) = (self.bf, self.w.offsets);
        let (Some(conv_state), Some(delta_state)) = (&bf.conv_state[i], &bf.delta_state[i]) else {
            unreachable!("Buffers::new gives every linear layer its state")
        };
        let at = deltanet::Offsets {
            conv_w: off.conv_w.unwrap_or(0),
            dt_bias: off.dt_bias.unwrap_or(0),
            a_neg: off.a_neg.unwrap_or(0),
            gnorm: off.gnorm.unwrap_or(0),
        };
        let (proj, stride, vecs, lin, gates, out) = (&bf.qkv, lw.wqkv.rows, &lw.vecs, &bf.lin, &bf.gates, &bf.attn);
        DeltaNet { proj, stride, vecs, at, lin, gates, conv_state, delta_state, out, eps: self.cfg.rms_eps }
    }

    /// Units a workgroup of layer `i`'s FFN split in one dispatch (matvec::ffn_split), or None:
    /// not the last layer's (whose output the LM head reads whole), and only plain FFNs whose
    /// output is added to x as it is.
    fn ffn_split(&self, r: &Recorder, i: usize) -> Option<usize> {
        let (cfg, off, lw) = (self.cfg, self.w.offsets, &self.w.layers[i]);
        let plain = off.post_ffn_norm.is_none()
            && off.ffn_norm.is_some()
            && cfg.gated
            && off.ffn_sub_norm.is_none()
            && off.gate_up_bias.is_none()
            && off.down_bias.is_none()
            && cfg.residual_scale == 1.0;
        (plain && i + 1 < cfg.n_layers).then(|| matvec::ffn_split_units(r, &lw.w_gate_up, &lw.w_down)).flatten()
    }

    /// One token through layer `i`: each projection a matvec with its norm fused in front and
    /// its residual add behind; attention split over the cache, merged by itself (`fused`),
    /// inside the output projection (caches of up to `short_max` positions) or on its own.
    fn decode_layer(&self, r: &mut Recorder, i: usize, fused: bool, short_max: u32) {
        let (cfg, bf, off, lw) = (self.cfg, self.bf, self.w.offsets, &self.w.layers[i]);
        let (out, epilogue) = self.residual(off.post_attn_norm);
        let scale = cfg.residual_scale;
        let h = self.heads(i);
        // The previous layer's split FFN left its output as partials after x: this layer's
        // first projection adds them to x as it reads it, the output projection to the residual.
        let parts = match i.checked_sub(1).and_then(|p| self.ffn_split(r, p)) {
            Some(units) => cfg.ffn / units,
            None => 0,
        };
        let (x_parts, y_parts) = (parts, parts);
        if let Some(l) = cfg.linear.filter(|_| cfg.layer_linear[i]) {
            let norm = self.attn_norm();
            matvec::matvec(r, MatVec { norm, x_parts, ..self.mv("in proj", &lw.wqkv, &bf.x, &bf.qkv, &lw.vecs) });
            deltanet::mix(r, l, self.deltanet(i, lw), false);
            matvec::matvec(r, MatVec { epilogue, y_parts, scale, ..self.mv("o", &lw.wo, &bf.attn, out, &lw.vecs) });
        } else {
            // The fused q/k/v kernel rotates row pairs as they are computed; a per-head q/k norm
            // needs the whole head first, so those models take the matvec + rope_kv route.
            // The fused kernel always normalises x (qkv_rope.wgsl).
            if let (QkNorm::None, false, Some(norm)) = (cfg.qk_norm, cfg.attn_gate, self.attn_norm()) {
                let (x_tile, q_temp) = (None, cfg.q_temperature);
                let (q_dim, kv_dim, head_dim, rot, cap) =
                    (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim, cfg.rope_dim, h.cap);
                let (w, x, qkv, vecs, kv, rope, bias) =
                    (&lw.wqkv, &bf.x, &bf.qkv, &lw.vecs, &bf.kv[i], self.rope(i), off.qkv_bias);
                matvec::qkv_rope(
                    r,
                    matvec::QkvRope {
                        w,
                        x,
                        qkv,
                        vecs,
                        kv,
                        rope,
                        norm,
                        bias,
                        q_dim,
                        kv_dim,
                        head_dim,
                        rot,
                        cap,
                        x_parts,
                        x_tile,
                        q_temp,
                    },
                );
            } else {
                let (norm, bias) = (self.attn_norm(), off.qkv_bias);
                matvec::matvec(r, MatVec { norm, bias, x_parts, ..self.mv("qkv", &lw.wqkv, &bf.x, &bf.qkv, &lw.vecs) });
                self.qk_norm_whole(r, lw);
                self.rope_kv(r, i, h);
            }
            let (qkv, kv, part, done) = (&bf.qkv, &bf.kv[i], &bf.part, &bf.done);
            attention::decode(r, h, attention::Decode { qkv, kv, part, out: &bf.attn, done, fused });
            // Deep caches merge the attention splits in their own dispatch; short ones inside
            // the output projection, one dispatch fewer a layer.
            if !fused {
                r.filter.when = When::Long;
                attention::combine(r, h, &bf.part, &bf.attn);
            }
            self.attn_gate(r);
            let (norm, bias) = (off.attn_sub_norm.map(|a| self.norm(a)), off.o_bias);
            let o = self.mv("o", &lw.wo, &bf.attn, out, &lw.vecs);
            matvec::matvec(r, MatVec { norm, bias, epilogue, y_parts, scale, ..o });
            if !fused && short_max > 0 {
                r.filter.when = When::Short;
                let merge = Some(Merge { context: self.context, head_dim: cfg.head_dim, heads: cfg.n_heads });
                matvec::matvec(
                    r,
                    MatVec { merge, bias, epilogue, y_parts, scale, ..self.mv("o", &lw.wo, &bf.part, out, &lw.vecs) },
                );
            }
            r.filter.when = When::Always;
        }
        self.post_norm(r, lw, off.post_attn_norm);
        let (out, epilogue) = self.residual(off.post_ffn_norm);
        if let (Some(units), Some(at)) = (self.ffn_split(r, i), off.ffn_norm) {
            let (gate_up, down, x, vecs, norm, act) =
                (&lw.w_gate_up, &lw.w_down, &bf.x, &lw.vecs, self.norm(at), self.act());
            matvec::ffn_split(r, matvec::FfnSplit { gate_up, down, x, vecs, norm, act, units });
            return;
        }
        let (norm, bias) = (off.ffn_norm.map(|at| self.norm(at)), off.gate_up_bias);
        let glu = if cfg.gated { Epilogue::Glu } else { Epilogue::Act };
        matvec::matvec(
            r,
            MatVec { norm, bias, epilogue: glu, ..self.mv("gate+up+glu", &lw.w_gate_up, &bf.x, &bf.h, &lw.vecs) },
        );
        let (norm, bias) = (off.ffn_sub_norm.map(|a| self.norm(a)), off.down_bias);
        matvec::matvec(r, MatVec { norm, bias, epilogue, scale, ..self.mv("down", &lw.w_down, &bf.h, out, &lw.vecs) });
        self.post_norm(r, lw, off.post_ffn_norm);
    }

    /// A chunk of tokens through layer `i`: norm, matmul, rope + cache append, attention over
    /// the cache, matmul with the residual, norm, matmul, GLU, matmul with the residual.
    fn prefill_layer(&self, r: &mut Recorder, i: usize) {
        let (cfg, bf, off, lw) = (self.cfg, self.bf, self.w.offsets, &self.w.layers[i]);
        let (out, epilogue) = self.residual(off.post_attn_norm);
        let scale = cfg.residual_scale;
        let accumulate = epilogue == Epilogue::Add;
        let (xin, a_ready) = self.prefill_input(r, lw, off.attn_norm, &lw.wqkv);
        if let Some(l) = cfg.linear.filter(|_| cfg.layer_linear[i]) {
            matmul::matmul(r, MatMul { a_ready, ..self.mm("in proj", &lw.wqkv, xin, &bf.qkv, &lw.vecs) });
            deltanet::mix(r, l, self.deltanet(i, lw), true);
            matmul::matmul(r, MatMul { accumulate, scale, ..self.mm("o", &lw.wo, &bf.attn, out, &lw.vecs) });
        } else {
            let bias = off.qkv_bias;
            matmul::matmul(r, MatMul { bias, a_ready, ..self.mm("qkv", &lw.wqkv, xin, &bf.qkv, &lw.vecs) });
            let h = self.heads(i);
            self.qk_norm_whole(r, lw);
            self.rope_kv(r, i, h);
            // Attention writes the output projection's 8-bit input itself, unless a gate or a
            // sub-norm comes between.
            let o_ready = match self.ready_for(r, &lw.wo) {
                Some(ready @ Ready::I8(..))
                    if attention::prefill_writes_i8(r, &h) && !cfg.attn_gate && off.attn_sub_norm.is_none() =>
                {
                    Some(ready)
                }
                _ => None,
            };
            let bufs = (&bf.qkv, &bf.kv[i], &bf.attn);
            attention::prefill(r, h, cfg.causal, bufs, bf.key_splits(), o_ready);
            self.attn_gate(r);
            // BitNet's sub-norm of the attention output before the projection.
            let o_in = match off.attn_sub_norm {
                Some(at) => {
                    elementwise::rmsnorm(r, self.norm_rows("sub norm", (&bf.attn, &lw.vecs, at, &bf.gu), cfg.q_dim()));
                    &bf.gu
                }
                None => &bf.attn,
            };
            let (bias, a_ready) = (off.o_bias, o_ready.is_some());
            matmul::matmul(r, MatMul { bias, accumulate, a_ready, scale, ..self.mm("o", &lw.wo, o_in, out, &lw.vecs) });
        }
        self.post_norm(r, lw, off.post_attn_norm);
        let (out, epilogue) = self.residual(off.post_ffn_norm);
        let accumulate = epilogue == Epilogue::Add;
        let (xin, a_ready) = self.prefill_input(r, lw, off.ffn_norm, &lw.w_gate_up);
        let bias = off.gate_up_bias;
        let gate_up = MatMul { bias, a_ready, ..self.mm("gate+up", &lw.w_gate_up, xin, &bf.gu, &lw.vecs) };
        // The GLU writes the down projection's input as its kernel reads it, unless a sub-norm
        // comes between; where the 8-bit kernel takes both matrices, inside the gate+up matmul.
        let ready = self.ready_for(r, &lw.w_down).filter(|_| off.ffn_sub_norm.is_none());
        let fused = matches!(ready, Some(Ready::I8(..)))
            && cfg.gated
            && matmul::tile_for(r, &lw.w_gate_up) == matmul::Tile::I8
            && cfg.ffn.is_multiple_of(32);
        if fused {
            let h = Ready::I8(&bf.h8, &bf.h8s);
            matmul::matmul(r, MatMul { glu: Some((self.act(), h)), ..gate_up });
        } else {
            matmul::matmul(r, gate_up);
            elementwise::glu(r, cfg.ffn, self.act(), &bf.gu, &bf.h, ready);
        }
        let down_in = match off.ffn_sub_norm {
            Some(at) => {
                elementwise::rmsnorm(r, self.norm_rows("sub norm", (&bf.h, &lw.vecs, at, &bf.gu), cfg.ffn));
                &bf.gu
            }
            None => &bf.h,
        };
        let (bias, a_ready) = (off.down_bias, ready.is_some());
        let down = MatMul { bias, accumulate, a_ready, scale, ..self.mm("down", &lw.w_down, down_in, out, &lw.vecs) };
        let (a8, a8s) = if fused { (&bf.h8, &bf.h8s) } else { (down.a8, down.a8s) };
        matmul::matmul(r, MatMul { a8, a8s, ..down });
        self.post_norm(r, lw, off.post_ffn_norm);
    }

    fn rope_kv(&self, r: &mut Recorder, i: usize, h: Heads) {
        let (cfg, bf, off, lw) = (self.cfg, self.bf, self.w.offsets, &self.w.layers[i]);
        let qk_norm = matches!(cfg.qk_norm, QkNorm::Head | QkNorm::HeadAfterRope)
            .then(|| (off.q_norm.unwrap_or(0), off.k_norm.unwrap_or(0), self.norm(0)));
        let after = cfg.qk_norm == QkNorm::HeadAfterRope;
        let (qkv, kv, vecs, rope, rot) = (&bf.qkv, &bf.kv[i], &lw.vecs, self.rope(i), cfg.rope_dim);
        let q_temp = cfg.q_temperature;
        attention::rope_kv(r, h, attention::RopeKv { qkv, kv, vecs, rope, rot, qk_norm, after, q_temp });
    }

    /// Qwen3.5's full-attention output gate (nothing for other models).
    fn attn_gate(&self, r: &mut Recorder) {
        let c = self.cfg;
        if c.attn_gate {
            attention::gate(r, c.q_dim(), c.kv_dim(), c.attn_rows(), &self.bf.qkv, &self.bf.attn);
        }
    }

    /// The LM head over every row range of the (streamed) matrix, one dispatch each, leaving
    /// per-workgroup argmax pairs after all the logits; returns how many.
    fn lm_head(&self, r: &mut Recorder, x: &wgpu::Buffer, norm: bool) -> u32 {
        let (m, vecs, y) = (self.w.lm_head(), &self.w.out_vecs, &self.bf.logits);
        let (norm, softcap, scale) = (norm.then(|| self.norm(0)), self.cfg.final_softcap, self.cfg.logit_scale);
        let mut pairs = 0;
        for (first, part) in m.ranges() {
            let rows = Some(RowRange { first, y_rows: m.rows, wg0: pairs as usize });
            pairs += matvec::matvec(
                r,
                MatVec { norm, softcap, argmax: true, rows, scale, ..self.mv("lm head", part, x, y, vecs) },
            );
        }
        pairs
    }
}

/// Build the program for steps of one token (`batched = false`) or many (`batched = true`).
pub fn build(
    gpu: &Gpu,
    cfg: &ModelConfig,
    w: &ModelWeights,
    bf: &Buffers,
    context: usize,
    batched: bool,
) -> Result<Program> {
    let mut r = Recorder::new(gpu, &bf.step);
    let m = Model { cfg, w, bf, context };
    // Attention whose splits merge themselves (Vulkan, attn_decode.wgsl FUSED) needs no merge;
    // a gated or normed attention output needs the merged attention in memory; otherwise up to
    // 16 splits (the kernel's MSPLITS), none for models too wide to gain.
    let fused = r.caps.fused_attention && !batched;
    let short_max = if fused || batched || cfg.attn_gate || cfg.sub_norms {
        0
    } else {
        // Natively, FERROLM_MERGE_MAX_VALUES=n moves the limit (measuring the browsers' path
        // with FERROLM_NO_FUSED_ATTENTION=1, not a setting).
        #[cfg(not(target_arch = "wasm32"))]
        let max_values =
            std::env::var("FERROLM_MERGE_MAX_VALUES").ok().and_then(|v| v.parse().ok()).unwrap_or(MERGE_MAX_VALUES);
        #[cfg(target_arch = "wasm32")]
        let max_values = MERGE_MAX_VALUES;
        (max_values / cfg.q_dim()).min(16) as u32 * 64
    };
    for (first, part) in w.embed.ranges() {
        elementwise::embed(&mut r, part, first, cfg.embed_scale, &bf.ids, &bf.x);
    }
    for i in 0..w.layers.len() {
        if batched {
            m.prefill_layer(&mut r, i);
        } else {
            m.decode_layer(&mut r, i, fused, short_max);
        }
    }
    // Prefill for embeddings ends with every token's final norm; for generation with the LM
    // head over the last token.
    if batched {
        r.filter.head = Some(true);
        elementwise::rmsnorm(&mut r, m.norm_rows("norm", (&bf.x, &w.out_vecs, 0, &bf.xn), cfg.hidden));
    }
    r.filter.head = Some(false);
    let parts = if batched {
        let (x, vecs, y, norm) = (&bf.x, &w.out_vecs, &bf.xlast, m.norm(0));
        elementwise::rmsnorm(
            &mut r,
            NormRows { label: "norm", x, vecs, y, width: cfg.hidden, norm, last_only: true, add: false, ready: None },
        );
        m.lm_head(&mut r, &bf.xlast, false)
    } else {
        m.lm_head(&mut r, &bf.x, true)
    };
    r.filter.pick = Some(false);
    sample::argmax(&mut r, cfg.vocab, parts, &bf.logits, &bf.ids, &bf.tokens);
    // Decode steps may sample instead; prefill chunks never do (the first token comes from the
    // prompt's logits, read back).
    r.filter.pick = Some(true);
    if !batched {
        r.filter.masked = true;
        sample::mask(&mut r, cfg.vocab, &bf.logits, &bf.mask_bits);
        r.filter.masked = false;
        let (logits, ids, tokens, state, params, counters) =
            (&bf.logits, &bf.ids, &bf.tokens, &bf.sample_state, &bf.sample_params, &bf.sample_counters);
        sample::sample(&mut r, cfg.vocab, Sample { logits, ids, tokens, state, params, counters });
    }
    r.finish(short_max)
}

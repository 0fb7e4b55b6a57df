//! THE forward pass: one straight-line description of a transformer step for every supported
//! architecture, built once at load into a list of dispatches with their bind groups. A step
//! then only writes a 16-byte uniform (token count, position, readback slot) and replays the
//! list in one compute pass and one submit.
//!
//! Two programs come from the same description: single-token decode (fused: 5 dispatches per
//! layer) and batched prefill (tiled matmuls, separate norm/rope/activation kernels).

use crate::error::{Error, Result};
use crate::gpu::{Gpu, Kernel, Pipeline};
use crate::model::sampling::{SampleLayout, PHASES};
use crate::model::streamed::StreamedMatrix;
use crate::model::weights::{GpuMatrix, ModelWeights};
use crate::model::ModelConfig;
use crate::weights::pack::Layout;
use std::rc::Rc;

/// Token ids the GPU sampler can hold for the CPU to read back, one per in-flight step.
pub const TOKEN_SLOTS: usize = 8;

/// How many workgroups a dispatch needs for a step of `t` tokens.
#[derive(Clone, Copy, Debug)]
enum Grid {
    Fixed(u32),
    Fixed2(u32, u32),
    /// (t, 1): one workgroup per token.
    Tokens,
    /// (x, t): one workgroup row per token.
    PerToken(u32),
    /// 64x64 output tiles over (n, t).
    Tiles(u32),
    /// 128x128 output tiles over (n, t) (matmul_coop_wide.wgsl).
    WideTiles(u32),
    /// (heads, ceil(t / 64)): 64 queries of a head per workgroup (attention_coop.wgsl).
    QueryBlocks(u32),
    /// `n` elements per token, 256 per workgroup, folded into 2-D past 65535 workgroups.
    Elems(u32),
    /// (heads, splits): one workgroup per 64 cached positions (decode attention).
    Splits(u32),
}

impl Grid {
    fn dims(self, t: u32, pos: u32) -> [u32; 3] {
        match self {
            Grid::Fixed(x) => [x, 1, 1],
            Grid::Fixed2(x, y) => [x, y, 1],
            Grid::Tokens => [t, 1, 1],
            Grid::PerToken(x) => [x, t, 1],
            Grid::Tiles(n) => [n.div_ceil(MATMUL_TILE_N), t.div_ceil(MATMUL_TILE_M), 1],
            Grid::WideTiles(n) => [n.div_ceil(WIDE_TILE), t.div_ceil(WIDE_TILE), 1],
            Grid::QueryBlocks(heads) => [heads, t.div_ceil(64), 1],
            Grid::Elems(n) => {
                let wgs = (n * t).div_ceil(256);
                let y = wgs.div_ceil(65535);
                [wgs.div_ceil(y), y, 1]
            }
            Grid::Splits(heads) => [heads, (pos + t).div_ceil(64), 1],
        }
    }
}

/// The prefill matmul's output tile (matmul.wgsl BN x BM): weight rows x tokens.
pub const MATMUL_TILE_N: u32 = 64;
pub const MATMUL_TILE_M: u32 = 64;
/// The wide matrix-unit matmul's tile (matmul_coop_wide.wgsl WM = WN).
pub const WIDE_TILE: u32 = 128;
/// Weight matrices with at least this many rows take the wide tile on matrix units; narrower
/// ones keep 64x64 tiles, which give the GPU more workgroups. H100, 512 tokens: rows of 2,048
/// (Llama-3.2-1B's down and o) ran 45% slower wide (64 workgroups), rows of 3,072 (Phi-3's down)
/// 32% faster. Measured again with A read in f16 from memory (session 9, 1B pp512): thresholds
/// of 1,024 / 2,048 / 3,072 rows gave 20.5k / 20.2k / 21.4k tok/s.
pub const WIDE_MIN_ROWS: usize = 3072;

/// Elements of `Buffers::a16`: every prefill matmul input (the hidden state, the attention or
/// token-mixer output, the FFN activation) of up to `max_tokens` tokens, rounded up to whole
/// 128-token tiles, which the matrix-unit kernels read whole.
pub fn a16_elems(cfg: &ModelConfig, max_tokens: usize) -> usize {
    max_tokens.next_multiple_of(WIDE_TILE as usize) * cfg.hidden.max(cfg.mix_width()).max(cfg.ffn)
}

/// Workgroup memory of attention_coop.wgsl: f16 queries and probabilities, f32 scores.
const ATTENTION_COOP_STORAGE: u32 = 44 * 1024;

/// Decode attention merges its 64-position splits with one weight each in workgroup memory
/// (attn_merge.wgsl): 8 KiB at this many, inside WebGPU's 16 KiB beside the kernel's other arrays.
pub const MAX_ATTENTION_SPLITS: usize = 2048;
/// The longest context, in tokens, those splits cover.
pub const MAX_CONTEXT: usize = MAX_ATTENTION_SPLITS * 64;

/// Decode steps merge the split attention (64 positions a split) inside the output projection
/// (rowdot.wgsl MERGE) while every workgroup of it reads at most this many partial values
/// (hidden size x splits), and in attn_combine's own dispatch beyond. Measured on the H100 at
/// 10 splits: SmolLM2 (5.8k values) +1.4%, Qwen2.5-0.5B (9k) +2.3%, Llama-3.2-1B (20k) -1.5%,
/// Phi-3-mini (31k) -3%.
const MERGE_MAX_VALUES: usize = 12288;

/// Which steps record a dispatch: all, or only those whose cache holds at most / more than the
/// program's `short_max` positions.
#[derive(Clone, Copy, Debug, PartialEq)]
enum When {
    Always,
    Short,
    Long,
}

impl When {
    fn at(self, t: u32, pos: u32, short_max: u32) -> bool {
        match self {
            When::Always => true,
            When::Short => pos + t <= short_max,
            When::Long => pos + t > short_max,
        }
    }
}

struct Op {
    /// What the dispatch does, for profiles ("qkv", "attention", "down", ...).
    label: &'static str,
    pipeline: Rc<Pipeline>,
    bind: wgpu::BindGroup,
    grid: Grid,
    when: When,
    /// `Some(sampled)`: recorded only in steps that choose their token greedily (`false`) or
    /// by sampling (`true`); `None`: in both.
    pick: Option<bool>,
    /// Recorded only in steps whose token a constraint masks (`Pick::masked`).
    masked: bool,
    /// `Some(hidden)`: recorded only in steps that end with the hidden states (`true`) or with
    /// the LM head (`false`); `None`: in both.
    head: Option<bool>,
}

/// How a decode step chooses its token: by argmax, or by the GPU sampler (`sampled`), which
/// then also applies a constraint's mask of allowed tokens (`masked`). A prefill step with
/// `hidden` ends with the final norm of every token in `Buffers::xn` (embeddings) instead of
/// the LM head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pick {
    pub sampled: bool,
    pub masked: bool,
    pub hidden: bool,
}

impl Pick {
    pub const GREEDY: Pick = Pick { sampled: false, masked: false, hidden: false };
    pub const HIDDEN: Pick = Pick { sampled: false, masked: false, hidden: true };
}

impl Op {
    fn runs(&self, t: u32, pos: u32, short_max: u32, pick: Pick) -> bool {
        self.when.at(t, pos, short_max)
            && self.pick.is_none_or(|p| p == pick.sampled)
            && (!self.masked || pick.masked)
            && self.head.is_none_or(|h| h == pick.hidden)
    }
}

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
    /// Cache slots per layer: the context, or on sliding-window layers just the window plus one
    /// prefill chunk (a chunk writes all its keys before any of its queries read).
    pub kv_cap: Vec<usize>,
    pub bytes: u64,
}

impl Buffers {
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, max_tokens: usize, context: usize) -> Result<Buffers> {
        let t = max_tokens as u64;
        let f = 4u64;
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
        let b = Buffers {
            ids: buf("ids", t.max(4) * 4)?,
            x: buf("x", t * h * f)?,
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
            sample_params: gpu.uniform("sample params", 32),
            mask_bits: buf("mask bits", cfg.vocab.div_ceil(32) as u64 * 4)?,
            rope: buf("rope", table.len() as u64 * 4)?,
            rope_local: local,
            kv_cap,
            step: gpu.uniform("step", 16),
            kv,
            bytes: 0,
        };
        gpu.queue.write_buffer(&b.rope, 0, bytemuck::cast_slice(&table));
        Ok(Buffers { bytes: bytes + 16 + 32, ..b })
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

/// A recorded program: the dispatches of one step for a given kind of step.
pub struct Program {
    ops: Vec<Op>,
    /// Cached positions up to which the `When::Short` dispatches run (the attention merge).
    short_max: u32,
}

impl Program {
    /// Dispatches of a step of `t` tokens at cache position `pos` (`sampled`: the token is
    /// sampled on the GPU rather than chosen by argmax).
    pub fn dispatches(&self, t: usize, pos: usize, pick: Pick) -> usize {
        self.ops.iter().filter(|o| o.runs(t as u32, pos as u32, self.short_max, pick)).count()
    }

    /// Record with a timestamp before the first dispatch and after each one (profiling);
    /// returns each dispatch's kernel.
    pub fn record_profiled(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        n_tokens: u32,
        pos: u32,
        pick: Pick,
        qs: &wgpu::QuerySet,
    ) -> Vec<&'static str> {
        pass.write_timestamp(qs, 0);
        let ops: Vec<&Op> = self.ops.iter().filter(|o| o.runs(n_tokens, pos, self.short_max, pick)).collect();
        for (i, op) in ops.iter().enumerate() {
            let [x, y, z] = op.grid.dims(n_tokens, pos);
            pass.set_pipeline(&op.pipeline.pipeline);
            pass.set_bind_group(0, &op.bind, &[]);
            pass.dispatch_workgroups(x, y, z);
            pass.write_timestamp(qs, i as u32 + 1);
        }
        ops.iter().map(|o| o.label).collect()
    }

    /// Record the step's dispatches for `n_tokens` tokens starting at cache position `pos`.
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>, n_tokens: u32, pos: u32, pick: Pick) {
        for op in self.ops.iter().filter(|o| o.runs(n_tokens, pos, self.short_max, pick)) {
            let [x, y, z] = op.grid.dims(n_tokens, pos);
            pass.set_pipeline(&op.pipeline.pipeline);
            pass.set_bind_group(0, &op.bind, &[]);
            pass.dispatch_workgroups(x, y, z);
        }
    }
}

struct Builder<'a> {
    gpu: &'a Gpu,
    cfg: &'a ModelConfig,
    ops: Vec<Op>,
    step: &'a wgpu::Buffer,
    /// Which steps record the dispatches pushed now.
    when: When,
    /// Greedy-only or sampled-only dispatches pushed now (`Op::pick`).
    pick: Option<bool>,
    /// Dispatches pushed now run only in masked steps (`Op::masked`).
    masked: bool,
    /// Hidden-state or LM-head dispatches pushed now (`Op::head`).
    head: Option<bool>,
    /// While `lm_head` records one row range of a `StreamedMatrix`: its matvec.wgsl constants
    /// (ROW0, Y_ROWS, WG0).
    row_range: Vec<(&'static str, f64)>,
    /// Where each layer's small vectors sit in its `vecs` buffer.
    offsets: crate::model::weights::VecOffsets,
    /// Set when a decode matvec would need more workgroup memory than the adapter has (wgpu
    /// does not check it natively; browsers refuse the pipeline).
    too_big: std::cell::Cell<Option<usize>>,
    /// The matrix-unit matmuls' f16 input (`Buffers::a16`).
    a16: &'a wgpu::Buffer,
}

/// Decode matvecs split rows into slices while they have fewer workgroups than this. Measured on
/// the H100 with integer activations, 96/132/200/264: 132 (its SM count) was best for the Phi-3
/// shape (+1.5% over 96; 200 and up lost 3%), and within 1% of the best for the 1B shape.
const MV_MIN_WORKGROUPS: usize = 132;

fn b(v: bool) -> f64 {
    v as u32 as f64
}

impl Builder<'_> {
    fn push(
        &mut self,
        label: &'static str,
        k: Kernel,
        consts: &[(&str, f64)],
        bufs: &[(u32, &wgpu::Buffer)],
        grid: Grid,
    ) {
        let pipeline = self.gpu.pipelines.get(&self.gpu.device, k, consts);
        let mut entries: Vec<wgpu::BindGroupEntry> =
            bufs.iter().map(|&(i, b)| wgpu::BindGroupEntry { binding: i, resource: b.as_entire_binding() }).collect();
        entries.push(wgpu::BindGroupEntry { binding: 5, resource: self.step.as_entire_binding() });
        let bind = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&format!("{k:?}")),
            layout: &pipeline.layout,
            entries: &entries,
        });
        let (when, pick, masked, head) = (self.when, self.pick, self.masked, self.head);
        self.ops.push(Op { label, pipeline, bind, grid, when, pick, masked, head });
    }

    /// How a decode matvec over rows of `k` elements of `layout` stages its activation vector in
    /// workgroup memory (rowdot.wgsl): as 8-bit blocks where the adapter has integer dot products
    /// and the weights are quantized (2.5 bytes an element), else as padded f32 (4.5 bytes an
    /// element). All of x when it fits the adapter's workgroup storage beside the kernels' other
    /// workgroup arrays (`decode_workgroup_bytes`), else tiles of a multiple of 256. The
    /// constants KT, XS_LEN, XB_LEN, IDOT. With `merge`, room is kept for the split weights.
    fn x_stage(&self, k: usize, layout: Layout, merge: bool) -> [(&'static str, f64); 4] {
        let idot = self.gpu.pipelines.idot && layout.block() > 1;
        let mw = if merge { self.cfg.n_heads * 16 } else { 1 };
        let reserve = self.decode_workgroup_bytes(1, 5, mw);
        let avail = (self.gpu.limits.max_compute_workgroup_storage_size as usize).saturating_sub(reserve);
        let max = if idot { avail * 2 / 5 } else { avail * 2 / 9 } / 256 * 256;
        let kt = if k <= max { k } else { max.max(256) };
        let (xs, xb) = if idot { (1, 5 * kt / 32) } else { (kt / 4 + kt / 32 + 1, 5) };
        let bytes = self.decode_workgroup_bytes(xs, xb, mw);
        if bytes > self.gpu.limits.max_compute_workgroup_storage_size as usize {
            self.too_big.set(Some(bytes));
        }
        [("KT", kt as f64), ("XS_LEN", xs as f64), ("XB_LEN", xb as f64), ("IDOT", b(idot))]
    }

    /// Workgroup memory of a decode matvec (matvec.wgsl, qkv_rope.wgsl with rowdot.wgsl and the
    /// reduction prelude; keep in step with their `var<workgroup>` arrays) for XS_LEN, XB_LEN
    /// and MW_LEN: xs, xb (16 bytes a slot), mw (8), ssg and parts (640), the argmax arrays
    /// (1 KiB), and without subgroups the reduction's `red` (4 KiB).
    fn decode_workgroup_bytes(&self, xs: usize, xb: usize, mw: usize) -> usize {
        let reduce = if self.gpu.pipelines.subgroups { 0 } else { 4096 };
        16 * xs + 16 * xb + 8 * mw + 640 + 1024 + reduce
    }

    /// Decode: y (+)= W · norm?(x), with the epilogue `epi` (0 store, 1 add, 2 GLU) and an
    /// optional soft-cap of stored values. With `argmax` (epilogue 0), each workgroup also leaves
    /// its largest value after y's N values; returns the number of workgroups. With `merge`
    /// (a context of that many positions), x is the split attention partials, merged on the fly.
    #[allow(clippy::too_many_arguments)]
    fn matvec(
        &mut self,
        label: &'static str,
        w: &GpuMatrix,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        vecs: &wgpu::Buffer,
        norm: Option<usize>,
        epi: u32,
        softcap: f32,
        bias: Option<usize>,
        argmax: bool,
        merge: Option<usize>,
    ) -> u32 {
        let outputs = if epi == 2 { w.rows / 2 } else { w.rows };
        let per_block = if epi == 2 { 2 } else { 4 };
        let (mut consts, wg, slices) =
            self.rowdot_consts(w, outputs.div_ceil(per_block), norm.unwrap_or(0), bias, merge);
        consts.extend([
            ("N", w.rows as f64),
            ("EPI", epi as f64),
            ("NORM", b(norm.is_some())),
            ("GELU", b(self.cfg.gelu)),
            ("RELU2", b(self.cfg.relu2)),
            ("SOFTCAP", softcap as f64),
            ("ARGMAX", b(argmax)),
        ]);
        consts.extend_from_slice(&self.row_range);
        let wgs = outputs.div_ceil(per_block * wg / 32 / slices) as u32;
        // Past 65535 workgroups the kernel folds (x, y) into one index.
        let gy = wgs.div_ceil(65535);
        let grid = Grid::Fixed2(wgs.div_ceil(gy), gy);
        self.push(label, Kernel::MatVec, &consts, &[(0, &w.words), (1, &w.meta), (2, x), (3, y), (4, vecs)], grid);
        wgs.div_ceil(gy) * gy
    }

    /// The LM head over every row range of `m` (one dispatch each; most models have one), its
    /// argmax pairs after all the logits. Returns the number of pairs.
    fn lm_head(
        &mut self,
        m: &StreamedMatrix,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        vecs: &wgpu::Buffer,
        norm: bool,
    ) -> u32 {
        let mut pairs = 0;
        for (first, part) in m.ranges() {
            self.row_range = vec![("ROW0", first as f64), ("Y_ROWS", m.rows as f64), ("WG0", pairs as f64)];
            let (cap, n) = (self.cfg.final_softcap, norm.then_some(0));
            pairs += self.matvec("lm head", part, x, y, vecs, n, 0, cap, None, true, None);
        }
        self.row_range.clear();
        pairs
    }

    /// The override constants every rowdot.wgsl kernel (matvec, qkv_rope) takes for matrix `w`
    /// over `blocks` blocks of four rows: layout, row length, norm weights at `norm_off`, bias,
    /// workgroup shape, activation staging and, with `merge` (a cache of that many positions),
    /// the attention merge. Returns them with the workgroup size and slices.
    fn rowdot_consts(
        &self,
        w: &GpuMatrix,
        blocks: usize,
        norm_off: usize,
        bias: Option<usize>,
        merge: Option<usize>,
    ) -> (Vec<(&'static str, f64)>, usize, usize) {
        let (wg, slices) = self.mv_shape(blocks, w.cols, w.layout.block());
        let mut c = Vec::from(w.layout_constants());
        c.extend(self.x_stage(w.cols, w.layout, merge.is_some()));
        c.extend([
            ("K", w.cols as f64),
            ("NW_OFF", norm_off as f64),
            ("EPS", self.cfg.rms_eps as f64),
            ("NW_OFFSET", self.cfg.norm_offset as f64),
            ("HAS_BIAS", b(bias.is_some())),
            ("BIAS_OFF", bias.unwrap_or(0) as f64),
            ("WG", wg as f64),
            ("S", slices as f64),
            ("MERGE", b(merge.is_some())),
            ("MHD", self.cfg.head_dim as f64),
            ("MNH", self.cfg.n_heads as f64),
            ("MCAP", merge.unwrap_or(64).div_ceil(64) as f64),
            ("MW_LEN", if merge.is_some() { self.cfg.n_heads * 16 } else { 1 } as f64),
        ]);
        (c, wg, slices)
    }

    /// Workgroup size and slices per row block for `blocks` blocks of four rows of length `k`.
    /// 256 invocations (x is staged once for more rows; smaller workgroups measured slower even
    /// for short rows), or 512 with integer activations where rows are long and the matrix tall
    /// enough to keep MV_MIN_WORKGROUPS of them: each workgroup quantizes all of x, so fewer,
    /// larger ones stage less (H100: Phi-3 shape +1.6%, Llama-3.1-8B +3%; rows of 896 lost 3%;
    /// the f32 path lost 4%). Subgroups only: the portable reduction holds 256. Long rows are
    /// split into slices until there are enough workgroups to spread over the GPU and keep
    /// loads in flight.
    fn mv_shape(&self, blocks: usize, k: usize, block: usize) -> (usize, usize) {
        let chunks = k / if block > 1 { 32 } else { 8 };
        let can_big = self.gpu.pipelines.subgroups
            && self.gpu.pipelines.idot
            && block > 1
            && self.gpu.limits.max_compute_invocations_per_workgroup >= 512
            && k >= 2048;
        let big = can_big && blocks >= 16 * MV_MIN_WORKGROUPS;
        let wg = if big { 512 } else { 256 };
        let mut slices = 1;
        while slices < 8 && blocks * slices / (wg / 32) < MV_MIN_WORKGROUPS && chunks >= 64 * slices {
            slices *= 2;
        }
        // Sliced rows longer than 8192 (more than four staging trips of 256 invocations): twice
        // the invocations and slices, the same rows per workgroup, half the trips. Llama-3.1-8B's
        // down projection (rows of 14336): +3.2%; rows of 8192 (1B, Phi-3): -0.5% / 0.
        if can_big && !big && slices >= 2 && k > 8192 {
            return (512, 2 * slices);
        }
        (wg, slices)
    }

    /// Whether a layer's prefill attention runs on matrix units (attention_coop.wgsl): full
    /// (not sliding) layers with head widths of 16k up to 128 and caches of 64k slots, so no
    /// 64-key chunk passes the cache's end. FERROLM_NO_COOP_ATTENTION=1 keeps attention.wgsl.
    fn coop_attention(&self, head_dim: usize, cap: usize, sliding: bool) -> bool {
        self.gpu.pipelines.matrix_units
            && !sliding
            && head_dim.is_multiple_of(16)
            && head_dim <= 128
            && cap.is_multiple_of(64)
            && self.gpu.limits.max_compute_workgroup_storage_size >= ATTENTION_COOP_STORAGE
            && std::env::var("FERROLM_NO_COOP_ATTENTION").is_err()
    }

    /// Prefill: c (+)= a · Wᵀ (+ bias).
    fn matmul(
        &mut self,
        label: &'static str,
        w: &GpuMatrix,
        a: &wgpu::Buffer,
        c: &wgpu::Buffer,
        vecs: &wgpu::Buffer,
        bias: Option<usize>,
        acc: bool,
    ) {
        let [l0, l1, l2] = w.layout_constants();
        let consts = [
            l0,
            l1,
            l2,
            ("K", w.cols as f64),
            ("N", w.rows as f64),
            ("ACCUMULATE", b(acc)),
            ("HAS_BIAS", b(bias.is_some())),
            ("BIAS_OFF", bias.unwrap_or(0) as f64),
        ];
        let n = w.rows as u32;
        if !self.gpu.pipelines.matrix_units || !w.cols.is_multiple_of(32) {
            self.push(
                label,
                Kernel::MatMul,
                &consts,
                &[(0, &w.words), (1, &w.meta), (2, a), (3, c), (4, vecs)],
                Grid::Tiles(n),
            );
            return;
        }
        let a16 = self.a16;
        let grid = Grid::Elems(w.cols.div_ceil(4) as u32);
        self.push("to f16", Kernel::ToF16, &[("N", w.cols as f64)], &[(0, a), (1, a16)], grid);
        let (kernel, grid) = if w.rows >= WIDE_MIN_ROWS {
            (Kernel::MatMulWide, Grid::WideTiles(n))
        } else {
            (Kernel::MatMulCoop, Grid::Tiles(n))
        };
        self.push(label, kernel, &consts, &[(0, &w.words), (1, &w.meta), (2, a16), (3, c), (4, vecs)], grid);
    }

    /// Qwen3.5's full-attention output gate, in place on `attn` (nothing for other models).
    fn attn_gate(&mut self, bf: &Buffers) {
        let c = self.cfg;
        if !c.attn_gate {
            return;
        }
        let (qd, stride) = (c.q_dim(), c.attn_rows());
        let consts = [("N", qd as f64), ("STRIDE", stride as f64), ("GATE_OFF", (qd + 2 * c.kv_dim()) as f64)];
        self.push("attn gate", Kernel::AttnGate, &consts, &[(0, &bf.qkv), (1, &bf.attn)], Grid::Elems(qd as u32));
    }

    /// A Gated DeltaNet layer's token mixing (Qwen3.5): the norm and the fused input projection
    /// [q k v | z | b | a], the causal convolution, the recurrence with its gated norm, and the
    /// output projection added to `out` (the residual, when `acc`).
    #[allow(clippy::too_many_arguments)]
    fn gated_deltanet(
        &mut self,
        l: crate::model::hf_config::LinearAttn,
        lw: &crate::model::weights::LayerWeights,
        bf: &Buffers,
        i: usize,
        batched: bool,
        out: &wgpu::Buffer,
        acc: bool,
    ) {
        let off = self.offsets;
        let rows = lw.wqkv.rows;
        if batched {
            self.rmsnorm(&bf.x, &lw.vecs, off.attn_norm, &bf.xn, false, false);
            self.matmul("in proj", &lw.wqkv, &bf.xn, &bf.qkv, &lw.vecs, None, false);
        } else {
            let norm = Some(off.attn_norm);
            self.matvec("in proj", &lw.wqkv, &bf.x, &bf.qkv, &lw.vecs, norm, 0, 0.0, None, false, None);
        }
        let (conv_state, delta_state) = match (&bf.conv_state[i], &bf.delta_state[i]) {
            (Some(c), Some(d)) => (c, d),
            _ => unreachable!("Buffers::new gives every linear layer its state"),
        };
        let cd = l.conv_dim();
        let conv = |mode: u32| {
            [
                ("C", cd as f64),
                ("TAPS", l.conv as f64),
                ("STRIDE", rows as f64),
                ("W_OFF", off.conv_w.unwrap_or(0) as f64),
                ("MODE", mode as f64),
            ]
        };
        let bufs = [(0, &bf.qkv), (1, &lw.vecs), (2, conv_state), (3, &bf.lin)];
        let channels = Grid::Fixed((cd as u32).div_ceil(256));
        if batched {
            // Every (token, channel) at once, then the state moved forward: a 512-token
            // prefill spent 2.5 ms (H100, Qwen3.5-0.8B) walking the tokens channel by channel.
            self.push("conv", Kernel::Conv1d, &conv(1), &bufs, Grid::Elems(cd as u32));
            self.push("conv state", Kernel::Conv1d, &conv(2), &bufs, channels);
        } else {
            self.push("conv", Kernel::Conv1d, &conv(0), &bufs, channels);
        }
        let (nk, nv) = (l.key_heads as f64, l.value_heads as f64);
        self.push(
            "delta prep",
            Kernel::DeltaPrep,
            &[
                ("NK", nk),
                ("NV", nv),
                ("DK", l.key_dim as f64),
                ("DV", l.value_dim as f64),
                ("STRIDE", rows as f64),
                ("CONV_DIM", cd as f64),
                ("DT_OFF", off.dt_bias.unwrap_or(0) as f64),
                ("A_OFF", off.a_neg.unwrap_or(0) as f64),
            ],
            &[(0, &bf.lin), (1, &bf.qkv), (2, &bf.gates), (3, &lw.vecs)],
            Grid::PerToken(2 * l.key_heads as u32 + 1),
        );
        let cb = l.column_block();
        self.push(
            "delta rule",
            Kernel::DeltaRule,
            &[
                ("NK", nk),
                ("NV", nv),
                ("DK", l.key_dim as f64),
                ("DV", l.value_dim as f64),
                ("CB", cb as f64),
                ("CONV_DIM", cd as f64),
                ("TILED", b(l.tiled)),
            ],
            &[(0, &bf.lin), (1, &bf.gates), (2, delta_state), (4, &bf.attn)],
            Grid::Fixed2(l.value_heads as u32, (l.value_dim / cb) as u32),
        );
        self.push(
            "gated norm",
            Kernel::GatedNorm,
            &[
                ("NV", nv),
                ("DV", l.value_dim as f64),
                ("STRIDE", rows as f64),
                ("CONV_DIM", cd as f64),
                ("GN_OFF", off.gnorm.unwrap_or(0) as f64),
                ("EPS", self.cfg.rms_eps as f64),
            ],
            &[(0, &bf.qkv), (1, &bf.attn), (3, &lw.vecs)],
            Grid::PerToken(l.value_heads as u32),
        );
        if batched {
            self.matmul("o", &lw.wo, &bf.attn, out, &lw.vecs, None, acc);
        } else {
            self.matvec("o", &lw.wo, &bf.attn, out, &lw.vecs, None, acc as u32, 0.0, None, false, None);
        }
    }

    /// Prefill: BitNet's sub-norm of `x` (rows of `width`) into `scratch` when the model has one
    /// at `off`; returns the buffer the next matmul reads.
    fn sub_norm<'b>(
        &mut self,
        x: &'b wgpu::Buffer,
        vecs: &wgpu::Buffer,
        off: Option<usize>,
        scratch: &'b wgpu::Buffer,
        width: usize,
    ) -> &'b wgpu::Buffer {
        let Some(off) = off else { return x };
        self.norm_rows("sub norm", (x, vecs, off, scratch), width, false, false);
        scratch
    }

    /// y = norm(x) (`add`: y += norm(x)), over every token or only the last.
    fn rmsnorm(
        &mut self,
        x: &wgpu::Buffer,
        vecs: &wgpu::Buffer,
        off: usize,
        y: &wgpu::Buffer,
        last_only: bool,
        add: bool,
    ) {
        self.norm_rows("norm", (x, vecs, off, y), self.cfg.hidden, last_only, add);
    }

    /// rmsnorm.wgsl over rows of `width` of `x` into `y`, with the weights at `off` in `vecs`.
    fn norm_rows(
        &mut self,
        label: &'static str,
        (x, vecs, off, y): (&wgpu::Buffer, &wgpu::Buffer, usize, &wgpu::Buffer),
        width: usize,
        last_only: bool,
        add: bool,
    ) {
        let consts = [
            ("H", width as f64),
            ("EPS", self.cfg.rms_eps as f64),
            ("LAST_ONLY", b(last_only)),
            ("NW_OFF", off as f64),
            ("W_OFFSET", self.cfg.norm_offset as f64),
            ("ADD", b(add)),
        ];
        let grid = if last_only { Grid::Fixed(1) } else { Grid::Tokens };
        self.push(label, Kernel::RmsNorm, &consts, &[(0, x), (1, vecs), (2, y)], grid);
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
    let mut p = Builder {
        gpu,
        cfg,
        ops: Vec::new(),
        step: &bf.step,
        when: When::Always,
        pick: None,
        masked: false,
        head: None,
        offsets: w.offsets,
        row_range: Vec::new(),
        too_big: Default::default(),
        a16: &bf.a16,
    };
    // 16 splits at most (the kernel's MSPLITS); none for models too wide to gain.
    let mut short_max = (MERGE_MAX_VALUES / cfg.q_dim()).min(16) as u32 * 64;
    // Attention whose splits merge themselves needs neither (Vulkan, attn_decode.wgsl FUSED).
    let fused = gpu.pipelines.fused_attention && !batched;
    if fused {
        short_max = 0;
    }
    let (nh, nkv, hd) = (cfg.n_heads as f64, cfg.n_kv_heads as f64, cfg.head_dim as f64);
    let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
    let off = w.offsets;
    // The fused decode q/k/v kernel rotates row pairs as they are computed; a per-head q/k norm
    // needs the whole head first, so those models take the matvec + rope_kv route.
    let fused_qkv = !batched && !cfg.qk_norm && !cfg.attn_gate;
    // A gated or normed attention output needs the merged attention in memory: no merging
    // inside the o-projection.
    if cfg.attn_gate || cfg.sub_norms {
        short_max = 0;
    }

    for (first, part) in w.embed.ranges() {
        let [l0, l1, l2] = part.layout_constants();
        let ids = (("ID0", first as f64), ("ID1", (first + part.rows) as f64));
        p.push(
            "embed",
            Kernel::Embed,
            &[l0, l1, l2, ("H", cfg.hidden as f64), ("SCALE", cfg.embed_scale as f64), ids.0, ids.1],
            &[(0, &part.words), (1, &part.meta), (2, &bf.ids), (3, &bf.x)],
            Grid::PerToken((cfg.hidden as u32 / 8).div_ceil(64)),
        );
    }
    for (i, lw) in w.layers.iter().enumerate() {
        let kv = &bf.kv[i];
        let cap = bf.kv_cap[i] as f64;
        let sliding = cfg.layer_sliding[i] && cfg.sliding_window > 0;
        let rope = if cfg.layer_sliding[i] { bf.rope_local.as_ref().unwrap_or(&bf.rope) } else { &bf.rope };
        let window = if sliding { cfg.sliding_window as f64 } else { 0.0 };
        // Residual adds: fused into the projection, or (Gemma) through a norm of its output.
        let (o_out, down_out) = if cfg.post_norms { (&bf.tmp, &bf.tmp) } else { (&bf.x, &bf.x) };
        let acc = !cfg.post_norms;
        if let Some(l) = cfg.linear.filter(|_| cfg.layer_linear[i]) {
            p.gated_deltanet(l, lw, bf, i, batched, o_out, acc);
        } else {
            if fused_qkv {
                let blocks = (qd + 2 * kvd).div_ceil(4);
                let (mut consts, wg, slices) = p.rowdot_consts(&lw.wqkv, blocks, off.attn_norm, off.qkv_bias, None);
                consts.extend([
                    ("QD", qd as f64),
                    ("KVD", kvd as f64),
                    ("HD", hd),
                    ("ROT", cfg.rope_dim as f64),
                    ("CAP", cap),
                ]);
                let bufs = [
                    (0, &lw.wqkv.words),
                    (1, &lw.wqkv.meta),
                    (2, &bf.x),
                    (3, &bf.qkv),
                    (4, &lw.vecs),
                    (6, kv),
                    (7, rope),
                ];
                p.push(
                    "qkv",
                    Kernel::QkvRope,
                    &consts,
                    &bufs,
                    Grid::Fixed(((qd + 2 * kvd) as u32).div_ceil((4 * wg / 32 / slices) as u32)),
                );
            } else {
                if batched {
                    p.rmsnorm(&bf.x, &lw.vecs, off.attn_norm, &bf.xn, false, false);
                    p.matmul("qkv", &lw.wqkv, &bf.xn, &bf.qkv, &lw.vecs, off.qkv_bias, false);
                } else {
                    p.matvec(
                        "qkv",
                        &lw.wqkv,
                        &bf.x,
                        &bf.qkv,
                        &lw.vecs,
                        Some(off.attn_norm),
                        0,
                        0.0,
                        off.qkv_bias,
                        false,
                        None,
                    );
                }
                p.push(
                    "rope+kv",
                    Kernel::RopeKv,
                    &[
                        ("HD", hd),
                        ("ROT", cfg.rope_dim as f64),
                        ("NH", nh),
                        ("NKV", nkv),
                        ("CAP", cap),
                        ("QK_NORM", b(cfg.qk_norm)),
                        ("Q_NORM_OFF", off.q_norm.unwrap_or(0) as f64),
                        ("K_NORM_OFF", off.k_norm.unwrap_or(0) as f64),
                        ("EPS", cfg.rms_eps as f64),
                        ("NW_OFFSET", cfg.norm_offset as f64),
                        ("QSTRIDE", cfg.attn_rows() as f64),
                    ],
                    &[(0, &bf.qkv), (3, kv), (4, &lw.vecs), (6, rope)],
                    Grid::PerToken((cfg.n_heads + 2 * cfg.n_kv_heads) as u32),
                );
            }
            let attn = [
                ("HD", hd),
                ("NH", nh),
                ("NKV", nkv),
                ("CTX", context as f64),
                ("CAP", cap),
                ("SCALE", cfg.attn_scale),
                ("SOFTCAP", cfg.attn_softcap as f64),
                ("WINDOW", window),
                ("QSTRIDE", cfg.attn_rows() as f64),
            ];
            if batched {
                let mut attn = attn.to_vec();
                attn.push(("CAUSAL", b(cfg.causal)));
                let (kernel, grid) = if p.coop_attention(cfg.head_dim, cap as usize, sliding) {
                    (Kernel::AttentionCoop, Grid::QueryBlocks(cfg.n_heads as u32))
                } else {
                    (Kernel::Attention, Grid::PerToken(cfg.n_heads as u32))
                };
                p.push("attention", kernel, &attn, &[(0, &bf.qkv), (1, kv), (2, kv), (3, &bf.attn)], grid);
            } else {
                let mut consts = attn[..8].to_vec();
                consts.push(("FUSED", b(fused)));
                p.push(
                    "attention",
                    Kernel::AttnDecode,
                    &consts,
                    &[(0, &bf.qkv), (1, kv), (2, kv), (3, &bf.part), (4, &bf.attn), (6, &bf.done)],
                    Grid::Splits(cfg.n_heads as u32),
                );
            }
            if batched {
                p.attn_gate(bf);
                let o_in = p.sub_norm(&bf.attn, &lw.vecs, off.attn_sub_norm, &bf.gu, qd);
                p.matmul("o", &lw.wo, o_in, o_out, &lw.vecs, off.o_bias, acc);
            } else if fused {
                p.attn_gate(bf);
                let n = off.attn_sub_norm;
                p.matvec("o", &lw.wo, &bf.attn, o_out, &lw.vecs, n, acc as u32, 0.0, off.o_bias, false, None);
            } else {
                // Deep caches merge the attention splits in their own dispatch; short ones inside
                // the output projection, one dispatch fewer a layer.
                p.when = When::Long;
                p.push(
                    "attn merge",
                    Kernel::AttnCombine,
                    &[("HD", hd), ("CTX", context as f64)],
                    &[(0, &bf.part), (3, &bf.attn)],
                    Grid::Fixed(cfg.n_heads as u32),
                );
                p.attn_gate(bf);
                let n = off.attn_sub_norm;
                p.matvec("o", &lw.wo, &bf.attn, o_out, &lw.vecs, n, acc as u32, 0.0, off.o_bias, false, None);
                if short_max > 0 {
                    p.when = When::Short;
                    let merge = Some(context);
                    p.matvec("o", &lw.wo, &bf.part, o_out, &lw.vecs, None, acc as u32, 0.0, off.o_bias, false, merge);
                }
                p.when = When::Always;
            }
        }
        if let Some(pn) = off.post_attn_norm {
            p.rmsnorm(&bf.tmp, &lw.vecs, pn, &bf.x, false, true);
        }
        if batched {
            p.rmsnorm(&bf.x, &lw.vecs, off.ffn_norm, &bf.xn, false, false);
            p.matmul("gate+up", &lw.w_gate_up, &bf.xn, &bf.gu, &lw.vecs, off.gate_up_bias, false);
            p.push(
                "glu",
                Kernel::FfnAct,
                &[("F", cfg.ffn as f64), ("GELU", b(cfg.gelu)), ("RELU2", b(cfg.relu2))],
                &[(0, &bf.gu), (1, &bf.h)],
                Grid::Elems(cfg.ffn as u32),
            );
            let down_in = p.sub_norm(&bf.h, &lw.vecs, off.ffn_sub_norm, &bf.gu, cfg.ffn);
            p.matmul("down", &lw.w_down, down_in, down_out, &lw.vecs, off.down_bias, acc);
        } else {
            let (gu, gu_bias) = (&lw.w_gate_up, off.gate_up_bias);
            p.matvec("gate+up+glu", gu, &bf.x, &bf.h, &lw.vecs, Some(off.ffn_norm), 2, 0.0, gu_bias, false, None);
            let n = off.ffn_sub_norm;
            p.matvec("down", &lw.w_down, &bf.h, down_out, &lw.vecs, n, acc as u32, 0.0, off.down_bias, false, None);
        }
        if let Some(pn) = off.post_ffn_norm {
            p.rmsnorm(&bf.tmp, &lw.vecs, pn, &bf.x, false, true);
        }
    }
    if batched {
        p.head = Some(true);
        p.rmsnorm(&bf.x, &w.out_vecs, 0, &bf.xn, false, false);
    }
    p.head = Some(false);
    let parts = if batched {
        p.rmsnorm(&bf.x, &w.out_vecs, 0, &bf.xlast, true, false);
        p.lm_head(w.lm_head(), &bf.xlast, &bf.logits, &w.out_vecs, false)
    } else {
        p.lm_head(w.lm_head(), &bf.x, &bf.logits, &w.out_vecs, true)
    };
    p.pick = Some(false);
    p.push(
        "argmax",
        Kernel::Argmax,
        &[("V", cfg.vocab as f64), ("P", parts as f64)],
        &[(0, &bf.logits), (1, &bf.ids), (2, &bf.tokens)],
        Grid::Fixed(1),
    );
    // Decode steps may sample instead; prefill chunks never do (the first token comes from the
    // prompt's logits, read back).
    p.pick = Some(true);
    if !batched {
        p.masked = true;
        p.push(
            "mask",
            Kernel::Mask,
            &[("V", cfg.vocab as f64)],
            &[(0, &bf.logits), (1, &bf.mask_bits)],
            Grid::Elems(cfg.vocab as u32),
        );
        p.masked = false;
    }
    let sl = SampleLayout::new(cfg.vocab);
    for (phase, wide) in PHASES.into_iter().filter(|_| !batched) {
        let grid = Grid::Fixed(if wide { sl.nw as u32 } else { 1 });
        let bufs = [
            (0, &bf.logits),
            (1, &bf.ids),
            (2, &bf.tokens),
            (3, &bf.sample_state),
            (4, &bf.sample_params),
            (6, &bf.sample_counters),
        ];
        p.push("sample", Kernel::Sample, &sl.consts(phase), &bufs, grid);
    }
    gpu.check().map_err(|e| Error::Gpu(format!("building the forward pass: {e}")))?;
    if let Some(bytes) = p.too_big.get() {
        return Err(Error::Limits(format!(
            "a decode kernel needs {bytes} bytes of workgroup memory; the adapter allows {}",
            gpu.limits.max_compute_workgroup_storage_size
        )));
    }
    Ok(Program { ops: p.ops, short_max })
}

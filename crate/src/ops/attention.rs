//! Attention: rotary embedding and the KV-cache append (rope_kv.wgsl), prefill attention
//! (attention.wgsl, or attention_coop.wgsl on matrix units), decode attention split over 64-slot
//! chunks of the cache (attn_decode.wgsl) with its merge (attn_combine.wgsl, or inside the
//! kernel, or inside the output projection: `matvec::Merge`), and Qwen3.5's output gate.

use super::matmul::Ready;
use super::matvec::Norm;
use super::{flag, Grid, Recorder};
use crate::gpu::Kernel;

/// Workgroup memory of attention_coop.wgsl: f16 queries and probabilities, f32 scores.
const ATTENTION_COOP_STORAGE: usize = 44 * 1024;

/// Decode attention merges its 64-position splits with one weight each in workgroup memory
/// (attn_merge.wgsl): 8 KiB at this many, inside WebGPU's 16 KiB beside the kernel's other arrays.
pub const MAX_ATTENTION_SPLITS: usize = 2048;
/// The longest context, in tokens, those splits cover.
pub const MAX_CONTEXT: usize = MAX_ATTENTION_SPLITS * 64;

/// One layer's attention: the cache ([k | v][kv head][slot][head_dim / 2] f16 pairs, position p
/// in slot p % cap) and the queries in rows of `q_stride` values.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub head_dim: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// Positions the program serves.
    pub context: usize,
    /// Slots of this layer's cache.
    pub cap: usize,
    pub scale: f64,
    /// Soft-cap of scores (0: none).
    pub softcap: f32,
    /// Sliding window (0: full attention).
    pub window: usize,
    /// Values per token row of the [q; k; v] buffer.
    pub q_stride: usize,
}

impl Heads {
    fn consts(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("HD", self.head_dim as f64),
            ("NH", self.heads as f64),
            ("NKV", self.kv_heads as f64),
            ("CTX", self.context as f64),
            ("CAP", self.cap as f64),
            ("SCALE", self.scale),
            ("SOFTCAP", self.softcap as f64),
            ("WINDOW", self.window as f64),
        ]
    }

    /// Whether prefill attention runs on matrix units: full (not sliding) layers with head widths
    /// of 16k up to 128 and caches of 64k slots, so no 64-key chunk passes the cache's end.
    /// FERROLM_NO_COOP_ATTENTION=1 keeps attention.wgsl.
    pub fn on_matrix_units(&self, r: &Recorder) -> bool {
        r.caps.matrix_units
            && self.window == 0
            && self.head_dim.is_multiple_of(16)
            && self.head_dim <= 128
            && self.cap.is_multiple_of(64)
            && r.caps.workgroup_storage >= ATTENTION_COOP_STORAGE
            && std::env::var("FERROLM_NO_COOP_ATTENTION").is_err()
    }
}

/// Prefill attention on matrix units sweeps the cache in splits of at least this many keys, one
/// workgroup each per 64 queries and head, merged by attn_prefill_merge.wgsl, where a full
/// chunk of queries gives fewer than `SPLIT_BELOW_WORKGROUPS` workgroups: late in a long prompt
/// each would otherwise sweep thousands of keys alone while most of the GPU idles (H100, 4,096-
/// token prompts: SmolLM2's 9 heads 52k -> 64k tok/s; the 1B and Phi-3 shapes' 32 heads lost
/// 1.5-3% to the merge and stay unsplit: BENCHMARKS.md session 14). Prompts up to this long
/// take one split and no merge.
pub const MIN_SPLIT_KEYS: usize = 512;
pub const SPLIT_BELOW_WORKGROUPS: usize = 256;
/// At most this many splits (their partial outputs' buffer grows with them).
pub const MAX_KEY_SPLITS: usize = 8;

/// Keys per split of prefill attention on matrix units for a `context`-token program of `heads`
/// query heads and chunks of up to `max_tokens` tokens (the whole context: one split).
pub fn split_keys(context: usize, heads: usize, max_tokens: usize) -> usize {
    if heads * max_tokens.div_ceil(64) >= SPLIT_BELOW_WORKGROUPS {
        return context.next_multiple_of(64);
    }
    context.div_ceil(MAX_KEY_SPLITS).next_multiple_of(64).max(MIN_SPLIT_KEYS)
}

/// Where prefill attention on matrix units leaves its key splits' partial outputs: `part`
/// holds `part_floats` floats for steps of up to `max_tokens` tokens.
#[derive(Clone, Copy)]
pub struct KeySplits<'a> {
    pub part: &'a wgpu::Buffer,
    pub keys: usize,
    pub max_tokens: usize,
}

/// Floats of the splits' buffer for a `context`-token program of `heads` heads of `head_dim`:
/// per split, token and head the output and its (max, sum).
pub fn part_floats(context: usize, heads: usize, head_dim: usize, keys: usize, max_tokens: usize) -> usize {
    context.div_ceil(keys) * max_tokens * heads * (head_dim + 2)
}

/// The query rows one workgroup of attention.wgsl (prefill without matrix units) takes: `heads`
/// of the query heads sharing a KV head times `tokens` consecutive tokens, so that each key and
/// value is read once for all of them. At most 16 rows, and at most four a value-phase
/// invocation (256 of them, `head_dim / 2` a row group): 16 up to 128 dimensions, 8 at 256;
/// the rows' queries in workgroup memory (8 KiB at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryRows {
    pub heads: usize,
    pub tokens: usize,
}

impl QueryRows {
    pub fn of(h: &Heads) -> QueryRows {
        let max_rows = (4 * (256 / (h.head_dim / 2).max(1))).min(16);
        // Natively, FERROLM_ATTENTION_ROWS=n caps the rows (kernel measurements, not a setting).
        #[cfg(not(target_arch = "wasm32"))]
        let max_rows = std::env::var("FERROLM_ATTENTION_ROWS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(max_rows, |n| max_rows.min(n.max(1)));
        let group = h.heads / h.kv_heads;
        let heads = (1..=group.min(max_rows)).rev().find(|d| group.is_multiple_of(*d)).unwrap_or(1);
        QueryRows { heads, tokens: max_rows / heads }
    }

    pub fn rows(&self) -> usize {
        self.heads * self.tokens
    }

    fn blocks_per_kv_head(&self, h: &Heads) -> usize {
        h.heads / h.kv_heads / self.heads
    }
}

/// Whether prefill attention can leave its output as the 8-bit matmul reads it
/// (`Ready::I8`), sparing the output projection its conversion pass: the portable kernel, with
/// heads of whole 32-value blocks.
pub fn prefill_writes_i8(r: &Recorder, h: &Heads) -> bool {
    !h.on_matrix_units(r) && h.head_dim.is_multiple_of(32)
}

/// Prefill: out = softmax(q·kᵀ) · v for every query of the step against the cache (`causal`:
/// each only up to its own position); on matrix units with the cache's keys in `splits`.
/// With `ready` (8-bit planes, where `prefill_writes_i8`) the output is written only in them.
pub fn prefill(
    r: &mut Recorder,
    h: Heads,
    causal: bool,
    (qkv, kv, out): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
    splits: KeySplits,
    ready: Option<Ready>,
) {
    let mut consts = h.consts();
    consts.extend([("QSTRIDE", h.q_stride as f64), ("CAUSAL", flag(causal))]);
    assert!(
        ready.is_none() || (matches!(ready, Some(Ready::I8(..))) && prefill_writes_i8(r, &h)),
        "attention writes 8-bit planes from the portable kernel only"
    );
    if !h.on_matrix_units(r) {
        let b = QueryRows::of(&h);
        consts.extend([
            ("GH", b.heads as f64),
            ("QB", b.tokens as f64),
            ("QS_LEN", (b.rows() * h.head_dim / 4) as f64),
            ("PS_LEN", (b.rows() * 64) as f64),
            ("I8_OUT", flag(ready.is_some())),
        ]);
        let grid =
            Grid::Tiles { n: (h.kv_heads * b.blocks_per_kv_head(&h)) as u32, tile_n: 1, tile_m: b.tokens as u32 };
        let (q8, s8) = Ready::buffers(ready, &r.unused);
        let bufs = [(0, qkv), (1, kv), (2, kv), (3, out), (4, &q8), (6, &s8)];
        r.push("attention", Kernel::Attention, &consts, &bufs, grid);
        return;
    }
    let keys = splits.keys as u32;
    assert!(
        keys.is_multiple_of(64) && splits.part_fits(&h),
        "key splits: whole 64-key chunks in a buffer that holds them"
    );
    let pstats = (h.context.div_ceil(splits.keys) * splits.max_tokens * h.heads * h.head_dim) as f64;
    consts.extend([("KSPL", keys as f64), ("PSTATS", pstats)]);
    let grid = Grid::QueryBlocks { heads: h.heads as u32, keys };
    r.push(
        "attention",
        Kernel::AttentionCoop,
        &consts,
        &[(0, qkv), (1, kv), (2, kv), (3, out), (4, splits.part)],
        grid,
    );
    let consts = [("HD", h.head_dim as f64), ("NH", h.heads as f64), ("KSPL", keys as f64), ("PSTATS", pstats)];
    let grid = Grid::SplitsMerge { n: (h.heads * h.head_dim) as u32, keys };
    r.push("attention merge", Kernel::AttnPrefillMerge, &consts, &[(0, splits.part), (3, out)], grid);
}

impl KeySplits<'_> {
    /// Whether `part` holds every split of `h`'s context, or the context has only one.
    fn part_fits(&self, h: &Heads) -> bool {
        let floats = part_floats(h.context, h.heads, h.head_dim, self.keys, self.max_tokens);
        h.context <= self.keys || self.part.size() >= floats as u64 * 4
    }
}

/// Decode: one workgroup per head and 64 cached positions leaves partials in `part` ([heads]
/// [splits][head_dim + 4]: acc, max, sum); with `fused` (a coherent-memory device) each head's
/// last split merges them into `out` and resets its count in `done`.
pub struct Decode<'a> {
    pub qkv: &'a wgpu::Buffer,
    pub kv: &'a wgpu::Buffer,
    pub part: &'a wgpu::Buffer,
    pub out: &'a wgpu::Buffer,
    pub done: &'a wgpu::Buffer,
    pub fused: bool,
}

pub fn decode(r: &mut Recorder, h: Heads, d: Decode) {
    let mut consts = h.consts();
    consts.push(("FUSED", flag(d.fused)));
    let bufs = [(0, d.qkv), (1, d.kv), (2, d.kv), (3, d.part), (4, d.out), (6, d.done)];
    r.push("attention", Kernel::AttnDecode, &consts, &bufs, Grid::Splits(h.heads as u32));
}

/// Decode: merge the splits in `part` into `out` in a dispatch of their own.
pub fn combine(r: &mut Recorder, h: Heads, part: &wgpu::Buffer, out: &wgpu::Buffer) {
    let consts = [("HD", h.head_dim as f64), ("CTX", h.context as f64)];
    r.push("attn merge", Kernel::AttnCombine, &consts, &[(0, part), (3, out)], Grid::Fixed(h.heads as u32));
}

/// Rotate q and k of every token in place (rotary table `rope`, `rot` dimensions of a head),
/// per-head RMS norms of q and k first where the model has them (weights at (q, k) words of
/// `vecs`), and append k and v to the cache.
pub struct RopeKv<'a> {
    pub qkv: &'a wgpu::Buffer,
    pub kv: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub rope: &'a wgpu::Buffer,
    pub rot: usize,
    pub qk_norm: Option<(usize, usize, Norm)>,
    /// The norms apply to the rotated q and k (HunYuan).
    pub after: bool,
    /// Llama 4's query temperature (beta, original context), `ModelConfig::q_temperature`.
    pub q_temp: Option<(f32, usize)>,
}

/// rope.wgsl's Q_BETA and Q_ORIG where the model scales its queries.
pub fn q_temp_consts(t: Option<(f32, usize)>) -> Vec<(&'static str, f64)> {
    t.map_or(vec![], |(beta, orig)| vec![("Q_BETA", beta as f64), ("Q_ORIG", orig as f64)])
}

pub fn rope_kv(r: &mut Recorder, h: Heads, o: RopeKv) {
    let (qn, kn, norm) = o.qk_norm.unwrap_or((0, 0, Norm { at: 0, eps: 0.0, offset: 0.0 }));
    let consts = [
        ("HD", h.head_dim as f64),
        ("ROT", o.rot as f64),
        ("NH", h.heads as f64),
        ("NKV", h.kv_heads as f64),
        ("CAP", h.cap as f64),
        ("QK_NORM", flag(o.qk_norm.is_some())),
        ("Q_NORM_OFF", qn as f64),
        ("K_NORM_OFF", kn as f64),
        ("EPS", norm.eps as f64),
        ("NW_OFFSET", norm.offset as f64),
        ("QSTRIDE", h.q_stride as f64),
        ("FLAT", flag(o.qk_norm.is_none())),
        ("QK_NORM_AFTER", flag(o.after)),
    ];
    let consts = [&consts[..], &q_temp_consts(o.q_temp)].concat();
    let heads = (h.heads + 2 * h.kv_heads) as u32;
    let grid = Grid::PerToken(if o.qk_norm.is_some() { heads } else { (heads * h.head_dim as u32 / 2).div_ceil(128) });
    r.push("rope+kv", Kernel::RopeKv, &consts, &[(0, o.qkv), (3, o.kv), (4, o.vecs), (6, o.rope)], grid);
}

/// Qwen3.5's full-attention output gate, in place on `attn`: times sigmoid of the gate q_proj
/// gives after [q; k; v] in each `stride`-value row of `qkv`.
pub fn gate(r: &mut Recorder, q_dim: usize, kv_dim: usize, stride: usize, qkv: &wgpu::Buffer, attn: &wgpu::Buffer) {
    let consts = [("N", q_dim as f64), ("STRIDE", stride as f64), ("GATE_OFF", (q_dim + 2 * kv_dim) as f64)];
    r.push("attn gate", Kernel::AttnGate, &consts, &[(0, qkv), (1, attn)], Grid::Elems(q_dim as u32));
}

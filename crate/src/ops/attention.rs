//! Attention: rotary embedding and the KV-cache append (rope_kv.wgsl), prefill attention
//! (attention.wgsl, or attention_coop.wgsl on matrix units), decode attention split over 64-slot
//! chunks of the cache (attn_decode.wgsl) with its merge (attn_combine.wgsl, or inside the
//! kernel, or inside the output projection: `matvec::Merge`), and Qwen3.5's output gate.

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

/// Prefill: out = softmax(q·kᵀ) · v for every query of the step against the cache (`causal`:
/// each only up to its own position).
pub fn prefill(r: &mut Recorder, h: Heads, causal: bool, qkv: &wgpu::Buffer, kv: &wgpu::Buffer, out: &wgpu::Buffer) {
    let mut consts = h.consts();
    consts.extend([("QSTRIDE", h.q_stride as f64), ("CAUSAL", flag(causal))]);
    let (kernel, grid) = if h.on_matrix_units(r) {
        (Kernel::AttentionCoop, Grid::QueryBlocks(h.heads as u32))
    } else {
        (Kernel::Attention, Grid::PerToken(h.heads as u32))
    };
    r.push("attention", kernel, &consts, &[(0, qkv), (1, kv), (2, kv), (3, out)], grid);
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
    ];
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

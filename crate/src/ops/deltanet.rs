//! Gated DeltaNet token mixing (Qwen3.5's linear-attention layers): the causal convolution
//! (conv1d.wgsl), the per-head gates and normed q/k (delta_prep.wgsl), the recurrence over the
//! state matrix (delta_rule.wgsl) and the gated output norm (gated_norm.wgsl).

use super::{flag, Grid, Recorder};
use crate::gpu::Kernel;
use crate::model::hf_config::LinearAttn;

/// The buffers of one layer: `proj` the fused input projection's rows [q k v | z | b | a] of
/// `stride` values, `vecs` the layer's small vectors (word offsets in `at`), the convolution's
/// outputs `lin`, the gates, the two states, and the output `out`.
pub struct DeltaNet<'a> {
    pub proj: &'a wgpu::Buffer,
    pub stride: usize,
    pub vecs: &'a wgpu::Buffer,
    pub at: Offsets,
    pub lin: &'a wgpu::Buffer,
    pub gates: &'a wgpu::Buffer,
    pub conv_state: &'a wgpu::Buffer,
    pub delta_state: &'a wgpu::Buffer,
    pub out: &'a wgpu::Buffer,
    pub eps: f32,
}

/// Where the layer's convolution weights, dt bias, -exp(A) and output-norm weights sit in vecs.
#[derive(Clone, Copy, Debug)]
pub struct Offsets {
    pub conv_w: usize,
    pub dt_bias: usize,
    pub a_neg: usize,
    pub gnorm: usize,
}

/// Everything between the input projection and the output projection; `batched`: a prefill
/// chunk (every token's convolution at once, then the state moved forward).
pub fn mix(r: &mut Recorder, l: LinearAttn, d: DeltaNet, batched: bool) {
    let cd = l.conv_dim();
    let conv = |mode: u32| {
        [
            ("C", cd as f64),
            ("TAPS", l.conv as f64),
            ("STRIDE", d.stride as f64),
            ("W_OFF", d.at.conv_w as f64),
            ("MODE", mode as f64),
        ]
    };
    let bufs = [(0, d.proj), (1, d.vecs), (2, d.conv_state), (3, d.lin)];
    let channels = Grid::Fixed((cd as u32).div_ceil(256));
    if batched {
        // Every (token, channel) at once, then the state moved forward: a 512-token prefill
        // spent 2.5 ms (H100, Qwen3.5-0.8B) walking the tokens channel by channel.
        r.push("conv", Kernel::Conv1d, &conv(1), &bufs, Grid::Elems(cd as u32));
        r.push("conv state", Kernel::Conv1d, &conv(2), &bufs, channels);
    } else {
        r.push("conv", Kernel::Conv1d, &conv(0), &bufs, channels);
    }
    let (nk, nv, dk, dv) = (l.key_heads as f64, l.value_heads as f64, l.key_dim as f64, l.value_dim as f64);
    let prep = [
        ("NK", nk),
        ("NV", nv),
        ("DK", dk),
        ("DV", dv),
        ("STRIDE", d.stride as f64),
        ("CONV_DIM", cd as f64),
        ("DT_OFF", d.at.dt_bias as f64),
        ("A_OFF", d.at.a_neg as f64),
    ];
    let bufs = [(0, d.lin), (1, d.proj), (2, d.gates), (3, d.vecs)];
    r.push("delta prep", Kernel::DeltaPrep, &prep, &bufs, Grid::PerToken(2 * l.key_heads as u32 + 1));
    let cb = l.column_block();
    let rule = [
        ("NK", nk),
        ("NV", nv),
        ("DK", dk),
        ("DV", dv),
        ("CB", cb as f64),
        ("CONV_DIM", cd as f64),
        ("TILED", flag(l.tiled)),
    ];
    let bufs = [(0, d.lin), (1, d.gates), (2, d.delta_state), (4, d.out)];
    r.push(
        "delta rule",
        Kernel::DeltaRule,
        &rule,
        &bufs,
        Grid::Fixed2(l.value_heads as u32, (l.value_dim / cb) as u32),
    );
    let norm = [
        ("NV", nv),
        ("DV", dv),
        ("STRIDE", d.stride as f64),
        ("CONV_DIM", cd as f64),
        ("GN_OFF", d.at.gnorm as f64),
        ("EPS", d.eps as f64),
    ];
    let bufs = [(0, d.proj), (1, d.out), (3, d.vecs)];
    r.push("gated norm", Kernel::GatedNorm, &norm, &bufs, Grid::PerToken(l.value_heads as u32));
}

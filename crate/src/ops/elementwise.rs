//! Per-token kernels: the embedding lookup (embed.wgsl), RMS norms of rows (rmsnorm.wgsl) and
//! the prefill FFN's gated activation (ffn_act.wgsl).

use super::matvec::{Act, Norm};
use super::{flag, Grid, Recorder};
use crate::gpu::Kernel;
use crate::model::weights::GpuMatrix;

/// x = scale · E[id] for every token id in `ids` that falls in rows [first, first + E.rows) of
/// the whole embedding (`part` is that row range).
pub fn embed(r: &mut Recorder, part: &GpuMatrix, first: usize, scale: f32, ids: &wgpu::Buffer, x: &wgpu::Buffer) {
    let [l0, l1, l2] = part.layout_constants();
    let h = part.cols;
    let consts = [
        l0,
        l1,
        l2,
        ("H", h as f64),
        ("SCALE", scale as f64),
        ("ID0", first as f64),
        ("ID1", (first + part.rows) as f64),
    ];
    let grid = Grid::PerToken((h as u32 / 8).div_ceil(64));
    r.push("embed", Kernel::Embed, &consts, &[(0, &part.words), (1, &part.meta), (2, ids), (3, x)], grid);
}

/// y (+)= norm(x) over rows of `width` (every token's, or with `last_only` the last one's).
pub struct NormRows<'a> {
    pub label: &'static str,
    pub x: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub y: &'a wgpu::Buffer,
    pub width: usize,
    pub norm: Norm,
    pub last_only: bool,
    /// y += norm(x) (Gemma's post-norms before the residual).
    pub add: bool,
    /// Also write the rows in f16 here, for a matrix-unit matmul (`MatMul::a16_ready`); width
    /// even, not with `add` or `last_only`.
    pub y16: Option<&'a wgpu::Buffer>,
}

pub fn rmsnorm(r: &mut Recorder, n: NormRows) {
    let consts = [
        ("H", n.width as f64),
        ("EPS", n.norm.eps as f64),
        ("LAST_ONLY", flag(n.last_only)),
        ("NW_OFF", n.norm.at as f64),
        ("NW_OFFSET", n.norm.offset as f64),
        ("ADD", flag(n.add)),
        ("F16_OUT", flag(n.y16.is_some())),
    ];
    assert!(n.y16.is_none() || (n.width % 2 == 0 && !n.add && !n.last_only), "f16 rows: even width, no add");
    let grid = if n.last_only { Grid::Fixed(1) } else { Grid::Tokens };
    let unused = r.unused.clone();
    let y16 = n.y16.unwrap_or(&unused);
    r.push(n.label, Kernel::RmsNorm, &consts, &[(0, n.x), (1, n.vecs), (2, n.y), (3, y16)], grid);
}

/// h = act(gate) * up for rows [gate; up] of `2 * ffn` values a token; with `h16` (`ffn` even)
/// also in f16 there, for a matrix-unit matmul (`MatMul::a16_ready`).
pub fn glu(r: &mut Recorder, ffn: usize, act: Act, gu: &wgpu::Buffer, h: &wgpu::Buffer, h16: Option<&wgpu::Buffer>) {
    assert!(h16.is_none() || ffn % 2 == 0, "f16 rows: even width");
    let mut consts = vec![("F", ffn as f64), ("F16_OUT", flag(h16.is_some()))];
    consts.extend(act.consts());
    let grid = Grid::Elems(if h16.is_some() { ffn / 2 } else { ffn } as u32);
    let unused = r.unused.clone();
    r.push("glu", Kernel::FfnAct, &consts, &[(0, gu), (1, h), (2, h16.unwrap_or(&unused))], grid);
}

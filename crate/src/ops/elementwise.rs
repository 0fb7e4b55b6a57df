//! Per-token kernels: the embedding lookup (embed.wgsl), RMS norms of rows (rmsnorm.wgsl) and
//! the prefill FFN's gated activation (ffn_act.wgsl).

use super::matmul::Ready;
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
    /// Also write the rows as this matmul kernel reads them (`MatMul::a_ready`): in f16 (width
    /// even) or in 8 bits (width a multiple of 32, and then not in f32 to `y`); not with `add`
    /// or `last_only`.
    pub ready: Option<Ready<'a>>,
}

/// Normalises, in place, `width` values from column `col0` of every token's row of `stride`
/// values (OLMo 2's q and k norms over the whole projection, inside [q; k; v]).
pub fn rmsnorm_in_place(
    r: &mut Recorder,
    y: &wgpu::Buffer,
    vecs: &wgpu::Buffer,
    norm: Norm,
    (col0, width, stride): (usize, usize, usize),
) {
    let consts = [
        ("H", width as f64),
        ("EPS", norm.eps as f64),
        ("NW_OFF", norm.at as f64),
        ("NW_OFFSET", norm.offset as f64),
        ("STRIDE", stride as f64),
        ("COL0", col0 as f64),
        ("IN_PLACE", 1.0),
    ];
    // x is not read: the (read-only) vecs stand in for it.
    let [u3, u6] = r.unused.clone();
    r.push("qk norm", Kernel::RmsNorm, &consts, &[(0, vecs), (1, vecs), (2, y), (3, &u3), (6, &u6)], Grid::Tokens);
}

pub fn rmsnorm(r: &mut Recorder, n: NormRows) {
    let consts = [
        ("H", n.width as f64),
        ("EPS", n.norm.eps as f64),
        ("LAST_ONLY", flag(n.last_only)),
        ("NW_OFF", n.norm.at as f64),
        ("NW_OFFSET", n.norm.offset as f64),
        ("ADD", flag(n.add)),
    ];
    let [f16, i8] = Ready::flags(n.ready);
    let consts = [&consts[..], &[("F16_OUT", f16), ("I8_OUT", i8)]].concat();
    assert!(
        n.ready.is_none() || (n.width.is_multiple_of(Ready::granule(n.ready)) && !n.add && !n.last_only),
        "matmul-ready rows: whole pairs or blocks, no add"
    );
    let grid = if n.last_only { Grid::Fixed(1) } else { Grid::Tokens };
    let (y3, y6) = Ready::buffers(n.ready, &r.unused);
    r.push(n.label, Kernel::RmsNorm, &consts, &[(0, n.x), (1, n.vecs), (2, n.y), (3, &y3), (6, &y6)], grid);
}

/// h = act(gate) * up for rows [gate; up] of `2 * ffn` values a token; with `ready` also as
/// the next matmul's kernel reads it (`MatMul::a_ready`): in f16 (`ffn` even), or in 8 bits
/// (`ffn` a multiple of 32, and then not in f32 to `h`).
pub fn glu(r: &mut Recorder, ffn: usize, act: Act, gu: &wgpu::Buffer, h: &wgpu::Buffer, ready: Option<Ready>) {
    let [f16, i8] = Ready::flags(ready);
    assert!(ffn.is_multiple_of(Ready::granule(ready)), "matmul-ready rows: whole pairs or blocks");
    // Outputs an invocation: a pair in f16, a quarter of a block's eight (quant_part) in 8 bits.
    let per = match ready {
        Some(Ready::F16(_)) => 2,
        Some(Ready::I8(..)) => 4,
        None => 1,
    };
    let mut consts = vec![("F", ffn as f64), ("F16_OUT", f16), ("I8_OUT", i8)];
    consts.extend(act.consts());
    let grid = Grid::Elems((ffn / per) as u32);
    let (h2, h6) = Ready::buffers(ready, &r.unused);
    r.push("glu", Kernel::FfnAct, &consts, &[(0, gu), (1, h), (2, &h2), (6, &h6)], grid);
}

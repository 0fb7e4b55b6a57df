//! Decode matrix-vector products (matvec.wgsl, qkv_rope.wgsl; both built on rowdot.wgsl): rows
//! of four outputs per 32 invocations, the activation staged in workgroup memory (as 8-bit
//! blocks where the adapter has integer dot products), a fused RMS norm of the input, and an
//! epilogue (store, residual add, GLU), optionally the LM head's per-workgroup argmax.

use super::{flag, Grid, Recorder};
use crate::gpu::Kernel;
use crate::model::weights::GpuMatrix;

/// Decode matvecs split rows into slices while they have fewer workgroups than this. Measured on
/// the H100 with integer activations, 96/132/200/264: 132 (its SM count) was best for the Phi-3
/// shape (+1.5% over 96; 200 and up lost 3%), and within 1% of the best for the 1B shape.
const MV_MIN_WORKGROUPS: usize = 132;

/// What a matvec does with its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    Store = 0,
    /// y += W·x (the residual).
    Add = 1,
    /// y = act(gate) * up over rows [gate; up] (half as many outputs as rows).
    Glu = 2,
    /// y = act(W·x + bias): an FFN without a gate.
    Act = 3,
}

/// The FFN's activation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Act {
    pub gelu: bool,
    pub relu2: bool,
    /// act(up) alone, no gate (the prefill GLU pass; decode takes `Epilogue::Act`).
    pub ungated: bool,
}

impl Act {
    pub(crate) fn consts(self) -> [(&'static str, f64); 3] {
        [("GELU", flag(self.gelu)), ("RELU2", flag(self.relu2)), ("UNGATED", flag(self.ungated))]
    }
}

/// An RMS norm of the input: weights at word `at` of the vecs buffer, plus `offset` (Gemma's 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Norm {
    pub at: usize,
    pub eps: f32,
    pub offset: f32,
}

/// The input is decode attention's split partials of a `context`-token cache, merged while
/// staged (rowdot.wgsl MERGE).
#[derive(Clone, Copy, Debug)]
pub struct Merge {
    pub context: usize,
    pub head_dim: usize,
    pub heads: usize,
}

/// One row range of a matrix streamed in several buffers (the LM head): its first row, all rows
/// of y, and the first argmax workgroup.
#[derive(Clone, Copy, Debug)]
pub struct RowRange {
    pub first: usize,
    pub y_rows: usize,
    pub wg0: usize,
}

/// y (+)= W · norm?(x) (+ bias), rows split as `shape` (invocations, slices) and x staged
/// `x_tile` elements at a time when given (tests), else as the adapter fits best.
pub struct MatVec<'a> {
    pub label: &'static str,
    pub w: &'a GpuMatrix,
    pub x: &'a wgpu::Buffer,
    pub y: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub norm: Option<Norm>,
    pub epilogue: Epilogue,
    pub act: Act,
    /// Soft-cap of stored values (0: none).
    pub softcap: f32,
    /// W·x (+ bias) times this before it is stored or added (Granite's residual and logit
    /// multipliers).
    pub scale: f32,
    /// Bias at this word of vecs.
    pub bias: Option<usize>,
    /// Each workgroup also leaves its largest value after y's rows.
    pub argmax: bool,
    pub merge: Option<Merge>,
    pub rows: Option<RowRange>,
    /// Partials of the previous layer's split FFN (`ffn_split`) stored after x (`x_parts`) or
    /// after y's rows (`y_parts`, with the residual add), added to them.
    pub x_parts: usize,
    pub y_parts: usize,
    pub shape: Option<(usize, usize)>,
    pub x_tile: Option<usize>,
}

impl<'a> MatVec<'a> {
    pub fn new(
        label: &'static str,
        w: &'a GpuMatrix,
        x: &'a wgpu::Buffer,
        y: &'a wgpu::Buffer,
        vecs: &'a wgpu::Buffer,
    ) -> Self {
        MatVec {
            label,
            w,
            x,
            y,
            vecs,
            norm: None,
            epilogue: Epilogue::Store,
            act: Act::default(),
            softcap: 0.0,
            scale: 1.0,
            bias: None,
            argmax: false,
            merge: None,
            rows: None,
            x_parts: 0,
            y_parts: 0,
            shape: None,
            x_tile: None,
        }
    }
}

/// Records `m`; returns its number of workgroups (the LM head's argmax pairs).
pub fn matvec(r: &mut Recorder, m: MatVec) -> u32 {
    let glu = m.epilogue == Epilogue::Glu;
    let outputs = if glu { m.w.rows / 2 } else { m.w.rows };
    let per_block = if glu { 2 } else { 4 };
    let (w, norm, bias, merge, x_parts, shape, x_tile) = (m.w, m.norm, m.bias, m.merge, m.x_parts, m.shape, m.x_tile);
    let rd = RowDot { w, norm, bias, merge, x_parts, shape, x_tile, own_bytes: 0 };
    let (mut consts, wg, slices) = rd.consts(r, outputs.div_ceil(per_block));
    consts.extend([
        ("N", m.w.rows as f64),
        ("EPI", m.epilogue as u32 as f64),
        ("NORM", flag(m.norm.is_some())),
        ("SOFTCAP", m.softcap as f64),
        ("ARGMAX", flag(m.argmax)),
        ("YP", m.y_parts as f64),
    ]);
    consts.extend(m.act.consts());
    if m.scale != 1.0 {
        consts.push(("SCALE", m.scale as f64));
    }
    if let Some(rr) = m.rows {
        consts.extend([("ROW0", rr.first as f64), ("Y_ROWS", rr.y_rows as f64), ("WG0", rr.wg0 as f64)]);
    }
    let wgs = outputs.div_ceil(per_block * wg / 32 / slices) as u32;
    // Past 65535 workgroups the kernel folds (x, y) into one index.
    let gy = wgs.div_ceil(65535);
    let bufs = [(0, &m.w.words), (1, &m.w.meta), (2, m.x), (3, m.y), (4, m.vecs)];
    r.push(m.label, Kernel::MatVec, &consts, &bufs, Grid::Fixed2(wgs.div_ceil(gy), gy));
    wgs.div_ceil(gy) * gy
}

/// Decode's fused first step of an attention layer (qkv_rope.wgsl): the norm, [q; k; v] =
/// W·x (+ bias), q and k rotated as their row pairs come out, k and v appended to the cache.
pub struct QkvRope<'a> {
    pub w: &'a GpuMatrix,
    pub x: &'a wgpu::Buffer,
    pub qkv: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub kv: &'a wgpu::Buffer,
    pub rope: &'a wgpu::Buffer,
    pub norm: Norm,
    /// Llama 4's query temperature (`attention::q_temp_consts`).
    pub q_temp: Option<(f32, usize)>,
    pub bias: Option<usize>,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub head_dim: usize,
    /// Rotated dimensions of a head.
    pub rot: usize,
    /// Cache slots.
    pub cap: usize,
    /// Partials of the previous layer's split FFN after x (`ffn_split`).
    pub x_parts: usize,
    pub x_tile: Option<usize>,
}

pub fn qkv_rope(r: &mut Recorder, q: QkvRope) {
    let rows = q.q_dim + 2 * q.kv_dim;
    let (w, norm, bias, x_parts, x_tile) = (q.w, Some(q.norm), q.bias, q.x_parts, q.x_tile);
    let rd = RowDot { w, norm, bias, merge: None, x_parts, shape: None, x_tile, own_bytes: 0 };
    let (mut consts, wg, slices) = rd.consts(r, rows.div_ceil(4));
    consts.extend([
        ("QD", q.q_dim as f64),
        ("KVD", q.kv_dim as f64),
        ("HD", q.head_dim as f64),
        ("ROT", q.rot as f64),
        ("CAP", q.cap as f64),
    ]);
    consts.extend(super::attention::q_temp_consts(q.q_temp));
    let bufs = [(0, &q.w.words), (1, &q.w.meta), (2, q.x), (3, q.qkv), (4, q.vecs), (6, q.kv), (7, q.rope)];
    let grid = Grid::Fixed((rows as u32).div_ceil((4 * wg / 32 / slices) as u32));
    r.push("qkv", Kernel::QkvRope, &consts, &bufs, grid);
}

/// What every rowdot.wgsl kernel shares.
struct RowDot<'a> {
    w: &'a GpuMatrix,
    norm: Option<Norm>,
    bias: Option<usize>,
    merge: Option<Merge>,
    x_parts: usize,
    shape: Option<(usize, usize)>,
    x_tile: Option<usize>,
    /// Workgroup memory of the kernel's own arrays beyond what `workgroup_bytes` counts.
    own_bytes: usize,
}

impl RowDot<'_> {
    /// Override constants over `blocks` blocks of four rows: layout, row length, norm, bias,
    /// workgroup shape, activation staging and the attention merge. Returns them with the
    /// workgroup size and slices.
    fn consts(&self, r: &mut Recorder, blocks: usize) -> (Vec<(&'static str, f64)>, usize, usize) {
        let w = self.w;
        let (wg, slices) = self.shape.unwrap_or_else(|| mv_shape(r, blocks, w.cols, w.layout.block()));
        let norm = self.norm.unwrap_or(Norm { at: 0, eps: 0.0, offset: 0.0 });
        let mut c = Vec::from(w.layout_constants());
        c.extend(self.x_stage(r));
        c.extend([
            ("K", w.cols as f64),
            ("NW_OFF", norm.at as f64),
            ("EPS", norm.eps as f64),
            ("NW_OFFSET", norm.offset as f64),
            ("WG", wg as f64),
            ("S", slices as f64),
            ("MERGE", flag(self.merge.is_some())),
            ("XP", self.x_parts as f64),
        ]);
        // Without a bias or a merge the shader's defaults hold (the split FFN declares neither).
        if let Some(b) = self.bias {
            c.extend([("HAS_BIAS", 1.0), ("BIAS_OFF", b as f64)]);
        }
        if let Some(m) = self.merge {
            c.extend([
                ("MHD", m.head_dim as f64),
                ("MNH", m.heads as f64),
                ("MCAP", m.context.div_ceil(64) as f64),
                ("MW_LEN", merge_weights(self.merge) as f64),
            ]);
        }
        (c, wg, slices)
    }

    /// How the activation vector is staged in workgroup memory (rowdot.wgsl): as 8-bit blocks
    /// where the adapter has integer dot products and the weights are quantized (2.5 bytes an
    /// element), else as padded f32 (4.5 bytes an element). All of x when it fits beside the
    /// kernel's other workgroup arrays, else tiles of a multiple of 256. KT, XS_LEN, XB_LEN, IDOT,
    /// XP_LEN.
    fn x_stage(&self, r: &mut Recorder) -> [(&'static str, f64); 5] {
        let (k, layout) = (self.w.cols, self.w.layout);
        let idot = r.caps.idot && layout.block() > 1;
        let mw = merge_weights(self.merge);
        let max = tile_max(r, idot, mw);
        // A split FFN's partials are summed into workgroup memory (`xps`) before x is staged
        // whole; the forward pass splits only FFNs whose x fits (`ffn_split_fits`).
        let xp_len = if self.x_parts > 0 { k / 4 } else { 1 };
        let whole = self.x_parts > 0 || k <= max;
        let kt = self.x_tile.unwrap_or(if whole { k } else { max.max(256) });
        let (xs, xb) = if idot { (1, 5 * kt / 32) } else { (kt / 4 + kt / 32 + 1, 5) };
        let bytes = workgroup_bytes(r, xs, xb, mw) + 16 * xp_len + self.own_bytes;
        r.workgroup_bytes(bytes);
        [
            ("KT", kt as f64),
            ("XS_LEN", xs as f64),
            ("XB_LEN", xb as f64),
            ("IDOT", flag(idot)),
            ("XP_LEN", xp_len as f64),
        ]
    }
}

/// The longest x a rowdot.wgsl kernel stages whole beside its other workgroup arrays.
fn tile_max(r: &Recorder, idot: bool, mw: usize) -> usize {
    let avail = r.caps.workgroup_storage.saturating_sub(workgroup_bytes(r, 1, 5, mw));
    (if idot { avail * 2 / 5 } else { avail * 2 / 9 }) / 256 * 256
}

/// MW_LEN: room for the split weights of a merge (16 a head), else one placeholder.
fn merge_weights(merge: Option<Merge>) -> usize {
    merge.map_or(1, |m| m.heads * 16)
}

/// Workgroup memory of a rowdot.wgsl kernel for XS_LEN, XB_LEN and MW_LEN (keep in step with
/// its `var<workgroup>` arrays and the reduction prelude's): xs, xb (16 bytes a slot), mw (8),
/// ssg and parts (640), the argmax arrays (1 KiB), and without subgroups the reduction's `red`.
fn workgroup_bytes(r: &Recorder, xs: usize, xb: usize, mw: usize) -> usize {
    let reduce = if r.caps.subgroups { 0 } else { 4096 };
    16 * xs + 16 * xb + 8 * mw + 640 + 1024 + reduce
}

/// Workgroup size and slices per row block for `blocks` blocks of four rows of length `k`.
/// 256 invocations (x is staged once for more rows; smaller workgroups measured slower even
/// for short rows), or 512 with integer activations where rows are long and the matrix tall
/// enough to keep MV_MIN_WORKGROUPS of them: each workgroup quantizes all of x, so fewer,
/// larger ones stage less (H100: Phi-3 shape +1.6%, Llama-3.1-8B +3%; rows of 896 lost 3%;
/// the f32 path lost 4%). Subgroups only: the portable reduction holds 256. Long rows are
/// split into slices until there are enough workgroups to spread over the GPU and keep
/// loads in flight.
fn mv_shape(r: &Recorder, blocks: usize, k: usize, block: usize) -> (usize, usize) {
    let chunks = k / if block > 1 { 32 } else { 8 };
    let can_big = r.caps.subgroups && r.caps.idot && block > 1 && r.caps.invocations >= 512 && k >= 2048;
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

/// Decode's whole FFN in one dispatch (ffn_split.wgsl): the norm, gate+up, the GLU and down,
/// `units` FFN units a workgroup. Workgroup j's partial of the output goes to x after its first
/// `down.rows` values, the j-th of `ffn_parts` for the next layer to add (`x_parts`, `y_parts`).
pub struct FfnSplit<'a> {
    pub gate_up: &'a GpuMatrix,
    pub down: &'a GpuMatrix,
    pub x: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub norm: Norm,
    pub act: Act,
    pub units: usize,
}

/// What an invocation of a split FFN holds in registers (ffn_split.wgsl PMAX, DMAX): gate/up
/// chunks, down chunks.
const FFN_SPLIT_PMAX: usize = 12;
const FFN_SPLIT_DMAX: usize = 8;

/// A split FFN's invocations. 1024 (fewer chunks each) measured slower natively on the H200
/// (SmolLM2 decode 1,275 -> 1,238 tok/s against 1,296 at 256) and no faster in Chromium.
const FFN_SPLIT_WG: usize = 256;

/// The split FFN's units a workgroup for these matrices, or None where it does not pay or the
/// kernel cannot take them. A split FFN saves a dispatch a layer (the GPU's ~5 us launch, and
/// a browser's ~8 us to record it, BENCHMARKS.md session 13) and costs every reader of x the
/// partials' reads, so it pays only for small FFNs: at most `FFN_SPLIT_MAX_VALUES` partial
/// values (hidden x parts), and few enough weights a workgroup for each invocation to hold its
/// share in registers. FERROLM_FFN_SPLIT=C natively forces C units (0: off), for measuring.
pub fn ffn_split_units(r: &Recorder, gate_up: &GpuMatrix, down: &GpuMatrix) -> Option<usize> {
    // The partials must fit in x's buffer (`FFN_SPLIT_MAX_VALUES`), forced or not.
    let room = |c: usize| ffn_split_fits(r, gate_up, down, c) && down.cols / c * down.rows <= FFN_SPLIT_MAX_VALUES;
    let forced = std::env::var("FERROLM_FFN_SPLIT").ok().and_then(|v| v.parse::<usize>().ok());
    if let Some(c) = forced {
        return Some(c).filter(|&c| room(c));
    }
    FFN_SPLIT_UNITS.into_iter().find(|&c| room(c))
}

/// Whether ffn_split.wgsl takes these matrices at `units` units a workgroup.
pub fn ffn_split_fits(r: &Recorder, gate_up: &GpuMatrix, down: &GpuMatrix, units: usize) -> bool {
    let (hidden, ffn, wg) = (down.rows, down.cols, FFN_SPLIT_WG);
    let lanes = wg / (2 * units).max(1);
    units > 0
        && gate_up.layout.block() > 1
        && gate_up.layout_constants() == down.layout_constants()
        && gate_up.rows == 2 * ffn
        && gate_up.cols == hidden
        && hidden % 32 == 0
        && hidden <= tile_max(r, r.caps.idot, 1)
        && units.is_multiple_of(32)
        && ffn % units == 0
        && wg % (2 * units) == 0
        && (hidden / 32).div_ceil(lanes) <= FFN_SPLIT_PMAX
        && hidden.div_ceil(wg) * units / 32 <= FFN_SPLIT_DMAX
}

/// See `ffn_split_units`; x's buffer holds this many values past the hidden state.
pub const FFN_SPLIT_MAX_VALUES: usize = 32768;

/// Units a workgroup the split FFN takes by default: more hold more weights in each
/// invocation's registers and spill (SmolLM2 on the H200, kernel time a layer: 32 units 12.1 us,
/// 64 15.5; at 1024 invocations 128 took 17.9, 256 34).
const FFN_SPLIT_UNITS: [usize; 2] = [32, 64];

pub fn ffn_split(r: &mut Recorder, f: FfnSplit) {
    let wg = FFN_SPLIT_WG;
    let (w, norm, shape) = (f.gate_up, Some(f.norm), Some((wg, 1)));
    // Its own arrays `pd` and `act`: 4 bytes an invocation and a unit. No biases (forward.rs
    // splits only FFNs without them).
    let own_bytes = 4 * (wg + f.units);
    let rd = RowDot { w, norm, bias: None, merge: None, x_parts: 0, shape, x_tile: None, own_bytes };
    let (mut consts, _, _) = rd.consts(r, 1);
    let (hidden, lanes) = (f.down.rows, wg / (2 * f.units));
    consts.extend([
        ("FF", f.down.cols as f64),
        ("C", f.units as f64),
        ("LP", lanes as f64),
        ("CPL", (hidden / 32).div_ceil(lanes) as f64),
        ("RPL", hidden.div_ceil(wg) as f64),
    ]);
    consts.extend(f.act.consts());
    let bufs =
        [(0, &f.gate_up.words), (1, &f.gate_up.meta), (2, f.x), (4, f.vecs), (6, &f.down.words), (7, &f.down.meta)];
    r.push("ffn", Kernel::FfnSplit, &consts, &bufs, Grid::Fixed((f.down.cols / f.units) as u32));
}

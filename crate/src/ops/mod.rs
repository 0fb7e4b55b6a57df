//! The kernel layer: one typed function per WGSL kernel role (`shaders/`), each owning its
//! bindings, override constants, grid and workgroup-memory sizing, and taking plain dimensions
//! rather than a model config. `model/forward.rs` describes a step with these calls; the kernel
//! tests (`tests/kernels.rs`) make the same calls, so no constant is kept twice.
//!
//! A `Recorder` collects the dispatches once, with their bind groups, into a `Program` that each
//! step replays after writing the 16-byte step uniform (`shaders/step.wgsl`).

pub mod attention;
pub mod deltanet;
pub mod elementwise;
pub mod matmul;
pub mod matvec;
pub mod sample;

use crate::error::{Error, Result};
use crate::gpu::{Gpu, Kernel, Pipeline};
use std::rc::Rc;

/// What the adapter offers that the kernels choose by: the pipelines' variants and the limits
/// that size workgroup memory. Tests may narrow it (e.g. integer activations off).
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub subgroups: bool,
    pub idot: bool,
    pub fused_attention: bool,
    pub matrix_units: bool,
    pub i8_prefill: bool,
    pub workgroup_storage: usize,
    pub invocations: usize,
}

impl Caps {
    pub fn of(gpu: &Gpu) -> Caps {
        let p = &gpu.pipelines;
        Caps {
            subgroups: p.subgroups,
            idot: p.idot,
            fused_attention: p.fused_attention,
            matrix_units: p.matrix_units,
            i8_prefill: p.i8_prefill,
            workgroup_storage: gpu.limits.max_compute_workgroup_storage_size as usize,
            invocations: gpu.limits.max_compute_invocations_per_workgroup as usize,
        }
    }
}

/// How many workgroups a dispatch needs for a step of `t` tokens at cache position `pos`.
#[derive(Clone, Copy, Debug)]
pub enum Grid {
    Fixed(u32),
    Fixed2(u32, u32),
    /// (t, 1): one workgroup per token.
    Tokens,
    /// (x, t): one workgroup row per token.
    PerToken(u32),
    /// (n / tile_n, t / tile_m) output tiles.
    Tiles {
        n: u32,
        tile_n: u32,
        tile_m: u32,
    },
    /// (n / 128, t / 128, splits) output tiles of a split-K wide matmul.
    SplitTiles {
        n: u32,
        splits: u32,
    },
    /// (heads, ceil(t / 64), splits): 64 queries of a head per workgroup, the cache's keys in
    /// splits of `keys` (attention_coop.wgsl).
    QueryBlocks {
        heads: u32,
        keys: u32,
    },
    /// `n` elements per token as `Elems`, where the step's cache has more than one split of
    /// `keys`; no dispatch otherwise (attn_prefill_merge.wgsl).
    SplitsMerge {
        n: u32,
        keys: u32,
    },
    /// `n` elements per token, 256 per workgroup, folded into 2-D past 65535 workgroups.
    Elems(u32),
    /// (heads, splits): one workgroup per 64 cached positions (decode attention).
    Splits(u32),
}

impl Grid {
    pub fn dims(self, t: u32, pos: u32) -> [u32; 3] {
        match self {
            Grid::Fixed(x) => [x, 1, 1],
            Grid::Fixed2(x, y) => [x, y, 1],
            Grid::Tokens => [t, 1, 1],
            Grid::PerToken(x) => [x, t, 1],
            Grid::Tiles { n, tile_n, tile_m } => [n.div_ceil(tile_n), t.div_ceil(tile_m), 1],
            Grid::SplitTiles { n, splits } => {
                let tile = matmul::WIDE_TILE;
                [n.div_ceil(tile), t.div_ceil(tile), splits]
            }
            Grid::QueryBlocks { heads, keys } => [heads, t.div_ceil(64), (pos + t).div_ceil(keys)],
            Grid::SplitsMerge { n, keys } if (pos + t).div_ceil(keys) > 1 => Grid::Elems(n).dims(t, pos),
            Grid::SplitsMerge { .. } => [0, 0, 0],
            Grid::Elems(n) => {
                let wgs = (n * t).div_ceil(256);
                let y = wgs.div_ceil(65535);
                [wgs.div_ceil(y), y, 1]
            }
            Grid::Splits(heads) => [heads, (pos + t).div_ceil(64), 1],
        }
    }
}

/// Which steps record a dispatch: all, or only those whose cache holds at most / more than the
/// program's `short_max` positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum When {
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

/// Which steps a dispatch belongs to (set on the recorder before pushing it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Filter {
    pub when: When,
    /// `Some(sampled)`: only steps that choose their token greedily (`false`) or by sampling.
    pub pick: Option<bool>,
    /// Only steps whose token a constraint masks (`Pick::masked`).
    pub masked: bool,
    /// `Some(hidden)`: only steps that end with the hidden states (`true`) or the LM head.
    pub head: Option<bool>,
}

impl Filter {
    pub const ALWAYS: Filter = Filter { when: When::Always, pick: None, masked: false, head: None };

    fn runs(&self, t: u32, pos: u32, short_max: u32, pick: Pick) -> bool {
        self.when.at(t, pos, short_max)
            && self.pick.is_none_or(|p| p == pick.sampled)
            && (!self.masked || pick.masked)
            && self.head.is_none_or(|h| h == pick.hidden)
    }
}

struct Op {
    /// What the dispatch does, for profiles ("qkv", "attention", "down", ...).
    label: &'static str,
    pipeline: Rc<Pipeline>,
    bind: wgpu::BindGroup,
    grid: Grid,
    filter: Filter,
}

/// A recorded program: the dispatches of one kind of step.
pub struct Program {
    ops: Vec<Op>,
    /// Cached positions up to which the `When::Short` dispatches run (the attention merge).
    short_max: u32,
}

impl Program {
    /// The dispatches a step runs: those its filters let through, with a non-empty grid.
    fn live(&self, t: u32, pos: u32, pick: Pick) -> impl Iterator<Item = &Op> {
        self.ops
            .iter()
            .filter(move |o| o.filter.runs(t, pos, self.short_max, pick) && !o.grid.dims(t, pos).contains(&0))
    }

    /// Dispatches of a step of `t` tokens at cache position `pos`.
    pub fn dispatches(&self, t: usize, pos: usize, pick: Pick) -> usize {
        self.live(t as u32, pos as u32, pick).count()
    }

    /// Record the step's dispatches for `n_tokens` tokens starting at cache position `pos`
    /// (one-off programs, `run_once`; steps go through `record_range`).
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>, n_tokens: u32, pos: u32, pick: Pick) {
        self.record_range(pass, n_tokens, pos, pick, 0..usize::MAX);
    }

    /// Record dispatches `range` of those the step runs (`record` in parts).
    pub fn record_range(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        n_tokens: u32,
        pos: u32,
        pick: Pick,
        range: std::ops::Range<usize>,
    ) {
        for op in self.live(n_tokens, pos, pick).skip(range.start).take(range.len()) {
            op.dispatch(pass, n_tokens, pos);
        }
    }

    /// Record with a timestamp before the first dispatch and after each one (profiling);
    /// returns each dispatch's label.
    pub fn record_profiled(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        n_tokens: u32,
        pos: u32,
        pick: Pick,
        qs: &wgpu::QuerySet,
    ) -> Vec<&'static str> {
        pass.write_timestamp(qs, 0);
        let ops = self.live(n_tokens, pos, pick).enumerate();
        ops.map(|(i, op)| {
            op.dispatch(pass, n_tokens, pos);
            pass.write_timestamp(qs, i as u32 + 1);
            op.label
        })
        .collect()
    }

    /// Record each dispatch in a compute pass of its own, with the pass's timestamp writes at
    /// `2i` (beginning) and `2i + 1` (end); returns each dispatch's label.
    pub fn record_passes_timed(
        &self,
        enc: &mut wgpu::CommandEncoder,
        n_tokens: u32,
        pos: u32,
        pick: Pick,
        qs: &wgpu::QuerySet,
    ) -> Vec<&'static str> {
        let ops = self.live(n_tokens, pos, pick).enumerate();
        ops.map(|(i, op)| {
            let timestamp_writes = Some(wgpu::ComputePassTimestampWrites {
                query_set: qs,
                beginning_of_pass_write_index: Some(2 * i as u32),
                end_of_pass_write_index: Some(2 * i as u32 + 1),
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
            op.dispatch(&mut pass, n_tokens, pos);
            op.label
        })
        .collect()
    }
}

impl Op {
    fn dispatch(&self, pass: &mut wgpu::ComputePass<'_>, n_tokens: u32, pos: u32) {
        let [x, y, z] = self.grid.dims(n_tokens, pos);
        pass.set_pipeline(&self.pipeline.pipeline);
        pass.set_bind_group(0, &self.bind, &[]);
        pass.dispatch_workgroups(x, y, z);
    }
}

/// Collects dispatches into a `Program`. Every bind group also gets the step uniform `step` at
/// binding 5.
pub struct Recorder<'a> {
    pub gpu: &'a Gpu,
    pub caps: Caps,
    step: &'a wgpu::Buffer,
    ops: Vec<Op>,
    /// Which steps the dispatches pushed now belong to.
    pub filter: Filter,
    /// Set when a kernel would need more workgroup memory than the adapter has (wgpu does not
    /// check it natively; browsers refuse the pipeline).
    too_big: Option<usize>,
    /// Bound where a kernel's variant leaves a binding unused, a distinct one for each of up to
    /// two: browsers refuse a writable buffer bound twice in one dispatch.
    pub unused: [wgpu::Buffer; 2],
}

impl<'a> Recorder<'a> {
    pub fn new(gpu: &'a Gpu, step: &'a wgpu::Buffer) -> Recorder<'a> {
        let placeholder = || {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("unused binding"),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let unused = [placeholder(), placeholder()];
        let (caps, ops, filter) = (Caps::of(gpu), Vec::new(), Filter::ALWAYS);
        Recorder { gpu, caps, step, ops, filter, too_big: None, unused }
    }

    /// A dispatch of `kernel` with override constants `consts` and buffers at their bindings.
    pub(crate) fn push(
        &mut self,
        label: &'static str,
        kernel: Kernel,
        consts: &[(&str, f64)],
        bufs: &[(u32, &wgpu::Buffer)],
        grid: Grid,
    ) {
        let pipeline = self.gpu.pipelines.get(&self.gpu.device, kernel, consts);
        let mut entries: Vec<wgpu::BindGroupEntry> =
            bufs.iter().map(|&(i, b)| wgpu::BindGroupEntry { binding: i, resource: b.as_entire_binding() }).collect();
        entries.push(wgpu::BindGroupEntry { binding: 5, resource: self.step.as_entire_binding() });
        let bind = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout: &pipeline.layout,
            entries: &entries,
        });
        self.ops.push(Op { label, pipeline, bind, grid, filter: self.filter });
    }

    /// Note a kernel's workgroup memory; `finish` fails past the adapter's limit.
    pub(crate) fn workgroup_bytes(&mut self, bytes: usize) {
        if bytes > self.caps.workgroup_storage {
            self.too_big = Some(self.too_big.unwrap_or(0).max(bytes));
        }
    }

    /// The recorded program (`short_max`: see `Program`), or why the adapter cannot run it.
    pub fn finish(self, short_max: u32) -> Result<Program> {
        self.gpu.check().map_err(|e| Error::Gpu(format!("building the forward pass: {e}")))?;
        if let Some(bytes) = self.too_big {
            return Err(Error::Limits(format!(
                "a decode kernel needs {bytes} bytes of workgroup memory; the adapter allows {}",
                self.caps.workgroup_storage
            )));
        }
        Ok(Program { ops: self.ops, short_max })
    }
}

/// Record what `f` pushes and run it once as a step of `n_tokens` tokens at position `pos`
/// (ring slot `slot`): the kernel tests' entry point.
pub fn run_once(gpu: &Gpu, caps: Caps, [n_tokens, pos, slot]: [u32; 3], f: impl FnOnce(&mut Recorder)) -> Result<()> {
    let step = gpu.uniform("step", 16);
    gpu.queue.write_buffer(&step, 0, bytemuck::cast_slice(&[n_tokens, pos, slot, 0]));
    let mut r = Recorder::new(gpu, &step);
    r.caps = caps;
    f(&mut r);
    let program = r.finish(u32::MAX)?;
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        program.record(&mut pass, n_tokens, pos, Pick::default());
    }
    gpu.queue.submit([enc.finish()]);
    gpu.check()
}

/// An override constant's value for a flag.
pub(crate) fn flag(v: bool) -> f64 {
    v as u32 as f64
}

//! THE forward pass: one straight-line description of a transformer step for every supported
//! architecture, built once at load into a list of dispatches with their bind groups. A step
//! then only writes a 16-byte uniform (token count, position) and replays the list in one compute
//! pass and one submit.

use crate::error::{Error, Result};
use crate::gpu::{Gpu, Kernel, Pipeline};
use crate::model::weights::{GpuMatrix, ModelWeights};
use crate::model::ModelConfig;
use std::rc::Rc;

/// How many workgroups a dispatch needs for a step of `t` tokens.
#[derive(Clone, Copy, Debug)]
enum Grid {
    Fixed(u32),
    /// (t, 1): one workgroup per token.
    Tokens,
    /// (x, t): one workgroup row per token.
    PerToken(u32),
    /// 64x64 output tiles over (n, t).
    Tiles(u32),
    /// `n` elements per token, 256 per workgroup, folded into 2-D past 65535 workgroups.
    Elems(u32),
}

impl Grid {
    fn dims(self, t: u32) -> [u32; 3] {
        match self {
            Grid::Fixed(x) => [x, 1, 1],
            Grid::Tokens => [t, 1, 1],
            Grid::PerToken(x) => [x, t, 1],
            Grid::Tiles(n) => [n.div_ceil(64), t.div_ceil(64), 1],
            Grid::Elems(n) => {
                let wgs = (n * t).div_ceil(256);
                let y = wgs.div_ceil(65535);
                [wgs.div_ceil(y), y, 1]
            }
        }
    }
}

struct Op {
    pipeline: Rc<Pipeline>,
    bind: wgpu::BindGroup,
    grid: Grid,
}

/// Activations for up to `max_tokens` tokens per step, and the KV cache.
pub struct Buffers {
    pub ids: wgpu::Buffer,
    pub x: wgpu::Buffer,
    pub xn: wgpu::Buffer,
    pub q: wgpu::Buffer,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub attn: wgpu::Buffer,
    pub gate: wgpu::Buffer,
    pub up: wgpu::Buffer,
    pub xlast: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    pub step: wgpu::Buffer,
    pub rope: wgpu::Buffer,
    pub k_cache: Vec<wgpu::Buffer>,
    pub v_cache: Vec<wgpu::Buffer>,
    pub dummy: wgpu::Buffer,
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
        let (h, qd, kvd, ff) = (cfg.hidden as u64, cfg.q_dim() as u64, cfg.kv_dim() as u64, cfg.ffn as u64);
        let cache_bytes = cfg.n_kv_heads as u64 * context as u64 * cfg.head_dim as u64 * 2;
        let mut k_cache = Vec::with_capacity(cfg.n_layers);
        let mut v_cache = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            k_cache.push(buf(&format!("k_cache.{i}"), cache_bytes)?);
            v_cache.push(buf(&format!("v_cache.{i}"), cache_bytes)?);
        }
        let rope_table = rope_table(cfg, context);
        let b = Buffers {
            ids: buf("ids", t * 4)?,
            x: buf("x", t * h * f)?,
            xn: buf("xn", t * h * f)?,
            q: buf("q", t * qd * f)?,
            k: buf("k", t * kvd * f)?,
            v: buf("v", t * kvd * f)?,
            attn: buf("attn", t * qd * f)?,
            gate: buf("gate", t * ff * f)?,
            up: buf("up", t * ff * f)?,
            xlast: buf("xlast", h * f)?,
            logits: buf("logits", cfg.vocab as u64 * f)?,
            rope: buf("rope", rope_table.len() as u64 * 4)?,
            dummy: buf("dummy", 16)?,
            step: gpu.uniform("step", 16),
            k_cache,
            v_cache,
            bytes: 0,
        };
        gpu.queue.write_buffer(&b.rope, 0, bytemuck::cast_slice(&rope_table));
        Ok(Buffers { bytes: bytes + 16, ..b })
    }
}

/// cos/sin of position * inverse frequency for every cached position, computed in f64.
fn rope_table(cfg: &ModelConfig, context: usize) -> Vec<f32> {
    let inv = cfg.rope_inv_freq();
    let mut t = Vec::with_capacity(context * inv.len() * 2);
    for p in 0..context {
        for &f in &inv {
            let a = p as f64 * f;
            t.push(a.cos() as f32);
            t.push(a.sin() as f32);
        }
    }
    t
}

/// A recorded program: the dispatches of one step for a given kind of step.
pub struct Program {
    ops: Vec<Op>,
}

impl Program {
    pub fn dispatches(&self) -> usize {
        self.ops.len()
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>, n_tokens: u32) {
        for op in &self.ops {
            let [x, y, z] = op.grid.dims(n_tokens);
            pass.set_pipeline(&op.pipeline.pipeline);
            pass.set_bind_group(0, &op.bind, &[]);
            pass.dispatch_workgroups(x, y, z);
        }
    }
}

struct Builder<'a> {
    gpu: &'a Gpu,
    ops: Vec<Op>,
    dummy: &'a wgpu::Buffer,
    step: &'a wgpu::Buffer,
}

impl Builder<'_> {
    fn push(&mut self, k: Kernel, consts: &[(&str, f64)], bufs: &[(u32, &wgpu::Buffer)], grid: Grid) {
        let pipeline = self.gpu.pipelines.get(&self.gpu.device, k, consts);
        let mut entries: Vec<wgpu::BindGroupEntry> =
            bufs.iter().map(|&(i, b)| wgpu::BindGroupEntry { binding: i, resource: b.as_entire_binding() }).collect();
        entries.push(wgpu::BindGroupEntry { binding: 5, resource: self.step.as_entire_binding() });
        let bind = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&format!("{k:?}")),
            layout: &pipeline.layout,
            entries: &entries,
        });
        self.ops.push(Op { pipeline, bind, grid });
    }

    /// y (+)= x · Wᵀ (+ bias): matrix-vector for single-token steps, tiled for prompts.
    fn linear(&mut self, batched: bool, w: &GpuMatrix, x: &wgpu::Buffer, y: &wgpu::Buffer, bias: Option<&wgpu::Buffer>, acc: bool) {
        let [l0, l1] = w.layout_constants();
        let consts = [
            l0,
            l1,
            ("K", w.cols as f64),
            ("N", w.rows as f64),
            ("ACCUMULATE", acc as u32 as f64),
            ("HAS_BIAS", bias.is_some() as u32 as f64),
        ];
        let bufs = [(0, &w.words), (1, &w.meta), (2, x), (3, y), (4, bias.unwrap_or(self.dummy))];
        if batched {
            self.push(Kernel::MatMul, &consts, &bufs, Grid::Tiles(w.rows as u32));
        } else {
            self.push(Kernel::MatVec, &consts, &bufs, Grid::PerToken((w.rows as u32).div_ceil(4)));
        }
    }

    fn rmsnorm(&mut self, cfg: &ModelConfig, x: &wgpu::Buffer, w: &wgpu::Buffer, y: &wgpu::Buffer, last_only: bool) {
        let consts = [("H", cfg.hidden as f64), ("EPS", cfg.rms_eps as f64), ("LAST_ONLY", last_only as u32 as f64)];
        let grid = if last_only { Grid::Fixed(1) } else { Grid::Tokens };
        self.push(Kernel::RmsNorm, &consts, &[(0, x), (1, w), (2, y)], grid);
    }
}

/// Build the program for steps of one token (`batched = false`) or many (`batched = true`).
pub fn build(gpu: &Gpu, cfg: &ModelConfig, w: &ModelWeights, b: &Buffers, context: usize, batched: bool) -> Result<Program> {
    let mut p = Builder { gpu, ops: Vec::new(), dummy: &b.dummy, step: &b.step };
    let (nh, nkv, hd) = (cfg.n_heads as f64, cfg.n_kv_heads as f64, cfg.head_dim as f64);

    let [l0, l1] = w.embed.layout_constants();
    p.push(
        Kernel::Embed,
        &[l0, l1, ("H", cfg.hidden as f64), ("SCALE", 1.0)],
        &[(0, &w.embed.words), (1, &w.embed.meta), (2, &b.ids), (3, &b.x)],
        Grid::PerToken((cfg.hidden as u32 / 8).div_ceil(64)),
    );
    for (i, lw) in w.layers.iter().enumerate() {
        p.rmsnorm(cfg, &b.x, &lw.attn_norm, &b.xn, false);
        p.linear(batched, &lw.wq, &b.xn, &b.q, lw.bq.as_ref(), false);
        p.linear(batched, &lw.wk, &b.xn, &b.k, lw.bk.as_ref(), false);
        p.linear(batched, &lw.wv, &b.xn, &b.v, lw.bv.as_ref(), false);
        p.push(
            Kernel::RopeKv,
            &[
                ("HD", hd),
                ("ROT", cfg.rope_dim as f64),
                ("NH", nh),
                ("NKV", nkv),
                ("CTX", context as f64),
                ("NEOX", cfg.rope_neox as u32 as f64),
            ],
            &[(0, &b.q), (1, &b.k), (2, &b.v), (3, &b.k_cache[i]), (4, &b.v_cache[i]), (6, &b.rope)],
            Grid::PerToken((cfg.n_heads + cfg.n_kv_heads) as u32),
        );
        p.push(
            Kernel::Attention,
            &[("HD", hd), ("NH", nh), ("NKV", nkv), ("CTX", context as f64), ("SCALE", 1.0 / hd.sqrt())],
            &[(0, &b.q), (1, &b.k_cache[i]), (2, &b.v_cache[i]), (3, &b.attn)],
            Grid::PerToken(cfg.n_heads as u32),
        );
        p.linear(batched, &lw.wo, &b.attn, &b.x, None, true);
        p.rmsnorm(cfg, &b.x, &lw.ffn_norm, &b.xn, false);
        p.linear(batched, &lw.w_gate, &b.xn, &b.gate, None, false);
        p.linear(batched, &lw.w_up, &b.xn, &b.up, None, false);
        p.push(Kernel::FfnAct, &[("F", cfg.ffn as f64)], &[(0, &b.gate), (1, &b.up)], Grid::Elems(cfg.ffn as u32));
        p.linear(batched, &lw.w_down, &b.gate, &b.x, None, true);
    }
    p.rmsnorm(cfg, &b.x, &w.out_norm, &b.xlast, true);
    p.linear(false, w.lm_head(), &b.xlast, &b.logits, None, false);
    gpu.check().map_err(|e| Error::Gpu(format!("building the forward pass: {e}")))?;
    Ok(Program { ops: p.ops })
}

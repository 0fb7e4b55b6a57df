//! A model's weights on the GPU, in the layouts the kernels read, and what a layer is made of
//! (`LayerSpec`); GGUF files as a `load::TensorSource` (`GgufSource`). Per-layer matrices are
//! fused as the kernels want them ([q; k; v] and [gate; up]) with NeoX rotary halves reordered
//! into pairs. Small vectors (norms, biases) of a layer share one `vecs` buffer.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::family::{tensor, QkNorm, Tensor};
use crate::model::load::{MatrixInfo, Rows, TensorSource};
use crate::model::streamed::StreamedMatrix;
use crate::model::ModelConfig;
use crate::weights::gguf::{GgufFile, TensorInfo};
use crate::weights::pack::{self, Layout, Packed};
use crate::weights::quant::{self, GgmlType};
use crate::weights::reshape::{concat_rows, neox_to_pairs, permute_rows};
use crate::weights::AsyncSource;
use std::collections::HashMap;

/// A weight matrix on the GPU: `rows` outputs of `cols` inputs each.
pub struct GpuMatrix {
    pub words: wgpu::Buffer,
    pub meta: wgpu::Buffer,
    pub layout: Layout,
    /// `meta` holds one word per block, (scale, offset) as f16 halves (see `Packed::meta_f16`).
    pub meta16: bool,
    pub rows: usize,
    pub cols: usize,
    pub bytes: u64,
}

impl GpuMatrix {
    /// Override constants that select the dequantizer in shaders/weights.wgsl.
    pub fn layout_constants(&self) -> [(&'static str, f64); 3] {
        let (id, block) = match self.layout {
            Layout::F32 => (0, 32),
            Layout::F16 => (1, 32),
            Layout::BF16 => (2, 32),
            Layout::Q4 { block } => (3, block),
            Layout::Q8 { block } => (4, block),
        };
        [("LAYOUT", id as f64), ("QBLOCK", block as f64), ("META16", self.meta16 as u32 as f64)]
    }

    pub fn upload(gpu: &Gpu, name: &str, p: &Packed) -> Result<GpuMatrix> {
        check_binding(gpu, name, p.words.len() as u64 * 4)?;
        let words = gpu.buffer_init(name, p.words_bytes())?;
        let m16 = p.meta_f16();
        let meta_bytes: &[u8] = match &m16 {
            Some(m) => bytemuck::cast_slice(m),
            None => p.meta_bytes(),
        };
        let meta = gpu.buffer_init(&format!("{name}.meta"), meta_bytes)?;
        let bytes = (p.words_bytes().len() + meta_bytes.len()) as u64;
        Ok(GpuMatrix { words, meta, layout: p.layout, meta16: m16.is_some(), rows: p.rows, cols: p.cols, bytes })
    }
}

impl GpuMatrix {
    /// An empty matrix that `write_rows` fills chunk by chunk (embedding, LM head: never whole in
    /// memory, in GGUF files or HF folders alike). `meta16`: the blocks' scales are f16 (Q4_0,
    /// Q4_1, Q8_0, ...: `GgmlType::f16_scales`), so the metadata goes to the GPU as f16 pairs.
    pub(crate) fn alloc_streamed(
        gpu: &Gpu,
        label: &str,
        layout: Layout,
        meta16: bool,
        (rows, cols): (usize, usize),
    ) -> Result<GpuMatrix> {
        let meta16 = meta16 && layout.block() > 1;
        let words_bytes = layout.words_for(rows * cols) as u64 * 4;
        check_binding(gpu, label, words_bytes)?;
        let words = gpu.buffer(label, words_bytes)?;
        let meta_bytes = meta_words_per_row(layout, meta16, cols) * rows as u64 * 4;
        let meta = gpu.buffer(&format!("{label}.meta"), meta_bytes)?;
        Ok(GpuMatrix { words, meta, layout, meta16, rows, cols, bytes: words_bytes + meta_bytes })
    }

    /// Rows to pack and write at once for rows of `row_bytes` in the file: half-precision rows of
    /// odd length share words across rows, so those go in one piece.
    pub(crate) fn rows_per_write(&self, row_bytes: u64, max_bytes: u64) -> usize {
        let wpr = self.layout.words_for(self.cols);
        if wpr * self.rows != self.layout.words_for(self.rows * self.cols) {
            return self.rows;
        }
        (max_bytes / row_bytes.max(1)).max(1) as usize
    }

    /// Write packed rows `r0 ..` of a matrix from `alloc_streamed`.
    pub(crate) fn write_rows(&self, gpu: &Gpu, name: &str, r0: usize, p: &Packed) -> Result<()> {
        let wpr = self.layout.words_for(self.cols) as u64;
        gpu.queue.write_buffer(&self.words, r0 as u64 * wpr * 4, p.words_bytes());
        let at = r0 as u64 * meta_words_per_row(self.layout, self.meta16, self.cols) * 4;
        if self.meta16 {
            let m = p
                .meta_f16()
                .ok_or_else(|| Error::Unsupported(format!("tensor {name}: a block scale is beyond the f16 range")))?;
            gpu.queue.write_buffer(&self.meta, at, bytemuck::cast_slice(&m));
        } else if !p.meta.is_empty() {
            gpu.queue.write_buffer(&self.meta, at, p.meta_bytes());
        }
        Ok(())
    }
}

fn meta_words_per_row(layout: Layout, meta16: bool, cols: usize) -> u64 {
    match layout.block() {
        1 => 0,
        b => (cols / b) as u64 * if meta16 { 1 } else { 2 },
    }
}

pub(crate) fn check_binding(gpu: &Gpu, name: &str, bytes: u64) -> Result<()> {
    let limit = gpu.limits.max_storage_buffer_binding_size;
    if bytes > limit {
        return Err(Error::Limits(format!(
            "tensor {name} needs {} MiB in one binding; the adapter allows {} MiB",
            bytes >> 20,
            limit >> 20
        )));
    }
    Ok(())
}

/// Where each small vector sits in a layer's `vecs` buffer (the same for every layer).
#[derive(Clone, Copy, Debug)]
pub struct VecOffsets {
    /// The norms before the token mixer and the FFN, where the layer has them.
    pub attn_norm: Option<usize>,
    pub ffn_norm: Option<usize>,
    /// Bias of the fused [q; k; v] rows, if the model has one.
    pub qkv_bias: Option<usize>,
    /// q and k norm weights (head_dim each, or q_dim and kv_dim over the whole projections).
    pub q_norm: Option<usize>,
    pub k_norm: Option<usize>,
    /// The norms of the token mixer's and the FFN's outputs.
    pub post_attn_norm: Option<usize>,
    pub post_ffn_norm: Option<usize>,
    /// Biases of the output projection, the fused [gate; up] rows and the down projection.
    pub o_bias: Option<usize>,
    pub gate_up_bias: Option<usize>,
    pub down_bias: Option<usize>,
    /// Gated DeltaNet layers: convolution taps ([channel][tap]), dt bias and -exp(A_log) per
    /// value head, and the weight of the gated output norm (value_dim).
    pub conv_w: Option<usize>,
    /// BitNet's norms of the attention output (q_dim) and of the FFN's inner activations (ffn).
    pub attn_sub_norm: Option<usize>,
    pub ffn_sub_norm: Option<usize>,
    pub dt_bias: Option<usize>,
    pub a_neg: Option<usize>,
    pub gnorm: Option<usize>,
    pub len: usize,
}

impl VecOffsets {
    pub fn new(cfg: &ModelConfig) -> VecOffsets {
        let h = cfg.hidden;
        let mut at = 0;
        let mut next = |on: bool, n: usize| {
            on.then(|| {
                at += n;
                at - n
            })
        };
        let n = cfg.norms;
        let attn_norm = next(n.attn.is_some(), h);
        let ffn_norm = next(n.ffn.is_some(), h);
        let qkv_bias = next(cfg.qkv_bias, cfg.q_dim() + 2 * cfg.kv_dim());
        let (qn, kn) = cfg.qk_norm_widths();
        let q_norm = next(cfg.qk_norm.on(), qn);
        let k_norm = next(cfg.qk_norm.on(), kn);
        let post_attn_norm = next(n.post_attn.is_some(), h);
        let post_ffn_norm = next(n.post_ffn.is_some(), h);
        let o_bias = next(cfg.o_bias, h);
        let gate_up_bias = next(cfg.mlp_bias, cfg.ffn_rows());
        let down_bias = next(cfg.mlp_bias, h);
        let attn_sub_norm = next(cfg.sub_norms, cfg.q_dim());
        let ffn_sub_norm = next(cfg.sub_norms, cfg.ffn);
        let lin = cfg.linear;
        let conv_w = next(lin.is_some(), lin.map_or(0, |l| l.conv_dim() * l.conv));
        let dt_bias = next(lin.is_some(), lin.map_or(0, |l| l.value_heads));
        let a_neg = next(lin.is_some(), lin.map_or(0, |l| l.value_heads));
        let gnorm = next(lin.is_some(), lin.map_or(0, |l| l.value_dim));
        VecOffsets {
            attn_sub_norm,
            ffn_sub_norm,
            conv_w,
            dt_bias,
            a_neg,
            gnorm,
            attn_norm,
            ffn_norm,
            qkv_bias,
            q_norm,
            k_norm,
            post_attn_norm,
            post_ffn_norm,
            o_bias,
            gate_up_bias,
            down_bias,
            len: at,
        }
    }
}

/// One layer's tensors as read from a file, before fusing and upload.
pub struct LayerParts {
    pub attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Option<Vec<f32>>,
    /// [q; k; v] rows, fused already (Phi-3) or as three matrices.
    pub qkv: Vec<Packed>,
    pub qkv_bias: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub o: Packed,
    /// [gate; up] rows, fused already (Phi-3) or as two matrices.
    pub gate_up: Vec<Packed>,
    pub down: Packed,
    pub post_attn_norm: Option<Vec<f32>>,
    pub post_ffn_norm: Option<Vec<f32>>,
    pub o_bias: Option<Vec<f32>>,
    /// [gate; up] bias, in the order of `gate_up`'s rows.
    pub gate_up_bias: Option<Vec<f32>>,
    pub down_bias: Option<Vec<f32>>,
    /// A Gated DeltaNet layer's small tensors (then `qkv` is [in_proj_qkv; z; b; a] and `o` the
    /// out_proj).
    pub linear: Option<LinearParts>,
    /// BitNet's sub-norm weights (attention output, FFN inner activations).
    pub sub_norms: Option<(Vec<f32>, Vec<f32>)>,
}

/// Where a format keeps its tensors: GGUF files under llama.cpp's names (`blk.{i}.`), Hugging
/// Face checkpoints (and MLC folders, renamed) under transformers' names after a prefix
/// (`model.`, or the multimodal wrapper's). Names come from `family::tensor`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Names {
    Gguf,
    Hf(&'static str),
}

impl Names {
    pub(crate) fn layer(self, i: usize, t: Tensor) -> String {
        match self {
            Names::Gguf => format!("blk.{i}.{}", t.gguf),
            Names::Hf(prefix) => format!("{prefix}layers.{i}.{}", t.hf),
        }
    }

    /// A layer in GPU labels and errors.
    pub(crate) fn layer_label(self, i: usize) -> String {
        match self {
            Names::Gguf => format!("blk.{i}"),
            Names::Hf(_) => format!("layer {i}"),
        }
    }

    /// A GPU matrix buffer in errors and labels (`what`: embed, lm_head, qkv, o, gate_up, down;
    /// `first`: its first tensor): GGUF names a fused buffer `blk.{i}.qkv` / `blk.{i}.gate_up`
    /// and any other by its tensor; HF `layer {i} qkv`, `embed`, ...
    pub(crate) fn buffer(self, layer: Option<usize>, what: &str, first: &str) -> String {
        match (self, layer) {
            (Names::Gguf, Some(i)) if matches!(what, "qkv" | "gate_up") => format!("blk.{i}.{what}"),
            (Names::Gguf, _) => first.to_string(),
            (Names::Hf(_), Some(i)) => format!("layer {i} {what}"),
            (Names::Hf(_), None) => what.to_string(),
        }
    }

    /// A tensor outside the layers (embedding, final norm).
    pub(crate) fn global(self, t: Tensor) -> String {
        match self {
            Names::Gguf => t.gguf.to_string(),
            Names::Hf(prefix) => format!("{prefix}{}", t.hf),
        }
    }
}

/// A tensor's expected shape: rows x columns, or a vector's length.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    Matrix(usize, usize),
    Vector(usize),
    /// A depthwise convolution's weight (channels, taps): [channels][tap] values.
    Conv(usize, usize),
}

/// The tensor names of one layer with the shapes the config implies, in either format: the one
/// description of a layer both loaders read (`jobs`) and assemble (`assemble`).
pub(crate) struct LayerSpec {
    /// [q; k; v] parts (or the fused qkv_proj) as (name, rows); columns: hidden.
    pub qkv: Vec<(String, usize)>,
    /// q, k, v biases (or the fused one) as (name, length).
    pub qkv_bias: Vec<(String, usize)>,
    pub q_norm: Option<String>,
    pub k_norm: Option<String>,
    pub o: String,
    /// [gate; up] parts (or the fused gate_up; up alone in an ungated FFN) as (name, rows);
    /// columns: hidden.
    pub gate_up: Vec<(String, usize)>,
    pub down: String,
    pub attn_norm: Option<String>,
    pub ffn_norm: Option<String>,
    pub post_attn_norm: Option<String>,
    pub post_ffn_norm: Option<String>,
    /// Output projection bias (length hidden).
    pub o_bias: Option<String>,
    /// Gate and up biases (length intermediate each), down bias (length hidden).
    pub gate_up_bias: Vec<String>,
    pub down_bias: Option<String>,
    /// Columns of the output projection (q_dim, or a Gated DeltaNet's value heads).
    pub o_cols: usize,
    /// A Gated DeltaNet layer's small tensors: conv1d weight, dt bias, A, the gated norm's weight.
    pub linear: Option<[String; 4]>,
    /// The file stores A_log (HF) rather than -exp(A_log) (GGUF).
    pub a_log: bool,
    /// BitNet's attention and FFN sub-norms.
    pub sub_norms: Option<[String; 2]>,
    /// The intermediate size in the file (before padding to `cfg.ffn`).
    pub ffn: usize,
}

impl LayerSpec {
    /// Layer `i` of a model stored under `names`, whose file has the tensors `has` says and
    /// an intermediate size of `ffn` (HF files may have one that is not a multiple of 8).
    pub(crate) fn new(cfg: &ModelConfig, i: usize, ffn: usize, names: Names, has: &dyn Fn(&str) -> bool) -> LayerSpec {
        use crate::model::family::tensor as t;
        let (qd, kvd, f) = (cfg.q_dim(), cfg.kv_dim(), ffn);
        let n = |r: Tensor| names.layer(i, r);
        let lin = cfg.linear.filter(|_| cfg.layer_linear[i]);
        let attn = lin.is_none();
        // A gated attention's q_proj gives a gate per head beside each query head.
        let q_rows = if cfg.attn_gate { 2 * qd } else { qd };
        let qkv = if let Some(l) = lin {
            vec![
                (n(t::LIN_QKV), l.conv_dim()),
                (n(t::LIN_Z), l.v_total()),
                (n(t::LIN_B), l.value_heads),
                (n(t::LIN_A), l.value_heads),
            ]
        } else if has(&n(t::QKV)) {
            vec![(n(t::QKV), qd + 2 * kvd)]
        } else {
            vec![(n(t::Q), q_rows), (n(t::K), kvd), (n(t::V), kvd)]
        };
        let qkv_bias = if cfg.qkv_bias && attn && has(&n(t::QKV_BIAS)) {
            // MLC fuses the biases with the weights (Qwen's c_attn).
            vec![(n(t::QKV_BIAS), qd + 2 * kvd)]
        } else if cfg.qkv_bias && attn {
            vec![(n(t::Q_BIAS), qd), (n(t::K_BIAS), kvd), (n(t::V_BIAS), kvd)]
        } else {
            vec![]
        };
        let gate_up = if !cfg.gated {
            vec![(n(t::UP), f)]
        } else if has(&n(t::GATE_UP)) && !has(&n(t::GATE)) {
            vec![(n(t::GATE_UP), 2 * f)]
        } else {
            vec![(n(t::GATE), f), (n(t::UP), f)]
        };
        let norms = cfg.norms;
        // Qwen3.5 GGUF files name the pre-FFN norm post_attention_norm (after transformers'
        // post_attention_layernorm).
        let ffn_norm = match norms.ffn {
            Some(t::FFN_NORM) if norms.post_attn.is_none() && !has(&n(t::FFN_NORM)) => Some(t::POST_ATTN_NORM),
            other => other,
        };
        LayerSpec {
            o_cols: lin.map_or(qd, |l| l.v_total()),
            linear: lin.map(|_| [n(t::CONV), n(t::DT_BIAS), n(t::A), n(t::LIN_NORM)]),
            a_log: matches!(names, Names::Hf(_)),
            sub_norms: cfg.sub_norms.then(|| [n(t::ATTN_SUB_NORM), n(t::FFN_SUB_NORM)]),
            o_bias: (cfg.o_bias && attn).then(|| n(t::O_BIAS)),
            gate_up_bias: match (cfg.mlp_bias, cfg.gated) {
                (true, true) => vec![n(t::GATE_BIAS), n(t::UP_BIAS)],
                (true, false) => vec![n(t::UP_BIAS)],
                (false, _) => vec![],
            },
            down_bias: cfg.mlp_bias.then(|| n(t::DOWN_BIAS)),
            qkv,
            qkv_bias,
            q_norm: (cfg.qk_norm.on() && attn).then(|| n(norms.q)),
            k_norm: (cfg.qk_norm.on() && attn).then(|| n(norms.k)),
            o: if attn { n(t::O) } else { n(t::LIN_OUT) },
            gate_up,
            down: n(t::DOWN),
            attn_norm: norms.attn.map(n),
            ffn_norm: ffn_norm.map(n),
            post_attn_norm: norms.post_attn.map(n),
            post_ffn_norm: norms.post_ffn.map(n),
            ffn,
        }
    }

    /// A Gated DeltaNet layer's small tensors with their shapes (none for other layers).
    pub(crate) fn linear_shapes(&self, cfg: &ModelConfig) -> Vec<(String, Shape)> {
        let (Some([conv, dt, a, norm]), Some(lin)) = (&self.linear, cfg.linear) else { return Vec::new() };
        vec![
            (conv.clone(), Shape::Conv(lin.conv_dim(), lin.conv)),
            (dt.clone(), Shape::Vector(lin.value_heads)),
            (a.clone(), Shape::Vector(lin.value_heads)),
            (norm.clone(), Shape::Vector(lin.value_dim)),
        ]
    }

    /// Every matrix of the layer (with its shape in the file) and every vector.
    pub(crate) fn jobs(&self, cfg: &ModelConfig) -> Vec<(String, Shape)> {
        let (h, fh) = (cfg.hidden, self.ffn);
        let mut jobs: Vec<(String, Shape)> = Vec::new();
        for (n, rows) in self.qkv.iter().chain(&self.gate_up) {
            jobs.push((n.clone(), Shape::Matrix(*rows, h)));
        }
        jobs.push((self.o.clone(), Shape::Matrix(h, self.o_cols)));
        jobs.extend(self.linear_shapes(cfg));
        if let Some([a, f]) = &self.sub_norms {
            jobs.push((a.clone(), Shape::Vector(cfg.q_dim())));
            jobs.push((f.clone(), Shape::Vector(fh)));
        }
        jobs.push((self.down.clone(), Shape::Matrix(h, fh)));
        for (n, len) in &self.qkv_bias {
            jobs.push((n.clone(), Shape::Vector(*len)));
        }
        for n in self.o_bias.iter().chain(&self.down_bias) {
            jobs.push((n.clone(), Shape::Vector(h)));
        }
        for n in &self.gate_up_bias {
            jobs.push((n.clone(), Shape::Vector(fh)));
        }
        for n in [&self.attn_norm, &self.ffn_norm, &self.post_attn_norm, &self.post_ffn_norm] {
            jobs.extend(n.as_ref().map(|n| (n.clone(), Shape::Vector(h))));
        }
        let (qn, kn) = cfg.qk_norm_widths();
        for (n, len) in [(self.q_norm.as_ref(), qn), (self.k_norm.as_ref(), kn)] {
            jobs.extend(n.map(|n| (n.clone(), Shape::Vector(len))));
        }
        jobs
    }

    /// The layer's parts from its matrices (each as one or more packed pieces, in order) and
    /// vectors as read by name; gate/up biases are padded to `ffn` values each.
    pub(crate) fn assemble(
        &self,
        mut mats: HashMap<String, Vec<Packed>>,
        mut vecs: HashMap<String, Vec<f32>>,
        ffn: usize,
    ) -> LayerParts {
        let gate_up: Vec<Packed> = self.gate_up.iter().flat_map(|(n, _)| mats.remove(n).expect("read above")).collect();
        let mut mat = |n: &str| mats.remove(n).and_then(|mut v| v.pop()).expect("read above");
        let mut vec = |n: &str| vecs.remove(n).expect("read above");
        let a_log = self.a_log;
        let linear = self.linear.as_ref().map(|[conv, dt, a, norm]| LinearParts {
            conv_w: vec(conv),
            dt_bias: vec(dt),
            a_neg: if a_log { vec(a).iter().map(|&a| -(a as f64).exp() as f32).collect() } else { vec(a) },
            norm: vec(norm),
        });
        let sub_norms = self.sub_norms.as_ref().map(|[a, f]| (vec(a), vec(f)));
        LayerParts {
            sub_norms,
            linear,
            o_bias: self.o_bias.as_deref().map(&mut vec),
            gate_up_bias: (!self.gate_up_bias.is_empty()).then(|| {
                self.gate_up_bias
                    .iter()
                    .flat_map(|n| vec(n).into_iter().chain(std::iter::repeat(0.0)).take(ffn))
                    .collect()
            }),
            down_bias: self.down_bias.as_deref().map(&mut vec),
            attn_norm: self.attn_norm.as_deref().map(&mut vec),
            ffn_norm: self.ffn_norm.as_deref().map(&mut vec),
            qkv: self.qkv.iter().map(|(n, _)| mat(n)).collect(),
            qkv_bias: (!self.qkv_bias.is_empty()).then(|| self.qkv_bias.iter().flat_map(|(n, _)| vec(n)).collect()),
            q_norm: self.q_norm.as_deref().map(&mut vec),
            k_norm: self.k_norm.as_deref().map(&mut vec),
            o: mat(&self.o),
            gate_up,
            down: mat(&self.down),
            post_attn_norm: self.post_attn_norm.as_deref().map(&mut vec),
            post_ffn_norm: self.post_ffn_norm.as_deref().map(&mut vec),
        }
    }
}

/// The small tensors of a Gated DeltaNet layer, as in the file.
pub struct LinearParts {
    /// [channel][tap].
    pub conv_w: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// -exp(A_log), as llama.cpp stores it (`ssm_a`).
    pub a_neg: Vec<f32>,
    pub norm: Vec<f32>,
}

impl LayerParts {
    /// Fuse, reorder NeoX rotary halves into pairs, and upload.
    pub fn upload(self, gpu: &Gpu, cfg: &ModelConfig, name: &str) -> Result<LayerWeights> {
        let (qd, kvd, hd) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let mut qkv = concat_rows(&self.qkv)?;
        let linear = self.linear.is_some();
        let want = match (&cfg.linear, linear) {
            (Some(l), true) => l.in_rows(),
            _ => qd + 2 * kvd + if cfg.attn_gate { qd } else { 0 },
        };
        if qkv.rows != want {
            return Err(Error::Model(format!("{name}: fused q/k/v has {} rows, expected {want}", qkv.rows)));
        }
        if cfg.attn_gate && !linear {
            // q_proj gives [q; gate] per head: all queries first, then k and v, then the gates.
            let rows = |h: usize, part: usize| (2 * h + part) * hd..(2 * h + part + 1) * hd;
            let perm: Vec<usize> = (0..cfg.n_heads)
                .flat_map(|h| rows(h, 0))
                .chain(2 * qd..2 * qd + 2 * kvd)
                .chain((0..cfg.n_heads).flat_map(|h| rows(h, 1)))
                .collect();
            qkv = permute_rows(&qkv, &perm);
        }
        let mut bias = self.qkv_bias;
        let (mut q_norm, mut k_norm) = (self.q_norm, self.k_norm);
        if cfg.rope_neox && !linear {
            let head = neox_to_pairs(1, hd, cfg.rope_dim);
            let q = neox_to_pairs(cfg.n_heads, hd, cfg.rope_dim);
            let k = neox_to_pairs(cfg.n_kv_heads, hd, cfg.rope_dim);
            let perm: Vec<usize> =
                q.iter().copied().chain(k.iter().map(|r| qd + r)).chain(qd + kvd..qkv.rows).collect();
            qkv = permute_rows(&qkv, &perm);
            bias = bias.map(|b| permute_vec(&b, &perm));
            let (qp, kp) = match cfg.qk_norm {
                QkNorm::Whole => (&q, &k),
                _ => (&head, &head),
            };
            q_norm = q_norm.map(|v| permute_vec(&v, qp));
            k_norm = k_norm.map(|v| permute_vec(&v, kp));
        }
        let off = VecOffsets::new(cfg);
        let mut vecs = vec![0f32; off.len];
        let mut put = |at: Option<usize>, v: Option<Vec<f32>>, what: &str| -> Result<()> {
            match (at, v) {
                (Some(at), Some(v)) => {
                    let end = at + v.len();
                    if end > vecs.len() {
                        return Err(Error::Model(format!("{name}: {what} has {} values, more than expected", v.len())));
                    }
                    vecs[at..end].copy_from_slice(&v);
                    Ok(())
                }
                (None, None) => Ok(()),
                (Some(_), None) => Err(Error::Model(format!("{name}: missing {what}"))),
                (None, Some(_)) => Ok(()),
            }
        };
        put(off.attn_norm, self.attn_norm, "attention norm")?;
        put(off.ffn_norm, self.ffn_norm, "FFN norm")?;
        put(off.qkv_bias, bias, "q/k/v bias")?;
        // Gated DeltaNet layers have no q/k norms; attention layers no DeltaNet tensors.
        if !linear {
            put(off.q_norm, q_norm, "q norm")?;
            put(off.k_norm, k_norm, "k norm")?;
        }
        put(off.post_attn_norm, self.post_attn_norm, "post-attention norm")?;
        put(off.post_ffn_norm, self.post_ffn_norm, "post-FFN norm")?;
        put(off.o_bias, self.o_bias, "output projection bias")?;
        put(off.gate_up_bias, self.gate_up_bias, "gate/up bias")?;
        put(off.down_bias, self.down_bias, "down projection bias")?;
        let (a, f) = self.sub_norms.map_or((None, None), |(a, f)| (Some(a), Some(f)));
        put(off.attn_sub_norm, a, "attention sub-norm")?;
        put(off.ffn_sub_norm, f, "FFN sub-norm")?;
        if let Some(l) = self.linear {
            put(off.conv_w, Some(l.conv_w), "convolution weights")?;
            put(off.dt_bias, Some(l.dt_bias), "dt bias")?;
            put(off.a_neg, Some(l.a_neg), "A_log")?;
            put(off.gnorm, Some(l.norm), "gated norm")?;
        }
        let gate_up = concat_rows(&self.gate_up)?;
        if gate_up.rows != cfg.ffn_rows() {
            return Err(Error::Model(format!(
                "{name}: fused gate/up has {} rows, expected {}",
                gate_up.rows,
                cfg.ffn_rows()
            )));
        }
        Ok(LayerWeights {
            vecs: gpu.buffer_init(&format!("{name}.vecs"), bytemuck::cast_slice(&vecs))?,
            wqkv: GpuMatrix::upload(gpu, &format!("{name}.qkv"), &qkv)?,
            wo: GpuMatrix::upload(gpu, &format!("{name}.o"), &self.o)?,
            w_gate_up: GpuMatrix::upload(gpu, &format!("{name}.gate_up"), &gate_up)?,
            w_down: GpuMatrix::upload(gpu, &format!("{name}.down"), &self.down)?,
        })
    }
}

pub struct LayerWeights {
    pub vecs: wgpu::Buffer,
    pub wqkv: GpuMatrix,
    pub wo: GpuMatrix,
    pub w_gate_up: GpuMatrix,
    pub w_down: GpuMatrix,
}

pub struct ModelWeights {
    pub embed: StreamedMatrix,
    pub layers: Vec<LayerWeights>,
    pub offsets: VecOffsets,
    /// The final norm's weight at offset 0.
    pub out_vecs: wgpu::Buffer,
    /// `None` when the LM head is the (tied) embedding matrix.
    pub lm_head: Option<StreamedMatrix>,
    pub bytes: u64,
}

impl ModelWeights {
    pub fn lm_head(&self) -> &StreamedMatrix {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

/// A GGUF file's tensors (llama.cpp names), read through its byte source.
pub struct GgufSource<'a> {
    pub gguf: &'a GgufFile,
    pub src: &'a dyn AsyncSource,
}

impl GgufSource<'_> {
    fn info(&self, name: &str, want: &[usize]) -> Result<&TensorInfo> {
        let t =
            self.gguf.tensor(name).ok_or_else(|| Error::Model(format!("{}: missing tensor {name}", self.gguf.name)))?;
        let got: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        if got != want {
            return Err(Error::Model(format!("tensor {name} has shape {got:?}, expected {want:?}")));
        }
        if !t.ty.is_supported() {
            return Err(unsupported_type(t));
        }
        Ok(t)
    }

    async fn read(&self, offset: u64, len: u64, on_read: &mut dyn FnMut(u64)) -> Result<Vec<u8>> {
        let data = self.src.read(offset, len as usize).await?;
        if data.len() as u64 != len {
            return Err(Error::Model(format!(
                "{}: short read at byte {offset}: {} of {len} bytes",
                self.gguf.name,
                data.len()
            )));
        }
        on_read(len);
        Ok(data)
    }

    /// GGUF dims (innermost first) of a tensor of `shape`.
    fn dims(shape: Shape) -> Vec<usize> {
        match shape {
            Shape::Matrix(rows, cols) => vec![cols, rows],
            Shape::Vector(n) => vec![n],
            // ggml order: [taps, channels].
            Shape::Conv(channels, taps) => vec![taps, channels],
        }
    }

    async fn vector_f32(&self, name: &str, n: usize, on_read: &mut dyn FnMut(u64)) -> Result<Vec<f32>> {
        self.values(name, Shape::Vector(n), on_read).await
    }
}

impl TensorSource for GgufSource<'_> {
    fn names(&self) -> Names {
        Names::Gguf
    }

    fn positions(&self) -> Vec<(&str, (usize, u64))> {
        self.gguf.tensors.iter().map(|t| (t.name.as_str(), (0, t.offset))).collect()
    }

    fn has(&self, name: &str) -> bool {
        self.gguf.tensor(name).is_some()
    }

    fn file_ffn(&self, cfg: &ModelConfig) -> usize {
        cfg.ffn
    }

    fn head(&self, cfg: &ModelConfig) -> Option<String> {
        (!cfg.tied_embeddings).then(|| tensor::HEAD.gguf.to_string())
    }

    fn matrix(&self, name: &str, (rows, cols): (usize, usize), streamed: bool) -> Result<MatrixInfo> {
        let t = self.info(name, &[cols, rows])?;
        if streamed && t.ty == GgmlType::I2_S {
            // Its one scale sits after all rows: read in row chunks, a chunk would lack it.
            return Err(Error::Unsupported(format!("tensor {name} in I2_S (BitNet's ternary type is run for layer matrices; embeddings and LM heads come as F16 or Q8_0 in its files)")));
        }
        let layout =
            Layout::for_type(t.ty).ok_or_else(|| Error::Unsupported(format!("tensor {name}: type {}", t.ty.name())))?;
        let row_bytes = t.n_bytes / rows.max(1) as u64;
        Ok(MatrixInfo { layout, meta16: t.ty.f16_scales(), row_bytes, bytes: t.n_bytes })
    }

    fn vector(&self, name: &str, shape: Shape) -> Result<u64> {
        Ok(self.info(name, &Self::dims(shape))?.n_bytes)
    }

    fn too_big(&self, buffer: &str, _parts: &[(String, usize)], bytes: u64, limit: u64) -> Error {
        Error::Limits(format!(
            "{buffer} needs {} MiB in one GPU buffer binding; the adapter allows {} MiB (maxStorageBufferBindingSize)",
            bytes >> 20,
            limit >> 20
        ))
    }

    /// Rotary frequency factors (`rope_freqs`), and Phi-3 longrope's short and long ones: short
    /// by default; as in transformers, a generation whose prompt is longer than the original
    /// context (`rope.scaling.original_context_length`, else the training context) uses the long
    /// ones (see ModelConfig::rope_table_key).
    async fn prepare(&self, cfg: &mut ModelConfig, on_read: &mut dyn FnMut(u64)) -> Result<()> {
        let gguf = self.gguf;
        // Each factor divides a rotary frequency: zero, negative or non-finite ones make the
        // rotations (and every logit after them) meaningless.
        let factors = |name: &str, v: Vec<f32>| match v.iter().position(|x| !(x.is_finite() && *x > 0.0)) {
            Some(i) => {
                Err(Error::Model(format!("tensor {name}: factor {i} is {}; rotary factors must be positive", v[i])))
            }
            None => Ok(v),
        };
        if gguf.tensor("rope_freqs.weight").is_some() {
            let v = self.vector_f32("rope_freqs.weight", cfg.rope_dim / 2, on_read).await?;
            cfg.rope_freq_factors = Some(factors("rope_freqs.weight", v)?);
        }
        if gguf.tensor("rope_factors_short.weight").is_some() {
            let v = self.vector_f32("rope_factors_short.weight", cfg.rope_dim / 2, on_read).await?;
            cfg.rope_freq_factors = Some(factors("rope_factors_short.weight", v)?);
            if gguf.tensor("rope_factors_long.weight").is_some() {
                let mut long = cfg.clone();
                let v = self.vector_f32("rope_factors_long.weight", cfg.rope_dim / 2, on_read).await?;
                long.rope_freq_factors = Some(factors("rope_factors_long.weight", v)?);
                let key = format!("{}.rope.scaling.original_context_length", cfg.arch);
                let original = match gguf.get_u64(&key)? {
                    Some(0) => {
                        return Err(Error::Model(format!(
                            "{key} is 0: the context the short factors cover must be positive"
                        )))
                    }
                    Some(v) => usize::try_from(v).unwrap_or(usize::MAX),
                    None => cfg.context_train,
                };
                let long = long.rope_inv_freq();
                // Phi3ForCausalLM recomputes the cache when a generation crosses the original context.
                let recompute = crate::model::family::of(&cfg.arch).is_some_and(|f| f.longrope_recompute);
                cfg.rope_dynamic = Some(crate::model::config::RopeDynamic::LongRope { original, long, recompute });
            }
        }
        Ok(())
    }

    async fn rows(&self, r: Rows<'_>, on_read: &mut dyn FnMut(u64)) -> Result<Packed> {
        let ((rows, cols), name) = (r.shape, r.name);
        if r.padded() {
            return Err(Error::Unsupported(format!("tensor {name}: padding (GGUF intermediate sizes are not padded)")));
        }
        let t = self.info(name, &[cols, rows])?;
        // A whole matrix is read as it lies (I2_S keeps its scale after the rows).
        let raw = if (r.first, r.n) == (0, rows) {
            self.read(t.offset, t.n_bytes, on_read).await?
        } else {
            let row_bytes = t.n_bytes / rows as u64;
            self.read(t.offset + r.first as u64 * row_bytes, r.n as u64 * row_bytes, on_read).await?
        };
        pack::pack(t.ty, r.n, cols, &raw)
    }

    async fn values(&self, name: &str, shape: Shape, on_read: &mut dyn FnMut(u64)) -> Result<Vec<f32>> {
        let dims = Self::dims(shape);
        let t = self.info(name, &dims)?;
        let raw = self.read(t.offset, t.n_bytes, on_read).await?;
        let mut out = vec![0f32; dims.iter().product()];
        quant::dequantize(t.ty, &raw, &mut out)?;
        Ok(out)
    }
}

pub fn permute_vec(v: &[f32], perm: &[usize]) -> Vec<f32> {
    perm.iter().map(|&i| v[i]).collect()
}

fn unsupported_type(t: &TensorInfo) -> Error {
    Error::Unsupported(format!(
        "tensor {} has type {}, which ferrolm cannot run: {}",
        t.name,
        t.ty.name(),
        t.ty.unsupported_hint()
    ))
}

impl ModelWeights {
    pub fn new(
        gpu: &Gpu,
        cfg: &ModelConfig,
        embed: StreamedMatrix,
        layers: Vec<LayerWeights>,
        out_norm: &[f32],
        lm_head: Option<StreamedMatrix>,
    ) -> Result<ModelWeights> {
        let out_vecs = gpu.buffer_init("output_norm", bytemuck::cast_slice(out_norm))?;
        gpu.check()?;
        let mut bytes = embed.bytes + lm_head.as_ref().map_or(0, |m| m.bytes) + out_norm.len() as u64 * 4;
        for ly in &layers {
            bytes += [&ly.wqkv, &ly.wo, &ly.w_gate_up, &ly.w_down].iter().map(|m| m.bytes).sum::<u64>();
            bytes += ly.vecs.size();
        }
        Ok(ModelWeights { embed, layers, offsets: VecOffsets::new(cfg), out_vecs, lm_head, bytes })
    }
}

//! Moving a model's tensors from a byte source onto the GPU, one tensor at a time (the file is
//! never whole in memory), repacked into the layouts the kernels read.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::ModelConfig;
use crate::weights::gguf::{GgufFile, TensorInfo};
use crate::weights::pack::{self, Layout};
use crate::weights::quant::{self, GgmlType};
use crate::weights::ByteSource;

/// A weight matrix on the GPU: `rows` outputs of `cols` inputs each.
pub struct GpuMatrix {
    pub words: wgpu::Buffer,
    pub meta: wgpu::Buffer,
    pub layout: Layout,
    pub rows: usize,
    pub cols: usize,
    pub bytes: u64,
}

impl GpuMatrix {
    /// Override constants that select the dequantizer in shaders/weights.wgsl.
    pub fn layout_constants(&self) -> [(&'static str, f64); 2] {
        let (id, block) = match self.layout {
            Layout::F32 => (0, 32),
            Layout::F16 => (1, 32),
            Layout::BF16 => (2, 32),
            Layout::Q4 { block } => (3, block),
            Layout::Q8 { block } => (4, block),
        };
        [("LAYOUT", id as f64), ("QBLOCK", block as f64)]
    }
}

pub struct LayerWeights {
    pub attn_norm: wgpu::Buffer,
    pub wq: GpuMatrix,
    pub wk: GpuMatrix,
    pub wv: GpuMatrix,
    pub bq: Option<wgpu::Buffer>,
    pub bk: Option<wgpu::Buffer>,
    pub bv: Option<wgpu::Buffer>,
    pub wo: GpuMatrix,
    pub ffn_norm: wgpu::Buffer,
    pub w_gate: GpuMatrix,
    pub w_up: GpuMatrix,
    pub w_down: GpuMatrix,
}

pub struct ModelWeights {
    pub embed: GpuMatrix,
    pub layers: Vec<LayerWeights>,
    pub out_norm: wgpu::Buffer,
    /// `None` when the LM head is the (tied) embedding matrix.
    pub lm_head: Option<GpuMatrix>,
    pub bytes: u64,
}

impl ModelWeights {
    pub fn lm_head(&self) -> &GpuMatrix {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

/// Loads named GGUF tensors, checking shapes against the config.
pub struct GgufLoader<'a> {
    pub gguf: &'a GgufFile,
    pub src: &'a dyn ByteSource,
    pub gpu: &'a Gpu,
    pub bytes: u64,
    pub on_tensor: &'a mut dyn FnMut(u64),
}

impl GgufLoader<'_> {
    fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.gguf.tensor(name).ok_or_else(|| Error::Model(format!("{}: missing tensor {name}", self.gguf.name)))
    }

    fn check_dims(&self, t: &TensorInfo, want: &[usize]) -> Result<()> {
        let got: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        if got != want {
            return Err(Error::Model(format!("tensor {} has shape {:?}, expected {:?}", t.name, got, want)));
        }
        Ok(())
    }

    fn raw(&mut self, t: &TensorInfo) -> Result<Vec<u8>> {
        if !t.ty.is_supported() {
            return Err(Error::Unsupported(format!("tensor {} has type {}, which ferrolm cannot run yet", t.name, t.ty.name())));
        }
        let data = self.gguf.read_tensor(self.src, t)?;
        self.bytes += data.len() as u64;
        (self.on_tensor)(self.bytes);
        Ok(data)
    }

    /// A matrix of `rows` x `cols` (GGUF dims [cols, rows]).
    pub fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<GpuMatrix> {
        let t = self.info(name)?.clone();
        self.check_dims(&t, &[cols, rows])?;
        let raw = self.raw(&t)?;
        let packed = pack::pack(t.ty, rows, cols, &raw)?;
        drop(raw);
        let words = self.gpu.buffer_init(name, bytemuck::cast_slice(&packed.words))?;
        let meta = self.gpu.buffer_init(&format!("{name}.meta"), bytemuck::cast_slice(&packed.meta))?;
        let bytes = (packed.words.len() + packed.meta.len()) as u64 * 4;
        Ok(GpuMatrix { words, meta, layout: packed.layout, rows, cols, bytes })
    }

    /// A vector of `n` values, dequantized to f32 on the CPU (norm weights and biases are small).
    pub fn vector_f32(&mut self, name: &str, n: usize) -> Result<Vec<f32>> {
        let t = self.info(name)?.clone();
        self.check_dims(&t, &[n])?;
        let raw = self.raw(&t)?;
        let mut out = vec![0f32; n];
        quant::dequantize(t.ty, &raw, &mut out)?;
        Ok(out)
    }

    pub fn vector(&mut self, name: &str, n: usize) -> Result<wgpu::Buffer> {
        let v = self.vector_f32(name, n)?;
        self.gpu.buffer_init(name, bytemuck::cast_slice(&v))
    }

    pub fn optional_vector(&mut self, name: &str, n: usize) -> Result<Option<wgpu::Buffer>> {
        if self.gguf.tensor(name).is_none() {
            return Ok(None);
        }
        self.vector(name, n).map(Some)
    }
}

/// Load all weights of a Llama-family GGUF (llama.cpp tensor names).
pub fn load_gguf(
    gpu: &Gpu,
    gguf: &GgufFile,
    src: &dyn ByteSource,
    cfg: &mut ModelConfig,
    on_progress: &mut dyn FnMut(u64),
) -> Result<ModelWeights> {
    let mut l = GgufLoader { gguf, src, gpu, bytes: 0, on_tensor: on_progress };
    let (h, qd, kvd, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
    if gguf.tensor("rope_freqs.weight").is_some() {
        cfg.rope_freq_factors = Some(l.vector_f32("rope_freqs.weight", cfg.rope_dim / 2)?);
    }
    let embed = l.matrix("token_embd.weight", cfg.vocab, h)?;
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for i in 0..cfg.n_layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        let bias = cfg.qkv_bias;
        layers.push(LayerWeights {
            attn_norm: l.vector(&n("attn_norm.weight"), h)?,
            wq: l.matrix(&n("attn_q.weight"), qd, h)?,
            wk: l.matrix(&n("attn_k.weight"), kvd, h)?,
            wv: l.matrix(&n("attn_v.weight"), kvd, h)?,
            bq: if bias { l.optional_vector(&n("attn_q.bias"), qd)? } else { None },
            bk: if bias { l.optional_vector(&n("attn_k.bias"), kvd)? } else { None },
            bv: if bias { l.optional_vector(&n("attn_v.bias"), kvd)? } else { None },
            wo: l.matrix(&n("attn_output.weight"), h, qd)?,
            ffn_norm: l.vector(&n("ffn_norm.weight"), h)?,
            w_gate: l.matrix(&n("ffn_gate.weight"), f, h)?,
            w_up: l.matrix(&n("ffn_up.weight"), f, h)?,
            w_down: l.matrix(&n("ffn_down.weight"), h, f)?,
        });
    }
    let out_norm = l.vector("output_norm.weight", h)?;
    let lm_head = if cfg.tied_embeddings { None } else { Some(l.matrix("output.weight", cfg.vocab, h)?) };
    gpu.check()?;
    let mut bytes = embed.bytes + lm_head.as_ref().map_or(0, |m| m.bytes);
    for ly in &layers {
        bytes += [&ly.wq, &ly.wk, &ly.wv, &ly.wo, &ly.w_gate, &ly.w_up, &ly.w_down].iter().map(|m| m.bytes).sum::<u64>();
        bytes += 2 * h as u64 * 4;
    }
    let _ = GgmlType::F32;
    Ok(ModelWeights { embed, layers, out_norm, lm_head, bytes })
}

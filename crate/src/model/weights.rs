//! Moving a model's tensors from a byte source onto the GPU, one tensor at a time (the file is
//! never whole in memory), repacked into the layouts the kernels read.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::ModelConfig;
use crate::weights::gguf::{GgufFile, TensorInfo};
use crate::weights::pack::{self, Layout};
use crate::weights::quant;
use crate::weights::AsyncSource;

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

/// Loads named GGUF tensors, checking shapes against the config. Matrices stream in row
/// chunks of at most `CHUNK` bytes, so neither the file nor a whole tensor is ever in memory.
pub struct GgufLoader<'a> {
    pub gguf: &'a GgufFile,
    pub src: &'a dyn AsyncSource,
    pub gpu: &'a Gpu,
    pub bytes: u64,
    pub on_tensor: &'a mut dyn FnMut(u64),
}

const CHUNK: u64 = 16 << 20;

impl GgufLoader<'_> {
    fn info(&self, name: &str) -> Result<TensorInfo> {
        self.gguf
            .tensor(name)
            .cloned()
            .ok_or_else(|| Error::Model(format!("{}: missing tensor {name}", self.gguf.name)))
    }

    fn check(&self, t: &TensorInfo, want: &[usize]) -> Result<()> {
        let got: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        if got != want {
            return Err(Error::Model(format!("tensor {} has shape {:?}, expected {:?}", t.name, got, want)));
        }
        if !t.ty.is_supported() {
            return Err(Error::Unsupported(format!("tensor {} has type {}, which ferrolm cannot run yet", t.name, t.ty.name())));
        }
        Ok(())
    }

    async fn read(&mut self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let data = self.src.read(offset, len as usize).await?;
        if data.len() as u64 != len {
            return Err(Error::Model(format!("{}: short read at byte {offset}: {} of {len} bytes", self.gguf.name, data.len())));
        }
        self.bytes += len;
        (self.on_tensor)(self.bytes);
        Ok(data)
    }

    /// A matrix of `rows` x `cols` (GGUF dims [cols, rows]).
    pub async fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<GpuMatrix> {
        let t = self.info(name)?;
        self.check(&t, &[cols, rows])?;
        let layout = Layout::for_type(t.ty).ok_or_else(|| Error::Unsupported(format!("tensor {name}: type {}", t.ty.name())))?;
        let row_bytes = t.n_bytes / rows as u64;
        let words_per_row = layout.words_for(cols) as u64;
        let meta_per_row = if matches!(layout, Layout::Q4 { .. } | Layout::Q8 { .. }) { 2 * (cols / layout.block()) as u64 } else { 0 };
        let limit = self.gpu.limits.max_storage_buffer_binding_size as u64;
        if words_per_row * rows as u64 * 4 > limit {
            return Err(Error::Limits(format!(
                "tensor {name} needs {} MiB in one binding; the adapter allows {} MiB",
                (words_per_row * rows as u64 * 4) >> 20,
                limit >> 20
            )));
        }
        let words = self.gpu.buffer(name, words_per_row * rows as u64 * 4)?;
        let meta = self.gpu.buffer(&format!("{name}.meta"), meta_per_row * rows as u64 * 4)?;
        let chunk_rows = (CHUNK / row_bytes.max(1)).max(1) as usize;
        let mut r0 = 0;
        while r0 < rows {
            let n = chunk_rows.min(rows - r0);
            let raw = self.read(t.offset + r0 as u64 * row_bytes, n as u64 * row_bytes).await?;
            let p = pack::pack(t.ty, n, cols, &raw)?;
            self.gpu.queue.write_buffer(&words, r0 as u64 * words_per_row * 4, p.words_bytes());
            if meta_per_row > 0 {
                self.gpu.queue.write_buffer(&meta, r0 as u64 * meta_per_row * 4, p.meta_bytes());
            }
            r0 += n;
        }
        let bytes = (words_per_row + meta_per_row) * rows as u64 * 4;
        Ok(GpuMatrix { words, meta, layout, rows, cols, bytes })
    }

    /// A vector of `n` values, dequantized to f32 on the CPU (norm weights and biases are small).
    pub async fn vector_f32(&mut self, name: &str, n: usize) -> Result<Vec<f32>> {
        let t = self.info(name)?;
        self.check(&t, &[n])?;
        let raw = self.read(t.offset, t.n_bytes).await?;
        let mut out = vec![0f32; n];
        quant::dequantize(t.ty, &raw, &mut out)?;
        Ok(out)
    }

    pub async fn vector(&mut self, name: &str, n: usize) -> Result<wgpu::Buffer> {
        let v = self.vector_f32(name, n).await?;
        self.gpu.buffer_init(name, bytemuck::cast_slice(&v))
    }

    pub async fn optional_vector(&mut self, name: &str, n: usize) -> Result<Option<wgpu::Buffer>> {
        if self.gguf.tensor(name).is_none() {
            return Ok(None);
        }
        Ok(Some(self.vector(name, n).await?))
    }
}

/// Load all weights of a Llama-family GGUF (llama.cpp tensor names).
pub async fn load_gguf(
    gpu: &Gpu,
    gguf: &GgufFile,
    src: &dyn AsyncSource,
    cfg: &mut ModelConfig,
    on_progress: &mut dyn FnMut(u64),
) -> Result<ModelWeights> {
    let mut l = GgufLoader { gguf, src, gpu, bytes: 0, on_tensor: on_progress };
    let (h, qd, kvd, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
    if gguf.tensor("rope_freqs.weight").is_some() {
        cfg.rope_freq_factors = Some(l.vector_f32("rope_freqs.weight", cfg.rope_dim / 2).await?);
    }
    let embed = l.matrix("token_embd.weight", cfg.vocab, h).await?;
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for i in 0..cfg.n_layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        let bias = cfg.qkv_bias;
        layers.push(LayerWeights {
            attn_norm: l.vector(&n("attn_norm.weight"), h).await?,
            wq: l.matrix(&n("attn_q.weight"), qd, h).await?,
            wk: l.matrix(&n("attn_k.weight"), kvd, h).await?,
            wv: l.matrix(&n("attn_v.weight"), kvd, h).await?,
            bq: if bias { l.optional_vector(&n("attn_q.bias"), qd).await? } else { None },
            bk: if bias { l.optional_vector(&n("attn_k.bias"), kvd).await? } else { None },
            bv: if bias { l.optional_vector(&n("attn_v.bias"), kvd).await? } else { None },
            wo: l.matrix(&n("attn_output.weight"), h, qd).await?,
            ffn_norm: l.vector(&n("ffn_norm.weight"), h).await?,
            w_gate: l.matrix(&n("ffn_gate.weight"), f, h).await?,
            w_up: l.matrix(&n("ffn_up.weight"), f, h).await?,
            w_down: l.matrix(&n("ffn_down.weight"), h, f).await?,
        });
        gpu.check()?;
    }
    let out_norm = l.vector("output_norm.weight", h).await?;
    let lm_head = if cfg.tied_embeddings { None } else { Some(l.matrix("output.weight", cfg.vocab, h).await?) };
    gpu.check()?;
    let mut bytes = embed.bytes + lm_head.as_ref().map_or(0, |m| m.bytes);
    for ly in &layers {
        bytes += [&ly.wq, &ly.wk, &ly.wv, &ly.wo, &ly.w_gate, &ly.w_up, &ly.w_down].iter().map(|m| m.bytes).sum::<u64>();
        bytes += 2 * h as u64 * 4;
    }
    Ok(ModelWeights { embed, layers, out_norm, lm_head, bytes })
}

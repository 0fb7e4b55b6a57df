//! Moving a model's tensors from a byte source onto the GPU, repacked into the layouts the
//! kernels read. Big matrices (embedding, LM head) stream in row chunks; per-layer matrices
//! are fused as the kernels want them ([q; k; v] and [gate; up]) with NeoX rotary halves
//! reordered into pairs. Small vectors (norms, biases) of a layer share one `vecs` buffer.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::ModelConfig;
use crate::weights::gguf::{GgufFile, TensorInfo};
use crate::weights::pack::{self, Layout, Packed};
use crate::weights::quant;
use crate::weights::reshape::{concat_rows, neox_to_pairs, permute_rows};
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

    fn upload(gpu: &Gpu, name: &str, p: &Packed) -> Result<GpuMatrix> {
        check_binding(gpu, name, p.words.len() as u64 * 4)?;
        let words = gpu.buffer_init(name, p.words_bytes())?;
        let meta = gpu.buffer_init(&format!("{name}.meta"), p.meta_bytes())?;
        Ok(GpuMatrix { words, meta, layout: p.layout, rows: p.rows, cols: p.cols, bytes: p.gpu_bytes() as u64 })
    }
}

fn check_binding(gpu: &Gpu, name: &str, bytes: u64) -> Result<()> {
    let limit = gpu.limits.max_storage_buffer_binding_size as u64;
    if bytes > limit {
        return Err(Error::Limits(format!("tensor {name} needs {} MiB in one binding; the adapter allows {} MiB", bytes >> 20, limit >> 20)));
    }
    Ok(())
}

/// Where each small vector sits in a layer's `vecs` buffer (the same for every layer).
#[derive(Clone, Copy, Debug)]
pub struct VecOffsets {
    pub attn_norm: usize,
    pub ffn_norm: usize,
    /// Bias of the fused [q; k; v] rows, if the model has one.
    pub qkv_bias: Option<usize>,
}

impl VecOffsets {
    pub fn new(cfg: &ModelConfig) -> VecOffsets {
        let h = cfg.hidden;
        VecOffsets { attn_norm: 0, ffn_norm: h, qkv_bias: cfg.qkv_bias.then_some(2 * h) }
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
    pub embed: GpuMatrix,
    pub layers: Vec<LayerWeights>,
    pub offsets: VecOffsets,
    /// The final norm's weight at offset 0.
    pub out_vecs: wgpu::Buffer,
    /// `None` when the LM head is the (tied) embedding matrix.
    pub lm_head: Option<GpuMatrix>,
    pub bytes: u64,
}

impl ModelWeights {
    pub fn lm_head(&self) -> &GpuMatrix {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

/// Loads named GGUF tensors, checking shapes and types against the config.
struct GgufLoader<'a> {
    gguf: &'a GgufFile,
    src: &'a dyn AsyncSource,
    gpu: &'a Gpu,
    bytes: u64,
    on_progress: &'a mut dyn FnMut(u64),
}

/// Largest read the loader makes at once.
const CHUNK: u64 = 16 << 20;

impl GgufLoader<'_> {
    fn info(&self, name: &str, want: &[usize]) -> Result<TensorInfo> {
        let t = self.gguf.tensor(name).cloned().ok_or_else(|| Error::Model(format!("{}: missing tensor {name}", self.gguf.name)))?;
        let got: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        if got != want {
            return Err(Error::Model(format!("tensor {name} has shape {got:?}, expected {want:?}")));
        }
        if !t.ty.is_supported() {
            return Err(Error::Unsupported(format!("tensor {name} has type {}, which ferrolm cannot run yet", t.ty.name())));
        }
        Ok(t)
    }

    async fn read(&mut self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let data = self.src.read(offset, len as usize).await?;
        if data.len() as u64 != len {
            return Err(Error::Model(format!("{}: short read at byte {offset}: {} of {len} bytes", self.gguf.name, data.len())));
        }
        self.bytes += len;
        (self.on_progress)(self.bytes);
        Ok(data)
    }

    /// A matrix of `rows` x `cols` (GGUF dims [cols, rows]), packed whole on the CPU.
    async fn packed(&mut self, name: &str, rows: usize, cols: usize) -> Result<Packed> {
        let t = self.info(name, &[cols, rows])?;
        let raw = self.read(t.offset, t.n_bytes).await?;
        pack::pack(t.ty, rows, cols, &raw)
    }

    /// A large matrix streamed to the GPU in row chunks (never whole in memory).
    async fn streamed(&mut self, name: &str, rows: usize, cols: usize) -> Result<GpuMatrix> {
        let t = self.info(name, &[cols, rows])?;
        let layout = Layout::for_type(t.ty).ok_or_else(|| Error::Unsupported(format!("tensor {name}: type {}", t.ty.name())))?;
        let row_bytes = t.n_bytes / rows as u64;
        let wpr = layout.words_for(cols) as u64;
        let mpr = if matches!(layout, Layout::Q4 { .. } | Layout::Q8 { .. }) { 2 * (cols / layout.block()) as u64 } else { 0 };
        check_binding(self.gpu, name, wpr * rows as u64 * 4)?;
        let words = self.gpu.buffer(name, wpr * rows as u64 * 4)?;
        let meta = self.gpu.buffer(&format!("{name}.meta"), mpr * rows as u64 * 4)?;
        let chunk_rows = (CHUNK / row_bytes.max(1)).max(1) as usize;
        let mut r0 = 0;
        while r0 < rows {
            let n = chunk_rows.min(rows - r0);
            let raw = self.read(t.offset + r0 as u64 * row_bytes, n as u64 * row_bytes).await?;
            let p = pack::pack(t.ty, n, cols, &raw)?;
            self.gpu.queue.write_buffer(&words, r0 as u64 * wpr * 4, p.words_bytes());
            if mpr > 0 {
                self.gpu.queue.write_buffer(&meta, r0 as u64 * mpr * 4, p.meta_bytes());
            }
            r0 += n;
        }
        Ok(GpuMatrix { words, meta, layout, rows, cols, bytes: (wpr + mpr) * rows as u64 * 4 })
    }

    /// A vector of `n` values as f32 (norm weights and biases are small).
    async fn vector(&mut self, name: &str, n: usize) -> Result<Vec<f32>> {
        let t = self.info(name, &[n])?;
        let raw = self.read(t.offset, t.n_bytes).await?;
        let mut out = vec![0f32; n];
        quant::dequantize(t.ty, &raw, &mut out)?;
        Ok(out)
    }
}

fn permute_vec(v: &[f32], perm: &[usize]) -> Vec<f32> {
    perm.iter().map(|&i| v[i]).collect()
}

/// Load all weights of a Llama-family GGUF (llama.cpp tensor names).
pub async fn load_gguf(
    gpu: &Gpu,
    gguf: &GgufFile,
    src: &dyn AsyncSource,
    cfg: &mut ModelConfig,
    on_progress: &mut dyn FnMut(u64),
) -> Result<ModelWeights> {
    let mut l = GgufLoader { gguf, src, gpu, bytes: 0, on_progress };
    let (h, qd, kvd, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
    if gguf.tensor("rope_freqs.weight").is_some() {
        cfg.rope_freq_factors = Some(l.vector("rope_freqs.weight", cfg.rope_dim / 2).await?);
    }
    // The kernels rotate (2i, 2i+1) pairs; NeoX-style models rotate halves, so reorder their
    // q and k rows (and biases) into pairs. Attention scores are unchanged by the reordering.
    let (q_perm, k_perm) = if cfg.rope_neox {
        (Some(neox_to_pairs(cfg.n_heads, cfg.head_dim, cfg.rope_dim)), Some(neox_to_pairs(cfg.n_kv_heads, cfg.head_dim, cfg.rope_dim)))
    } else {
        (None, None)
    };
    let offsets = VecOffsets::new(cfg);
    let embed = l.streamed("token_embd.weight", cfg.vocab, h).await?;
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for i in 0..cfg.n_layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        let mut vecs = l.vector(&n("attn_norm.weight"), h).await?;
        vecs.extend(l.vector(&n("ffn_norm.weight"), h).await?);
        let mut q = l.packed(&n("attn_q.weight"), qd, h).await?;
        let mut k = l.packed(&n("attn_k.weight"), kvd, h).await?;
        let v = l.packed(&n("attn_v.weight"), kvd, h).await?;
        if let (Some(qp), Some(kp)) = (&q_perm, &k_perm) {
            q = permute_rows(&q, qp);
            k = permute_rows(&k, kp);
        }
        if cfg.qkv_bias {
            let mut bq = l.vector(&n("attn_q.bias"), qd).await?;
            let mut bk = l.vector(&n("attn_k.bias"), kvd).await?;
            if let (Some(qp), Some(kp)) = (&q_perm, &k_perm) {
                bq = permute_vec(&bq, qp);
                bk = permute_vec(&bk, kp);
            }
            vecs.extend(bq);
            vecs.extend(bk);
            vecs.extend(l.vector(&n("attn_v.bias"), kvd).await?);
        }
        let wqkv = GpuMatrix::upload(gpu, &n("attn_qkv"), &concat_rows(&[q, k, v])?)?;
        let wo = GpuMatrix::upload(gpu, &n("attn_output.weight"), &l.packed(&n("attn_output.weight"), h, qd).await?)?;
        let gate = l.packed(&n("ffn_gate.weight"), f, h).await?;
        let up = l.packed(&n("ffn_up.weight"), f, h).await?;
        let w_gate_up = GpuMatrix::upload(gpu, &n("ffn_gate_up"), &concat_rows(&[gate, up])?)?;
        let w_down = GpuMatrix::upload(gpu, &n("ffn_down.weight"), &l.packed(&n("ffn_down.weight"), h, f).await?)?;
        let vecs = gpu.buffer_init(&n("vecs"), bytemuck::cast_slice(&vecs))?;
        layers.push(LayerWeights { vecs, wqkv, wo, w_gate_up, w_down });
        gpu.check()?;
    }
    let out_norm = l.vector("output_norm.weight", h).await?;
    let out_vecs = gpu.buffer_init("output_norm", bytemuck::cast_slice(&out_norm))?;
    let lm_head = if cfg.tied_embeddings { None } else { Some(l.streamed("output.weight", cfg.vocab, h).await?) };
    gpu.check()?;
    let mut bytes = embed.bytes + lm_head.as_ref().map_or(0, |m| m.bytes) + h as u64 * 4;
    for ly in &layers {
        bytes += [&ly.wqkv, &ly.wo, &ly.w_gate_up, &ly.w_down].iter().map(|m| m.bytes).sum::<u64>();
        bytes += ly.vecs.size();
    }
    Ok(ModelWeights { embed, layers, offsets, out_vecs, lm_head, bytes })
}

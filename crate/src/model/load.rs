//! The one loader, for GGUF files and Hugging Face / MLX / MLC folders alike. A format is a
//! `TensorSource`: it says which tensors exist and where, checks a tensor against the shape the
//! config implies, and reads a tensor (or some rows of a matrix) packed into its GPU layout. The
//! routines here do the rest the same way for every format:
//!
//! 1. `check_fits`: before any weight is read, every tensor the model needs is there with a shape
//!    and type we can run, and every GPU buffer (the fused [q; k; v] and [gate; up] included)
//!    fits the adapter's limits.
//! 2. `load`: the embedding, the layers, the final norm and the LM head are visited in the order
//!    they lie in the files (a download serving the reads moves forward); the embedding and LM
//!    head stream to the GPU in row chunks (`streamed`), a layer is read in file order, fused and
//!    uploaded before the next (peak memory about one layer).

use super::family::tensor;
use super::streamed::StreamedMatrix;
use super::weights::{LayerSpec, LayerWeights, ModelWeights, Names, Shape};
use super::ModelConfig;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::weights::pack::{Layout, Packed};
use crate::weights::safetensors::READ_CHUNK;
use std::collections::HashMap;

/// How a matrix goes to the GPU, as its source checked it.
pub(crate) struct MatrixInfo {
    pub layout: Layout,
    /// The blocks' scale and offset are exact as f16 (see `GpuMatrix::alloc_streamed`).
    pub meta16: bool,
    /// Bytes a row takes in the file (for reading in row chunks).
    pub row_bytes: u64,
    /// Bytes the matrix takes in the files (its scales included).
    pub bytes: u64,
}

/// Rows `first..first + n` of matrix `name` (`shape`: rows x cols in the file); each row
/// zero-padded to `pad.1` columns and zero rows appended up to `pad.0` (no padding:
/// `pad == (n, cols)`).
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub name: &'a str,
    pub shape: (usize, usize),
    pub first: usize,
    pub n: usize,
    pub pad: (usize, usize),
}

impl<'a> Rows<'a> {
    /// Rows `first..first + n`, unpadded.
    fn some(name: &'a str, shape: (usize, usize), first: usize, n: usize) -> Rows<'a> {
        Rows { name, shape, first, n, pad: (n, shape.1) }
    }

    pub fn padded(&self) -> bool {
        self.pad != (self.n, self.shape.1)
    }
}

/// A model's tensors as a format stores them (`weights::GgufSource`, `hf::HfSource`).
pub(crate) trait TensorSource {
    /// The tensor names the format uses.
    fn names(&self) -> Names;
    /// Every tensor in the files with where it lies: (file, byte offset).
    fn positions(&self) -> Vec<(&str, (usize, u64))>;
    fn has(&self, name: &str) -> bool;
    /// The intermediate size in the files (a folder's may be padded to `cfg.ffn` at load).
    fn file_ffn(&self, cfg: &ModelConfig) -> usize;
    /// The LM head tensor, if the model does not use the embedding.
    fn head(&self, cfg: &ModelConfig) -> Option<String>;
    /// Matrix `name` of `rows` x `cols`, checked (present, shape, type); `streamed`: it will be
    /// read in row chunks.
    fn matrix(&self, name: &str, shape: (usize, usize), streamed: bool) -> Result<MatrixInfo>;
    /// A vector (or convolution weight) checked; returns the bytes it takes in the file.
    fn vector(&self, name: &str, shape: Shape) -> Result<u64>;
    /// The error for a GPU buffer (`parts` fused) of `bytes` over the binding `limit`.
    fn too_big(&self, buffer: &str, parts: &[(String, usize)], bytes: u64, limit: u64) -> Error;
    /// Settings the format keeps in tensors (GGUF's rotary factors), read before the weights.
    async fn prepare(&self, _cfg: &mut ModelConfig, _on_read: &mut dyn FnMut(u64)) -> Result<()> {
        Ok(())
    }
    /// Some rows of a matrix, packed (`Rows`).
    async fn rows(&self, r: Rows<'_>, on_read: &mut dyn FnMut(u64)) -> Result<Packed>;
    /// A vector (or convolution weight, [channel][tap]) as f32 values.
    async fn values(&self, name: &str, shape: Shape, on_read: &mut dyn FnMut(u64)) -> Result<Vec<f32>>;
}

/// One GPU matrix buffer: its name, its parts as (tensor, rows) fused in order, its columns.
struct Buffer {
    name: String,
    parts: Vec<(String, usize)>,
    cols: usize,
    streamed: bool,
}

fn layer_spec<T: TensorSource>(src: &T, cfg: &ModelConfig, i: usize) -> LayerSpec {
    LayerSpec::new(cfg, i, src.file_ffn(cfg), src.names(), &|n| src.has(n))
}

/// Every matrix buffer the model needs, in load order within a layer.
fn buffers<T: TensorSource>(src: &T, cfg: &ModelConfig) -> Vec<Buffer> {
    let (names, h) = (src.names(), cfg.hidden);
    let embed = names.global(tensor::EMBED);
    let big = |what: &str, name: String| Buffer {
        name: names.buffer(None, what, &name),
        parts: vec![(name, cfg.vocab)],
        cols: h,
        streamed: true,
    };
    let mut out = vec![big("embed", embed)];
    for i in 0..cfg.n_layers {
        let l = layer_spec(src, cfg, i);
        let mut one = |what: &str, parts: Vec<(String, usize)>, cols: usize| {
            let name = names.buffer(Some(i), what, &parts[0].0);
            out.push(Buffer { name, parts, cols, streamed: false })
        };
        one("qkv", l.qkv, h);
        one("o", vec![(l.o, h)], l.o_cols);
        one("gate_up", l.gate_up, h);
        one("down", vec![(l.down, h)], l.ffn);
    }
    out.extend(src.head(cfg).map(|head| big("lm_head", head)));
    out
}

/// Every vector (and convolution weight) the model needs.
fn vectors<T: TensorSource>(src: &T, cfg: &ModelConfig) -> Vec<(String, Shape)> {
    let mut out = vec![(src.names().global(tensor::OUT_NORM), Shape::Vector(cfg.hidden))];
    for i in 0..cfg.n_layers {
        out.extend(layer_spec(src, cfg, i).jobs(cfg).into_iter().filter(|(_, s)| !matches!(s, Shape::Matrix(..))));
    }
    out
}

/// Before any weight is read: every tensor the model needs is there with the shape the config
/// implies and a type we can run, and every GPU buffer (fused [q; k; v] and [gate; up] included,
/// as packed) fits the adapter's binding and buffer limits; the embedding and LM head, kept in
/// row ranges (model/streamed.rs), need only a range of the fewest rows to fit. Returns the
/// bytes `load` will read (besides `prepare`'s).
pub(crate) fn check_fits<T: TensorSource>(gpu: &Gpu, src: &T, cfg: &ModelConfig) -> Result<u64> {
    let limit = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
    let mut read = 0u64;
    for b in buffers(src, cfg) {
        let mut layout = None;
        let mut rows = 0;
        for (name, r) in &b.parts {
            let m = src.matrix(name, (*r, b.cols), b.streamed)?;
            // The layout the loader fuses the parts into (see weights::reshape::common_layout).
            layout = Some(layout.map_or(m.layout, |a| crate::weights::reshape::common_layout(a, m.layout)));
            rows += r;
            read += m.bytes;
        }
        let layout = layout.expect("a buffer has parts");
        let bytes = layout.words_for(rows * b.cols) as u64 * 4;
        if b.streamed {
            StreamedMatrix::rows_per_range(gpu, &b.name, layout, (rows, b.cols))?;
        } else if bytes > limit {
            return Err(src.too_big(&b.name, &b.parts, bytes, limit));
        }
    }
    for (name, shape) in vectors(src, cfg) {
        read += src.vector(&name, shape)?;
    }
    Ok(read)
}

/// A large matrix (embedding, LM head) streamed to the GPU in row chunks of at most
/// `READ_CHUNK` file bytes, never whole in memory.
async fn streamed<T: TensorSource>(
    gpu: &Gpu,
    src: &T,
    label: &str,
    name: &str,
    (rows, cols): (usize, usize),
    on_read: &mut dyn FnMut(u64),
) -> Result<StreamedMatrix> {
    let info = src.matrix(name, (rows, cols), true)?;
    let m = StreamedMatrix::alloc(gpu, label, info.layout, info.meta16, (rows, cols))?;
    for c in m.chunks(info.row_bytes, READ_CHUNK) {
        let p = finite_rows(src, Rows::some(name, (rows, cols), c.first, c.n), on_read).await?;
        m.parts[c.part].write_rows(gpu, name, c.local, &p)?;
    }
    Ok(m)
}

/// `src.rows`, refusing a value that is not finite: one NaN or infinite weight (or block scale)
/// turns every later activation into NaN, and the model into garbage text instead of an error.
async fn finite_rows<T: TensorSource>(src: &T, r: Rows<'_>, on_read: &mut dyn FnMut(u64)) -> Result<Packed> {
    let (name, first) = (r.name, r.first);
    let p = src.rows(r, on_read).await?;
    // The packed width, which a padded matrix widens.
    let cols = p.cols.max(1);
    match p.first_non_finite() {
        Some(i) => Err(not_finite(name, (first + i / cols, i % cols))),
        None => Ok(p),
    }
}

/// `src.values`, refusing a value that is not finite (see `finite_rows`).
async fn finite_values<T: TensorSource>(
    src: &T,
    name: &str,
    shape: Shape,
    on_read: &mut dyn FnMut(u64),
) -> Result<Vec<f32>> {
    finite(&format!("tensor {name}"), src.values(name, shape, on_read).await?)
}

/// `v` (`what` in the error), refused where a value is not finite (see `finite_rows`).
pub(crate) fn finite(what: &str, v: Vec<f32>) -> Result<Vec<f32>> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(Error::Model(format!("{what}: value {i} is not finite ({})", v[i]))),
        None => Ok(v),
    }
}

fn not_finite(name: &str, (row, col): (usize, usize)) -> Error {
    Error::Model(format!(
        "tensor {name}: the value at row {row}, column {col} (or its block's scale) is not finite (NaN or infinite)"
    ))
}

/// One layer: its tensors read in file order (a download moves forward and no chunk is needed
/// twice), then fused and uploaded.
async fn layer<T: TensorSource>(
    gpu: &Gpu,
    src: &T,
    cfg: &ModelConfig,
    i: usize,
    at: &dyn Fn(&str) -> (usize, u64),
    on_read: &mut dyn FnMut(u64),
) -> Result<LayerWeights> {
    // The kernels step through rows 8 values at a time: an intermediate size that is not a
    // multiple of 8 is padded with zero gate/up rows (after each of gate and up) and zero
    // down columns. Exact: the padded units compute act(0 + 0) * 0 = 0.
    let (fh, f) = (src.file_ffn(cfg), cfg.ffn);
    let l = layer_spec(src, cfg, i);
    let mut jobs = l.jobs(cfg);
    jobs.sort_by_key(|(n, _)| at(n));
    let (mut mats, mut vecs) = (HashMap::new(), HashMap::new());
    for (name, shape) in jobs {
        match shape {
            Shape::Matrix(rows, cols) if fh != f && l.gate_up.iter().any(|(g, _)| *g == name) => {
                // gate and up (or both halves of a fused gate_up_proj), each padded to f rows.
                let mut parts = Vec::new();
                for r0 in (0..rows).step_by(fh) {
                    let r = Rows { pad: (f, cols), ..Rows::some(&name, (rows, cols), r0, fh) };
                    parts.push(finite_rows(src, r, on_read).await?);
                }
                mats.insert(name, parts);
            }
            Shape::Matrix(rows, cols) => {
                let mut r = Rows::some(&name, (rows, cols), 0, rows);
                if fh != f && name == l.down {
                    r.pad = (rows, f);
                }
                let m = finite_rows(src, r, on_read).await?;
                mats.insert(name, vec![m]);
            }
            Shape::Vector(_) | Shape::Conv(..) => {
                let v = finite_values(src, &name, shape, on_read).await?;
                vecs.insert(name, v);
            }
        }
    }
    l.assemble(mats, vecs, f).upload(gpu, cfg, &src.names().layer_label(i))
}

/// What the loader visits, in the order the weights lie in the files.
#[derive(Clone, Copy)]
enum Item {
    Embed,
    Layer(usize),
    Norm,
    Head,
}

/// Upload every weight (after `check_fits`). `on_progress(bytes read so far)`.
pub(crate) async fn load<T: TensorSource>(
    gpu: &Gpu,
    src: &T,
    cfg: &mut ModelConfig,
    on_progress: &mut dyn FnMut(u64),
) -> Result<ModelWeights> {
    let mut done = 0u64;
    let mut on_read = |n: u64| {
        done += n;
        on_progress(done);
    };
    src.prepare(cfg, &mut on_read).await?;
    let cfg = &*cfg;
    let (names, h) = (src.names(), cfg.hidden);
    let positions = src.positions();
    let pos: HashMap<&str, (usize, u64)> = positions.iter().copied().collect();
    let at = |n: &str| pos.get(n).copied().unwrap_or((usize::MAX, u64::MAX));
    let (embed_name, norm_name, head) = (names.global(tensor::EMBED), names.global(tensor::OUT_NORM), src.head(cfg));
    // A layer lies where its first matrix does (llama.cpp writes blk.0, blk.1, blk.10, ...; some
    // writers put every norm at the start of the file, apart from its layer).
    let first: Vec<(usize, u64)> = (0..cfg.n_layers)
        .map(|i| {
            let jobs = layer_spec(src, cfg, i).jobs(cfg);
            let mats = jobs.iter().filter(|(_, s)| matches!(s, Shape::Matrix(..)));
            mats.map(|(n, _)| at(n)).min().unwrap_or((usize::MAX, u64::MAX))
        })
        .collect();
    let position = |it: Item| match it {
        Item::Embed => at(&embed_name),
        Item::Norm => at(&norm_name),
        Item::Head => head.as_deref().map_or((usize::MAX, u64::MAX), at),
        Item::Layer(i) => first[i],
    };
    let mut items: Vec<Item> = vec![Item::Embed, Item::Norm, Item::Head];
    items.extend((0..cfg.n_layers).map(Item::Layer));
    items.sort_by_key(|&it| position(it));
    let (mut embed, mut out_norm, mut lm_head) = (None, None, None);
    let mut layers: Vec<Option<LayerWeights>> = (0..cfg.n_layers).map(|_| None).collect();
    for item in items {
        match item {
            Item::Embed => {
                let label = names.buffer(None, "embed", &embed_name);
                embed = Some(streamed(gpu, src, &label, &embed_name, (cfg.vocab, h), &mut on_read).await?);
            }
            Item::Norm => out_norm = Some(finite_values(src, &norm_name, Shape::Vector(h), &mut on_read).await?),
            Item::Head => {
                if let Some(head) = &head {
                    let label = names.buffer(None, "lm_head", head);
                    lm_head = Some(streamed(gpu, src, &label, head, (cfg.vocab, h), &mut on_read).await?);
                }
            }
            Item::Layer(i) => {
                layers[i] = Some(layer(gpu, src, cfg, i, &at, &mut on_read).await?);
                gpu.check()?;
            }
        }
    }
    let (embed, out_norm) = (embed.expect("visited"), out_norm.expect("visited"));
    let layers: Vec<LayerWeights> = layers.into_iter().flatten().collect();
    ModelWeights::new(gpu, cfg, embed, layers, &out_norm, lm_head)
}

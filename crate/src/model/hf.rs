//! Hugging Face model folders: config.json, *.safetensors (one file or shards with
//! model.safetensors.index.json), tokenizer.json, tokenizer_config.json, generation_config.json.
//! Weights map onto the same per-layer parts as GGUF tensors, so the forward pass is shared.
//! MLC-LLM folders (`mlc.rs`) come through here too, their tensor cache standing in for the
//! safetensors shards.

use super::config::ModelConfig;
use super::family::tensor;
use super::hf_config::{GenerationConfig, HfConfig, TokenizerConfig};
use super::load::{MatrixInfo, Rows, TensorSource};
use super::weights::{Names, Shape};
use crate::error::{Error, Result};
use crate::weights::pack::{self, Layout, Packed};
use crate::weights::quant::{self, GgmlType};
use crate::weights::safetensors::{SafetensorsModel, StDtype};
use crate::weights::AsyncSource;

/// How to store F32/F16/BF16 weights on the GPU: as they are, or quantized at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Quantize {
    #[default]
    None,
    Q8_0,
    Q4_0,
}

impl std::str::FromStr for Quantize {
    type Err = Error;
    fn from_str(s: &str) -> Result<Quantize> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "" => Ok(Quantize::None),
            "q8_0" | "q8" => Ok(Quantize::Q8_0),
            "q4_0" | "q4" => Ok(Quantize::Q4_0),
            other => Err(Error::InvalidOption(format!("quantize {other:?}: expected none, q8_0 or q4_0"))),
        }
    }
}

/// The text files of a model folder, read by the caller (natively from disk, in the browser by
/// fetch); weights come through `open`.
#[derive(Clone, Debug, Default)]
pub struct HfFiles {
    pub config: String,
    pub generation_config: Option<String>,
    pub tokenizer: Option<String>,
    pub tokenizer_config: Option<String>,
    /// `chat_template.jinja` (newer transformers save the template there instead of in
    /// tokenizer_config.json; when both exist, this file wins, as in transformers).
    pub chat_template: Option<String>,
    pub index: Option<Vec<u8>>,
    /// sentence-transformers files (`modules.json` and what it names), for embeddings.
    pub st: Option<crate::embed::StFiles>,
    /// An MLC-LLM folder's tensor cache: the weights are its shards, not safetensors (`config`
    /// and `generation_config` were then made from `mlc-chat-config.json`, see `mlc::hf_files`).
    pub mlc: Option<super::mlc::MlcWeights>,
}

impl HfFiles {
    /// config.json as the engine's config (and generation_config.json), checked before any
    /// weight file is opened. An MLC folder's two are made from its mlc-chat-config.json: errors
    /// name the file the user has.
    pub fn configs(&self) -> Result<(HfConfig, ModelConfig, Option<GenerationConfig>)> {
        let named = |e: Error| match (&self.mlc, e) {
            (Some(_), Error::Model(m)) => Error::Model(if let Some(rest) = m.strip_prefix("config.json:") {
                format!("mlc-chat-config.json (model_config):{rest}")
            } else if let Some(rest) = m.strip_prefix("generation_config.json:") {
                format!("mlc-chat-config.json:{rest}")
            } else {
                m
            }),
            (_, e) => e,
        };
        let hf = HfConfig::from_json(&self.config).map_err(named)?;
        let cfg = ModelConfig::from_hf(&hf).map_err(named)?;
        let generation =
            self.generation_config.as_deref().map(GenerationConfig::from_json).transpose().map_err(named)?;
        Ok((hf, cfg, generation))
    }
}

/// The optional files of a model folder besides the weights, in the order they are looked for.
pub const OPTIONAL_FILES: [&str; 5] = [
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    crate::weights::safetensors::INDEX_FILE,
];

pub struct HfModel<S> {
    pub hf: HfConfig,
    pub cfg: ModelConfig,
    pub st: SafetensorsModel<S>,
    pub generation: Option<GenerationConfig>,
    pub tokenizer_config: Option<TokenizerConfig>,
    /// Where the text model's tensors are (`model.`, or `language_model.model.` ... for the
    /// Gemma 3 multimodal wrapper; see `text_prefix`).
    pub prefix: &'static str,
    /// The LM head tensor to load, if the model does not use the embedding (see `head_tensor`).
    pub head: Option<&'static str>,
    /// The folder's norm weights are Gemma's (1 + w) stored as w + 1 (MLC's Gemma loaders).
    norms_plus_one: bool,
}

fn shape_dims(s: Shape) -> Vec<usize> {
    match s {
        Shape::Matrix(r, c) => vec![r, c],
        Shape::Vector(n) => vec![n],
        Shape::Conv(c, k) => vec![c, 1, k],
    }
}

/// The element type a matrix is packed as: its own, or the quantization asked for (when the rows
/// are whole 32-element blocks).
fn packed_type(dtype: &StDtype, q: Quantize, cols: usize) -> std::result::Result<GgmlType, String> {
    Ok(match (q, cols.is_multiple_of(32)) {
        (Quantize::Q8_0, true) => GgmlType::Q8_0,
        (Quantize::Q4_0, true) => GgmlType::Q4_0,
        _ => match dtype {
            StDtype::F32 => GgmlType::F32,
            StDtype::F16 => GgmlType::F16,
            StDtype::BF16 => GgmlType::BF16,
            other => return Err(format!("dtype {} (F32, F16 and BF16 are supported)", other.name())),
        },
    })
}

/// How a matrix is stored in the folder: float (packed as is, or quantized at load to the
/// type), MLX's affine quantization (`mlx_lm.convert -q`: uint32 words of `bits`-bit codes
/// with per-group `scales` and `biases`, w = scale * q + bias), or MLC's 4-bit group
/// quantization (`q_weight` codes and `q_scale`, w = (q - 7) * scale, groups of 32).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stored {
    Plain(GgmlType),
    Mlx { bits: usize, group: usize },
    Mlc,
}

impl Stored {
    fn layout(self) -> Layout {
        match self {
            Stored::Plain(ty) => Layout::for_type(ty).expect("F32, F16, BF16, Q8_0 and Q4_0 have layouts"),
            Stored::Mlx { bits: 4, .. } | Stored::Mlc => Layout::Q4 { block: 32 },
            Stored::Mlx { .. } => Layout::Q8 { block: 32 },
        }
    }
}

/// MLX codes of `bits` bits, rows of `cols`, with one (scale, bias) per `group` elements, as
/// the 4-bit (unsigned nibbles, as MLX packs them) or 8-bit (bytes made signed, the bias moved
/// by 128 scales) layout. MLX packs element j of a row into bits (j % (32 / bits)) * bits of
/// word j / (32 / bits): the layouts' own order.
fn pack_mlx(
    words: &[u8],
    scales: &[f32],
    biases: &[f32],
    (rows, cols): (usize, usize),
    bits: usize,
    group: usize,
) -> Packed {
    let layout = if bits == 4 { Layout::Q4 { block: 32 } } else { Layout::Q8 { block: 32 } };
    let mut w: Vec<u32> = words.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if bits == 8 {
        w.iter_mut().for_each(|x| *x ^= 0x8080_8080);
    }
    let groups = cols / group;
    let mut meta = Vec::with_capacity(rows * cols / 16);
    for r in 0..rows {
        for b in 0..cols / 32 {
            let g = r * groups + b * 32 / group;
            let (s, o) = (scales[g], biases[g]);
            meta.extend([s, if bits == 8 { o + 128.0 * s } else { o }]);
        }
    }
    Packed { layout, rows, cols, words: w, meta }
}

/// MLC's 4-bit codes (element j of a row in bits 4 (j % 8) of word j / 8: the layout's own order)
/// with one scale per 32 elements, as the 4-bit layout. A block is stored as (q + 1, scale,
/// -8 scale), Q4_0's form, whose scale and offset are both exact in f16 for f16 scales (so the
/// GPU keeps 32 bits of metadata a block, not 64); a block holding a code 15, which q + 1 would
/// carry out of its nibble (MLC's quantizer clamps codes to 0..=14, so only other writers give
/// it), keeps (q, scale, -7 scale). Either way scale * q + offset is (q - 7) * scale exactly in f32
/// for f16 and bf16 scales (an 8- or 11-bit significand times 4-bit integers).
fn pack_mlc(words: &[u8], scales: &[f32], (rows, cols): (usize, usize)) -> Packed {
    let mut w: Vec<u32> = words.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let mut meta = Vec::with_capacity(rows * cols / 16);
    for (block, &s) in w.chunks_exact_mut(4).zip(scales) {
        let has_15 = block.iter().any(|&x| x & (x >> 1) & (x >> 2) & (x >> 3) & 0x1111_1111 != 0);
        if has_15 {
            meta.extend([s, -7.0 * s]);
        } else {
            block.iter_mut().for_each(|x| *x += 0x1111_1111);
            meta.extend([s, -8.0 * s]);
        }
    }
    Packed { layout: Layout::Q4 { block: 32 }, rows, cols, words: w, meta }
}

/// Bytes for a message: whole MiB from 1 MiB up, else KiB (rounded up).
fn size_text(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b.div_ceil(1 << 20))
    } else {
        format!("{} KiB", b.div_ceil(1 << 10))
    }
}

impl<S: AsyncSource> HfModel<S> {
    /// Parse the configs (an unsupported model fails here, before any weight file is opened), then
    /// open the weight files through `open(file name)` and read their headers.
    pub async fn open<F, Fut>(files: &HfFiles, open: F) -> Result<HfModel<S>>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<S>>,
    {
        let (hf, cfg, generation) = files.configs()?;
        // The ids the configs name must be tokens of the model, as a GGUF's must.
        let (config, gen_config) = if files.mlc.is_some() {
            ("mlc-chat-config.json", "mlc-chat-config.json")
        } else {
            ("config.json", "generation_config.json")
        };
        let named = [(config, "bos_token_id", &hf.bos_token_id), (config, "eos_token_id", &hf.eos_token_id)]
            .into_iter()
            .chain(generation.iter().flat_map(|g| {
                [(gen_config, "bos_token_id", &g.bos_token_id), (gen_config, "eos_token_id", &g.eos_token_id)]
            }));
        for (file, key, ids) in named {
            if let Some(id) = ids.iter().find(|&&i| i >= cfg.vocab as u64) {
                return Err(Error::Model(format!(
                    "{file}: {key} {id} is not a token of the model (its vocabulary has {} tokens)",
                    cfg.vocab
                )));
            }
        }
        let tokenizer_config = files.tokenizer_config.as_deref().map(TokenizerConfig::from_json).transpose()?;
        let st = match &files.mlc {
            Some(w) => super::mlc::open_tensors(w, open).await?,
            None => SafetensorsModel::open_async(files.index.as_deref(), open).await?,
        };
        let prefix = text_prefix(&st)?;
        let head = head_tensor(&st, prefix, cfg.tied_embeddings).await?;
        // A causal LM whose config does not tie (tie_word_embeddings false or, for most families,
        // absent) but whose weights have no head: transformers would start that head from random
        // values; the embedding is the likelier intent. Embedding models have no head at all.
        let lm = hf.architectures.iter().any(|a| a.ends_with("ForCausalLM") || a.ends_with("ForConditionalGeneration"));
        if head.is_none() && !cfg.tied_embeddings && lm {
            log::warn!(
                "config.json does not tie the word embeddings, but the weights hold no lm_head.weight: the LM head \
                 is the token embedding"
            );
        }
        let norms_plus_one = files.mlc.as_ref().is_some_and(|w| w.norms_plus_one());
        Ok(HfModel { hf, cfg, st, generation, tokenizer_config, prefix, head, norms_plus_one })
    }

    /// Stop token ids from generation_config.json, else config.json.
    pub fn eos_ids(&self) -> Vec<u32> {
        let ids = self
            .generation
            .as_ref()
            .map(|g| g.eos_token_id.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| self.hf.eos_token_id.clone());
        ids.into_iter().filter_map(|i| u32::try_from(i).ok()).collect()
    }

    fn has(&self, name: &str) -> bool {
        self.st.get(name).is_some()
    }

    fn norm_name(&self) -> String {
        Names::Hf(self.prefix).global(tensor::OUT_NORM)
    }

    /// How matrix `name` ([rows, cols] as a float matrix) is stored, checked against the
    /// tensors in the folder: MLX-quantized when `<stem>.scales` is there (bits and group from
    /// the shapes of the words and the scales), else float packed as `q` asks.
    fn stored(&self, name: &str, (rows, cols): (usize, usize), q: Quantize) -> Result<Stored> {
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        if self.st.get(&format!("{stem}.q_scale")).is_some() {
            return self.stored_mlc(name, (rows, cols));
        }
        let Some((_, _, s)) = self.st.get(&format!("{stem}.scales")) else {
            let t = self.tensor(name, &[rows, cols])?;
            let ty = packed_type(&t.dtype, q, cols).map_err(|e| Error::Unsupported(format!("tensor {name}: {e}")))?;
            return Ok(Stored::Plain(ty));
        };
        let bad = |m: String| Error::Model(format!("MLX-quantized {name}: {m}"));
        let (_, _, w) = self.st.get(name).ok_or_else(|| Error::Model(format!("missing tensor {name}")))?;
        let (_, _, b) = self
            .st
            .get(&format!("{stem}.biases"))
            .ok_or_else(|| bad(format!("{stem}.scales without {stem}.biases")))?;
        if w.dtype.name() != "U32" || w.shape.len() != 2 || w.shape[0] != rows as u64 {
            return Err(bad(format!("words {} {:?}, expected U32 with {rows} rows", w.dtype.name(), w.shape)));
        }
        let bits = (w.shape[1] * 32) as usize / cols.max(1);
        if !matches!(bits, 4 | 8) || w.shape[1] as usize * 32 != cols * bits {
            return Err(Error::Unsupported(format!(
                "MLX-quantized {name}: {} words a row for {cols} columns ({} bits; 4 and 8 bits run)",
                w.shape[1],
                w.shape[1] as usize * 32 / cols.max(1)
            )));
        }
        let groups = s.shape.get(1).copied().unwrap_or(0) as usize;
        if s.shape.len() != 2 || s.shape[0] != rows as u64 || groups == 0 || cols % groups != 0 || b.shape != s.shape {
            return Err(bad(format!("scales {:?} / biases {:?} for {rows} x {cols}", s.shape, b.shape)));
        }
        let group = cols / groups;
        if !group.is_multiple_of(32) || matches!(s.dtype, StDtype::Other { .. }) || b.dtype != s.dtype {
            return Err(Error::Unsupported(format!(
                "MLX-quantized {name}: groups of {group} with {} scales (multiples of 32, F32/F16/BF16 run)",
                s.dtype.name()
            )));
        }
        Ok(Stored::Mlx { bits, group })
    }

    /// An MLC-quantized matrix (`name` is its `q_weight`, `mlc::hf_name`): uint32 codes
    /// [rows, cols / 8] and float scales [rows, cols / 32], checked against the config's shape.
    fn stored_mlc(&self, name: &str, (rows, cols): (usize, usize)) -> Result<Stored> {
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        let (_, _, s) = self.st.get(&format!("{stem}.q_scale")).expect("looked up by the caller");
        let (_, _, w) =
            self.st.get(name).ok_or_else(|| Error::Model(format!("{stem}.q_scale without {stem}.q_weight")))?;
        if !cols.is_multiple_of(32) {
            return Err(Error::Unsupported(format!(
                "MLC-quantized {stem}: rows of {cols} values, not whole groups of 32"
            )));
        }
        let bad = |m: String| Error::Model(format!("MLC-quantized {stem}: {m}"));
        if w.dtype.name() != "U32" || w.shape != [rows as u64, cols as u64 / 8] {
            return Err(bad(format!("q_weight {} {:?}, expected U32 [{rows}, {}]", w.dtype.name(), w.shape, cols / 8)));
        }
        if matches!(s.dtype, StDtype::Other { .. }) || s.shape != [rows as u64, cols as u64 / 32] {
            return Err(bad(format!(
                "q_scale {} {:?}, expected float [{rows}, {}]",
                s.dtype.name(),
                s.shape,
                cols / 32
            )));
        }
        Ok(Stored::Mlc)
    }

    /// Bytes of `name` and its MLX scales and biases or MLC scales, if any.
    fn stored_bytes(&self, name: &str) -> u64 {
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        [name.to_string(), format!("{stem}.scales"), format!("{stem}.biases"), format!("{stem}.q_scale")]
            .iter()
            .filter_map(|n| self.st.get(n))
            .map(|(_, _, t)| t.n_bytes)
            .sum()
    }

    fn tensor(&self, name: &str, shape: &[usize]) -> Result<&crate::weights::safetensors::StTensor> {
        let (_, _, t) = self.st.get(name).ok_or_else(|| Error::Model(format!("missing tensor {name}")))?;
        if t.shape.len() != shape.len() || t.shape.iter().zip(shape).any(|(&a, &b)| a != b as u64) {
            return Err(Error::Model(format!("tensor {name} has shape {:?}, expected {shape:?}", t.shape)));
        }
        Ok(t)
    }

    /// A small tensor of `shape` as f32 values, row-major.
    async fn shaped(&self, name: &str, shape: &[usize], on_read: &mut dyn FnMut(u64)) -> Result<Vec<f32>> {
        self.tensor(name, shape)?;
        let mut v = self.st.read_f32_async(name, on_read).await?;
        if self.norms_plus_one && (name.ends_with("layernorm.weight") || name == self.norm_name()) {
            // Exact: v - 1 of a half-precision v needs at most 24 significant bits.
            v.iter_mut().for_each(|x| *x -= 1.0);
        }
        Ok(v)
    }

    /// The bytes of rows `r0..r0 + n` of tensor `t` (a quantized matrix's codes or its scales),
    /// with its dtype.
    async fn row_range(&self, t: &str, (r0, n): (usize, usize)) -> Result<(Vec<u8>, StDtype)> {
        let (src, _, info) = self.st.get(t).ok_or_else(|| Error::Model(format!("missing tensor {t}")))?;
        let row = info.n_bytes / info.shape[0].max(1);
        let raw = SafetensorsModel::read_range(src, info.offset + r0 as u64 * row, n as u64 * row, &mut |_| {}).await?;
        Ok((raw, info.dtype.clone()))
    }

    /// Rows `r0..r0 + n` of a `rows` x `cols` matrix stored as `how`, packed.
    async fn rows(
        &self,
        name: &str,
        (r0, n, cols): (usize, usize, usize),
        how: Stored,
        on_read: &mut dyn FnMut(u64),
    ) -> Result<Packed> {
        let ty = match how {
            Stored::Plain(ty) => ty,
            Stored::Mlx { bits, group } => {
                let stem = name.strip_suffix(".weight").unwrap_or(name);
                let (words, _) = self.row_range(name, (r0, n)).await?;
                let (s, sd) = self.row_range(&format!("{stem}.scales"), (r0, n)).await?;
                let (b, bd) = self.row_range(&format!("{stem}.biases"), (r0, n)).await?;
                on_read((words.len() + s.len() + b.len()) as u64);
                let f = |raw: &[u8], d: &StDtype| crate::weights::safetensors::to_f32(d, raw).expect("dtype checked");
                return Ok(pack_mlx(&words, &f(&s, &sd), &f(&b, &bd), (n, cols), bits, group));
            }
            Stored::Mlc => {
                let stem = name.strip_suffix(".weight").unwrap_or(name);
                let (words, _) = self.row_range(name, (r0, n)).await?;
                let (s, sd) = self.row_range(&format!("{stem}.q_scale"), (r0, n)).await?;
                on_read((words.len() + s.len()) as u64);
                let scales = crate::weights::safetensors::to_f32(&sd, &s).expect("dtype checked");
                return Ok(pack_mlc(&words, &scales, (n, cols)));
            }
        };
        let (src, _, t) = self.st.get(name).ok_or_else(|| Error::Model(format!("missing tensor {name}")))?;
        let row_bytes = t.n_bytes / t.shape[0].max(1);
        let raw =
            SafetensorsModel::read_range(src, t.offset + r0 as u64 * row_bytes, n as u64 * row_bytes, on_read).await?;
        if matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) {
            let x = crate::weights::safetensors::to_f32(&t.dtype, &raw).expect("dtype checked");
            pack::pack(ty, n, cols, &quantize_rows(name, ty, &x, (r0, cols))?)
        } else {
            pack::pack(ty, n, cols, &raw)
        }
    }

    /// Rows `r0..r0 + n` of `name` (`cols` wide in the file), each row zero-padded to `pcols`
    /// and zero rows appended up to `prows`, packed as stored or quantized.
    async fn padded(
        &self,
        name: &str,
        (r0, n, cols): (usize, usize, usize),
        (prows, pcols): (usize, usize),
        q: Quantize,
        on_read: &mut dyn FnMut(u64),
    ) -> Result<Packed> {
        if let Stored::Mlx { .. } | Stored::Mlc =
            self.stored(name, (n, cols), q).unwrap_or(Stored::Plain(GgmlType::F32))
        {
            return Err(Error::Unsupported(format!(
                "quantized {name}: an intermediate size that is not a multiple of 8 (the kernels would pad it)"
            )));
        }
        let (src, _, t) = self.st.get(name).ok_or_else(|| Error::Model(format!("missing tensor {name}")))?;
        let ty = packed_type(&t.dtype, q, pcols).map_err(|e| Error::Unsupported(format!("tensor {name}: {e}")))?;
        let row_bytes = t.n_bytes / t.shape[0].max(1);
        let raw =
            SafetensorsModel::read_range(src, t.offset + r0 as u64 * row_bytes, n as u64 * row_bytes, on_read).await?;
        if matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) {
            let x = crate::weights::safetensors::to_f32(&t.dtype, &raw).expect("dtype checked");
            let x = pad_rows(&x, cols, n, prows, pcols);
            pack::pack(ty, prows, pcols, &quantize_rows(name, ty, &x, (r0, pcols))?)
        } else {
            let es = (t.dtype.bits() / 8) as usize;
            pack::pack(ty, prows, pcols, &pad_rows(&raw, cols * es, n, prows, pcols * es))
        }
    }

    /// The tensors as the loader reads them (`load::TensorSource`), matrices packed as `q` asks.
    pub fn tensors(&self, q: Quantize) -> HfSource<'_, S> {
        HfSource { model: self, q }
    }
}

/// A folder's tensors (transformers' names; MLC's renamed) for the loader, with the
/// quantization asked for at load.
pub struct HfSource<'a, S> {
    model: &'a HfModel<S>,
    q: Quantize,
}

impl<S: AsyncSource> TensorSource for HfSource<'_, S> {
    fn names(&self) -> Names {
        Names::Hf(self.model.prefix)
    }

    fn positions(&self) -> Vec<(&str, (usize, u64))> {
        let shards = self.model.st.shards.iter().enumerate();
        shards.flat_map(|(s, (_, _, f))| f.tensors.iter().map(move |t| (t.name.as_str(), (s, t.offset)))).collect()
    }

    fn has(&self, name: &str) -> bool {
        self.model.has(name)
    }

    /// The intermediate size before padding (see `load::layer`).
    fn file_ffn(&self, _cfg: &ModelConfig) -> usize {
        self.model.hf.intermediate_size
    }

    fn head(&self, _cfg: &ModelConfig) -> Option<String> {
        self.model.head.map(str::to_string)
    }

    fn matrix(&self, name: &str, (rows, cols): (usize, usize), _streamed: bool) -> Result<MatrixInfo> {
        let m = self.model;
        let how = m.stored(name, (rows, cols), self.q)?;
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        let f16 = |t: String| m.st.get(&t).is_some_and(|s| s.2.dtype == StDtype::F16);
        // Quantizing at load gives Q8_0 / Q4_0, whose f16 block scales make f16 metadata exact;
        // so do MLX's 4-bit f16 scales and biases (8-bit offsets move by 128 scales: kept f32).
        // MLC's f16 scales keep f16 metadata too (`pack_mlc`).
        let meta16 = match how {
            Stored::Plain(_) => true,
            Stored::Mlc => f16(format!("{stem}.q_scale")),
            Stored::Mlx { bits, .. } => bits == 4 && f16(format!("{stem}.scales")),
        };
        let n_bytes = m.st.get(name).map_or(0, |t| t.2.n_bytes);
        Ok(MatrixInfo {
            layout: how.layout(),
            meta16,
            row_bytes: n_bytes / rows.max(1) as u64,
            bytes: m.stored_bytes(name),
        })
    }

    fn vector(&self, name: &str, shape: Shape) -> Result<u64> {
        let t = self.model.tensor(name, &shape_dims(shape))?;
        if matches!(t.dtype, StDtype::Other { .. }) {
            return Err(Error::Unsupported(format!(
                "tensor {name} has dtype {} (F32, F16 and BF16 are supported)",
                t.dtype.name()
            )));
        }
        Ok(t.n_bytes)
    }

    fn too_big(&self, buffer: &str, parts: &[(String, usize)], bytes: u64, limit: u64) -> Error {
        Error::Limits(format!(
            "{buffer} ({}) needs {} in one GPU buffer binding; the adapter allows {} \
             (maxStorageBufferBindingSize){}",
            parts.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(" + "),
            size_text(bytes),
            size_text(limit),
            if self.q == Quantize::None { "; quantize: 'q8_0' or 'q4_0' makes it smaller" } else { "" }
        ))
    }

    async fn rows(&self, r: Rows<'_>, on_read: &mut dyn FnMut(u64)) -> Result<Packed> {
        let (m, cols) = (self.model, r.shape.1);
        if r.padded() {
            m.padded(r.name, (r.first, r.n, cols), r.pad, self.q, on_read).await
        } else {
            m.rows(r.name, (r.first, r.n, cols), m.stored(r.name, r.shape, self.q)?, on_read).await
        }
    }

    async fn values(&self, name: &str, shape: Shape, on_read: &mut dyn FnMut(u64)) -> Result<Vec<f32>> {
        self.model.shaped(name, &shape_dims(shape), on_read).await
    }
}

/// The first `n` rows of a row-major matrix with `row_len` elements per row, each row
/// zero-padded to `padded_len`, and zero rows appended up to `rows`.
fn pad_rows<T: Copy + Default>(x: &[T], row_len: usize, n: usize, rows: usize, padded_len: usize) -> Vec<T> {
    let mut out = vec![T::default(); rows * padded_len];
    for r in 0..n {
        out[r * padded_len..r * padded_len + row_len].copy_from_slice(&x[r * row_len..(r + 1) * row_len]);
    }
    out
}

/// Where the text model's tensors are: `model.` for the *ForCausalLM classes;
/// `language_model.model.` (as transformers saves Gemma3ForConditionalGeneration, and as the
/// published Gemma 3 checkpoints are) or `model.language_model.` (its module names in
/// transformers 5) for the multimodal wrapper, whose vision tensors are then ignored.
fn text_prefix<S>(st: &SafetensorsModel<S>) -> Result<&'static str> {
    const PREFIXES: [&str; 5] = ["model.", "language_model.model.", "model.language_model.", "language_model.", ""];
    PREFIXES.into_iter().find(|p| st.get(&Names::Hf(p).global(tensor::EMBED)).is_some()).ok_or_else(|| {
        Error::Model("missing tensor model.embed_tokens.weight (no token embedding under any known prefix)".into())
    })
}

/// The LM head to load, as transformers ties it: an untied model's own head; a tied model whose
/// file also has a head ties only when the two hold the same values (else transformers keeps the
/// head and warns); no head in the file: the embedding (`HfModel::open` warns where the config
/// does not tie).
async fn head_tensor<S: AsyncSource>(
    st: &SafetensorsModel<S>,
    prefix: &'static str,
    tied: bool,
) -> Result<Option<&'static str>> {
    let Some(head) = ["lm_head.weight", "language_model.lm_head.weight"].into_iter().find(|n| st.get(n).is_some())
    else {
        return Ok(None);
    };
    if !tied {
        return Ok(Some(head));
    }
    let embed = Names::Hf(prefix).global(tensor::EMBED);
    let (Some((_, _, a)), Some((_, _, b))) = (st.get(head), st.get(&embed)) else { return Ok(Some(head)) };
    if a.dtype != b.dtype || a.shape != b.shape {
        return Ok(Some(head));
    }
    let same = st.read_bytes_async(head, &mut |_| {}).await? == st.read_bytes_async(&embed, &mut |_| {}).await?;
    Ok((!same).then_some(head))
}

/// Read a model folder's files from disk.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_dir_files(dir: &std::path::Path) -> Result<HfFiles> {
    let read = |name: &str| -> Result<Option<String>> {
        let p = dir.join(name);
        match std::fs::read_to_string(&p) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(p.display().to_string(), e)),
        }
    };
    let config = match read("config.json")? {
        Some(c) => c,
        None if dir.join(super::mlc::CHAT_CONFIG).is_file() => return super::mlc::read_dir_files(dir),
        None => {
            return Err(Error::Model(format!(
                "{}: no config.json (not a Hugging Face model folder) and no {} (not an MLC folder)",
                dir.display(),
                super::mlc::CHAT_CONFIG
            )))
        }
    };
    Ok(HfFiles {
        config,
        generation_config: read("generation_config.json")?,
        tokenizer: read("tokenizer.json")?,
        tokenizer_config: read("tokenizer_config.json")?,
        chat_template: read("chat_template.jinja")?,
        index: read(crate::weights::safetensors::INDEX_FILE)?.map(String::into_bytes),
        st: read_st_files(dir, &read)?,
        mlc: None,
    })
}

/// A folder's sentence-transformers files, if it has `modules.json`.
#[cfg(not(target_arch = "wasm32"))]
fn read_st_files(
    dir: &std::path::Path,
    read: &dyn Fn(&str) -> Result<Option<String>>,
) -> Result<Option<crate::embed::StFiles>> {
    let [modules, config, sbert] = crate::embed::ST_FILES;
    let Some(modules) = read(modules)? else { return Ok(None) };
    let mut module_files = Vec::new();
    for path in crate::embed::module_files(&modules)? {
        let p = dir.join(&path);
        let bytes = std::fs::read(&p).map_err(|e| Error::io(p.display().to_string(), e))?;
        module_files.push((path, bytes));
    }
    Ok(Some(crate::embed::StFiles { modules, config: read(config)?, sbert: read(sbert)?, module_files }))
}

/// Rows of `name` (from row `r0`, `width` values each) quantized to `ty` at load
/// (`--quantize`), refusing values that are not finite or too large for the type's f16 scale
/// with the tensor and position named: quantized, a NaN became finite junk.
fn quantize_rows(name: &str, ty: GgmlType, x: &[f32], (r0, width): (usize, usize)) -> Result<Vec<u8>> {
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        let (row, col) = (r0 + i / width.max(1), i % width.max(1));
        return Err(Error::Model(format!(
            "tensor {name}: the value at row {row}, column {col} is not finite ({})",
            x[i]
        )));
    }
    quant::quantize(ty, x)
        .map_err(|e| Error::Model(format!("tensor {name} (rows from {r0}, {width} wide) to {}: {e}", ty.name())))
}

//! Text embeddings: the transformer's final-norm hidden states (no LM head runs), pooled,
//! projected and normalized the way the model folder's sentence-transformers modules say
//! (`modules.json`: Transformer, Pooling, Dense, Normalize), or a GGUF's `pooling_type`, or
//! defaults for a plain model. Requests and responses have OpenAI's `embeddings.create` shape.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::forward::MAX_CONTEXT;
use crate::model::ModelConfig;
use crate::tokenizer::Tokenizer;
use crate::weights::safetensors::SafetensorsFile;
use crate::weights::MemSource;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The sentence-transformers files at a model folder's top level.
pub const ST_FILES: [&str; 3] = ["modules.json", "config_sentence_transformers.json", "sentence_bert_config.json"];

/// Most inputs one request may hold.
pub const MAX_INPUTS: usize = 2048;

/// Most bytes of text one request may hold (all inputs together).
pub const MAX_TEXT_BYTES: usize = 64 << 20;

/// A text is tokenized only up to this many bytes per token it may keep: enough for any real
/// vocabulary's longest tokens, so the tokens kept are those of the whole text, and a huge text
/// cut to a few hundred tokens is not tokenized in full first.
const BYTES_PER_TOKEN: usize = 64;

/// A model folder's sentence-transformers files, read by the caller (natively from disk, in the
/// browser by fetch): `module_files` holds what `module_files()` names, by relative path.
#[derive(Clone, Debug, Default)]
pub struct StFiles {
    pub modules: String,
    pub config: Option<String>,
    pub sbert: Option<String>,
    pub module_files: Vec<(String, Vec<u8>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    Cls,
    Max,
    Mean,
    MeanSqrtLen,
    WeightedMean,
    LastToken,
}

impl PoolMode {
    fn parse(s: &str) -> Result<PoolMode> {
        Ok(match s {
            "cls" => PoolMode::Cls,
            "max" => PoolMode::Max,
            "mean" => PoolMode::Mean,
            "mean_sqrt_len_tokens" => PoolMode::MeanSqrtLen,
            "weightedmean" => PoolMode::WeightedMean,
            "lasttoken" => PoolMode::LastToken,
            other => {
                return Err(Error::Unsupported(format!(
                    "pooling mode {other:?} (cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken)"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            PoolMode::Cls => "cls",
            PoolMode::Max => "max",
            PoolMode::Mean => "mean",
            PoolMode::MeanSqrtLen => "mean_sqrt_len_tokens",
            PoolMode::WeightedMean => "weightedmean",
            PoolMode::LastToken => "lasttoken",
        }
    }
}

/// Dense module activations (`torch.nn` class names).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Identity,
    Tanh,
    Relu,
    Gelu,
    Sigmoid,
    Silu,
}

impl Act {
    fn parse(name: &str) -> Result<Act> {
        Ok(match name.rsplit('.').next().unwrap_or(name) {
            "Identity" => Act::Identity,
            "Tanh" => Act::Tanh,
            "ReLU" => Act::Relu,
            "GELU" => Act::Gelu,
            "Sigmoid" => Act::Sigmoid,
            "SiLU" => Act::Silu,
            _ => {
                return Err(Error::Unsupported(format!(
                    "Dense activation {name:?} (Identity, Tanh, ReLU, GELU, Sigmoid, SiLU)"
                )))
            }
        })
    }

    fn apply(self, x: f32) -> f32 {
        match self {
            Act::Identity => x,
            Act::Tanh => x.tanh(),
            Act::Relu => x.max(0.0),
            Act::Gelu => 0.5 * x * (1.0 + erf(x as f64 / std::f64::consts::SQRT_2) as f32),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Silu => x / (1.0 + (-x).exp()),
        }
    }
}

/// erf in f64: its Maclaurin series below 2, the erfc continued fraction above.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.0 {
        // Maclaurin series: converges fast below 2 (40 terms reach 1e-16).
        let (mut term, mut sum, x2) = (a, a, a * a);
        for n in 1..60 {
            term *= -x2 / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction (Lentz), accurate past 2.
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    };
    r.copysign(x)
}

/// A sentence-transformers Dense module: y = act(W x + b) (+ x, or + R x, with `use_residual`).
#[derive(Clone, Debug)]
pub struct Dense {
    pub in_features: usize,
    pub out_features: usize,
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    act: Act,
    residual: Option<Option<Vec<f32>>>,
}

fn matvec(w: &[f32], x: &[f32], out: usize) -> Vec<f32> {
    let k = x.len();
    (0..out)
        .map(|r| w[r * k..(r + 1) * k].iter().zip(x).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>() as f32)
        .collect()
}

impl Dense {
    fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut y = matvec(&self.weight, x, self.out_features);
        if let Some(b) = &self.bias {
            y.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
        y.iter_mut().for_each(|v| *v = self.act.apply(*v));
        match &self.residual {
            None => {}
            Some(None) => y.iter_mut().zip(x).for_each(|(v, x)| *v += x),
            Some(Some(r)) => y.iter_mut().zip(matvec(r, x, self.out_features)).for_each(|(v, r)| *v += r),
        }
        y
    }
}

/// What turns hidden states into one embedding.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// Modes whose results are concatenated, in order.
    pub pooling: Vec<PoolMode>,
    /// `false`: tokens of the prompt (instruction) are left out of the pooling.
    pub include_prompt: bool,
    pub dense: Vec<Dense>,
    pub normalize: bool,
    /// Named prompts (instruction prefixes) and the one used when a request names none.
    pub prompts: BTreeMap<String, String>,
    pub default_prompt_name: Option<String>,
    /// Longer inputs are truncated to this many tokens (special tokens kept).
    pub max_seq_length: Option<usize>,
    /// Where the pipeline came from: "sentence-transformers", "gguf" or "default".
    pub source: &'static str,
}

fn parse<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::Model(format!("{what}: {e}")))
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    ty: String,
}

/// The module kinds ferrolm runs, by the last segment of their class path (sentence-transformers
/// moved them between releases: `sentence_transformers.models.Pooling`,
/// `sentence_transformers.sentence_transformer.modules.pooling.Pooling`, ...).
fn module_kind(ty: &str) -> &str {
    ty.rsplit('.').next().unwrap_or(ty)
}

fn modules(modules_json: &str) -> Result<Vec<ModuleEntry>> {
    let list: Vec<ModuleEntry> = parse(modules_json, "modules.json")?;
    if list.len() > 32 {
        return Err(Error::Model(format!("modules.json lists {} modules", list.len())));
    }
    for m in &list {
        if m.path.contains("..") || m.path.starts_with('/') || m.path.contains('\\') {
            return Err(Error::Model(format!("modules.json: module path {:?} leaves the folder", m.path)));
        }
    }
    Ok(list)
}

/// The files inside module folders a pipeline needs (pooling and dense configs, dense weights),
/// as paths relative to the model folder.
pub fn module_files(modules_json: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for m in modules(modules_json)? {
        match module_kind(&m.ty) {
            "Pooling" => out.push(format!("{}/config.json", m.path)),
            "Dense" => {
                out.push(format!("{}/config.json", m.path));
                out.push(format!("{}/model.safetensors", m.path));
            }
            _ => {}
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default, alias = "word_embedding_dimension")]
    embedding_dimension: Option<usize>,
    #[serde(default)]
    pooling_mode: Option<Value>,
    #[serde(default = "yes")]
    include_prompt: bool,
    #[serde(flatten)]
    legacy: BTreeMap<String, Value>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    #[serde(default)]
    activation_function: Option<String>,
    #[serde(default)]
    use_residual: bool,
}

#[derive(Deserialize, Default)]
struct StConfig {
    #[serde(default)]
    prompts: BTreeMap<String, String>,
    #[serde(default)]
    default_prompt_name: Option<String>,
}

#[derive(Deserialize, Default)]
struct SbertConfig {
    #[serde(default)]
    max_seq_length: Option<usize>,
}

impl Pipeline {
    /// The defaults for a model without sentence-transformers files: last-token pooling for a
    /// causal model (its last token has seen the whole text), mean pooling for a bidirectional
    /// one; normalized.
    pub fn default_for(causal: bool) -> Pipeline {
        Pipeline {
            pooling: vec![if causal { PoolMode::LastToken } else { PoolMode::Mean }],
            include_prompt: true,
            dense: Vec::new(),
            normalize: true,
            prompts: BTreeMap::new(),
            default_prompt_name: None,
            max_seq_length: None,
            source: "default",
        }
    }

    /// From a GGUF's `<arch>.pooling_type` (llama.cpp: 1 mean, 2 cls, 3 last), normalized as
    /// llama.cpp's embedding tool does by default.
    pub fn from_gguf_pooling(kind: u64, causal: bool) -> Result<Pipeline> {
        let mode = match kind {
            0 => return Ok(Pipeline::default_for(causal)),
            1 => PoolMode::Mean,
            2 => PoolMode::Cls,
            3 => PoolMode::LastToken,
            other => return Err(Error::Unsupported(format!("GGUF pooling_type {other} (1 mean, 2 cls, 3 last)"))),
        };
        Ok(Pipeline { pooling: vec![mode], source: "gguf", ..Pipeline::default_for(causal) })
    }

    /// From a model folder's sentence-transformers files, for a transformer of `hidden` outputs.
    pub fn from_st(files: &StFiles, hidden: usize) -> Result<Pipeline> {
        let file = |path: &str| -> Result<&[u8]> {
            files
                .module_files
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, b)| &b[..])
                .ok_or_else(|| Error::Model(format!("sentence-transformers module file {path} is missing")))
        };
        let text = |path: &str| -> Result<String> {
            String::from_utf8(file(path)?.to_vec()).map_err(|_| Error::Model(format!("{path} is not UTF-8")))
        };
        let mut p = Pipeline {
            pooling: Vec::new(),
            normalize: false,
            source: "sentence-transformers",
            ..Self::default_for(true)
        };
        let mut width = hidden;
        let mut seen_transformer = false;
        for m in modules(&files.modules)? {
            let kind = module_kind(&m.ty);
            let late = |what: &str| Error::Unsupported(format!("modules.json: {what} after the Pooling module"));
            match kind {
                "Transformer" => {
                    if !m.path.is_empty() {
                        return Err(Error::Unsupported(format!(
                            "modules.json: the transformer is in the sub-folder {:?}; load that folder",
                            m.path
                        )));
                    }
                    seen_transformer = true;
                }
                "Pooling" => {
                    if !seen_transformer || !p.pooling.is_empty() {
                        return Err(Error::Unsupported(
                            "modules.json: one Pooling module after the Transformer".into(),
                        ));
                    }
                    let path = format!("{}/config.json", m.path);
                    let c: PoolingConfig = parse(&text(&path)?, &path)?;
                    if let Some(d) = c.embedding_dimension.filter(|&d| d != hidden) {
                        return Err(Error::Model(format!(
                            "{path}: embedding_dimension {d}, the model's hidden size is {hidden}"
                        )));
                    }
                    p.pooling = match c.pooling_mode {
                        Some(Value::String(s)) => vec![PoolMode::parse(&s)?],
                        Some(Value::Array(a)) => a
                            .iter()
                            .map(|v| {
                                v.as_str()
                                    .ok_or_else(|| Error::Model(format!("{path}: pooling_mode entries are strings")))
                                    .and_then(PoolMode::parse)
                            })
                            .collect::<Result<_>>()?,
                        Some(other) => return Err(Error::Model(format!("{path}: pooling_mode {other}"))),
                        None => {
                            // Before sentence-transformers 6: one boolean key per mode.
                            let legacy = [
                                ("pooling_mode_cls_token", PoolMode::Cls),
                                ("pooling_mode_max_tokens", PoolMode::Max),
                                ("pooling_mode_mean_tokens", PoolMode::Mean),
                                ("pooling_mode_mean_sqrt_len_tokens", PoolMode::MeanSqrtLen),
                                ("pooling_mode_weightedmean_tokens", PoolMode::WeightedMean),
                                ("pooling_mode_lasttoken", PoolMode::LastToken),
                            ];
                            let on: Vec<PoolMode> = legacy
                                .iter()
                                .filter(|(k, _)| c.legacy.get(*k).and_then(Value::as_bool) == Some(true))
                                .map(|(_, m)| *m)
                                .collect();
                            if on.is_empty() {
                                vec![PoolMode::Mean]
                            } else {
                                on
                            }
                        }
                    };
                    if p.pooling.is_empty() || p.pooling.len() > 6 {
                        return Err(Error::Model(format!("{path}: {} pooling modes", p.pooling.len())));
                    }
                    p.include_prompt = c.include_prompt;
                    width = hidden * p.pooling.len();
                }
                "Dense" => {
                    if p.pooling.is_empty() {
                        return Err(Error::Unsupported(
                            "modules.json: a Dense module before the Pooling module".into(),
                        ));
                    }
                    if p.normalize {
                        return Err(late("a Dense module after Normalize"));
                    }
                    let path = format!("{}/config.json", m.path);
                    let c: DenseConfig = parse(&text(&path)?, &path)?;
                    if c.in_features != width || c.out_features == 0 || c.out_features > 1 << 16 {
                        return Err(Error::Model(format!(
                            "{path}: {} -> {} features after {width}",
                            c.in_features, c.out_features
                        )));
                    }
                    let wpath = format!("{}/model.safetensors", m.path);
                    let src = MemSource::new(file(&wpath)?.to_vec(), wpath.clone());
                    let st = SafetensorsFile::read(&src).map_err(|e| Error::Model(format!("{wpath}: {e}")))?;
                    let tensor = |name: &str, shape: &[u64]| -> Result<Vec<f32>> {
                        let t = st.tensor(name).ok_or_else(|| Error::Model(format!("{wpath}: no tensor {name}")))?;
                        if t.shape != shape {
                            return Err(Error::Model(format!(
                                "{wpath}: {name} has shape {:?}, expected {shape:?}",
                                t.shape
                            )));
                        }
                        crate::model::load::finite(&format!("{wpath}: {name}"), st.read_tensor_f32(&src, t)?)
                    };
                    let (i, o) = (c.in_features as u64, c.out_features as u64);
                    let residual = match (c.use_residual, i == o) {
                        (false, _) => None,
                        (true, true) => Some(None),
                        (true, false) => Some(Some(tensor("residual.weight", &[o, i])?)),
                    };
                    p.dense.push(Dense {
                        in_features: c.in_features,
                        out_features: c.out_features,
                        weight: tensor("linear.weight", &[o, i])?,
                        bias: if c.bias { Some(tensor("linear.bias", &[o])?) } else { None },
                        act: Act::parse(
                            c.activation_function.as_deref().unwrap_or("torch.nn.modules.activation.Tanh"),
                        )?,
                        residual,
                    });
                    width = c.out_features;
                }
                "Normalize" => {
                    if p.pooling.is_empty() {
                        return Err(Error::Unsupported("modules.json: Normalize before the Pooling module".into()));
                    }
                    p.normalize = true;
                }
                other => {
                    return Err(Error::Unsupported(format!(
                        "sentence-transformers module {other} (Transformer, Pooling, Dense and Normalize run)"
                    )))
                }
            }
        }
        if p.pooling.is_empty() {
            return Err(Error::Unsupported("modules.json has no Pooling module".into()));
        }
        if let Some(c) = &files.config {
            let c: StConfig = parse(c, "config_sentence_transformers.json")?;
            if let Some(name) = c.default_prompt_name.as_ref().filter(|n| !c.prompts.contains_key(*n)) {
                return Err(Error::Model(format!(
                    "config_sentence_transformers.json: default_prompt_name {name:?} is not one of the prompts"
                )));
            }
            (p.prompts, p.default_prompt_name) = (c.prompts, c.default_prompt_name);
        }
        if let Some(c) = &files.sbert {
            p.max_seq_length = parse::<SbertConfig>(c, "sentence_bert_config.json")?.max_seq_length;
        }
        Ok(p)
    }

    /// A GGUF's pipeline: `<arch>.pooling_type` if the file has it, else the defaults; inputs up to
    /// the training context.
    pub fn from_gguf(g: &crate::weights::gguf::GgufFile, cfg: &ModelConfig) -> Result<Pipeline> {
        let key = format!("{}.pooling_type", cfg.arch);
        let mut p = match g.get_u64(&key)? {
            Some(kind) => Pipeline::from_gguf_pooling(kind, cfg.causal)?,
            None => Pipeline::default_for(cfg.causal),
        };
        p.max_seq_length = Some(cfg.context_train.min(MAX_CONTEXT));
        Ok(p)
    }

    /// A model folder's pipeline: its sentence-transformers modules, else the defaults. Inputs
    /// are cut at `sentence_bert_config.json`'s max_seq_length, else at tokenizer_config.json's
    /// model_max_length capped by the model's positions (as sentence-transformers does).
    pub fn from_hf(files: &crate::model::hf::HfFiles, cfg: &ModelConfig) -> Result<Pipeline> {
        let mut p = match &files.st {
            Some(st) => Pipeline::from_st(st, cfg.hidden)?,
            None => Pipeline::default_for(cfg.causal),
        };
        let tokenizer_max = files
            .tokenizer_config
            .as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .and_then(|v| v.get("model_max_length")?.as_f64())
            .filter(|m| (1.0..1e12).contains(m))
            .map(|m| m as usize);
        let max = p.max_seq_length.unwrap_or(tokenizer_max.map_or(cfg.context_train, |t| t.min(cfg.context_train)));
        p.max_seq_length = Some(max.clamp(1, MAX_CONTEXT));
        Ok(p)
    }

    /// What `Engine::info` reports.
    pub fn info(&self, hidden: usize) -> Value {
        json!({
            "dimensions": self.dimensions(hidden),
            "pooling": self.pooling.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "includePrompt": self.include_prompt,
            "dense": self.dense.iter().map(|d| [d.in_features, d.out_features]).collect::<Vec<_>>(),
            "normalize": self.normalize,
            "prompts": self.prompts,
            "defaultPromptName": self.default_prompt_name,
            "maxSeqLength": self.max_seq_length,
            "source": self.source,
        })
    }

    /// EmbeddingGemma's Dense layers as llama.cpp writes them (`dense_2.weight`,
    /// `dense_3.weight`: in x out, no bias, identity), read from the file after its header.
    pub async fn load_gguf_dense(
        &mut self,
        g: &crate::weights::gguf::GgufFile,
        src: &dyn crate::weights::AsyncSource,
        hidden: usize,
    ) -> Result<()> {
        let mut width = hidden * self.pooling.len();
        for name in ["dense_2.weight", "dense_3.weight"] {
            let Some(t) = g.tensor(name) else { break };
            let (i, o) = (t.dims[0] as usize, t.dims.get(1).copied().unwrap_or(1) as usize);
            if t.dims.len() != 2 || i != width || o == 0 || o > 1 << 16 {
                return Err(Error::Model(format!("{}: {name} has dims {:?} after {width} features", g.name, t.dims)));
            }
            let raw = src.read(t.offset, t.n_bytes as usize).await?;
            if raw.len() as u64 != t.n_bytes {
                return Err(Error::Model(format!("{}: short read of {name}", g.name)));
            }
            let mut weight = vec![0f32; i * o];
            crate::weights::quant::dequantize(t.ty, &raw, &mut weight)?;
            // A NaN weight would make every embedding NaN (printed as null).
            let weight = crate::model::load::finite(&format!("{}: {name}", g.name), weight)?;
            self.dense.push(Dense {
                in_features: i,
                out_features: o,
                weight,
                bias: None,
                act: Act::Identity,
                residual: None,
            });
            width = o;
        }
        Ok(())
    }

    /// Length of the embeddings for a transformer of `hidden` outputs.
    pub fn dimensions(&self, hidden: usize) -> usize {
        self.dense.last().map_or(hidden * self.pooling.len(), |d| d.out_features)
    }

    /// One embedding from `states` (`[token][h]`), leaving out the first `skip` tokens (the
    /// prompt, when `include_prompt` is false) as sentence-transformers' padded pooling does.
    /// The last token always stays: where sentence-transformers pools nothing (a one-token text
    /// merged into the prompt's last token) and returns NaN, this pools that token.
    pub fn apply(&self, states: &[f32], h: usize, skip: usize) -> Vec<f32> {
        let n = states.len() / h;
        let skip = skip.min(n.saturating_sub(1));
        let keep = |i: usize| self.include_prompt || i >= skip;
        let row = |i: usize| &states[i * h..(i + 1) * h];
        let kept: Vec<usize> = (0..n).filter(|&i| keep(i)).collect();
        let mut out = Vec::with_capacity(h * self.pooling.len());
        for mode in &self.pooling {
            let mut v = vec![0f64; h];
            match mode {
                PoolMode::Cls => v = row(kept.first().copied().unwrap_or(0)).iter().map(|&x| x as f64).collect(),
                PoolMode::LastToken => {
                    if let Some(&i) = kept.last() {
                        v = row(i).iter().map(|&x| x as f64).collect();
                    }
                }
                PoolMode::Max => {
                    v = vec![f64::NEG_INFINITY; h];
                    for &i in &kept {
                        v.iter_mut().zip(row(i)).for_each(|(a, &x)| *a = a.max(x as f64));
                    }
                }
                PoolMode::Mean | PoolMode::MeanSqrtLen | PoolMode::WeightedMean => {
                    let mut total = 0f64;
                    for &i in &kept {
                        let w = if *mode == PoolMode::WeightedMean { (i + 1) as f64 } else { 1.0 };
                        total += w;
                        v.iter_mut().zip(row(i)).for_each(|(a, &x)| *a += w * x as f64);
                    }
                    let d = total.max(1e-9);
                    let d = if *mode == PoolMode::MeanSqrtLen { d.sqrt() } else { d };
                    v.iter_mut().for_each(|a| *a /= d);
                }
            }
            out.extend(v.iter().map(|&x| x as f32));
        }
        for d in &self.dense {
            out = d.apply(&out);
        }
        if self.normalize {
            l2_normalize(&mut out);
        }
        out
    }
}

/// x / max(|x|, 1e-12), as torch.nn.functional.normalize.
pub fn l2_normalize(v: &mut [f32]) {
    let n = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x = (*x as f64 / n) as f32);
}

/// An embeddings request in OpenAI's shape, plus ferrolm's `prompt_name` / `prompt`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedRequest {
    pub input: EmbedInput,
    pub model: Option<String>,
    /// Keep the first this many dimensions (Matryoshka truncation), re-normalized when the
    /// model normalizes.
    pub dimensions: Option<usize>,
    /// "float" (default) or "base64" (little-endian float32 bytes).
    pub encoding_format: Option<String>,
    pub user: Option<String>,
    /// ferrolm: a named prompt of the model (`config_sentence_transformers.json`), e.g. "query".
    pub prompt_name: Option<String>,
    /// ferrolm: a prompt (instruction prefix) put before every input; wins over `prompt_name`.
    pub prompt: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum EmbedInput {
    One(String),
    Many(Vec<String>),
    Ids(Vec<u32>),
    ManyIds(Vec<Vec<u32>>),
}

/// One input, ready to run.
pub enum Input<'a> {
    Text(&'a str),
    Ids(&'a [u32]),
}

impl EmbedRequest {
    /// Parse a request; an unknown field or a wrong type is an `InvalidOption` naming it.
    pub fn from_json(text: &str) -> Result<EmbedRequest> {
        serde_json::from_str(text).map_err(|e| Error::InvalidOption(format!("embeddings.create: {e}")))
    }

    pub fn texts(texts: Vec<String>) -> EmbedRequest {
        EmbedRequest {
            input: EmbedInput::Many(texts),
            model: None,
            dimensions: None,
            encoding_format: None,
            user: None,
            prompt_name: None,
            prompt: None,
        }
    }

    /// The inputs, checked: at least one, at most `MAX_INPUTS`.
    pub fn inputs(&self) -> Result<Vec<Input<'_>>> {
        let list: Vec<Input> = match &self.input {
            EmbedInput::One(s) => vec![Input::Text(s)],
            EmbedInput::Many(v) => v.iter().map(|s| Input::Text(s)).collect(),
            EmbedInput::Ids(ids) => vec![Input::Ids(ids)],
            EmbedInput::ManyIds(v) => v.iter().map(|i| Input::Ids(i)).collect(),
        };
        let ids = matches!(self.input, EmbedInput::Ids(_) | EmbedInput::ManyIds(_));
        if ids && (self.prompt.is_some() || self.prompt_name.is_some()) {
            return Err(Error::InvalidOption(
                "embeddings.create: prompt and prompt_name go before texts; token ids are embedded as given".into(),
            ));
        }
        if list.is_empty() || list.len() > MAX_INPUTS {
            return Err(Error::InvalidOption(format!(
                "embeddings.create: input holds {} items (1 to {MAX_INPUTS})",
                list.len()
            )));
        }
        let bytes: usize = list.iter().map(|i| if let Input::Text(t) = i { t.len() } else { 0 }).sum();
        if bytes > MAX_TEXT_BYTES {
            return Err(Error::InvalidOption(format!(
                "embeddings.create: {bytes} bytes of text (at most {MAX_TEXT_BYTES} a request)"
            )));
        }
        Ok(list)
    }

    /// The prompt put before each text input.
    pub fn prompt_text<'a>(&'a self, p: &'a Pipeline) -> Result<&'a str> {
        if let Some(t) = &self.prompt {
            return Ok(t);
        }
        match self.prompt_name.as_ref().or(p.default_prompt_name.as_ref()) {
            None => Ok(""),
            Some(name) => p.prompts.get(name).map(String::as_str).ok_or_else(|| {
                let names: Vec<&str> = p.prompts.keys().map(String::as_str).collect();
                Error::InvalidOption(format!(
                    "embeddings.create: prompt_name {name:?} is not one of the model's prompts {names:?}"
                ))
            }),
        }
    }

    /// Check the options that do not depend on the inputs.
    pub fn validate(&self, dims: usize) -> Result<()> {
        if let Some(d) = self.dimensions {
            if d == 0 || d > dims {
                return Err(Error::InvalidOption(format!("embeddings.create: dimensions {d} (1 to {dims})")));
            }
        }
        match self.encoding_format.as_deref() {
            None | Some("float") | Some("base64") => Ok(()),
            Some(other) => {
                Err(Error::InvalidOption(format!("embeddings.create: encoding_format {other:?} (float or base64)")))
            }
        }
    }

    /// The final vector: truncated to `dimensions` (and re-normalized when `normalized`).
    pub fn finish(&self, mut v: Vec<f32>, normalized: bool) -> Vec<f32> {
        if let Some(d) = self.dimensions {
            v.truncate(d);
            if normalized {
                l2_normalize(&mut v);
            }
        }
        v
    }

    /// The response in OpenAI's shape.
    pub fn response(&self, vectors: &[Vec<f32>], model: &str, tokens: usize) -> Value {
        let as_base64 = self.encoding_format.as_deref() == Some("base64");
        let data: Vec<Value> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let embedding = if as_base64 {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    Value::String(crate::base64::encode(&bytes))
                } else {
                    json!(v)
                };
                json!({"object": "embedding", "index": i, "embedding": embedding})
            })
            .collect();
        json!({
            "object": "list",
            "data": data,
            "model": self.model.clone().unwrap_or_else(|| model.to_string()),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })
    }
}

/// Tokens of `prompt` that pooling leaves out when `include_prompt` is false: the prompt
/// tokenized alone with special tokens, less a special token at its end (sentence-transformers'
/// `_get_prompt_length`).
fn prompt_length(tok: &Tokenizer, prompt: &str, max_len: usize) -> Result<usize> {
    let ids = tok.encode_wrapped(prompt, max_len)?;
    Ok(ids.len() - ids.last().is_some_and(|&l| tok.is_special(l)) as usize)
}

impl Engine {
    /// Embeddings of `req`'s inputs in OpenAI's response shape. Each input runs alone through
    /// the model from position 0 (the prefix cache is dropped); texts get the prompt in front,
    /// the tokenizer's special tokens around, and are cut at the pipeline's max_seq_length.
    pub async fn embed(&mut self, req: &EmbedRequest) -> Result<Value> {
        let p = self.embedding.clone();
        let hidden = self.rt.cfg.hidden;
        req.validate(p.dimensions(hidden))?;
        let inputs = req.inputs()?;
        let prompt = req.prompt_text(&p)?;
        let max_len = p.max_seq_length.unwrap_or(MAX_CONTEXT);
        let skip = match (&inputs[0], p.include_prompt || prompt.is_empty()) {
            (Input::Text(_), false) => prompt_length(self.tokenizer()?, prompt, max_len)?,
            _ => 0,
        };
        let (mut vectors, mut tokens) = (Vec::with_capacity(inputs.len()), 0);
        for (i, input) in inputs.iter().enumerate() {
            let (ids, skip) = match input {
                Input::Text(t) => {
                    let mut text = format!("{prompt}{t}");
                    let cap = max_len.saturating_mul(BYTES_PER_TOKEN);
                    if text.len() > cap {
                        let cut = (0..=cap).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
                        text.truncate(cut);
                    }
                    (self.tokenizer()?.encode_wrapped(&text, max_len)?, skip)
                }
                // Texts are cut to the pipeline's length; ids the caller chose are not cut.
                Input::Ids(ids) if ids.len() > max_len => {
                    return Err(Error::InvalidOption(format!(
                        "embeddings.create: input {i} has {} token ids, more than the {max_len} this model embeds",
                        ids.len()
                    )));
                }
                Input::Ids(ids) => (ids.to_vec(), 0),
            };
            if ids.is_empty() {
                return Err(Error::InvalidOption(format!("embeddings.create: input {i} has no tokens")));
            }
            self.fit_context(ids.len())?;
            self.kv_tokens.clear();
            let states = self.rt.hidden_states(&ids).await?;
            tokens += ids.len();
            vectors.push(req.finish(p.apply(&states, hidden, skip), p.normalize));
        }
        Ok(req.response(&vectors, &self.source_name, tokens))
    }

    /// Make room for an input of `n` tokens run from position 0: a default-sized context grows
    /// (to a power of two), a fixed one is a limit.
    fn fit_context(&mut self, n: usize) -> Result<()> {
        if n > self.rt.context && !self.rt.context_fixed && n <= MAX_CONTEXT {
            self.rt.grow_context(n.next_power_of_two().min(MAX_CONTEXT))?;
        }
        if n > self.rt.context {
            return Err(Error::ContextOverflow { tokens: n, max_new: 0, context: self.rt.context });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.5, 0.999_593_047_982_555),
            (-1.5, -0.9661051464753108),
        ] {
            assert!((erf(x) - want).abs() < 1e-13, "erf({x}) = {} want {want}", erf(x));
        }
    }

    #[test]
    fn pooling_modes_on_a_small_example() {
        let states = [1.0, 2.0, 3.0, -4.0, 5.0, 0.0];
        let mut p = Pipeline::default_for(true);
        p.normalize = false;
        p.pooling = vec![PoolMode::Mean, PoolMode::Max, PoolMode::Cls, PoolMode::LastToken, PoolMode::WeightedMean];
        let v = p.apply(&states, 2, 0);
        let w = [(1.0 + 6.0 + 15.0) / 6.0, (2.0 - 8.0) / 6.0];
        assert_eq!(&v[..6], &[3.0, -2.0 / 3.0, 5.0, 2.0, 1.0, 2.0]);
        assert_eq!(&v[6..8], &[5.0, 0.0]);
        assert!((v[8] - w[0] as f32).abs() < 1e-6 && (v[9] - w[1] as f32).abs() < 1e-6);
        p.include_prompt = false;
        p.pooling = vec![PoolMode::Mean];
        assert_eq!(p.apply(&states, 2, 1), vec![4.0, -2.0]);
    }
}

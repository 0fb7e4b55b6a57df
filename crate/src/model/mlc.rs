//! MLC-LLM model folders, the format WebLLM and MLC-LLM run: `mlc-chat-config.json`, a tensor
//! cache (`tensor-cache.json`; `ndarray-cache.json` before MLC-LLM's rename of September 2025,
//! and in the folders published before it) listing the tensors of its `params_shard_*.bin` files,
//! and `tokenizer.json` (+ `tokenizer_config.json` when the source model had one).
//!
//! Such a folder loads through the Hugging Face loader (`hf.rs`): `mlc-chat-config.json`'s
//! `model_config` becomes a config.json, and the tensor cache becomes the tensor index the
//! safetensors shards would have given, under the names the HF loader looks for (MLC's fused
//! `qkv_proj` / `c_attn` and `gate_up_proj` are the fused tensors it already reads for Phi-3).
//! MLC's group-quantized `<name>.q_weight` (uint32 [out, in / 8]) is indexed as `<name>.weight`
//! beside its `<name>.q_scale`; `hf.rs` repacks it into the 4-bit GPU layout (`pack_mlc`).
//!
//! Format facts, from MLC-LLM's and TVM's sources (mlc-ai/mlc-llm 79d603f, apache/tvm 5d4dc87):
//! - `python/tvm/contrib/tvmjs.py` `dump_tensor_cache`: `{"metadata", "records": [shard]}`, a
//!   shard `{"dataPath", "format": "raw-shard", "nbytes", "records": [{"name", "shape", "dtype",
//!   "format", "nbytes", "byteOffset"}]}`. MLC writes with `encode_format="f32-to-bf16"`: every
//!   record says "f32-to-bf16", and float32 tensors (q4f32_1's scales, q0f32's weights) are
//!   stored as bfloat16 (round to nearest even); other dtypes are raw. Little-endian.
//! - `python/mlc_llm/quantization/quantization.py`: q4f16_1 / q4bf16_1 / q4f32_1 are
//!   `GroupQuantize` with group 32, int4 in uint32, "NK" layout, embedding and LM head quantized;
//!   q4f16_2 the same with embedding and LM head left as floats; q0f16 / q0bf16 / q0f32 none.
//!   q4f16_0 (weights stored transposed, "KN"), the 3-bit, AWQ, FasterTransformer and float8
//!   kinds are refused by name.
//! - `group_quantization.py`: element i of a row in bits 4 (i % 8) of word i / 8; w = (q - 7) *
//!   scale, one scale per 32 elements.
//! - `python/mlc_llm/model/*/`: parameter names (Phi-3's `transformer.h.{i}.mixer.*`, Qwen's
//!   `c_attn`), the config fields (`position_embedding_base` for rope_theta, `context_window_size`
//!   for max_position_embeddings), and Gemma's loaders, which store norm weights plus one.

use super::family;
use super::hf::HfFiles;
use crate::error::{Error, Result};
use crate::weights::safetensors::{SafetensorsFile, SafetensorsModel, StDtype, StTensor};
use crate::weights::AsyncSource;
use serde_json::{json, Map, Value};

pub const CHAT_CONFIG: &str = "mlc-chat-config.json";
/// The tensor cache's names, the current one first.
pub const TENSOR_CACHE_FILES: [&str; 2] = ["tensor-cache.json", "ndarray-cache.json"];

/// The quantizations read: `GroupQuantize` 4-bit "NK" ones and the unquantized ones.
pub const QUANTIZATIONS: [&str; 7] = ["q4f16_1", "q4bf16_1", "q4f32_1", "q4f16_2", "q0f16", "q0bf16", "q0f32"];

/// What is wrong in a tensor cache or its shards.
#[derive(Debug, thiserror::Error)]
pub enum MlcError {
    #[error("{file}: {msg}")]
    BadCache { file: String, msg: String },
    #[error("{file}: shard dataPath {path:?} is not a plain file name")]
    BadShardName { file: String, path: String },
    #[error("{file}: tensor {tensor:?}: {msg}")]
    BadRecord { file: String, tensor: String, msg: String },
    #[error("{file}: tensor {tensor:?} has dtype {dtype:?}, which is not a TVM dtype ferrolm knows")]
    UnknownDtype { file: String, tensor: String, dtype: String },
    #[error("{file}: tensor {tensor:?} at bytes [{begin}, {end}) lies outside {shard} ({size} bytes)")]
    OutOfRange { file: String, tensor: String, shard: String, begin: u64, end: u64, size: u64 },
    #[error("{file}: tensors {a:?} and {b:?} overlap in {shard}")]
    Overlap { file: String, shard: String, a: String, b: String },
    #[error("{file}: tensor {tensor:?} is listed twice")]
    Duplicate { file: String, tensor: String },
    #[error("{shard} has {actual} bytes, {file} says {expected}{}", if actual < expected { " (truncated)" } else { "" })]
    ShardSize { file: String, shard: String, expected: u64, actual: u64 },
}

/// The weight side of an MLC folder, carried in `HfFiles::mlc`.
#[derive(Clone, Debug)]
pub struct MlcWeights {
    /// `tensor-cache.json` or `ndarray-cache.json`, as read.
    pub cache: Vec<u8>,
    /// Which of the two it was, for messages.
    pub cache_name: String,
    /// MLC's `model_type` (a family with `mlc` renames in `family::FAMILIES`).
    pub model_type: String,
}

impl MlcWeights {
    /// Gemma's MLC loaders store its (1 + w) norm weights as w + 1 (`add_one` in
    /// gemma_loader.py / gemma2_loader.py); the HF loader wants w back.
    pub fn norms_plus_one(&self) -> bool {
        family::by_mlc(&self.model_type).is_some_and(|f| f.gemma)
    }
}

fn cfg_err(msg: String) -> Error {
    Error::Model(format!("{CHAT_CONFIG}: {msg}"))
}

/// The text files of an MLC folder as the HF loader takes them: config.json and
/// generation_config.json made from `mlc-chat-config.json`, the tokenizer files as they are.
/// Refuses model types and quantizations ferrolm cannot read before any weight is opened.
pub fn hf_files(
    chat_config: &str,
    cache: Vec<u8>,
    cache_name: &str,
    tokenizer: Option<String>,
    tokenizer_config: Option<String>,
) -> Result<HfFiles> {
    let v: Value = serde_json::from_str(chat_config).map_err(|e| cfg_err(format!("not valid JSON: {e}")))?;
    let top = v.as_object().ok_or_else(|| cfg_err("must be a JSON object".into()))?;
    let text = |k: &str| top.get(k).and_then(Value::as_str);
    let model_type = text("model_type").ok_or_else(|| cfg_err("no model_type".into()))?;
    if family::by_mlc(model_type).is_none() {
        return Err(Error::Unsupported(format!(
            "MLC model_type {model_type:?} (ferrolm reads MLC folders of {})",
            family::mlc_names()
        )));
    }
    let quant = text("quantization").ok_or_else(|| cfg_err("no quantization".into()))?;
    if !QUANTIZATIONS.contains(&quant) {
        return Err(Error::Unsupported(format!(
            "MLC quantization {quant:?} (ferrolm reads {}; q4f16_0 stores weights transposed, q3* are 3-bit)",
            QUANTIZATIONS.join(", ")
        )));
    }
    let mc =
        top.get("model_config").and_then(Value::as_object).ok_or_else(|| cfg_err("no model_config object".into()))?;
    let stop = stop_ids(top)?;
    Ok(HfFiles {
        config: config_json(model_type, top, mc, &stop).to_string(),
        generation_config: Some(generation_json(top, &stop).to_string()),
        tokenizer,
        tokenizer_config,
        mlc: Some(MlcWeights { cache, cache_name: cache_name.to_string(), model_type: model_type.to_string() }),
        ..Default::default()
    })
}

/// End-of-sequence ids: `eos_token_id` (from the source's generation_config.json or config.json,
/// else MLC's default 2) and the conversation template's `stop_token_ids`, which MLC stops on.
fn stop_ids(top: &Map<String, Value>) -> Result<Vec<u64>> {
    let ids = |v: Option<&Value>, what: &str| -> Result<Vec<u64>> {
        match v {
            None | Some(Value::Null) => Ok(vec![]),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_u64().ok_or_else(|| cfg_err(format!("{what} holds {x}, not a token id"))))
                .collect(),
            Some(x) => Ok(vec![x.as_u64().ok_or_else(|| cfg_err(format!("{what} is {x}, not a token id")))?]),
        }
    };
    let mut out = ids(top.get("eos_token_id"), "eos_token_id")?;
    // conv_template is an object for registered templates, a bare name otherwise (gen_config.py).
    let conv = top.get("conv_template").and_then(Value::as_object);
    for id in ids(conv.and_then(|c| c.get("stop_token_ids")), "conv_template.stop_token_ids")? {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

/// config.json for `HfConfig`: `model_config` (the source config's fields MLC keeps) with MLC's
/// renames undone. Unknown keys stay: HfConfig ignores them.
fn config_json(model_type: &str, top: &Map<String, Value>, mc: &Map<String, Value>, stop: &[u64]) -> Value {
    let mut c = mc.clone();
    let positive = |v: Option<&Value>| v.and_then(Value::as_i64).filter(|&n| n > 0);
    c.insert("model_type".into(), json!(model_type));
    if let Some(base) = c.remove("position_embedding_base") {
        c.entry("rope_theta").or_insert(base);
    }
    // Llama, Qwen and Gemma configs keep the training context as `context_window_size` (which
    // gen_config may have lowered, and which is Gemma 2's sliding window); Phi-3 keeps
    // max_position_embeddings itself. Only the default context length depends on it here.
    if !c.contains_key("max_position_embeddings") {
        if let Some(n) = positive(mc.get("context_window_size")).or(positive(top.get("context_window_size"))) {
            c.insert("max_position_embeddings".into(), json!(n));
        }
    }
    // Mistral's window is `sliding_window_size` (-1: none); Gemma 2 keeps `sliding_window`.
    if !c.contains_key("sliding_window") {
        if let Some(w) = positive(mc.get("sliding_window_size")).or(positive(top.get("sliding_window_size"))) {
            c.insert("sliding_window".into(), json!(w));
        }
    }
    for k in ["bos_token_id", "pad_token_id"] {
        if let Some(v) = top.get(k).filter(|v| !v.is_null()) {
            c.insert(k.into(), v.clone());
        }
    }
    c.insert("eos_token_id".into(), json!(stop));
    Value::Object(c)
}

/// generation_config.json: the token ids and the sampling defaults MLC copied from the source's
/// generation_config.json into `mlc-chat-config.json` (presence and frequency penalties have no
/// generation_config counterpart and are left out).
fn generation_json(top: &Map<String, Value>, stop: &[u64]) -> Value {
    let mut g = Map::new();
    for k in ["bos_token_id", "pad_token_id", "temperature", "top_p", "repetition_penalty"] {
        if let Some(v) = top.get(k).filter(|v| !v.is_null()) {
            g.insert(k.into(), v.clone());
        }
    }
    g.insert("eos_token_id".into(), json!(stop));
    Value::Object(g)
}

/// MLC's parameter name as the HF loader looks for it: the family's renames (Phi-3's module
/// names, Qwen's `c_attn`; `family::FAMILIES`) and the quantized weight's `q_weight` suffix
/// mapped to the transformers ones.
pub fn hf_name(model_type: &str, mlc: &str) -> String {
    let table = family::by_mlc(model_type).and_then(|f| f.mlc).unwrap_or(&[]);
    let mut n = mlc.to_string();
    for (from, to) in table {
        n = n.replacen(from, to, 1);
    }
    match n.strip_suffix(".q_weight") {
        Some(stem) => format!("{stem}.weight"),
        None => n,
    }
}

/// A record's element type as stored, and its size in bytes.
fn stored_dtype(dtype: &str, format: &str) -> Option<(StDtype, u64)> {
    let other = |name: &str, bits: u64| Some((StDtype::Other { name: name.into(), bits }, bits / 8));
    match (dtype, format) {
        ("float32", "f32-to-bf16") => Some((StDtype::BF16, 2)),
        ("float32", _) => Some((StDtype::F32, 4)),
        ("float16", _) => Some((StDtype::F16, 2)),
        ("bfloat16", _) => Some((StDtype::BF16, 2)),
        ("uint32", _) => other("U32", 32),
        ("int32", _) => other("I32", 32),
        ("uint16", _) => other("U16", 16),
        ("int16", _) => other("I16", 16),
        ("uint8", _) => other("U8", 8),
        ("int8", _) => other("I8", 8),
        ("float64", _) => other("F64", 64),
        ("int64", _) => other("I64", 64),
        ("uint64", _) => other("U64", 64),
        ("float8_e4m3fn", _) => other("F8_E4M3", 8),
        ("float8_e5m2", _) => other("F8_E5M2", 8),
        _ => None,
    }
}

/// One shard of the tensor cache: its file name, size and tensors (HF names, offsets in the shard).
struct Shard {
    path: String,
    nbytes: u64,
    tensors: Vec<StTensor>,
}

/// A record: the tensor under its HF name, and its name in the cache (for messages).
struct Record {
    tensor: StTensor,
    mlc_name: String,
}

/// Parse and check the tensor cache without opening a shard: each record's dtype, shape and
/// nbytes agree, lies inside its shard, overlaps no other, and no name repeats.
fn parse_cache(w: &MlcWeights) -> Result<Vec<Shard>, MlcError> {
    let file = w.cache_name.clone();
    let bad = |msg: String| MlcError::BadCache { file: file.clone(), msg };
    let v: Value = serde_json::from_slice(&w.cache).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let shards = v.get("records").and_then(Value::as_array).ok_or_else(|| bad("no records list".into()))?;
    let mut out = Vec::with_capacity(shards.len());
    let mut seen = std::collections::HashSet::new();
    for s in shards {
        let path = s.get("dataPath").and_then(Value::as_str).ok_or_else(|| bad("a shard without dataPath".into()))?;
        if !plain_file_name(path) {
            return Err(MlcError::BadShardName { file: file.clone(), path: path.into() });
        }
        let fmt = s.get("format").and_then(Value::as_str).unwrap_or("");
        if fmt != "raw-shard" {
            return Err(bad(format!("shard {path}: format {fmt:?} (only \"raw-shard\" exists)")));
        }
        let nbytes = s.get("nbytes").and_then(Value::as_u64).ok_or_else(|| bad(format!("shard {path}: no nbytes")))?;
        let recs =
            s.get("records").and_then(Value::as_array).ok_or_else(|| bad(format!("shard {path}: no records")))?;
        let mut records = Vec::with_capacity(recs.len());
        for r in recs {
            let r = record(&file, &w.model_type, r, path, nbytes)?;
            // Two cache names for one HF name (`x.weight` and `x.q_weight`) are a repeat too.
            if !seen.insert(r.tensor.name.clone()) {
                return Err(MlcError::Duplicate { file: file.clone(), tensor: r.mlc_name });
            }
            records.push(r);
        }
        let mut order: Vec<&Record> = records.iter().collect();
        order.sort_by_key(|r| (r.tensor.offset, r.tensor.n_bytes));
        if let Some(p) = order.windows(2).find(|p| p[0].tensor.offset + p[0].tensor.n_bytes > p[1].tensor.offset) {
            let (a, b) = (p[0].mlc_name.clone(), p[1].mlc_name.clone());
            return Err(MlcError::Overlap { file: file.clone(), shard: path.into(), a, b });
        }
        out.push(Shard { path: path.into(), nbytes, tensors: records.into_iter().map(|r| r.tensor).collect() });
    }
    Ok(out)
}

/// One record, checked against its shard's size.
fn record(file: &str, model_type: &str, r: &Value, shard: &str, shard_bytes: u64) -> Result<Record, MlcError> {
    let name = r.get("name").and_then(Value::as_str).unwrap_or("");
    let bad = |msg: String| MlcError::BadRecord { file: file.into(), tensor: name.into(), msg };
    if name.is_empty() {
        return Err(bad("a record without a name".into()));
    }
    let field = |k: &str| r.get(k).ok_or_else(|| bad(format!("no {k}")));
    let shape: Vec<u64> = field("shape")?
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect())
        .ok_or_else(|| bad("shape is not a list of non-negative integers".into()))?;
    if shape.len() > 8 {
        return Err(bad(format!("shape {shape:?} has more than 8 dimensions")));
    }
    let dtype = field("dtype")?.as_str().ok_or_else(|| bad("dtype is not a string".into()))?;
    let format = field("format")?.as_str().ok_or_else(|| bad("format is not a string".into()))?;
    if !matches!(format, "raw" | "f32-to-bf16") {
        return Err(bad(format!("format {format:?} (\"raw\" and \"f32-to-bf16\" exist)")));
    }
    let (st_dtype, size) = stored_dtype(dtype, format).ok_or_else(|| MlcError::UnknownDtype {
        file: file.into(),
        tensor: name.into(),
        dtype: dtype.into(),
    })?;
    let nbytes = field("nbytes")?.as_u64().ok_or_else(|| bad("nbytes is not a non-negative integer".into()))?;
    let offset = field("byteOffset")?.as_u64().ok_or_else(|| bad("byteOffset is not a non-negative integer".into()))?;
    let want = shape.iter().try_fold(size, |a, &d| a.checked_mul(d));
    if want != Some(nbytes) {
        let want = want.map_or("more than 2^64".to_string(), |w| w.to_string());
        let coded = if dtype == "float32" { format!(" ({format})") } else { String::new() };
        return Err(bad(format!("nbytes {nbytes}, but {dtype} {shape:?}{coded} takes {want}")));
    }
    if offset.checked_add(nbytes).is_none_or(|e| e > shard_bytes) {
        return Err(MlcError::OutOfRange {
            file: file.into(),
            tensor: name.into(),
            shard: shard.into(),
            begin: offset,
            end: offset.saturating_add(nbytes),
            size: shard_bytes,
        });
    }
    let tensor = StTensor { name: hf_name(model_type, name), dtype: st_dtype, shape, offset, n_bytes: nbytes };
    Ok(Record { tensor, mlc_name: name.into() })
}

/// A shard file name from the cache is used to build a path or URL: no directories.
fn plain_file_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0', ':']) && !s.starts_with('~')
}

/// The shard files a tensor cache names, in its order (for callers that fetch them first).
pub fn shard_files(w: &MlcWeights) -> Result<Vec<String>> {
    Ok(parse_cache(w)?.into_iter().map(|s| s.path).collect())
}

/// Open every shard through `open(dataPath)` and index their tensors: what
/// `SafetensorsModel::open_async` gives for a safetensors folder. A shard whose size is not the
/// one the cache records is refused before any tensor is read.
pub async fn open_tensors<S, F, Fut>(w: &MlcWeights, mut open: F) -> Result<SafetensorsModel<S>>
where
    S: AsyncSource,
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<S>>,
{
    let shards = parse_cache(w)?;
    let mut files = Vec::with_capacity(shards.len());
    for s in shards {
        let src = open(s.path.clone()).await?;
        let actual = src.total_len();
        if actual != s.nbytes {
            let (file, shard) = (w.cache_name.clone(), s.path);
            return Err(MlcError::ShardSize { file, shard, expected: s.nbytes, actual }.into());
        }
        let st = SafetensorsFile::from_tensors(s.path.clone(), s.tensors);
        files.push((s.path, src, st));
    }
    SafetensorsModel::from_files(files)
}

/// Read an MLC folder's files from disk (`dir` has `mlc-chat-config.json`).
#[cfg(not(target_arch = "wasm32"))]
pub fn read_dir_files(dir: &std::path::Path) -> Result<HfFiles> {
    let read = |name: &str| -> Result<Option<Vec<u8>>> {
        let p = dir.join(name);
        match std::fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(p.display().to_string(), e)),
        }
    };
    let text = |name: &str| -> Result<Option<String>> {
        read(name)?
            .map(|b| String::from_utf8(b).map_err(|_| Error::Model(format!("{name} is not UTF-8 text"))))
            .transpose()
    };
    let chat = text(CHAT_CONFIG)?.ok_or_else(|| Error::Model(format!("{}: no {CHAT_CONFIG}", dir.display())))?;
    let mut cache = None;
    for name in TENSOR_CACHE_FILES {
        if let Some(b) = read(name)? {
            cache = Some((b, name));
            break;
        }
    }
    let (cache, name) = cache.ok_or_else(|| {
        Error::Model(format!("{}: an MLC folder without {}", dir.display(), TENSOR_CACHE_FILES.join(" or ")))
    })?;
    hf_files(&chat, cache, name, text("tokenizer.json")?, text("tokenizer_config.json")?)
}

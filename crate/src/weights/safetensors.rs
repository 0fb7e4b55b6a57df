//! safetensors reader over a `ByteSource`, with u64 offsets throughout.
//!
//! The `safetensors` crate indexes with `usize`, so on wasm32 it cannot address shards past 4 GiB;
//! it is used only as a test oracle. Validation follows that crate (0.7) and the format spec:
//! an 8-byte little-endian header length (at most 100 MB, as the crate enforces), a JSON object
//! header, and a data section that tensors cover exactly: sorted by offset they start at 0, touch
//! without holes or overlaps, and end at the end of the file. Duplicate keys are rejected (serde_json
//! would silently keep the last one), so the JSON is parsed into an order- and duplicate-preserving
//! tree first. Tensors of dtypes the engine cannot use are recorded as `Other`; the loader decides
//! whether a model needs them.

use super::source::{AsyncSource, ByteSource};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashMap;

/// The safetensors crate's `MAX_HEADER_SIZE`.
pub const MAX_HEADER: u64 = 100_000_000;
pub const INDEX_FILE: &str = "model.safetensors.index.json";
pub const SINGLE_FILE: &str = "model.safetensors";

#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    #[error("{name}: read failed at byte {offset}: {msg}")]
    Io { name: String, offset: u64, msg: String },
    #[error("{name}: the file is empty")]
    Empty { name: String },
    #[error("{name}: file of {len} bytes is too short for the 8-byte header length")]
    TooShort { name: String, len: u64 },
    #[error("{name}: header length {header_len} is larger than {limit} ({why}){hint}")]
    BadHeaderLength { name: String, header_len: u64, limit: u64, why: &'static str, hint: &'static str },
    #[error("{name}: header is not valid JSON: {msg}")]
    BadJson { name: String, msg: String },
    #[error("{name}: header must be a JSON object, found {found}")]
    NotAnObject { name: String, found: &'static str },
    #[error("{name}: duplicate key {key:?} in {place}")]
    DuplicateKey { name: String, key: String, place: String },
    #[error("{name}: __metadata__ must map strings to strings: {msg}")]
    BadMetadata { name: String, msg: String },
    #[error("{name}: tensor {tensor:?}: {msg}")]
    BadEntry { name: String, tensor: String, msg: String },
    #[error("{name}: tensor {tensor:?} has unknown dtype {dtype:?}")]
    UnknownDtype { name: String, tensor: String, dtype: String },
    #[error("{name}: tensor {tensor:?} shape {shape:?} {why}")]
    BadShape { name: String, tensor: String, shape: Vec<u64>, why: &'static str },
    #[error("{name}: tensor {tensor:?} data_offsets [{begin}, {end}]: {why}")]
    BadOffsets { name: String, tensor: String, begin: u64, end: u64, why: String },
    #[error("{name}: tensors {a:?} and {b:?} overlap in the data section")]
    Overlap { name: String, a: String, b: String },
    #[error("{name}: bytes [{start}, {end}) of the data section belong to no tensor (the spec forbids holes)")]
    Hole { name: String, start: u64, end: u64 },
    #[error("{name}: {extra} bytes after the last tensor (the data section must end with the file)")]
    TrailingBytes { name: String, extra: u64 },
    #[error("{name}: tensor {tensor:?} has dtype {dtype}, which cannot be converted to f32")]
    UnsupportedDtype { name: String, tensor: String, dtype: String },
    #[error("{name}: shard file name {file:?} in weight_map is not a plain file name")]
    BadShardName { name: String, file: String },
    #[error("{name}: {msg}")]
    BadIndex { name: String, msg: String },
    #[error("{name}: tensor {tensor:?} is listed in {shard:?} by the index but is not in that shard")]
    MissingTensor { name: String, tensor: String, shard: String },
    #[error("tensor {tensor:?} appears in both {a:?} and {b:?}")]
    TensorInTwoShards { tensor: String, a: String, b: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StDtype {
    F32,
    F16,
    BF16,
    /// A known safetensors dtype the engine does not compute with (I64, U8, F8_E4M3, ...).
    Other {
        name: String,
        bits: u64,
    },
}

impl StDtype {
    fn parse(s: &str) -> Option<StDtype> {
        let bits = match s {
            "F32" => return Some(StDtype::F32),
            "F16" => return Some(StDtype::F16),
            "BF16" => return Some(StDtype::BF16),
            "F4" => 4,
            "F6_E2M3" | "F6_E3M2" => 6,
            "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
            "I16" | "U16" => 16,
            "I32" | "U32" => 32,
            "F64" | "I64" | "U64" | "C64" => 64,
            _ => return None,
        };
        Some(StDtype::Other { name: s.to_string(), bits })
    }
    pub fn bits(&self) -> u64 {
        match self {
            StDtype::F32 => 32,
            StDtype::F16 | StDtype::BF16 => 16,
            StDtype::Other { bits, .. } => *bits,
        }
    }
    pub fn name(&self) -> &str {
        match self {
            StDtype::F32 => "F32",
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::Other { name, .. } => name,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StTensor {
    pub name: String,
    pub dtype: StDtype,
    /// Row-major, outermost first (PyTorch order), unlike GGUF's innermost-first dims.
    pub shape: Vec<u64>,
    /// Absolute byte offset in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

impl StTensor {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

#[derive(Clone, Debug)]
pub struct SafetensorsFile {
    pub name: String,
    pub header_len: u64,
    pub data_offset: u64,
    pub metadata: Vec<(String, String)>,
    /// In header order.
    pub tensors: Vec<StTensor>,
    index: HashMap<String, usize>,
}

/// JSON that keeps object keys in order, duplicates included, so we can reject them ourselves.
/// serde_json's recursion limit (128) still applies, so deep nesting errors instead of overflowing.
#[derive(Debug)]
enum Json {
    Null,
    Bool,
    U64(u64),
    Num,
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool => "a boolean",
            Json::U64(_) | Json::Num => "a number",
            Json::Str(_) => "a string",
            Json::Arr(_) => "an array",
            Json::Obj(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Json, E> {
                Ok(Json::Bool)
            }
            fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
                Ok(Json::U64(v))
            }
            // serde_json calls visit_i64 only for negative integers.
            fn visit_i64<E>(self, _: i64) -> Result<Json, E> {
                Ok(Json::Num)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Json, E> {
                Ok(Json::Num)
            }
            fn visit_str<E>(self, v: &str) -> Result<Json, E> {
                Ok(Json::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Json, E> {
                Ok(Json::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x)
                }
                Ok(Json::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                // Keys in order, duplicates kept: the caller rejects them with a typed error.
                let mut v = Vec::new();
                while let Some(kv) = a.next_entry()? {
                    v.push(kv)
                }
                Ok(Json::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

fn parse_json(name: &str, bytes: &[u8]) -> Result<Vec<(String, Json)>, SafetensorsError> {
    let json: Json = serde_json::from_slice(bytes)
        .map_err(|e| SafetensorsError::BadJson { name: name.to_string(), msg: e.to_string() })?;
    match json {
        Json::Obj(o) => Ok(o),
        other => Err(SafetensorsError::NotAnObject { name: name.to_string(), found: other.kind() }),
    }
}

/// The first key of `o` that repeats, if any.
fn find_duplicate(o: &[(String, Json)]) -> Option<&str> {
    let mut seen = std::collections::HashSet::with_capacity(o.len());
    o.iter().map(|(k, _)| k.as_str()).find(|k| !seen.insert(*k))
}

fn u64_list(j: &Json) -> Option<Vec<u64>> {
    match j {
        Json::Arr(a) => a.iter().map(|x| if let Json::U64(v) = x { Some(*v) } else { None }).collect(),
        _ => None,
    }
}

fn io_err(name: &str, offset: u64, e: crate::Error) -> SafetensorsError {
    SafetensorsError::Io { name: name.to_string(), offset, msg: e.to_string() }
}

/// Little-endian F32/F16/BF16 values widened to f32 (exactly); `None` for other dtypes.
pub fn to_f32(dtype: &StDtype, b: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        StDtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        StDtype::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        StDtype::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        StDtype::Other { .. } => return None,
    })
}

impl SafetensorsFile {
    /// Read and validate the header against the source's length. Tensor data is not read.
    pub fn read(src: &dyn ByteSource) -> Result<Self, SafetensorsError> {
        let (name, len) = (src.name(), src.len());
        Self::check_len(&name, len)?;
        let mut n8 = [0u8; 8];
        src.read_at(0, &mut n8).map_err(|e| io_err(&name, 0, e))?;
        let header_len = Self::header_len(&name, len, n8)?;
        let mut header = vec![0u8; header_len as usize];
        src.read_at(8, &mut header).map_err(|e| io_err(&name, 8, e))?;
        Self::from_header(name, len, header_len, &header)
    }

    /// `read` through an asynchronous source (a download in the browser): two reads, the length
    /// and then the header, with the same validation.
    pub async fn read_async(src: &dyn AsyncSource) -> Result<Self, SafetensorsError> {
        let (name, len) = (src.source_name(), src.total_len());
        Self::check_len(&name, len)?;
        let n8 = src.read(0, 8).await.map_err(|e| io_err(&name, 0, e))?;
        let n8: [u8; 8] = n8.as_slice().try_into().map_err(|_| SafetensorsError::Io {
            name: name.clone(),
            offset: 0,
            msg: format!("read of 8 bytes returned {}", n8.len()),
        })?;
        let header_len = Self::header_len(&name, len, n8)?;
        let header = src.read(8, header_len as usize).await.map_err(|e| io_err(&name, 8, e))?;
        if header.len() as u64 != header_len {
            let msg = format!("read of {header_len} header bytes returned {}", header.len());
            return Err(SafetensorsError::Io { name, offset: 8, msg });
        }
        Self::from_header(name, len, header_len, &header)
    }

    fn check_len(name: &str, len: u64) -> Result<(), SafetensorsError> {
        if len == 0 {
            return Err(SafetensorsError::Empty { name: name.to_string() });
        }
        if len < 8 {
            return Err(SafetensorsError::TooShort { name: name.to_string(), len });
        }
        Ok(())
    }

    /// The header length from the first 8 bytes, checked against the format's limit and the file.
    pub(crate) fn header_len(name: &str, len: u64, n8: [u8; 8]) -> Result<u64, SafetensorsError> {
        let header_len = u64::from_le_bytes(n8);
        let bad_len = |limit: u64, why: &'static str| {
            // A page or JSON document read as a shard gives a huge "length" made of ASCII.
            let t = String::from_utf8_lossy(&n8).trim_start().to_ascii_lowercase();
            let hint = if t.starts_with('<') {
                "; this looks like an HTML page, e.g. an error page served instead of the model"
            } else if t.starts_with('{') {
                "; this looks like JSON, e.g. an error response or a safetensors index"
            } else {
                ""
            };
            SafetensorsError::BadHeaderLength { name: name.to_string(), header_len, limit, why, hint }
        };
        if header_len > MAX_HEADER {
            return Err(bad_len(MAX_HEADER, "the format's limit"));
        }
        if header_len > len - 8 {
            return Err(bad_len(len - 8, "the bytes after the length"));
        }
        Ok(header_len)
    }

    fn from_header(name: String, len: u64, header_len: u64, header: &[u8]) -> Result<Self, SafetensorsError> {
        let entries = parse_json(&name, header)?;
        if let Some(k) = find_duplicate(&entries) {
            return Err(SafetensorsError::DuplicateKey { name, key: k.to_string(), place: "the header".into() });
        }
        let data_offset = 8 + header_len;
        let data_len = len - data_offset;
        let mut metadata = Vec::new();
        let mut tensors = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            if key == "__metadata__" {
                metadata = Self::metadata(&name, value)?;
            } else {
                tensors.push(Self::entry(&name, key, value, data_offset, data_len)?);
            }
        }
        Self::check_coverage(&name, &tensors, data_offset, data_len)?;
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(SafetensorsFile { name, header_len, data_offset, metadata, tensors, index })
    }

    fn metadata(name: &str, value: Json) -> Result<Vec<(String, String)>, SafetensorsError> {
        let bad = |msg: String| SafetensorsError::BadMetadata { name: name.to_string(), msg };
        if let Json::Null = value {
            return Ok(Vec::new()); // the reference crate reads it as an absent Option
        }
        let Json::Obj(o) = value else { return Err(bad(format!("found {}", value.kind()))) };
        if let Some(k) = find_duplicate(&o) {
            let place = "__metadata__".to_string();
            return Err(SafetensorsError::DuplicateKey { name: name.to_string(), key: k.to_string(), place });
        }
        o.into_iter()
            .map(|(k, v)| match v {
                Json::Str(s) => Ok((k, s)),
                other => Err(bad(format!("value of {k:?} is {}", other.kind()))),
            })
            .collect()
    }

    fn entry(
        name: &str,
        tensor: String,
        value: Json,
        data_offset: u64,
        data_len: u64,
    ) -> Result<StTensor, SafetensorsError> {
        let bad = |msg: String| SafetensorsError::BadEntry { name: name.to_string(), tensor: tensor.clone(), msg };
        let Json::Obj(fields) = value else { return Err(bad(format!("entry is {}, not an object", value.kind()))) };
        if let Some(k) = find_duplicate(&fields) {
            return Err(bad(format!("duplicate field {k:?}")));
        }
        // Unknown fields are ignored, as serde's derive in the reference crate does.
        let field =
            |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v).ok_or_else(|| bad(format!("missing {k:?}")));
        let dtype_name = match field("dtype")? {
            Json::Str(s) => s.clone(),
            other => return Err(bad(format!("dtype is {}, not a string", other.kind()))),
        };
        let shape =
            u64_list(field("shape")?).ok_or_else(|| bad("shape is not a list of non-negative integers".into()))?;
        let offs = u64_list(field("data_offsets")?).filter(|o| o.len() == 2);
        let [begin, end] =
            offs.as_deref().map(|o| [o[0], o[1]]).ok_or_else(|| bad("data_offsets is not [begin, end]".into()))?;
        let Some(dtype) = StDtype::parse(&dtype_name) else {
            return Err(SafetensorsError::UnknownDtype { name: name.to_string(), tensor, dtype: dtype_name });
        };
        let bad_shape = |why| SafetensorsError::BadShape {
            name: name.to_string(),
            tensor: tensor.clone(),
            shape: shape.clone(),
            why,
        };
        // Model tensors have at most 4 dimensions (5 in some vision towers); a longer shape is
        // a broken or hostile header.
        if shape.len() > 8 {
            return Err(bad_shape("has more than 8 dimensions"));
        }
        let bits = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).and_then(|n| n.checked_mul(dtype.bits()));
        let bits = bits.ok_or_else(|| bad_shape("overflows when counting its bytes"))?;
        if bits % 8 != 0 {
            return Err(bad_shape("does not fill whole bytes"));
        }
        let bad_off = |why: String| SafetensorsError::BadOffsets {
            name: name.to_string(),
            tensor: tensor.clone(),
            begin,
            end,
            why,
        };
        if begin > end {
            return Err(bad_off("begin is after end".into()));
        }
        if end - begin != bits / 8 {
            return Err(bad_off(format!(
                "span {} bytes, but {} {shape:?} needs {}",
                end - begin,
                dtype.name(),
                bits / 8
            )));
        }
        if end > data_len {
            return Err(bad_off(format!("past the end of the {data_len}-byte data section")));
        }
        Ok(StTensor { name: tensor, dtype, shape, offset: data_offset + begin, n_bytes: end - begin })
    }

    /// Sorted by offset, tensors must tile the data section exactly.
    fn check_coverage(
        name: &str,
        tensors: &[StTensor],
        data_offset: u64,
        data_len: u64,
    ) -> Result<(), SafetensorsError> {
        let mut order: Vec<&StTensor> = tensors.iter().collect();
        order.sort_by_key(|t| (t.offset, t.n_bytes));
        let mut pos = data_offset;
        let mut prev: Option<&StTensor> = None;
        for t in order {
            if t.offset < pos {
                let a = prev.map(|p| p.name.clone()).unwrap_or_default();
                return Err(SafetensorsError::Overlap { name: name.to_string(), a, b: t.name.clone() });
            }
            if t.offset > pos {
                let (start, end) = (pos - data_offset, t.offset - data_offset);
                return Err(SafetensorsError::Hole { name: name.to_string(), start, end });
            }
            pos = t.offset + t.n_bytes;
            prev = Some(t);
        }
        let extra = data_offset + data_len - pos;
        if extra != 0 {
            return Err(SafetensorsError::TrailingBytes { name: name.to_string(), extra });
        }
        Ok(())
    }

    pub fn tensor(&self, name: &str) -> Option<&StTensor> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// A file whose tensors another index lists (an MLC tensor cache's shard, `model/mlc.rs`):
    /// no header, offsets as given, checked by that index's reader.
    pub(crate) fn from_tensors(name: String, tensors: Vec<StTensor>) -> Self {
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        SafetensorsFile { name, header_len: 0, data_offset: 0, metadata: Vec::new(), tensors, index }
    }

    pub fn read_tensor_bytes(&self, src: &dyn ByteSource, t: &StTensor) -> crate::Result<Vec<u8>> {
        let n = usize::try_from(t.n_bytes).map_err(|_| {
            crate::Error::Model(format!("{}: tensor {:?} is too large for this platform", self.name, t.name))
        })?;
        let mut buf = vec![0u8; n];
        src.read_at(t.offset, &mut buf)?;
        Ok(buf)
    }

    /// The tensor as f32; F16 and BF16 widen exactly.
    pub fn read_tensor_f32(&self, src: &dyn ByteSource, t: &StTensor) -> crate::Result<Vec<f32>> {
        if matches!(t.dtype, StDtype::Other { .. }) {
            return Err(self.unsupported(t).into());
        }
        let b = self.read_tensor_bytes(src, t)?;
        Ok(to_f32(&t.dtype, &b).expect("dtype checked above"))
    }

    fn unsupported(&self, t: &StTensor) -> SafetensorsError {
        SafetensorsError::UnsupportedDtype {
            name: self.name.clone(),
            tensor: t.name.clone(),
            dtype: t.dtype.name().to_string(),
        }
    }
}

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Clone, Debug)]
pub struct ShardIndex {
    /// `metadata.total_size`, when present.
    pub total_size: Option<u64>,
    /// Tensor name → shard file name, in file order.
    pub weight_map: Vec<(String, String)>,
}

/// A shard name from an index is used to build a path or URL, so it must be a plain file name.
fn plain_file_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0', ':']) && !s.starts_with('~')
}

impl ShardIndex {
    pub fn parse(json: &str) -> Result<ShardIndex, SafetensorsError> {
        Self::parse_named(INDEX_FILE, json.as_bytes())
    }

    pub fn parse_named(name: &str, json: &[u8]) -> Result<ShardIndex, SafetensorsError> {
        let bad = |msg: String| SafetensorsError::BadIndex { name: name.to_string(), msg };
        let top = parse_json(name, json)?;
        let dup = |o: &[(String, Json)], place: &str| match find_duplicate(o) {
            Some(k) => Err(SafetensorsError::DuplicateKey { name: name.into(), key: k.into(), place: place.into() }),
            None => Ok(()),
        };
        dup(&top, "the index")?;
        let mut total_size = None;
        let mut weight_map = None;
        for (k, v) in top {
            match (k.as_str(), v) {
                ("metadata", Json::Obj(m)) => {
                    total_size = m.iter().find(|(k, _)| k == "total_size").and_then(|(_, v)| match v {
                        Json::U64(n) => Some(*n),
                        _ => None,
                    })
                }
                ("weight_map", Json::Obj(m)) => {
                    dup(&m, "weight_map")?;
                    let mut out = Vec::with_capacity(m.len());
                    for (tensor, file) in m {
                        let Json::Str(file) = file else {
                            return Err(bad(format!("weight_map[{tensor:?}] is not a string")));
                        };
                        if !plain_file_name(&file) {
                            return Err(SafetensorsError::BadShardName { name: name.to_string(), file });
                        }
                        out.push((tensor, file));
                    }
                    weight_map = Some(out);
                }
                ("weight_map", other) => return Err(bad(format!("weight_map is {}, not an object", other.kind()))),
                _ => {}
            }
        }
        let weight_map = weight_map.ok_or_else(|| bad("no weight_map".into()))?;
        Ok(ShardIndex { total_size, weight_map })
    }

    /// Distinct shard file names in first-mention order.
    pub fn shards(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        self.weight_map.iter().map(|(_, f)| f.as_str()).filter(|f| seen.insert(*f)).collect()
    }
}

/// All shards of a model with their headers; a tensor is looked up across shards.
pub struct SafetensorsModel<S> {
    pub shards: Vec<(String, S, SafetensorsFile)>,
    where_: HashMap<String, (usize, usize)>,
}

/// The files a model's weights live in: the index's shards in first-mention order (each name
/// checked to be a plain file name), or the single `model.safetensors`.
pub fn weight_files(index: Option<&[u8]>) -> crate::Result<(Option<ShardIndex>, Vec<String>)> {
    let index = index.map(|j| ShardIndex::parse_named(INDEX_FILE, j)).transpose()?;
    let names = match &index {
        Some(ix) => ix.shards().into_iter().map(String::from).collect(),
        None => vec![SINGLE_FILE.to_string()],
    };
    Ok((index, names))
}

impl<S> SafetensorsModel<S> {
    fn empty(n: usize) -> Self {
        SafetensorsModel { shards: Vec::with_capacity(n), where_: HashMap::new() }
    }

    fn add(&mut self, file: String, src: S, st: SafetensorsFile) -> crate::Result<()> {
        let si = self.shards.len();
        for (ti, t) in st.tensors.iter().enumerate() {
            if let Some(&(other, _)) = self.where_.get(&t.name) {
                let (a, b) = (self.shards[other].0.clone(), file.clone());
                return Err(SafetensorsError::TensorInTwoShards { tensor: t.name.clone(), a, b }.into());
            }
            self.where_.insert(t.name.clone(), (si, ti));
        }
        self.shards.push((file, src, st));
        Ok(())
    }

    /// Shards opened and indexed elsewhere (an MLC tensor cache, `model/mlc.rs`); a tensor in two
    /// of them is refused as in a safetensors folder.
    pub(crate) fn from_files(files: Vec<(String, S, SafetensorsFile)>) -> crate::Result<Self> {
        let mut m = Self::empty(files.len());
        for (file, src, st) in files {
            m.add(file, src, st)?;
        }
        Ok(m)
    }

    /// Every tensor the index names must be in the shard it names.
    fn check_index(&self, index: Option<&ShardIndex>) -> crate::Result<()> {
        for (tensor, file) in index.iter().flat_map(|ix| ix.weight_map.iter()) {
            let found = self.where_.get(tensor).map(|&(s, _)| self.shards[s].0 == *file).unwrap_or(false);
            if !found {
                let (name, tensor, shard) = (INDEX_FILE.to_string(), tensor.clone(), file.clone());
                return Err(SafetensorsError::MissingTensor { name, tensor, shard }.into());
            }
        }
        Ok(())
    }

    /// Source, header and tensor for `name`.
    pub fn get(&self, name: &str) -> Option<(&S, &SafetensorsFile, &StTensor)> {
        let &(s, t) = self.where_.get(name)?;
        let (_, src, st) = &self.shards[s];
        Some((src, st, &st.tensors[t]))
    }

    /// Which shard (in open order) holds `name`.
    pub fn shard_of(&self, name: &str) -> Option<usize> {
        self.where_.get(name).map(|&(s, _)| s)
    }

    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.shards.iter().flat_map(|(_, _, st)| st.tensors.iter().map(|t| t.name.as_str()))
    }

    fn lookup(&self, name: &str) -> crate::Result<(&S, &SafetensorsFile, &StTensor)> {
        self.get(name).ok_or_else(|| crate::Error::Model(format!("tensor {name:?} not found")))
    }
}

impl<S: ByteSource> SafetensorsModel<S> {
    /// `index`: the contents of `model.safetensors.index.json` if the model has one (else the single
    /// `model.safetensors` is opened). `open` fetches a file by its plain name — a path natively, a
    /// URL or cache entry in the browser.
    pub fn open(index: Option<&[u8]>, mut open: impl FnMut(&str) -> crate::Result<S>) -> crate::Result<Self> {
        let (index, names) = weight_files(index)?;
        let mut m = Self::empty(names.len());
        for file in names {
            let src = open(&file)?;
            let st = SafetensorsFile::read(&src)?;
            m.add(file, src, st)?;
        }
        m.check_index(index.as_ref())?;
        Ok(m)
    }

    pub fn read_f32(&self, name: &str) -> crate::Result<Vec<f32>> {
        let (src, st, t) = self.lookup(name)?;
        st.read_tensor_f32(src, t)
    }

    pub fn read_bytes(&self, name: &str) -> crate::Result<Vec<u8>> {
        let (src, st, t) = self.lookup(name)?;
        st.read_tensor_bytes(src, t)
    }
}

/// Largest single read the loaders make (GGUF and safetensors alike): one download chunk in the
/// browser (pkg-template/source.js CHUNK_SIZE is the same 16 MiB).
pub const READ_CHUNK: u64 = 16 << 20;

impl<S: AsyncSource> SafetensorsModel<S> {
    /// `open` through asynchronous sources: `open(name)` yields the source of a shard (natively a
    /// file, in the browser a cached download). Shards are opened one after the other, and each
    /// header is read as soon as its shard is open.
    pub async fn open_async<F, Fut>(index: Option<&[u8]>, mut open: F) -> crate::Result<Self>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = crate::Result<S>>,
    {
        let (index, names) = weight_files(index)?;
        let mut m = Self::empty(names.len());
        for file in names {
            let src = open(file.clone()).await?;
            let st = SafetensorsFile::read_async(&src).await?;
            m.add(file, src, st)?;
        }
        m.check_index(index.as_ref())?;
        Ok(m)
    }

    /// Bytes `offset..offset + len` of `src`, read in pieces of at most `READ_CHUNK`;
    /// `on_read(n)` after each piece.
    pub async fn read_range(src: &S, offset: u64, len: u64, on_read: &mut dyn FnMut(u64)) -> crate::Result<Vec<u8>> {
        let n = usize::try_from(len)
            .map_err(|_| crate::Error::Model(format!("{}: a read of {len} bytes is too large", src.source_name())))?;
        let mut out = Vec::with_capacity(n);
        let mut at = 0u64;
        while at < len {
            let piece = (len - at).min(READ_CHUNK);
            let b = src.read(offset + at, piece as usize).await?;
            if b.len() as u64 != piece {
                return Err(crate::Error::Model(format!(
                    "{}: short read at byte {}: {} of {piece} bytes",
                    src.source_name(),
                    offset + at,
                    b.len()
                )));
            }
            out.extend_from_slice(&b);
            at += piece;
            on_read(piece);
        }
        Ok(out)
    }

    /// The raw bytes of tensor `name`.
    pub async fn read_bytes_async(&self, name: &str, on_read: &mut dyn FnMut(u64)) -> crate::Result<Vec<u8>> {
        let (src, _, t) = self.lookup(name)?;
        Self::read_range(src, t.offset, t.n_bytes, on_read).await
    }

    /// Tensor `name` as f32 (F16 and BF16 widen exactly).
    pub async fn read_f32_async(&self, name: &str, on_read: &mut dyn FnMut(u64)) -> crate::Result<Vec<f32>> {
        let (src, st, t) = self.lookup(name)?;
        if matches!(t.dtype, StDtype::Other { .. }) {
            return Err(st.unsupported(t).into());
        }
        let b = Self::read_range(src, t.offset, t.n_bytes, on_read).await?;
        Ok(to_f32(&t.dtype, &b).expect("dtype checked above"))
    }
}

/// Open a local Hugging Face folder (sharded or not).
#[cfg(not(target_arch = "wasm32"))]
pub fn open_dir(dir: impl AsRef<std::path::Path>) -> crate::Result<SafetensorsModel<super::FileSource>> {
    let dir = dir.as_ref();
    let ix_path = dir.join(INDEX_FILE);
    let index = match std::fs::read(&ix_path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(crate::Error::io(ix_path.display().to_string(), e)),
    };
    SafetensorsModel::open(index.as_deref(), |f| super::FileSource::open(dir.join(f)))
}

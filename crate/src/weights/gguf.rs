//! GGUF (v2, v3) reader. Everything read from the file is validated before it is used to size an
//! allocation: counts and lengths are bounded by the bytes that remain, dimension products use
//! checked arithmetic, and tensor data must lie inside the file without overlapping.
//! Only the header is read here; tensor data is read later, tensor by tensor, from the same source.

use super::quant::GgmlType;
use super::source::{AsyncSource, ByteSource, PrefixSource};
use std::collections::HashMap;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Arrays may nest (arrays of arrays); real files use one level, so a deep nest is an attack.
const MAX_NESTING: u32 = 4;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
/// No real key, tensor name, token or template comes close to this.
const MAX_STRING: u64 = 64 << 20;
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// Upper bounds far above any real model (the largest have a few thousand tensors, ~100 keys and
/// ~1.5M metadata array elements in all), so that a corrupt count in a multi-gigabyte file cannot
/// make us parse gigabytes of tensor data as metadata and build a tree many times its size.
pub const MAX_TENSORS: u64 = 1 << 20;
pub const MAX_KV: u64 = 1 << 20;
pub const MAX_ARRAY_ELEMENTS: u64 = 1 << 24;
/// Vectors sized from a count start no larger than this and grow as items actually parse, so a
/// count that passes the bounds above still cannot reserve memory the data does not back.
const PREALLOC: u64 = 1 << 12;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{name}: read failed at byte {offset}: {msg}")]
    Io { name: String, offset: u64, msg: String },
    #[error("{name}: the file is empty")]
    Empty { name: String },
    #[error("{name}: not a GGUF file (it starts with {found}{hint})")]
    BadMagic { name: String, found: String, hint: &'static str },
    #[error("{name}: GGUF version {version} is not supported (2 and 3 are){}", big_endian_hint(*version))]
    UnsupportedVersion { name: String, version: u32 },
    #[error("{name}: truncated: {what} at byte {offset} needs {need} bytes, but the file ends at byte {len}")]
    Truncated { name: String, what: String, offset: u64, need: u64, len: u64 },
    #[error("{name}: {what} count {count} at byte {offset} cannot fit in the {remaining} bytes that remain")]
    CountTooLarge { name: String, what: String, count: u64, offset: u64, remaining: u64 },
    #[error("{name}: string of {len} bytes at byte {offset} is too long ({what})")]
    StringTooLong { name: String, what: String, len: u64, offset: u64 },
    #[error("{name}: {what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 { name: String, what: String, offset: u64 },
    #[error("{name}: {what}: value type {ty} at byte {offset} is not a GGUF value type")]
    InvalidValueType { name: String, what: String, ty: u32, offset: u64 },
    #[error("{name}: {what}: arrays nested deeper than {MAX_NESTING} at byte {offset}")]
    NestingTooDeep { name: String, what: String, offset: u64 },
    #[error("{name}: {what} count {count} at byte {offset} exceeds the limit of {limit}")]
    LimitExceeded { name: String, what: String, count: u64, limit: u64, offset: u64 },
    #[error("{name}: duplicate metadata key {key:?}")]
    DuplicateKey { name: String, key: String },
    #[error("{name}: general.alignment = {value} is not a power of two between 1 and {MAX_ALIGNMENT}")]
    BadAlignment { name: String, value: u64 },
    #[error("{name}: metadata key {key:?} has type {found}, expected {expected}")]
    WrongValueType { name: String, key: String, found: &'static str, expected: &'static str },
    #[error("{name}: tensor {tensor:?} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")]
    BadDimCount { name: String, tensor: String, n_dims: u32 },
    #[error("{name}: tensor {tensor:?} has invalid shape {dims:?}: {why}")]
    BadShape { name: String, tensor: String, dims: Vec<u64>, why: &'static str },
    #[error("{name}: tensor {tensor:?} has unknown ggml type id {ty}")]
    UnknownTensorType { name: String, tensor: String, ty: u32 },
    #[error("{name}: tensor {tensor:?}: first dimension {ne0} is not a multiple of the {ty} block size {block}")]
    NotBlockAligned { name: String, tensor: String, ne0: u64, ty: &'static str, block: u64 },
    #[error("{name}: duplicate tensor name {tensor:?}")]
    DuplicateTensor { name: String, tensor: String },
    #[error("{name}: tensor {tensor:?} data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor { name: String, tensor: String, offset: u64, alignment: u64 },
    #[error("{name}: tensor {tensor:?} data [{start}, {end}) lies outside the file ({len} bytes)")]
    TensorOutOfRange { name: String, tensor: String, start: u64, end: u64, len: u64 },
    #[error("{name}: tensors {a:?} and {b:?} overlap in the file")]
    TensorsOverlap { name: String, a: String, b: String },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }

    /// Any integer type that is non-negative, as u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    pub n_bytes: u64,
    pub n_elements: u64,
}

#[derive(Clone, Debug)]
pub struct GgufFile {
    pub name: String,
    pub version: u32,
    pub alignment: u64,
    pub data_offset: u64,
    pub file_len: u64,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    meta_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

/// Buffered sequential reader over a `ByteSource`; reads in chunks so parsing a header with
/// 100k tokens does not turn into 100k positioned reads.
struct Reader<'a> {
    src: &'a dyn ByteSource,
    name: String,
    len: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
    /// Metadata array elements still allowed (see `MAX_ARRAY_ELEMENTS`).
    elements_left: u64,
}

const CHUNK: u64 = 1 << 16;

/// GGUF metadata value types, by their on-disk id.
#[derive(Clone, Copy)]
enum Ty {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl Ty {
    fn from_u32(v: u32) -> Option<Ty> {
        use Ty::*;
        [U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64].get(v as usize).copied()
    }

    /// Smallest encoded size, used to bound array counts by the bytes that remain.
    fn min_size(self) -> u64 {
        match self {
            Ty::U8 | Ty::I8 | Ty::Bool => 1,
            Ty::U16 | Ty::I16 => 2,
            Ty::U32 | Ty::I32 | Ty::F32 => 4,
            Ty::U64 | Ty::I64 | Ty::F64 => 8,
            Ty::String => 8,    // its u64 length
            Ty::Array => 4 + 8, // element type + count
        }
    }
}

/// A key or tensor name as shown in error context. Clipped because the context string is built
/// for every array and tensor field, and a 64 MiB key copied per nested array would make parsing
/// quadratic in the file size.
fn clip(s: &str) -> String {
    const SHOWN: usize = 80;
    match s.char_indices().nth(SHOWN) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &s[..cut], s.len()),
    }
}

/// Big-endian GGUF (for s390x) stores the same versions byte-swapped.
fn big_endian_hint(version: u32) -> &'static str {
    if (2..=3).contains(&version.swap_bytes()) {
        " -- this is a big-endian GGUF; ferrolm reads little-endian ones"
    } else {
        ""
    }
}

fn prealloc<T>(n: u64) -> Vec<T> {
    Vec::with_capacity(n.min(PREALLOC) as usize)
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    fn truncated(&self, what: &str, need: u64) -> GgufError {
        GgufError::Truncated { name: self.name.clone(), what: what.to_string(), offset: self.pos, need, len: self.len }
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<&[u8], GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(what, n));
        }
        let in_buf = self.pos >= self.buf_start && self.pos + n <= self.buf_start + self.buf.len() as u64;
        if !in_buf {
            let want = n.max(CHUNK).min(self.remaining());
            self.buf.resize(want as usize, 0);
            self.buf_start = self.pos;
            if let Err(e) = self.src.read_at(self.pos, &mut self.buf) {
                // A failed read must not leave bytes that look buffered.
                self.buf.clear();
                return Err(GgufError::Io { name: self.name.clone(), offset: self.pos, msg: e.to_string() });
            }
        }
        let s = (self.pos - self.buf_start) as usize;
        self.pos += n;
        Ok(&self.buf[s..s + n as usize])
    }

    fn arr<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N as u64, what)?);
        Ok(out)
    }
    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }

    /// A count of items each at least `min_item` bytes long: it must fit in what remains and
    /// stay within `limit`.
    fn count(&mut self, what: &str, min_item: u64, limit: u64) -> Result<u64, GgufError> {
        let offset = self.pos;
        let count = self.u64(&format!("{what} count"))?;
        let remaining = self.remaining();
        if count.checked_mul(min_item).is_none_or(|b| b > remaining) {
            return Err(GgufError::CountTooLarge {
                name: self.name.clone(),
                what: what.to_string(),
                count,
                offset,
                remaining,
            });
        }
        if count > limit {
            return Err(GgufError::LimitExceeded {
                name: self.name.clone(),
                what: what.to_string(),
                count,
                limit,
                offset,
            });
        }
        Ok(count)
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let offset = self.pos;
        let len = self.u64(what)?;
        if len > MAX_STRING {
            return Err(GgufError::StringTooLong { name: self.name.clone(), what: what.to_string(), len, offset });
        }
        let bytes = self.bytes(len, what)?.to_vec();
        String::from_utf8(bytes).map_err(|_| GgufError::InvalidUtf8 {
            name: self.name.clone(),
            what: what.to_string(),
            offset,
        })
    }

    fn value_type(&mut self, what: &str) -> Result<Ty, GgufError> {
        let offset = self.pos;
        let ty = self.u32(what)?;
        Ty::from_u32(ty).ok_or_else(|| GgufError::InvalidValueType {
            name: self.name.clone(),
            what: what.to_string(),
            ty,
            offset,
        })
    }

    fn value(&mut self, ty: Ty, depth: u32, what: &str) -> Result<Value, GgufError> {
        Ok(match ty {
            Ty::U8 => Value::U8(self.arr::<1>(what)?[0]),
            Ty::I8 => Value::I8(self.arr::<1>(what)?[0] as i8),
            Ty::U16 => Value::U16(u16::from_le_bytes(self.arr(what)?)),
            Ty::I16 => Value::I16(i16::from_le_bytes(self.arr(what)?)),
            Ty::U32 => Value::U32(self.u32(what)?),
            Ty::I32 => Value::I32(i32::from_le_bytes(self.arr(what)?)),
            Ty::F32 => Value::F32(f32::from_le_bytes(self.arr(what)?)),
            Ty::Bool => Value::Bool(self.arr::<1>(what)?[0] != 0),
            Ty::String => Value::String(self.string(what)?),
            Ty::Array => {
                if depth >= MAX_NESTING {
                    return Err(GgufError::NestingTooDeep {
                        name: self.name.clone(),
                        what: what.to_string(),
                        offset: self.pos,
                    });
                }
                let elem = self.value_type(&format!("{what}: array element type"))?;
                let n = self.count(&format!("{what}: array element"), elem.min_size(), self.elements_left)?;
                self.elements_left -= n;
                let mut items = prealloc(n);
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1, what)?);
                }
                Value::Array(items)
            }
            Ty::U64 => Value::U64(self.u64(what)?),
            Ty::I64 => Value::I64(i64::from_le_bytes(self.arr(what)?)),
            Ty::F64 => Value::F64(f64::from_le_bytes(self.arr(what)?)),
        })
    }
}

/// What a file that does not start with the magic looks like, for the error message.
fn magic_hint(src: &dyn ByteSource, len: u64) -> &'static str {
    let mut peek = vec![0u8; len.min(64) as usize];
    if src.read_at(0, &mut peek).is_err() {
        return "";
    }
    let safetensors = |p: &[u8]| {
        let n8: [u8; 8] = p[..8].try_into().expect("8 bytes");
        p[8] == b'{' && super::safetensors::SafetensorsFile::header_len("", len, n8).is_ok()
    };
    if peek.len() > 8 && safetensors(&peek) {
        return "; this is a safetensors file: pass the model's folder (config.json beside it)";
    }
    let text = String::from_utf8_lossy(&peek);
    let text = text.trim_start_matches('\u{feff}').trim_start();
    if text.starts_with('<') {
        "; this looks like an HTML page, e.g. an error page served instead of the model"
    } else if text.starts_with('{') || text.starts_with('[') {
        "; this looks like JSON, e.g. an error response, a config.json or a safetensors index (pass the model's folder)"
    } else {
        ""
    }
}

impl GgufFile {
    /// Parse the header (metadata and tensor table) and validate the tensor layout against the
    /// source's length.
    pub fn read(src: &dyn ByteSource) -> Result<Self, GgufError> {
        let name = src.name();
        let len = src.len();
        if len == 0 {
            return Err(GgufError::Empty { name });
        }
        let mut r = Reader {
            src,
            name: name.clone(),
            len,
            pos: 0,
            buf: Vec::new(),
            buf_start: 0,
            elements_left: MAX_ARRAY_ELEMENTS,
        };
        let head = r.bytes(len.min(4), "magic")?.to_vec();
        if head.as_slice() != MAGIC {
            if MAGIC.starts_with(&head) {
                r.pos = 0;
                return Err(r.truncated("magic", 4));
            }
            let found = format!("{:?}", String::from_utf8_lossy(&head));
            return Err(GgufError::BadMagic { name, found, hint: magic_hint(src, len) });
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { name, version });
        }
        // Smallest tensor info: empty name (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
        let n_tensors = r.count("tensor", 32, MAX_TENSORS)?;
        // Smallest key/value: empty key (8) + type (4) + a one-byte value.
        let n_kv = r.count("metadata key/value", 13, MAX_KV)?;

        let mut metadata = prealloc(n_kv);
        let mut meta_index = HashMap::with_capacity(n_kv.min(PREALLOC) as usize);
        for i in 0..n_kv {
            let key = r.string(&format!("metadata key #{i}"))?;
            let what = format!("value of {}", clip(&key));
            let ty = r.value_type(&what)?;
            let value = r.value(ty, 0, &what)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::DuplicateKey { name, key });
            }
            metadata.push((key, value));
        }

        let alignment = match meta_index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(v) => {
                let a = v.as_u64().ok_or_else(|| GgufError::WrongValueType {
                    name: name.clone(),
                    key: "general.alignment".into(),
                    found: v.type_name(),
                    expected: "unsigned integer",
                })?;
                if a == 0 || !a.is_power_of_two() || a > MAX_ALIGNMENT {
                    return Err(GgufError::BadAlignment { name, value: a });
                }
                a
            }
        };

        let mut infos: Vec<TensorInfo> = prealloc(n_tensors);
        let mut tensor_index = HashMap::with_capacity(n_tensors.min(PREALLOC) as usize);
        for i in 0..n_tensors {
            let tname = r.string(&format!("name of tensor #{i}"))?;
            let shown = clip(&tname);
            let what = |field: &str| format!("{field} of tensor {shown}");
            let n_dims = r.u32(&what("dimension count"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::BadDimCount { name, tensor: tname, n_dims });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&what("dimension"))?);
            }
            let ty_id = r.u32(&what("type"))?;
            let rel = r.u64(&what("data offset"))?;
            let ty = GgmlType::from_u32(ty_id).ok_or_else(|| GgufError::UnknownTensorType {
                name: name.clone(),
                tensor: tname.clone(),
                ty: ty_id,
            })?;
            if dims.contains(&0) {
                return Err(GgufError::BadShape { name, tensor: tname, dims, why: "a dimension is zero" });
            }
            // 2^53 keeps element counts exact as f64 and byte counts far from overflow.
            let n_elements = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let Some(n_elements) = n_elements.filter(|&n| n < (1u64 << 53)) else {
                return Err(GgufError::BadShape { name, tensor: tname, dims, why: "element count overflows" });
            };
            if !dims[0].is_multiple_of(ty.block_size()) {
                return Err(GgufError::NotBlockAligned {
                    name,
                    tensor: tname,
                    ne0: dims[0],
                    ty: ty.name(),
                    block: ty.block_size(),
                });
            }
            let Some(n_bytes) = ty.bytes_for(n_elements) else {
                return Err(GgufError::BadShape { name, tensor: tname, dims, why: "byte size overflows" });
            };
            if !rel.is_multiple_of(alignment) {
                return Err(GgufError::MisalignedTensor { name, tensor: tname, offset: rel, alignment });
            }
            if tensor_index.insert(tname.clone(), infos.len()).is_some() {
                return Err(GgufError::DuplicateTensor { name, tensor: tname });
            }
            infos.push(TensorInfo { name: tname, dims, ty, offset: rel, n_bytes, n_elements });
        }

        // pos <= len, so this only fails for a source claiming a length near u64::MAX.
        let data_offset = r.pos.checked_next_multiple_of(alignment).unwrap_or(u64::MAX);
        for t in &mut infos {
            let start = data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(t.n_bytes));
            match (start, end) {
                (Some(s), Some(e)) if e <= len => t.offset = s,
                _ => {
                    return Err(GgufError::TensorOutOfRange {
                        name,
                        tensor: t.name.clone(),
                        start: start.unwrap_or(u64::MAX),
                        end: end.unwrap_or(u64::MAX),
                        len,
                    })
                }
            }
        }
        let mut order: Vec<usize> = (0..infos.len()).collect();
        order.sort_by_key(|&i| infos[i].offset);
        for w in order.windows(2) {
            let (a, b) = (&infos[w[0]], &infos[w[1]]);
            if a.offset + a.n_bytes > b.offset {
                return Err(GgufError::TensorsOverlap { name, a: a.name.clone(), b: b.name.clone() });
            }
        }

        Ok(GgufFile {
            name,
            version,
            alignment,
            data_offset,
            file_len: len,
            metadata,
            tensors: infos,
            meta_index,
            tensor_index,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    fn typed<'v, T>(
        &'v self,
        key: &str,
        expected: &'static str,
        f: impl Fn(&'v Value) -> Option<T>,
    ) -> Result<Option<T>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| GgufError::WrongValueType {
                name: self.name.clone(),
                key: key.to_string(),
                found: v.type_name(),
                expected,
            }),
        }
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.typed(key, "string", |v| v.as_str())
    }
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.typed(key, "unsigned integer", |v| v.as_u64())
    }
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.typed(key, "number", |v| v.as_f64())
    }
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.typed(key, "bool", |v| v.as_bool())
    }
    pub fn get_array(&self, key: &str) -> Result<Option<&[Value]>, GgufError> {
        self.typed(key, "array", |v| v.as_array())
    }
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        self.typed(key, "array of strings", |v| v.as_array()?.iter().map(|x| x.as_str()).collect())
    }
    pub fn get_f64_array(&self, key: &str) -> Result<Option<Vec<f64>>, GgufError> {
        self.typed(key, "array of numbers", |v| v.as_array()?.iter().map(|x| x.as_f64()).collect())
    }
    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>, GgufError> {
        self.typed(key, "array of integers", |v| v.as_array()?.iter().map(|x| x.as_i64()).collect())
    }

    /// Read one tensor's raw bytes.
    pub fn read_tensor(&self, src: &dyn ByteSource, t: &TensorInfo) -> crate::Result<Vec<u8>> {
        // On wasm32 a tensor over 4 GiB cannot be held at all; say so rather than truncate.
        let n = usize::try_from(t.n_bytes).map_err(|_| {
            crate::Error::io(
                src.name(),
                std::io::Error::other(format!("tensor {:?} ({} bytes) exceeds the address space", t.name, t.n_bytes)),
            )
        })?;
        let mut buf = vec![0u8; n];
        src.read_at(t.offset, &mut buf)?;
        Ok(buf)
    }
}

/// Read a GGUF header through an async source, fetching a growing prefix (4 MiB, then x4) until
/// the whole header lies inside it. A broken file is reported once the prefix covers the file or
/// 256 MiB, so a bad header never pulls a multi-gigabyte download.
pub async fn read_gguf_header(src: &dyn AsyncSource) -> crate::Result<GgufFile> {
    const FIRST: u64 = 4 << 20;
    const CAP: u64 = 256 << 20;
    let total = src.total_len();
    let mut n = total.min(FIRST);
    loop {
        let data = src.read(0, n as usize).await?;
        let prefix = PrefixSource { data, total, name: src.source_name() };
        let done = n == total || n >= CAP;
        match GgufFile::read(&prefix) {
            Ok(g) if g.data_offset <= n || done => return Ok(g),
            Err(e) if done => return Err(e.into()),
            _ => n = total.min(n * 4),
        }
    }
}

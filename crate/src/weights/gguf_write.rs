//! GGUF writer (v3 layout; v2 is byte-identical apart from the version field).
//!
//! The header (metadata and tensor table) is built in memory, since it is small, but tensor data
//! can be streamed: register tensors with [`GgufWriter::add_tensor_info`] and supply their bytes
//! from a callback in [`GgufWriter::write_with`], so a multi-gigabyte file of random weights never
//! needs more than one tensor in memory.
//!
//! The writer refuses to produce files our reader would reject (bad shapes, wrong data sizes,
//! duplicate tensors, mixed-type arrays); tests that need broken files patch bytes themselves.

use super::gguf::{Value, MAX_ALIGNMENT};
use super::quant::GgmlType;
use std::io::Write;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
const ALIGNMENT_KEY: &str = "general.alignment";

#[derive(Debug, thiserror::Error)]
pub enum GgufWriteError {
    #[error("write failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata {key:?}: {why}")]
    BadValue { key: String, why: String },
    #[error("alignment {0} is not a power of two up to 1 MiB")]
    BadAlignment(u64),
    #[error("tensor {tensor:?}: {why}")]
    BadTensor { tensor: String, why: String },
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("tensor {tensor:?}: expected {expected} bytes of data, got {got}")]
    DataSize { tensor: String, expected: u64, got: u64 },
    #[error("tensor {0:?} has no data: pass it to add_tensor or supply it from write_with's callback")]
    MissingData(String),
}

/// A tensor as it will be laid out in the file.
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset relative to the start of the data section, as stored in the tensor table.
    pub rel_offset: u64,
    pub n_bytes: u64,
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    n_bytes: u64,
    data: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<Entry>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter { version: 3, metadata: Vec::new(), tensors: Vec::new() }
    }

    /// The version field is written as given: any value, so tests can produce files the reader
    /// must refuse. The layout is the v2/v3 one regardless.
    pub fn version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Sets `general.alignment` (written as u32, as llama.cpp expects), which also drives the
    /// layout of tensor data.
    pub fn alignment(&mut self, alignment: u64) -> Result<&mut Self, GgufWriteError> {
        if !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
            return Err(GgufWriteError::BadAlignment(alignment));
        }
        self.add(ALIGNMENT_KEY, Value::U32(alignment as u32))
    }

    /// Adds a key, or replaces its value in place if it exists (keeping file order stable).
    /// Arrays must be homogeneous, as GGUF stores one element type per array; an empty array is
    /// written with element type u8, which reads back as an empty array all the same.
    pub fn add(&mut self, key: impl Into<String>, value: Value) -> Result<&mut Self, GgufWriteError> {
        let key = key.into();
        if let Err(why) = check_value(&value) {
            return Err(GgufWriteError::BadValue { key, why });
        }
        if key == ALIGNMENT_KEY {
            match value.as_u64() {
                Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => {}
                _ => return Err(GgufWriteError::BadValue { key, why: "must be a power of two up to 1 MiB".into() }),
            }
        }
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        Ok(self)
    }

    /// Adds a tensor with its bytes held by the writer.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufWriteError> {
        self.push_tensor(name.into(), dims, ty, Some(data))
    }

    /// Registers a tensor whose bytes [`GgufWriter::write_with`]'s callback will supply.
    pub fn add_tensor_info(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
    ) -> Result<&mut Self, GgufWriteError> {
        self.push_tensor(name.into(), dims, ty, None)
    }

    fn push_tensor(
        &mut self,
        name: String,
        dims: &[u64],
        ty: GgmlType,
        data: Option<Vec<u8>>,
    ) -> Result<&mut Self, GgufWriteError> {
        let bad = |why: String| GgufWriteError::BadTensor { tensor: name.clone(), why };
        if dims.is_empty() || dims.len() > 4 {
            return Err(bad(format!("{} dimensions (1 to 4 allowed)", dims.len())));
        }
        if dims.contains(&0) {
            return Err(bad(format!("shape {dims:?} has a zero dimension")));
        }
        if !dims[0].is_multiple_of(ty.block_size()) {
            return Err(bad(format!("first dimension {} is not a multiple of the {} block size", dims[0], ty.name())));
        }
        let n_bytes = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| ty.bytes_for(n))
            .ok_or_else(|| bad(format!("shape {dims:?} overflows")))?;
        if let Some(d) = &data {
            if d.len() as u64 != n_bytes {
                return Err(GgufWriteError::DataSize { tensor: name, expected: n_bytes, got: d.len() as u64 });
            }
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufWriteError::DuplicateTensor(name));
        }
        self.tensors.push(Entry { name, dims: dims.to_vec(), ty, n_bytes, data });
        Ok(self)
    }

    fn layout_alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == ALIGNMENT_KEY)
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Where each tensor's data will go, in file order.
    pub fn plan(&self) -> Vec<PlannedTensor> {
        let align = self.layout_alignment();
        let mut off = 0u64;
        self.tensors
            .iter()
            .map(|t| {
                let p = PlannedTensor {
                    name: t.name.clone(),
                    dims: t.dims.clone(),
                    ty: t.ty,
                    rel_offset: off,
                    n_bytes: t.n_bytes,
                };
                off = (off + t.n_bytes).next_multiple_of(align);
                p
            })
            .collect()
    }

    /// The header: everything up to (not including) the padding before the data section.
    fn header(&self, plan: &[PlannedTensor]) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.version.to_le_bytes());
        h.extend_from_slice(&(plan.len() as u64).to_le_bytes());
        h.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut h, k);
            h.extend_from_slice(&type_id(v).to_le_bytes());
            put_value(&mut h, v);
        }
        for t in plan {
            put_str(&mut h, &t.name);
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.ty.id().to_le_bytes());
            h.extend_from_slice(&t.rel_offset.to_le_bytes());
        }
        h
    }

    /// Writes the file. Tensors added with `add_tensor` are written from the writer's copy; for
    /// the others `fill` must write exactly `n_bytes` bytes to the writer it is given.
    /// Returns the number of bytes written.
    pub fn write_with<W: Write>(
        &self,
        w: &mut W,
        mut fill: impl FnMut(&PlannedTensor, &mut dyn Write) -> std::io::Result<()>,
    ) -> Result<u64, GgufWriteError> {
        let align = self.layout_alignment();
        let plan = self.plan();
        let header = self.header(&plan);
        let data_start = (header.len() as u64).next_multiple_of(align);
        w.write_all(&header)?;
        pad(w, data_start - header.len() as u64)?;
        let mut pos = 0u64;
        for (t, e) in plan.iter().zip(&self.tensors) {
            pad(w, t.rel_offset - pos)?;
            match &e.data {
                Some(d) => w.write_all(d)?,
                None => {
                    let mut counted = Counted { inner: &mut *w, n: 0 };
                    fill(t, &mut counted)?;
                    if counted.n != t.n_bytes {
                        return Err(GgufWriteError::DataSize {
                            tensor: t.name.clone(),
                            expected: t.n_bytes,
                            got: counted.n,
                        });
                    }
                }
            }
            pos = t.rel_offset + t.n_bytes;
        }
        // gguf-py pads after the last tensor too; readers don't need it, but matching it keeps
        // files byte-comparable.
        let end = pos.next_multiple_of(align);
        pad(w, end - pos)?;
        Ok(data_start + end)
    }

    /// Writes the file; every tensor must have been given its data.
    pub fn write<W: Write>(&self, w: &mut W) -> Result<u64, GgufWriteError> {
        if let Some(t) = self.tensors.iter().find(|t| t.data.is_none()) {
            return Err(GgufWriteError::MissingData(t.name.clone()));
        }
        self.write_with(w, |_, _| unreachable!("every tensor has data"))
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufWriteError> {
        let mut out = Vec::new();
        self.write(&mut out)?;
        Ok(out)
    }
}

struct Counted<'a, W: Write> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn pad<W: Write>(w: &mut W, n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 64] = [0; 64];
    let mut left = n;
    while left > 0 {
        let k = left.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..k])?;
        left -= k as u64;
    }
    Ok(())
}

/// GGUF value type ids.
fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn check_value(v: &Value) -> Result<(), String> {
    let Value::Array(items) = v else { return Ok(()) };
    if let Some(first) = items.first() {
        let ty = type_id(first);
        if let Some(bad) = items.iter().find(|x| type_id(x) != ty) {
            return Err(format!("array mixes {} and {}", first.type_name(), bad.type_name()));
        }
    }
    items.iter().try_for_each(check_value)
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn put_value(h: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => h.push(*x as u8),
        Value::String(s) => put_str(h, s),
        Value::Array(items) => {
            h.extend_from_slice(&items.first().map_or(0, type_id).to_le_bytes());
            h.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for x in items {
                put_value(h, x);
            }
        }
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
    }
}

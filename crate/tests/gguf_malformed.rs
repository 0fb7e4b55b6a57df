//! Broken GGUF files: each must be refused with the right `GgufError`, never a panic, a hang or
//! an allocation the file's bytes do not back.

use ferrolm::weights::gguf::{GgufError, GgufFile, Value, MAX_ARRAY_ELEMENTS, MAX_KV};
use ferrolm::weights::gguf_write::GgufWriter;
use ferrolm::weights::quant::GgmlType;
use ferrolm::weights::{ByteSource, MemSource};

const NAME: &str = "broken.gguf";

fn read(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::read(&MemSource::new(bytes, NAME))
}

fn err(bytes: Vec<u8>) -> GgufError {
    let e = read(bytes).expect_err("a broken file must be refused");
    let msg = e.to_string();
    assert!(msg.starts_with(NAME), "message must name the file: {msg}");
    e
}

/// Raw little-endian GGUF bytes, for files the writer refuses to produce.
#[derive(Clone)]
struct Raw(Vec<u8>);

const T_U8: u32 = 0;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_U32: u32 = 4;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;

impl Raw {
    fn new(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        Raw(b"GGUF".to_vec()).u32(version).u64(n_tensors).u64(n_kv)
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn str(self, s: &[u8]) -> Self {
        self.u64(s.len() as u64).bytes(s)
    }
    fn kv(self, key: &str, ty: u32) -> Self {
        self.str(key.as_bytes()).u32(ty)
    }
    fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        let mut r = self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Pads to `align` (where the data section starts) and appends `n` data bytes.
    fn data(mut self, align: usize, n: usize) -> Self {
        let start = self.0.len().next_multiple_of(align);
        self.0.resize(start + n, 0xAA);
        self
    }
    fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

/// A one-tensor file whose tensor table entry is `dims`/`ty`/`offset`, with 64 data bytes.
fn one_tensor(dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    Raw::new(3, 1, 0).tensor("blk.0.w", dims, ty, offset).data(32, 64).0
}

/// A small valid file that exercises every part of the header.
fn small_valid() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("llama".into())).unwrap();
    w.alignment(16).unwrap();
    w.add("tokens", Value::Array(vec![Value::String("a".into()), Value::String("bc".into())])).unwrap();
    w.add("nested", Value::Array(vec![Value::Array(vec![Value::I16(-1)])])).unwrap();
    w.add("f", Value::F32(1.0)).unwrap();
    w.add_tensor("w", &[32], GgmlType::Q8_0, (0..34).collect()).unwrap();
    w.add_tensor("b", &[4, 2], GgmlType::F16, (0..16).collect()).unwrap();
    w.to_bytes().unwrap()
}

#[test]
fn valid_baselines_parse() {
    read(small_valid()).unwrap();
    read(one_tensor(&[16], 0, 0)).unwrap();
}

#[test]
fn not_gguf_at_all() {
    assert!(matches!(err(vec![]), GgufError::Empty { .. }));
    assert!(matches!(err(b"GGML\x03\0\0\0".to_vec()), GgufError::BadMagic { hint: "", .. }));
    assert!(matches!(err(vec![0xFF]), GgufError::BadMagic { .. }));
    let html = b"\n<!DOCTYPE html><html><body>404 Not Found</body></html>".to_vec();
    assert!(matches!(err(html), GgufError::BadMagic { hint, .. } if hint.contains("HTML")));
    let json = br#"{"error": "Repository not found"}"#.to_vec();
    assert!(matches!(err(json), GgufError::BadMagic { hint, .. } if hint.contains("JSON")));
    // A prefix of the magic is a truncated GGUF file, not a foreign format.
    for n in 1..4 {
        assert!(matches!(err(b"GGUF"[..n].to_vec()), GgufError::Truncated { .. }), "{n}");
    }
}

#[test]
fn unsupported_versions() {
    for v in [0, 1, 4, 0x0300_0000, u32::MAX] {
        let e = err(Raw::new(v, 0, 0).0);
        assert!(matches!(e, GgufError::UnsupportedVersion { version, .. } if version == v), "{e}");
        assert_eq!(e.to_string().contains("big-endian"), v == 0x0300_0000, "{e}");
    }
}

#[test]
fn truncation_names_where_the_file_ends() {
    // A file cut right after the version ("needs 8 bytes, the file has 8" read as a contradiction).
    let e = err(Raw::new(3, 0, 0).0[..8].to_vec());
    assert_eq!(
        e.to_string(),
        format!("{NAME}: truncated: tensor count at byte 8 needs 8 bytes, but the file ends at byte 8")
    );
}

#[test]
fn truncated_at_every_byte() {
    let full = small_valid();
    let f = read(full.clone()).unwrap();
    let needed = f.tensors.iter().map(|t| t.offset + t.n_bytes).max().unwrap() as usize;
    for n in 0..full.len() {
        match read(full[..n].to_vec()) {
            Ok(_) => assert!(n >= needed, "prefix of {n} bytes parsed"),
            Err(e) => {
                assert!(n < needed, "prefix of {n} bytes: {e}");
                assert!(
                    matches!(
                        e,
                        GgufError::Empty { .. }
                            | GgufError::Truncated { .. }
                            | GgufError::CountTooLarge { .. }
                            | GgufError::TensorOutOfRange { .. }
                    ),
                    "prefix of {n} bytes: {e}"
                );
            }
        }
    }
}

#[test]
fn absurd_counts() {
    for n in [u64::MAX, 1 << 40, 1 << 32] {
        assert!(matches!(err(Raw::new(3, n, 0).zeros(64).0), GgufError::CountTooLarge { count, .. } if count == n));
        assert!(matches!(err(Raw::new(3, 0, n).zeros(64).0), GgufError::CountTooLarge { count, .. } if count == n));
        let arr = Raw::new(3, 0, 1).kv("a", T_ARRAY).u32(T_U8).u64(n).zeros(64).0;
        assert!(matches!(err(arr), GgufError::CountTooLarge { count, .. } if count == n));
        let arr = Raw::new(3, 0, 1).kv("a", T_ARRAY).u32(T_ARRAY).u64(n).zeros(64).0;
        assert!(matches!(err(arr), GgufError::CountTooLarge { count, .. } if count == n));
    }
    // 3 strings need at least 24 bytes; 23 remain.
    let arr = Raw::new(3, 0, 1).kv("a", T_ARRAY).u32(T_STRING).u64(3).zeros(23).0;
    assert!(matches!(err(arr), GgufError::CountTooLarge { count: 3, remaining: 23, .. }));
}

#[test]
fn counts_the_bytes_back_but_over_the_limits() {
    // Zero bytes parse as valid 13-byte key/values, so only the limit can stop these.
    let e = err(Raw::new(3, 0, MAX_KV + 1).zeros(13 * (MAX_KV as usize + 1)).0);
    assert!(matches!(e, GgufError::LimitExceeded { limit: MAX_KV, .. }), "{e}");
    let n = MAX_ARRAY_ELEMENTS + 1;
    let e = err(Raw::new(3, 0, 1).kv("big", T_ARRAY).u32(T_U8).u64(n).zeros(n as usize).0);
    assert!(matches!(e, GgufError::LimitExceeded { .. }), "{e}");
    assert!(e.to_string().contains("\"big\""), "{e}");
}

#[test]
fn absurd_string_lengths() {
    let e = err(Raw::new(3, 0, 1).u64(u64::MAX).zeros(64).0);
    assert!(matches!(e, GgufError::StringTooLong { len: u64::MAX, .. }), "{e}");
    let e = err(Raw::new(3, 0, 1).u64(1000).zeros(64).0);
    assert!(matches!(e, GgufError::Truncated { need: 1000, .. }), "{e}");
    let e = err(Raw::new(3, 0, 1).kv("s", T_STRING).u64(1 << 40).zeros(64).0);
    assert!(matches!(e, GgufError::StringTooLong { len: 0x100_0000_0000, .. }), "{e}");
    let e = err(Raw::new(3, 0, 1).kv("s", T_ARRAY).u32(T_STRING).u64(1).u64(u64::MAX - 1).zeros(64).0);
    assert!(matches!(e, GgufError::StringTooLong { .. }), "{e}");
    let e = err(Raw::new(3, 1, 0).u64(u64::MAX).zeros(64).0);
    assert!(matches!(e, GgufError::StringTooLong { .. }), "{e}");
}

#[test]
fn invalid_value_types() {
    for ty in [13, 14, 0x100, u32::MAX] {
        let e = err(Raw::new(3, 0, 1).kv("k", ty).zeros(64).0);
        assert!(matches!(e, GgufError::InvalidValueType { ty: t, offset: 33, .. } if t == ty), "{e}");
        assert!(e.to_string().contains("\"k\""), "{e}");
        let e = err(Raw::new(3, 0, 1).kv("k", T_ARRAY).u32(ty).u64(1).zeros(64).0);
        assert!(matches!(e, GgufError::InvalidValueType { ty: t, offset: 37, .. } if t == ty), "{e}");
        // Inside a nested array, after a valid first element.
        let e = err(Raw::new(3, 0, 1).kv("k", T_ARRAY).u32(T_ARRAY).u64(2).u32(T_U8).u64(0).u32(ty).u64(0).zeros(64).0);
        assert!(matches!(e, GgufError::InvalidValueType { ty: t, .. } if t == ty), "{e}");
    }
}

#[test]
fn nesting_depth() {
    let nest = |levels: usize| {
        let mut r = Raw::new(3, 0, 1).kv("deep", T_ARRAY);
        for _ in 1..levels {
            r = r.u32(T_ARRAY).u64(1);
        }
        r.u32(T_U8).u64(1).bytes(&[7]).zeros(64).0
    };
    let ok = read(nest(4)).unwrap();
    assert!(matches!(ok.get("deep"), Some(Value::Array(_))));
    for levels in [5, 6, 1000] {
        let e = err(nest(levels));
        assert!(matches!(e, GgufError::NestingTooDeep { .. }), "{levels}: {e}");
    }
}

#[test]
fn duplicates() {
    let e = err(Raw::new(3, 0, 2).kv("k", T_U32).u32(1).kv("k", T_U8).bytes(&[1]).0);
    assert!(matches!(&e, GgufError::DuplicateKey { key, .. } if key == "k"), "{e}");
    let two = Raw::new(3, 2, 0).tensor("t", &[8], 0, 0).tensor("t", &[8], 0, 32).data(32, 64).0;
    assert!(matches!(err(two), GgufError::DuplicateTensor { tensor, .. } if tensor == "t"));
}

#[test]
fn bad_alignment() {
    let with = |r: Raw| r.tensor("t", &[8], 0, 0).data(32, 32).0;
    for a in [0u32, 3, 48, 1 << 21] {
        let e = err(with(Raw::new(3, 1, 1).kv("general.alignment", T_U32).u32(a)));
        assert!(matches!(e, GgufError::BadAlignment { value, .. } if value == a as u64), "{a}: {e}");
    }
    let e = err(with(Raw::new(3, 1, 1).kv("general.alignment", T_U64).u64(1 << 40)));
    assert!(matches!(e, GgufError::BadAlignment { value: 0x100_0000_0000, .. }), "{e}");
    for r in [
        Raw::new(3, 1, 1).kv("general.alignment", T_STRING).str(b"32"),
        Raw::new(3, 1, 1).kv("general.alignment", T_I32).u32(-32i32 as u32),
        Raw::new(3, 1, 1).kv("general.alignment", T_F32).u32(32f32.to_bits()),
        Raw::new(3, 1, 1).kv("general.alignment", T_ARRAY).u32(T_U32).u64(1).u32(32),
    ] {
        let e = err(with(r));
        assert!(matches!(&e, GgufError::WrongValueType { key, .. } if key == "general.alignment"), "{e}");
    }
}

#[test]
fn bad_shapes() {
    for dims in [&[][..], &[1, 1, 1, 1, 1][..]] {
        let e = err(one_tensor(dims, 0, 0));
        assert!(matches!(e, GgufError::BadDimCount { n_dims, .. } if n_dims as usize == dims.len()), "{e}");
    }
    let e = err(Raw::new(3, 1, 0).str(b"t").u32(u32::MAX).zeros(64).0);
    assert!(matches!(e, GgufError::BadDimCount { n_dims: u32::MAX, .. }), "{e}");
    assert!(matches!(err(one_tensor(&[8, 0], 0, 0)), GgufError::BadShape { .. }));
    assert!(matches!(err(one_tensor(&[0], 2, 0)), GgufError::BadShape { .. }));
    for dims in [&[1 << 32, 1 << 32, 2][..], &[u64::MAX, u64::MAX][..], &[1 << 27, 1 << 26][..]] {
        let e = err(one_tensor(dims, 0, 0));
        assert!(matches!(e, GgufError::BadShape { .. }), "{dims:?}: {e}");
    }
    for ty in [4, 5, 31, 32, 33, 37, 99, u32::MAX] {
        let e = err(one_tensor(&[32], ty, 0));
        assert!(matches!(e, GgufError::UnknownTensorType { ty: t, .. } if t == ty), "{e}");
    }
    let e = err(one_tensor(&[31], GgmlType::Q8_0.id(), 0));
    assert!(matches!(e, GgufError::NotBlockAligned { ne0: 31, block: 32, .. }), "{e}");
    let e = err(one_tensor(&[128, 2], GgmlType::Q4_K.id(), 0));
    assert!(matches!(e, GgufError::NotBlockAligned { block: 256, .. }), "{e}");
}

#[test]
fn bad_offsets() {
    let e = err(one_tensor(&[8], 0, 4));
    assert!(matches!(e, GgufError::MisalignedTensor { offset: 4, alignment: 32, .. }), "{e}");
    assert!(e.to_string().contains("blk.0.w"), "{e}");
    // With alignment 1 the same offset is fine.
    let ok = Raw::new(3, 1, 1).kv("general.alignment", T_U32).u32(1).tensor("t", &[8], 0, 4).data(1, 36).0;
    read(ok).unwrap();

    let e = err(one_tensor(&[8], 0, 1024));
    assert!(matches!(e, GgufError::TensorOutOfRange { .. }), "{e}");
    let e = err(one_tensor(&[32], 0, 0)); // 128 bytes, 64 present
    assert!(matches!(e, GgufError::TensorOutOfRange { .. }), "{e}");
    // Data offset + relative offset overflows.
    let e = err(one_tensor(&[8], 0, !31));
    assert!(matches!(e, GgufError::TensorOutOfRange { start: u64::MAX, .. }), "{e}");
    // Start fits, start + size overflows.
    let header_len = Raw::new(3, 1, 0).tensor("blk.0.w", &[8], 0, 0).0.len() as u64;
    let data_offset = header_len.next_multiple_of(32);
    let e = err(one_tensor(&[8], 0, (u64::MAX - data_offset) & !31));
    assert!(matches!(e, GgufError::TensorOutOfRange { end: u64::MAX, start, .. } if start != u64::MAX), "{e}");
}

#[test]
fn overlapping_tensors() {
    let same = Raw::new(3, 2, 0).tensor("a", &[8], 0, 0).tensor("b", &[8], 0, 0).data(32, 64).0;
    assert!(matches!(err(same), GgufError::TensorsOverlap { .. }));
    // Listed out of order, and b begins inside a.
    let partial = Raw::new(3, 2, 0).tensor("b", &[8], 0, 32).tensor("a", &[16], 0, 0).data(32, 96).0;
    let e = err(partial);
    assert!(matches!(&e, GgufError::TensorsOverlap { a, b, .. } if a == "a" && b == "b"), "{e}");
}

#[test]
fn invalid_utf8() {
    let bad = b"\xff\xfe";
    for r in [
        Raw::new(3, 0, 1).str(bad).u32(T_U8).bytes(&[0]),
        Raw::new(3, 0, 1).kv("k", T_STRING).str(bad),
        Raw::new(3, 0, 1).kv("k", T_ARRAY).u32(T_STRING).u64(2).str(b"ok").str(b"a\xc3"),
        Raw::new(3, 1, 0).str(bad).u32(1).u64(8).u32(0).u64(0).data(32, 32),
    ] {
        let e = err(r.0);
        assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e}");
    }
}

/// A source whose reads fail past a point, like a network stream that dies.
struct Flaky(Vec<u8>, u64);

impl ByteSource for Flaky {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> ferrolm::Result<()> {
        if offset + buf.len() as u64 > self.1 {
            return Err(ferrolm::Error::io("flaky", std::io::Error::other("connection reset")));
        }
        buf.copy_from_slice(&self.0[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn name(&self) -> String {
        NAME.into()
    }
}

#[test]
fn io_errors_are_reported() {
    let e = GgufFile::read(&Flaky(small_valid(), 10)).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }), "{e}");
}

/// xorshift64*, so the flip test needs no extra dependency and replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let base = small_valid();
    let header_len = read(base.clone()).unwrap().data_offset as usize;
    let mut rng = Rng(0x5EED_F00D);
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..5000 {
        let mut b = base.clone();
        for _ in 0..1 + rng.below(4) {
            // Mostly hit the header, where the parsing is.
            let at = if rng.below(8) == 0 { rng.below(b.len()) } else { rng.below(header_len) };
            b[at] = match rng.below(3) {
                0 => b[at] ^ (1 << rng.below(8)),
                1 => 0xFF,
                _ => rng.next() as u8,
            };
        }
        if rng.below(10) == 0 {
            b.truncate(rng.below(b.len() + 1));
        }
        let src = MemSource::new(b, NAME);
        match GgufFile::read(&src) {
            Ok(f) => {
                ok += 1;
                for t in &f.tensors {
                    assert_eq!(f.read_tensor(&src, t).unwrap().len() as u64, t.n_bytes);
                }
            }
            Err(e) => {
                refused += 1;
                assert!(e.to_string().starts_with(NAME), "{e}");
            }
        }
    }
    eprintln!("byte flips: {ok} parsed, {refused} refused");
    assert!(refused > 1000, "the mutations should break most files");
}

#[test]
fn long_key_with_many_nested_arrays_stays_linear() {
    // Error context naming the key is built per nested array; with the whole 2 MiB key copied
    // each time this would be ~400 GB of copying.
    let key = "k".repeat(2 << 20);
    let n = 100_000;
    let build = |last_ty: u32| {
        let mut r = Raw::new(3, 0, 1).kv(&key, T_ARRAY).u32(T_ARRAY).u64(n);
        for _ in 1..n {
            r = r.u32(T_U8).u64(0);
        }
        r.u32(last_ty).u64(0).0
    };
    let start = std::time::Instant::now();
    let f = read(build(T_U8)).unwrap();
    assert_eq!(f.get(&key).and_then(|v| v.as_array()).map(|a| a.len()), Some(n as usize));
    assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
    // The message shows the key clipped, not 2 MiB of it.
    let e = err(build(13)).to_string();
    assert!(e.len() < 500 && e.contains("kkkk") && e.contains("2097152 bytes"), "{}", &e[..e.len().min(500)]);
}

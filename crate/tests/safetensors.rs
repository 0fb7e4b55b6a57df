//! safetensors reader: files written by the reference `safetensors` crate read back identically,
//! every malformed header gives its typed error, and corrupted files never panic. The fuzz loops
//! are differential: our reader accepts a file exactly when the reference crate does (apart from
//! duplicate keys, which only we detect).

use ferrolm::gpu::block_on;
use ferrolm::weights::quant::SplitMix64;
use ferrolm::weights::safetensors::{SafetensorsError as E, SafetensorsFile, SafetensorsModel, ShardIndex, StDtype};
use ferrolm::weights::{ByteSource, MemSource};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;

fn read(bytes: &[u8]) -> Result<SafetensorsFile, E> {
    let src = MemSource::new(bytes.to_vec(), "t.safetensors");
    let sync = SafetensorsFile::read(&src);
    // The asynchronous reader (the browser's path) validates identically.
    let via_async = ferrolm::gpu::block_on(SafetensorsFile::read_async(&src));
    let show = |r: &Result<SafetensorsFile, E>| match r {
        Ok(f) => format!("{:?}", (f.header_len, f.data_offset, &f.metadata, &f.tensors)),
        Err(e) => format!("{e:?}"),
    };
    assert_eq!(show(&sync), show(&via_async), "sync and async readers disagree");
    sync
}

/// A file from a raw header string and a data section of `data_len` bytes.
fn raw(header: &str, data_len: usize) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend((0..data_len).map(|i| i as u8));
    v
}

fn bytes_of(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// name, dtype, shape, bytes
type Spec = (String, Dtype, Vec<usize>, Vec<u8>);

/// A varied file written by the oracle, and what was put in it.
fn oracle_file(seed: u64) -> (Vec<u8>, Vec<Spec>) {
    let mut rng = SplitMix64(seed);
    let specs: Vec<(&str, Dtype, Vec<usize>)> = vec![
        ("model.embed_tokens.weight", Dtype::F32, vec![7, 5]),
        ("model.layers.0.self_attn.q_proj.weight", Dtype::F16, vec![4, 6]),
        ("model.layers.0.mlp.up_proj.weight", Dtype::BF16, vec![3, 2, 5]),
        ("scalar", Dtype::F32, vec![]),
        ("empty", Dtype::F32, vec![0, 4]),
        ("position_ids", Dtype::I64, vec![9]),
        ("mask", Dtype::U8, vec![3]),
        ("fp8", Dtype::F8_E4M3, vec![2, 2]),
    ];
    let mut out = Vec::new();
    for (name, dt, shape) in specs {
        let n: usize = shape.iter().product::<usize>() * dt.bitsize() / 8;
        let mut data = bytes_of(&mut rng, n);
        if matches!(dt, Dtype::F16 | Dtype::BF16 | Dtype::F32) {
            // Finite values so round-trip comparisons are meaningful; keep random bit patterns otherwise.
            let w = dt.bitsize() / 8;
            for c in data.chunks_mut(w) {
                c[w - 1] &= 0x3f;
            }
        }
        out.push((name.to_string(), dt, shape, data));
    }
    let views: Vec<(String, TensorView)> =
        out.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    (safetensors::serialize(views, Some(meta)).unwrap(), out)
}

#[test]
fn oracle_files_read_back_identically() {
    for seed in 0..4 {
        let (file, specs) = oracle_file(seed);
        let src = MemSource::new(file.clone(), "o.safetensors");
        let st = SafetensorsFile::read(&src).unwrap();
        assert_eq!(st.metadata, vec![("format".to_string(), "pt".to_string())]);
        assert_eq!(st.tensors.len(), specs.len());
        let oracle = safetensors::SafeTensors::deserialize(&file).unwrap();
        for (name, dt, shape, data) in &specs {
            let t = st.tensor(name).unwrap();
            assert_eq!(t.dtype.name(), format!("{dt}"), "{name}");
            assert_eq!(t.shape, shape.iter().map(|&d| d as u64).collect::<Vec<_>>());
            let bytes = st.read_tensor_bytes(&src, t).unwrap();
            assert_eq!(&bytes, data, "{name}");
            assert_eq!(bytes, oracle.tensor(name).unwrap().data(), "{name}");
            let f = st.read_tensor_f32(&src, t);
            let expect: Option<Vec<f32>> = match dt {
                Dtype::F32 => Some(data.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()),
                Dtype::F16 => Some(data.chunks(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()),
                Dtype::BF16 => Some(data.chunks(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect()),
                _ => None,
            };
            match expect {
                Some(e) => assert_eq!(f.unwrap(), e, "{name}"),
                None => {
                    assert!(matches!(t.dtype, StDtype::Other { .. }));
                    let msg = f.unwrap_err().to_string();
                    assert!(msg.contains(name.as_str()) && msg.contains(&format!("{dt}")), "{msg}");
                }
            }
        }
    }
}

fn check(bytes: &[u8], want: fn(&E) -> bool) {
    match read(bytes) {
        Ok(_) => panic!("accepted: {:?}", String::from_utf8_lossy(bytes)),
        Err(e) => {
            assert!(want(&e), "wrong error {e:?} for {:?}", String::from_utf8_lossy(&bytes[..bytes.len().min(200)]))
        }
    }
}

#[test]
fn malformed_headers_give_typed_errors() {
    let t = |name: &str, dtype: &str, shape: &str, b: u64, e: u64| {
        format!(r#""{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{b},{e}]}}"#)
    };
    let ok = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("b", "F16", "[2,2]", 8, 16));
    assert!(read(&raw(&ok, 16)).is_ok());
    check(&[], |e| matches!(e, E::Empty { .. }));
    check(&[1, 0, 0], |e| matches!(e, E::TooShort { len: 3, .. }));
    let mut huge = (200_000_000u64).to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    check(&huge, |e| matches!(e, E::BadHeaderLength { limit: 100_000_000, .. }));
    check(&raw("{}", 0)[..9], |e| matches!(e, E::BadHeaderLength { header_len: 2, limit: 1, .. }));
    let html = b"<!DOCTYPE html><html><body>Not found</body></html>";
    check(html, |e| matches!(e, E::BadHeaderLength { hint, .. } if hint.contains("HTML")));
    check(
        br#"{"weight_map": {"a": "x.safetensors"}}"#,
        |e| matches!(e, E::BadHeaderLength { hint, .. } if hint.contains("JSON")),
    );
    check(&raw("{\"a\": ", 0), |e| matches!(e, E::BadJson { .. }));
    check(&raw("not json", 0), |e| matches!(e, E::BadJson { .. }));
    check(&raw("[1, 2]", 0), |e| matches!(e, E::NotAnObject { found: "an array", .. }));
    check(&raw("\"x\"", 0), |e| matches!(e, E::NotAnObject { .. }));
    check(
        &raw(&format!("{{{}}}", t("a", "F33", "[2]", 0, 8)), 8),
        |e| matches!(e, E::UnknownDtype { tensor, dtype, .. } if tensor == "a" && dtype == "F33"),
    );
    let big = "[4294967296,4294967296,4294967296]";
    check(
        &raw(&format!("{{{}}}", t("a", "F32", big, 0, 8)), 8),
        |e| matches!(e, E::BadShape { tensor, .. } if tensor == "a"),
    );
    let deep = format!("[{}2]", "1,".repeat(100_000));
    check(
        &raw(&format!("{{{}}}", t("a", "F32", &deep, 0, 8)), 8),
        |e| matches!(e, E::BadShape { why, .. } if why.contains("dimensions")),
    );
    check(&raw(&format!("{{{}}}", t("a", "F32", "[-1]", 0, 8)), 8), |e| matches!(e, E::BadEntry { .. }));
    check(&raw(&format!("{{{}}}", t("a", "F32", "[1.5]", 0, 8)), 8), |e| matches!(e, E::BadEntry { .. }));
    check(&raw(&format!("{{{}}}", t("a", "F4", "[3]", 0, 2)), 2), |e| matches!(e, E::BadShape { .. }));
    check(&raw(&format!("{{{}}}", t("a", "F32", "[2]", 0, 16)), 8), |e| matches!(e, E::BadOffsets { .. }));
    check(&raw(&format!("{{{}}}", t("a", "F32", "[2]", 8, 16)), 8), |e| matches!(e, E::BadOffsets { .. }));
    check(
        &raw(&format!("{{{}}}", t("a", "F32", "[0]", 8, 0)), 8),
        |e| matches!(e, E::BadOffsets { why, .. } if why.contains("after")),
    );
    check(
        &raw(&format!("{{{}}}", t("a", "F32", "[2]", 0, 12)), 12),
        |e| matches!(e, E::BadOffsets { why, .. } if why.contains("needs 8")),
    );
    let overlap = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("b", "F32", "[2]", 4, 12));
    check(&raw(&overlap, 12), |e| matches!(e, E::Overlap { a, b, .. } if a == "a" && b == "b"));
    let same = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("b", "F32", "[2]", 0, 8));
    check(&raw(&same, 8), |e| matches!(e, E::Overlap { .. }));
    let dup = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("a", "F32", "[2]", 8, 16));
    check(&raw(&dup, 16), |e| matches!(e, E::DuplicateKey { key, .. } if key == "a"));
    let dup_meta = format!(r#"{{"__metadata__":{{"k":"1","k":"2"}},{}}}"#, t("a", "F32", "[2]", 0, 8));
    check(&raw(&dup_meta, 8), |e| matches!(e, E::DuplicateKey { key, .. } if key == "k"));
    let bad_meta = format!(r#"{{"__metadata__":{{"k":1}},{}}}"#, t("a", "F32", "[2]", 0, 8));
    check(&raw(&bad_meta, 8), |e| matches!(e, E::BadMetadata { .. }));
    let hole = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("b", "F32", "[2]", 12, 20));
    check(&raw(&hole, 20), |e| matches!(e, E::Hole { start: 8, end: 12, .. }));
    check(&raw(&format!("{{{}}}", t("a", "F32", "[2]", 4, 12)), 12), |e| matches!(e, E::Hole { start: 0, end: 4, .. }));
    check(&raw(&ok, 17), |e| matches!(e, E::TrailingBytes { extra: 1, .. }));
    check(&raw(r#"{"a": 3}"#, 0), |e| matches!(e, E::BadEntry { .. }));
    check(
        &raw(r#"{"a": {"dtype":"F32","shape":[1]}}"#, 4),
        |e| matches!(e, E::BadEntry { msg, .. } if msg.contains("data_offsets")),
    );
    check(&raw(r#"{"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}"#, 4), |e| matches!(e, E::BadEntry { .. }));
    // Accepted: spaces after the JSON (the writer pads to 8 bytes), empty header, unknown fields, null metadata.
    assert!(read(&raw("{}    ", 0)).is_ok());
    assert!(
        read(&raw(r#"{"__metadata__":null,"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}"#, 4)).is_ok()
    );
}

/// Our verdict must match the oracle's (a duplicate key is the one thing only we reject).
fn differential(bytes: &[u8]) {
    let ours = read(bytes);
    let theirs = safetensors::SafeTensors::read_metadata(bytes);
    match (&ours, &theirs) {
        (Ok(st), Ok((_, meta))) => {
            for t in &st.tensors {
                let info = meta.info(&t.name).expect("oracle has the tensor");
                assert_eq!(t.shape, info.shape.iter().map(|&d| d as u64).collect::<Vec<_>>());
                assert_eq!(t.offset - st.data_offset, info.data_offsets.0 as u64);
            }
        }
        (Err(E::DuplicateKey { .. }), _) | (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => panic!("we reject what the oracle accepts: {e}"),
        (Ok(_), Err(e)) => panic!("we accept what the oracle rejects: {e}"),
    }
}

#[test]
fn every_prefix_of_a_valid_file_is_rejected() {
    let (file, _) = oracle_file(7);
    let header_len = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    for n in 0..file.len() {
        let e = read(&file[..n]).expect_err("a truncated file must not parse");
        let ok = match n {
            0 => matches!(e, E::Empty { .. }),
            1..=7 => matches!(e, E::TooShort { .. }),
            _ if n < 8 + header_len => matches!(e, E::BadHeaderLength { .. }),
            _ => matches!(e, E::BadOffsets { .. } | E::TrailingBytes { .. }),
        };
        assert!(ok, "prefix {n}: {e}");
        differential(&file[..n]);
    }
    assert!(read(&file).is_ok());
}

#[test]
fn byte_flips_never_panic_and_agree_with_the_oracle() {
    let (file, _) = oracle_file(11);
    let header_end = 8 + u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let mut rng = SplitMix64(0x5eed);
    let mut accepted = 0;
    for _ in 0..4000 {
        let mut f = file.clone();
        for _ in 0..1 + rng.next_u64() % 3 {
            // Mostly the header (where parsing happens), sometimes the length and the data.
            let i = match rng.next_u64() % 8 {
                0 => (rng.next_u64() % 8) as usize,
                1 => (rng.next_u64() % f.len() as u64) as usize,
                _ => 8 + (rng.next_u64() % (header_end - 8) as u64) as usize,
            };
            match rng.next_u64() % 3 {
                0 => f[i] ^= 1 << (rng.next_u64() % 8),
                1 => f[i] = b"0123456789[]{},:\"-. eE"[(rng.next_u64() % 22) as usize],
                _ => f[i] = rng.next_u64() as u8,
            }
        }
        if rng.next_u64().is_multiple_of(10) {
            let cut = (rng.next_u64() % f.len() as u64) as usize;
            f.truncate(cut);
        }
        differential(&f);
        if let Ok(st) = read(&f) {
            accepted += 1;
            let src = MemSource::new(f.clone(), "flip");
            for t in &st.tensors {
                assert!(t.offset + t.n_bytes <= src.len());
                let _ = st.read_tensor_f32(&src, t);
            }
        }
    }
    eprintln!("{accepted} of 4000 corrupted files still valid (data or benign header bytes)");
}

#[test]
fn shard_index_and_sharded_model() {
    let ix = r#"{"metadata":{"total_size":24},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}}"#;
    let p = ShardIndex::parse(ix).unwrap();
    assert_eq!(p.total_size, Some(24));
    assert_eq!(p.shards(), vec!["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]);
    for bad in ["../x.safetensors", "/etc/passwd", "a/b", "a\\b", "", "..", "x\u{0}y", "C:x"] {
        let j = serde_json::json!({"weight_map": {"a": bad}}).to_string();
        assert!(matches!(ShardIndex::parse(&j), Err(E::BadShardName { .. })), "{bad:?}");
    }
    assert!(matches!(ShardIndex::parse(r#"{"weight_map":{"a":"x","a":"y"}}"#), Err(E::DuplicateKey { .. })));
    assert!(matches!(ShardIndex::parse(r#"{"metadata":{}}"#), Err(E::BadIndex { .. })));
    assert!(matches!(ShardIndex::parse(r#"{"weight_map":{"a":1}}"#), Err(E::BadIndex { .. })));
    assert!(matches!(ShardIndex::parse("<html>"), Err(E::BadJson { .. })));

    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (da, db, dc) = (f32s(&[1.0, 2.0]), f32s(&[3.0]), f32s(&[4.0, 5.0, 6.0]));
    let shard = |ts: Vec<(&str, &[u8])>| {
        let v: Vec<_> =
            ts.into_iter().map(|(n, d)| (n, TensorView::new(Dtype::F32, vec![d.len() / 4], d).unwrap())).collect();
        safetensors::serialize(v, None).unwrap()
    };
    let files: HashMap<&str, Vec<u8>> = HashMap::from([
        ("model-00001-of-00002.safetensors", shard(vec![("a", &da), ("c", &dc)])),
        ("model-00002-of-00002.safetensors", shard(vec![("b", &db)])),
        ("model.safetensors", shard(vec![("a", &da), ("b", &db)])),
    ]);
    let open = |f: &str| -> ferrolm::Result<MemSource> {
        files.get(f).map(|b| MemSource::new(b.clone(), f)).ok_or_else(|| ferrolm::Error::Model(format!("no {f}")))
    };
    let m = SafetensorsModel::open(Some(ix.as_bytes()), open).unwrap();
    assert_eq!(m.read_f32("c").unwrap(), vec![4.0, 5.0, 6.0]);
    assert_eq!(m.read_f32("b").unwrap(), vec![3.0]);
    assert_eq!(m.tensor_names().count(), 3);
    let single = SafetensorsModel::open(None, open).unwrap();
    assert_eq!(single.read_f32("a").unwrap(), vec![1.0, 2.0]);
    // The asynchronous open (the browser's and the engine's path) agrees.
    let open_async = |f: String| {
        let r = open(&f);
        async move { r }
    };
    let m = block_on(SafetensorsModel::open_async(Some(ix.as_bytes()), open_async)).unwrap();
    assert_eq!(block_on(m.read_f32_async("c", &mut |_| {})).unwrap(), vec![4.0, 5.0, 6.0]);
    let mut seen = 0;
    assert_eq!(block_on(m.read_bytes_async("a", &mut |n| seen += n)).unwrap(), da);
    assert_eq!(seen, 8);
    for bad in
        [r#"{"weight_map":{"a":"../model.safetensors"}}"#, r#"{"weight_map":{"a":"model-00002-of-00002.safetensors"}}"#]
    {
        let sync = SafetensorsModel::open(Some(bad.as_bytes()), open).err().unwrap().to_string();
        let via_async =
            block_on(SafetensorsModel::open_async(Some(bad.as_bytes()), open_async)).err().unwrap().to_string();
        assert_eq!(sync, via_async);
    }
    // The index names a tensor its shard lacks; and a tensor present in two shards.
    let wrong = ix.replace(r#""b":"model-00002"#, r#""b":"model-00001"#);
    let e = SafetensorsModel::open(Some(wrong.as_bytes()), open).err().unwrap();
    assert!(matches!(e, ferrolm::Error::Safetensors(E::MissingTensor { .. })), "{e}");
    let two = r#"{"weight_map":{"a":"model.safetensors","c":"model-00001-of-00002.safetensors"}}"#;
    let e = SafetensorsModel::open(Some(two.as_bytes()), open).err().unwrap();
    assert!(matches!(e, ferrolm::Error::Safetensors(E::TensorInTwoShards { .. })), "{e}");
}

/// A sparse source: the real header, then `data_len` bytes that read as zeros.
struct Sparse(Vec<u8>, u64);

impl ByteSource for Sparse {
    fn len(&self) -> u64 {
        self.0.len() as u64 + self.1
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> ferrolm::Result<()> {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.0.get((offset + i as u64) as usize).copied().unwrap_or(0);
        }
        Ok(())
    }
    fn name(&self) -> String {
        "sparse".into()
    }
}

#[test]
fn offsets_past_4_gib_are_addressed_with_u64() {
    let big: u64 = 5 << 30;
    let h = format!(
        r#"{{"big":{{"dtype":"U8","shape":[{big}],"data_offsets":[0,{big}]}},"w":{{"dtype":"F16","shape":[2],"data_offsets":[{big},{}]}}}}"#,
        big + 4
    );
    let mut head = (h.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(h.as_bytes());
    let src = Sparse(head, big + 4);
    let st = SafetensorsFile::read(&src).unwrap();
    let w = st.tensor("w").unwrap();
    assert_eq!(w.offset, st.data_offset + big);
    assert!(w.offset > u32::MAX as u64);
    assert_eq!(st.read_tensor_f32(&src, w).unwrap(), vec![0.0, 0.0]);
}

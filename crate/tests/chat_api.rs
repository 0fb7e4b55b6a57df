//! The chat API on the default model's vocabulary and template (SmolLM2, natively on lavapipe;
//! its weights where the claim needs them, 2 random layers where it is bookkeeping): prefix reuse gives the
//! tokens of a cold run, JSON schemas always yield valid JSON, logprobs follow the raw logits,
//! stop strings, `n`, the context policy; and tool calls on the real chat templates and
//! tokenizers of the families that have them (Qwen 3, Llama 3.1, Mistral Nemo), a forced call
//! driven through each real vocabulary.

mod common;

use ferrolm::chat::tools::{self, ToolFormat, ToolStyle};
use ferrolm::chat::{ChatRequest, ChatRun};
use ferrolm::chat_template::ChatTemplate;
use ferrolm::constrain::{Constraint, ConstraintSpec, VocabEnv};
use ferrolm::engine::{Engine, GenerateOptions, LoadOptions};
use ferrolm::gpu::block_on;
use ferrolm::tokenizer::Tokenizer;
use serde_json::{json, Value};

fn engine() -> Option<Engine> {
    let path = common::model_path()?;
    Some(block_on(Engine::load_path(&path, &LoadOptions::default(), &mut |_, _, _| {})).unwrap())
}

/// The default model's vocabulary and chat template on 2 random layers (`common::small_smollm2`):
/// for the request bookkeeping, whose claims do not depend on the weights.
fn small_engine(opts: &LoadOptions) -> Option<Engine> {
    let path = common::small_smollm2()?;
    Some(block_on(Engine::load_path(&path, opts, &mut |_, _, _| {})).unwrap())
}

/// The default model's tokenizer (its GGUF metadata only).
fn model_tokenizer() -> Option<Tokenizer> {
    let path = common::model_path()?;
    let g = ferrolm::weights::gguf::GgufFile::read(&ferrolm::weights::FileSource::open(&path).unwrap()).unwrap();
    Some(Tokenizer::from_gguf(&g).unwrap())
}

fn complete(e: &mut Engine, req: Value) -> Value {
    let req = ChatRequest::from_json(&req.to_string()).unwrap();
    let mut run = ChatRun::new(e, &req, 7, 0, "test".into()).unwrap();
    block_on(run.complete(e)).unwrap()
}

/// The subset of JSON schema the test schemas use.
fn valid(v: &Value, s: &Value) -> bool {
    if let Some(e) = s.get("enum") {
        return e.as_array().unwrap().contains(v);
    }
    match s["type"].as_str() {
        Some("object") => {
            let Some(o) = v.as_object() else { return false };
            let props = s["properties"].as_object().unwrap();
            let required = s["required"].as_array().map(|r| r.iter().all(|k| o.contains_key(k.as_str().unwrap())));
            required.unwrap_or(true) && o.iter().all(|(k, x)| props.get(k).is_some_and(|p| valid(x, p)))
        }
        Some("array") => {
            let Some(a) = v.as_array() else { return false };
            a.len() as u64 <= s["maxItems"].as_u64().unwrap_or(u64::MAX) && a.iter().all(|x| valid(x, &s["items"]))
        }
        Some("string") => {
            v.as_str().is_some_and(|t| t.chars().count() as u64 <= s["maxLength"].as_u64().unwrap_or(u64::MAX))
        }
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => false,
    }
}

#[test]
fn chat_features_on_the_default_model() {
    // The real weights: random ones write runs of newlines, under which a cold and a warm turn
    // or a stop string would agree trivially.
    let Some(mut e) = engine() else { return };

    // Prefix reuse: turn 2 of a chat reuses turn 1's cache and gives the cold run's tokens.
    let turn1 = json!([{ "role": "user", "content": "Name a fruit." }]);
    let a1 = complete(&mut e, json!({ "messages": turn1, "max_tokens": 6, "temperature": 0 }));
    let reply = a1["choices"][0]["message"]["content"].clone();
    let turn2 =
        json!([turn1[0], { "role": "assistant", "content": reply }, { "role": "user", "content": "And a vegetable?" }]);
    let cold = complete(&mut e, json!({ "messages": turn2, "max_tokens": 8, "temperature": 0, "prefix_cache": false }));
    complete(&mut e, json!({ "messages": turn1, "max_tokens": 6, "temperature": 0 }));
    let warm = complete(&mut e, json!({ "messages": turn2, "max_tokens": 8, "temperature": 0 }));
    assert_eq!(warm["choices"][0]["message"], cold["choices"][0]["message"]);
    assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached > 20, "turn 2 reuses the cache: {}", warm["usage"]);
    // Fewer tokens prefilled (a comparison of times failed on a loaded CI machine).
    let prefilled =
        |r: &Value| r["stats"]["prompt_tokens"].as_u64().unwrap() - r["stats"]["cached_tokens"].as_u64().unwrap();
    assert_eq!(prefilled(&cold), cold["stats"]["prompt_tokens"].as_u64().unwrap());
    assert!(prefilled(&warm) + 20 < prefilled(&cold), "cold {} warm {}", cold["stats"], warm["stats"]);

    // Logprobs: log-softmax of the raw logits, in the order of the top logits.
    let ids = e.chat_ids(&[ferrolm::chat_template::ChatMessage::new("user", "Hi")]).unwrap();
    let opts = GenerateOptions { max_tokens: 1, top_logits: 5, logprobs: Some(5), ..Default::default() };
    let r = block_on(e.generate(&ids, &opts, &mut |_, _| true)).unwrap();
    let lp = &r.logprobs[0];
    assert_eq!(lp.top.iter().map(|x| x.0).collect::<Vec<_>>(), r.top_logits.iter().map(|x| x.0).collect::<Vec<_>>());
    assert_eq!(lp.token, r.tokens[0]);
    for (a, b) in lp.top.iter().zip(&r.top_logits) {
        assert!(((a.1 - lp.top[0].1) - (b.1 - r.top_logits[0].1)).abs() < 1e-4);
    }
    assert!(lp.top[0].1 <= 0.0 && lp.top.iter().map(|x| x.1.exp()).sum::<f32>() <= 1.0 + 1e-5);

    // Stop strings cut the text before the first match.
    let full = block_on(e.generate(&ids, &GenerateOptions { max_tokens: 12, ..Default::default() }, &mut |_, _| true))
        .unwrap();
    let word: String = full.text.split_whitespace().nth(2).unwrap().to_string();
    let opts = GenerateOptions { max_tokens: 12, stop: vec![word.clone()], ..Default::default() };
    let cut = block_on(e.generate(&ids, &opts, &mut |_, _| true)).unwrap();
    assert_eq!(cut.text, full.text[..full.text.find(&word).unwrap()]);

    // n > 1 samples each choice with its own seed; usage counts the prompt once.
    let n = complete(&mut e, json!({ "messages": turn1, "max_tokens": 4, "n": 3, "seed": 1 }));
    assert_eq!(n["choices"].as_array().unwrap().len(), 3);
    let done = n["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((3..=12).contains(&done), "{}", n["usage"]);
    assert_eq!(n["usage"]["prompt_tokens"], a1["usage"]["prompt_tokens"]);

    // A conversation longer than a fixed context: an error by default, or its oldest turns go.
    // The context policy counts template tokens only: the small model serves.
    let mut small = small_engine(&LoadOptions { context_length: Some(96), ..Default::default() }).unwrap();
    let long: Vec<Value> = (0..12)
        .map(|i| json!({ "role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("Message number {i} about apples and pears.") }))
        .collect();
    let req = ChatRequest::from_json(&json!({ "messages": long, "max_tokens": 8 }).to_string()).unwrap();
    let mut run = ChatRun::new(&mut small, &req, 1, 0, "x".into()).unwrap();
    assert!(matches!(block_on(run.complete(&mut small)), Err(ferrolm::Error::ContextOverflow { .. })));
    let req = ChatRequest::from_json(
        &json!({ "messages": long, "max_tokens": 8, "context_overflow": "drop_oldest" }).to_string(),
    )
    .unwrap();
    let mut run = ChatRun::new(&mut small, &req, 1, 0, "x".into()).unwrap();
    assert!(run.dropped_messages() > 0);
    let out = block_on(run.complete(&mut small)).unwrap();
    assert!(out["usage"]["prompt_tokens"].as_u64().unwrap() + 8 <= 96);
}

#[test]
fn out_of_range_request_fields_are_refused() {
    let Some(mut e) = small_engine(&LoadOptions::default()) else { return };
    let msgs = json!([{ "role": "user", "content": "Hi" }]);
    let call = |f: Value| json!([{ "role": "user", "content": "Hi" }, { "role": "assistant", "content": null, "tool_calls": f }]);
    for (field, v, want) in [
        ("temperature", json!(5), "temperature must be in [0, 2], got 5"),
        ("temperature", json!(-0.5), "temperature must be in [0, 2]"),
        ("temperature", json!(1e39), "temperature is out of range"),
        ("logit_bias", json!({ "5": 1e39 }), "logit_bias is out of range"),
        ("top_p", json!(1.5), "top-p must be in (0, 1]"),
        ("frequency_penalty", json!(3), "frequency penalty must be in [-2, 2]"),
        ("stop", json!(5), "stop must be a string or an array of strings, got 5"),
        ("stop", json!(["a", 5]), "stop must be a string or an array of strings, got 5"),
        ("messages", json!([{ "role": 5, "content": "x" }]), "messages[0]: role must be a string, got 5"),
        (
            "messages",
            json!([{ "role": "user", "content": [{ "type": "image_url" }] }]),
            "content[0] is of type \"image_url\"",
        ),
        ("messages", json!([{ "role": "user", "content": [5] }]), "content[0] must be a text part"),
        ("messages", json!([{ "role": "user", "content": [] }]), "messages[0]: content is an empty list of parts"),
        ("messages", call(json!("junk")), "messages[1]: tool_calls must be an array"),
        ("messages", call(json!([{ "id": "a", "type": "function" }])), "tool_calls[0] needs function.name"),
        (
            "messages",
            call(json!([{ "id": "a", "type": "function", "function": { "name": "f", "arguments": "{not json" } }])),
            "arguments must be a JSON object",
        ),
        (
            "messages",
            json!([{ "role": "tool", "content": "1", "tool_call_id": 5 }]),
            "tool_call_id must be a string, got 5",
        ),
        ("response_format", json!({ "type": "text", "bogus": 1 }), "type \"text\" has no field \"bogus\""),
        (
            "response_format",
            json!({ "type": "json_object", "json_schema": { "schema": { "type": "string" } } }),
            "has no field \"json_schema\"",
        ),
        (
            "response_format",
            json!({ "type": "json_schema", "json_schema": { "schema": {}, "shema": {} } }),
            "no field \"shema\"",
        ),
        ("logit_bias", json!({ "+5": 1 }), "logit_bias key \"+5\" is not a token id"),
        ("logit_bias", json!({ "05": 1 }), "logit_bias key \"05\" is not a token id"),
        ("max_completion_tokens", json!(3), "max_completion_tokens 3 and max_tokens 2 disagree"),
        (
            "tools",
            json!([{ "type": "function", "function": { "name": "f", "parameters": { "type": "string" } } }]),
            "parameters has type \"string\": a call's arguments are an object",
        ),
    ] {
        let mut body = json!({ "messages": msgs, "max_tokens": 2 });
        body[field] = v;
        let err = match ChatRequest::from_json(&body.to_string()) {
            Err(e) => e.to_string(),
            Ok(req) => ChatRun::new(&mut e, &req, 1, 0, "x".into()).err().map(|e| e.to_string()).unwrap_or_default(),
        };
        assert!(err.contains(want), "{field}: {err:?}");
    }
}

#[test]
fn json_schemas_always_yield_valid_json() {
    // Random weights: the constraint alone keeps the output valid, through the real vocabulary.
    let Some(mut e) = small_engine(&LoadOptions::default()) else { return };
    let schemas = [
        json!({ "type": "object", "properties": { "answer": { "type": "boolean" } }, "required": ["answer"], "additionalProperties": false }),
        json!({ "type": "object", "properties": {
            "name": { "type": "string", "maxLength": 12 },
            "age": { "type": "integer", "minimum": 0, "maximum": 150 },
            "mood": { "enum": ["happy", "sad"] } }, "required": ["name", "age", "mood"], "additionalProperties": false }),
        json!({ "type": "object", "properties": { "tags": { "type": "array", "items": { "type": "string", "maxLength": 8 }, "maxItems": 2 } }, "required": ["tags"], "additionalProperties": false }),
    ];
    // Three prompts a schema, each sampled with its own seed (every token a decode step on
    // lavapipe: 20 prompts took 200 s of the suite).
    let prompts = [
        "Is water wet?",
        "Describe a cat.",
        "Give me tags for a blog post about cooking.",
        "Is the moon made of cheese?",
        "Describe a dog named Rex.",
        "List two colours.",
        "Is Rust fast?",
        "Who are you?",
        "Summarize this: the sky is blue.",
    ];
    let mut fails = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let s = &schemas[i % schemas.len()];
        let r = complete(
            &mut e,
            json!({
                "messages": [{ "role": "user", "content": p }],
                "response_format": { "type": "json_schema", "json_schema": { "name": "out", "schema": s } },
                "max_tokens": 48, "seed": i,
            }),
        );
        let text = r["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        match serde_json::from_str::<Value>(&text) {
            Ok(v) if valid(&v, s) => {}
            _ => fails.push(format!("{p:?} -> {text:?} ({})", r["choices"][0]["finish_reason"])),
        }
    }
    assert!(fails.is_empty(), "invalid outputs:\n{}", fails.join("\n"));
}

fn cache_file(family: &str, file: &str) -> Option<std::path::PathBuf> {
    let root = std::env::var_os("FERROLM_CACHE").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/ferrolm")
    });
    let p = root.join("tokenizers").join(family).join(file);
    if p.exists() {
        return Some(p);
    }
    let msg = format!("{} not found (run `make tokenizers`)", p.display());
    assert!(std::env::var_os("FERROLM_REQUIRE_TOKENIZERS").is_none_or(|v| v == "0"), "{msg}");
    eprintln!("SKIPPED: {msg}");
    None
}

#[test]
fn tool_calls_on_real_templates_and_vocabularies() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/chat_templates");
    let tools_v = vec![json!({ "type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": { "type": "object", "$defs": { "days": { "type": "integer", "minimum": 1, "maximum": 14 } },
            "properties": { "city": { "enum": ["Paris", "Rome"] }, "days": { "$ref": "#/$defs/days" } }, "required": ["city"] } } })];
    let cases = [
        ("qwen3", "qwen3.jinja", ToolFormat::Hermes),
        ("llama3", "llama-3.1.jinja", ToolFormat::Llama3),
        ("mistral", "mistral-nemo.jinja", ToolFormat::Mistral),
    ];
    for (family, template, format) in cases {
        let tok = match family {
            "mistral" => {
                let Some(p) = cache_file(family, "vocab.gguf") else { continue };
                let g =
                    ferrolm::weights::gguf::GgufFile::read(&ferrolm::weights::FileSource::open(&p).unwrap()).unwrap();
                Tokenizer::from_gguf(&g).unwrap()
            }
            _ => {
                let Some(p) = cache_file(family, "tokenizer.json") else { continue };
                let cfg = std::fs::read_to_string(p.with_file_name("tokenizer_config.json")).ok();
                Tokenizer::from_hf_json(&std::fs::read_to_string(&p).unwrap(), cfg.as_deref()).unwrap()
            }
        };
        let src = std::fs::read_to_string(root.join(template)).unwrap();
        let style = ToolStyle::of_template(&src);
        assert_eq!(style, ToolStyle { format, native: true }, "{family}");
        // The template renders the tools, an earlier call and its result.
        let msgs = vec![
            json!({ "role": "user", "content": "Weather in Paris?" }),
            json!({ "role": "assistant", "content": null, "tool_calls": [{ "id": "abcDEF123", "type": "function", "function": { "name": "get_weather", "arguments": "{\"city\": \"Paris\"}" } }] }),
            json!({ "role": "tool", "tool_call_id": "abcDEF123", "content": "{\"temp_c\": 21}" }),
        ];
        let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
        let t = ChatTemplate::new(&src, &text(tok.bos_id()), &text(tok.eos_id())).unwrap();
        let rendered = t
            .render_json(
                &tools::template_messages(&msgs, Some(&tools_v), style),
                Some(&Value::Array(tools_v.clone())),
                true,
            )
            .unwrap_or_else(|e| panic!("{family}: {e}"));
        for needle in ["get_weather", "Weather in a city", "temp_c", "Paris"] {
            assert!(rendered.contains(needle), "{family}: {needle} missing from\n{rendered}");
        }
        // A forced call through the real vocabulary: random logits under the mask (the schema is
        // bounded, so any path through it ends: an unbounded integer could take random digits
        // for ever).
        let env = VocabEnv::new(&tok, &tok.eos_ids()).unwrap();
        let g = tools::forced_call_grammar(&tools_v, None, format, tok.token_id("[TOOL_CALLS]")).unwrap();
        // The tool's own `$ref`s resolve inside the grammar's schema (they were refused).
        let mut c = Constraint::new(&ConstraintSpec::ToolCall(g), &env).unwrap();
        let mut rng = common::R::new();
        let mut out = Vec::new();
        for _ in 0..200 {
            if c.is_done() {
                break;
            }
            let mut logits = rng.vec(tok.vocab_size());
            c.mask(&mut logits).unwrap();
            let id = ferrolm::sampler::argmax(&logits) as u32;
            c.commit(id).unwrap();
            out.push(id);
        }
        assert!(c.is_done(), "{family}: the call did not end in 200 tokens");
        let generated = tok.decode(&out).unwrap();
        let (_, calls) = tools::parse(&generated, 1);
        assert_eq!(calls.len(), 1, "{family}: {generated:?}");
        assert_eq!(calls[0].function.name, "get_weather");
        let args: Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
        assert!(["Paris", "Rome"].contains(&args["city"].as_str().unwrap()), "{family}: {args}");
        eprintln!("{family}: {generated:?}");
    }
}

/// A conversation that outgrows the default context keeps its cached prefix: the KV cache is
/// copied into the larger one, and the second turn's tokens and logits are those of a cold run.
#[test]
fn growing_the_context_keeps_the_cached_prefix() {
    let mut shape = ferrolm::synth::shape("smollm2-135m").unwrap();
    shape.context = 64; // the default context: a 74-token prompt grows it
    let opts = ferrolm::synth::SynthOptions {
        shape,
        ty: ferrolm::synth::parse_type("q8_0").unwrap(),
        seed: 5,
        layers: Some(2),
        sparse: false,
    };
    let m = common::SynthModel::write("grow", &opts);
    let load = || block_on(Engine::load_path(&m.path, &LoadOptions::default(), &mut |_, _, _| {})).unwrap();
    let turn1: Vec<u32> = (0..40).map(|i| 3 + (i * 7) % 200).collect();
    let gen = |e: &mut Engine, p: &[u32], reuse: bool| {
        let o = GenerateOptions {
            max_tokens: 4,
            stop_ids: Some(vec![]),
            top_logits: 8,
            prefix_cache: reuse,
            ..Default::default()
        };
        block_on(e.generate(p, &o, &mut |_, _| true)).unwrap()
    };
    let mut warm = load();
    assert_eq!(warm.rt.context, 64);
    let r1 = gen(&mut warm, &turn1, true);
    let mut turn2 = turn1.clone();
    turn2.extend(&r1.tokens);
    turn2.extend((0..30).map(|i| 5 + (i * 11) % 200));
    let w = gen(&mut warm, &turn2, true);
    assert_eq!(warm.rt.context, 128, "grown to a power of two");
    assert_eq!(w.stats.cached_tokens, 43, "turn 1's prompt and three of its tokens were cached");
    let mut cold = load();
    let c = gen(&mut cold, &turn2, false);
    assert_eq!(c.stats.cached_tokens, 0);
    assert_eq!(w.tokens, c.tokens);
    for (a, b) in w.top_logits.iter().zip(&c.top_logits) {
        assert_eq!(a.0, b.0);
        assert!((a.1 - b.1).abs() < 2e-3, "{a:?} vs {b:?}");
    }
}

/// A constraint alone keeps token choice on the GPU (its mask goes up each step): greedy tokens
/// equal those of the CPU path, and sampled output is valid too.
#[test]
fn constrained_decoding_on_the_gpu_matches_the_cpu_path() {
    let Some(mut e) = small_engine(&LoadOptions::default()) else { return };
    let schema = json!({ "type": "object", "properties": {
        "city": { "type": "string", "maxLength": 16 }, "population": { "type": "integer", "minimum": 0, "maximum": 99999999 } },
        "required": ["city", "population"], "additionalProperties": false });
    let ids = e.chat_ids(&[ferrolm::chat_template::ChatMessage::new("user", "Give a city as JSON.")]).unwrap();
    let run = |e: &mut Engine, cpu: bool, temperature: f32| {
        let o = GenerateOptions {
            max_tokens: 40,
            constraint: Some(ConstraintSpec::JsonSchema(schema.clone())),
            cpu_sampling: cpu,
            sampling: ferrolm::sampler::SamplingParams { temperature, seed: 3, ..Default::default() },
            ..Default::default()
        };
        let r = block_on(e.generate(&ids, &o, &mut |_, _| true)).unwrap();
        (r.tokens, r.text, r.stats.dispatches_per_token)
    };
    let (gpu, text, gpu_dispatches) = run(&mut e, false, 0.0);
    let (cpu, _, cpu_dispatches) = run(&mut e, true, 0.0);
    assert_eq!(gpu, cpu, "{text}");
    assert!(gpu_dispatches > cpu_dispatches, "the GPU path masks and samples on the GPU");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v["city"].is_string() && v["population"].is_i64(), "{text}");
    let (_, sampled, _) = run(&mut e, false, 0.9);
    let v: Value = serde_json::from_str(&sampled).unwrap_or_else(|e| panic!("{sampled:?}: {e}"));
    assert!(v["city"].is_string() && v["population"].is_i64(), "{sampled}");
}

/// llama.cpp's JSON grammar (GBNF, as in its grammars/json.gbnf) and a small list grammar accept
/// what they describe through the real SmolLM2 vocabulary, and refuse what they do not.
#[test]
fn gbnf_grammars_constrain_like_llama_cpp() {
    let Some(tok) = model_tokenizer() else { return };
    let env = VocabEnv::new(&tok, &tok.eos_ids()).unwrap();
    let bytes = tok.token_bytes();
    let json_gbnf = r#"root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"#;
    let list_gbnf = "root ::= item (\", \" item){1,3} \".\"\nitem ::= \"apple\" | \"pear\" | [0-9]+\n";
    // Feed `text` token by token (the longest allowed token that is a prefix of what is left);
    // Ok(done) once it is all in, Err(at) where no allowed token continues it.
    let feed = |grammar: &str, text: &str| -> Result<bool, usize> {
        let mut c = Constraint::new(&ConstraintSpec::grammar(grammar), &env).unwrap();
        let t = text.as_bytes();
        let mut at = 0;
        while at < t.len() {
            let mut logits = vec![0.0f32; bytes.len()];
            c.mask(&mut logits).unwrap();
            let best = (0..bytes.len())
                .filter(|&i| logits[i] == 0.0 && !bytes[i].is_empty() && t[at..].starts_with(&bytes[i]))
                .max_by_key(|&i| bytes[i].len());
            let Some(id) = best else { return Err(at) };
            c.commit(id as u32).unwrap();
            at += bytes[id].len();
        }
        let mut logits = vec![0.0f32; bytes.len()];
        Ok(c.is_done() || (c.mask(&mut logits).is_ok() && logits[tok.eos_ids()[0] as usize] == 0.0))
    };
    assert_eq!(feed(json_gbnf, r#"{"a": [1, 2.5e3, "x\n"], "b": {"c": null, "d": true}}"#), Ok(true));
    assert_eq!(feed(json_gbnf, r#"{"a": [1, 2,]}"#), Err(12));
    assert_eq!(feed(list_gbnf, "apple, 42, pear."), Ok(true));
    assert!(feed(list_gbnf, "apple.").is_err(), "at least two items");
    assert!(matches!(
        Constraint::new(&ConstraintSpec::grammar("root ::= missing"), &env),
        Err(ferrolm::Error::InvalidOption(_))
    ));
}

/// Hostile grammars and schemas from a request: huge repetition counts, deep nesting and random
/// bytes are refused or compiled in bounded time, never a panic or a hang.
#[test]
fn hostile_grammars_are_refused_quickly() {
    let Some(tok) = model_tokenizer() else { return };
    let env = VocabEnv::new(&tok, &tok.eos_ids()).unwrap();
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(500), ")".repeat(500));
    let cases: Vec<ConstraintSpec> = vec![
        ConstraintSpec::grammar("root ::= \"a\"{100000000}"),
        ConstraintSpec::grammar("start: \"a\"{100000000}"),
        ConstraintSpec::grammar(&deep),
        ConstraintSpec::JsonSchema(json!({ "type": "array", "minItems": 100000000, "items": { "type": "integer" } })),
        ConstraintSpec::JsonSchema(json!({ "type": "string", "minLength": 100000000 })),
        ConstraintSpec::Regex("a{100000000}".into()),
    ];
    for spec in cases {
        let t = std::time::Instant::now();
        let r = Constraint::new(&spec, &env).and_then(|mut c| {
            let mut logits = vec![0.0f32; tok.vocab_size()];
            c.mask(&mut logits)
        });
        let ms = t.elapsed().as_millis();
        eprintln!(
            "{:?}: {} in {ms} ms",
            format!("{spec:?}").chars().take(60).collect::<String>(),
            r.map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string())
        );
        assert!(ms < 5000, "took {ms} ms");
    }
    // Random damage to a real grammar: an error or a grammar, never a panic.
    let base = "root ::= item (\", \" item){1,3} \".\"\nitem ::= \"apple\" | [0-9]+ | (\"x\" [a-f]?)*\n";
    let mut rng = common::R::new();
    for _ in 0..3000 {
        let mut b = base.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(b.len() as u32) as usize;
            match rng.below(3) {
                0 => b[i] = b"()[]{}|*+?\"\\:=-,^.# \n0a"[rng.below(23) as usize],
                1 => {
                    b.remove(i);
                }
                _ => b.truncate(i),
            }
            if b.is_empty() {
                break;
            }
        }
        let text = String::from_utf8_lossy(&b).to_string();
        let _ = ferrolm::gbnf::to_lark(&text);
    }
}

/// Schemas as applications write them: $defs/$ref, anyOf, nullable types, patterns, known and
/// unknown formats (an unknown one is an annotation, dropped); unsupported keywords are refused by
/// name.
#[test]
fn real_world_schemas_compile_or_name_what_is_unsupported() {
    let Some(tok) = model_tokenizer() else { return };
    let env = VocabEnv::new(&tok, &tok.eos_ids()).unwrap();
    let ok = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Order", "type": "object",
        "$defs": { "item": { "type": "object", "properties": { "sku": { "type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$" }, "qty": { "type": "integer", "minimum": 1 } }, "required": ["sku", "qty"] } },
        "properties": {
            "id": { "type": "string", "format": "uuid" },
            "site": { "type": "string", "format": "uri-reference" },
            "big": { "type": "integer", "format": "int64" },
            "when": { "type": "string", "format": "date-time" },
            "note": { "type": ["string", "null"], "description": "free text", "examples": [{ "format": "kept" }] },
            "items": { "type": "array", "items": { "$ref": "#/$defs/item" }, "minItems": 1 },
            "status": { "anyOf": [{ "const": "open" }, { "const": "closed" }] }
        },
        "required": ["id", "items", "status"], "additionalProperties": false
    });
    let mut c = Constraint::new(&ConstraintSpec::JsonSchema(ok), &env).unwrap();
    let mut logits = vec![0.0f32; tok.vocab_size()];
    c.mask(&mut logits).unwrap();
    let e = Constraint::new(&ConstraintSpec::JsonSchema(json!({ "type": "array", "uniqueItems": true })), &env)
        .err()
        .unwrap();
    assert!(e.to_string().contains("uniqueItems"), "{e}");
}

/// A stop string whose first characters come in an earlier token than its last: the stream holds
/// them back as the plain response does, so both give the same content.
#[test]
fn streamed_content_holds_back_a_stop_strings_start() {
    let Some(mut e) = engine() else { return };
    let base = json!({"messages": [{"role": "user", "content": "Count from one to ten in words."}], "max_tokens": 24, "temperature": 0});
    let full = complete(&mut e, base.clone())["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    // A stop of several characters that starts inside one token and ends in a later one.
    let words: Vec<&str> = full.split_whitespace().collect();
    assert!(words.len() >= 4, "{full:?}");
    let stop = format!("{} {}", &words[2][words[2].len().saturating_sub(2)..], &words[3][..words[3].len().min(2)]);
    assert!(full.contains(&stop), "{stop:?} is not in {full:?}");
    // It must start and end in different tokens (else no hold-back is needed).
    let tok = model_tokenizer().unwrap();
    let mut ends = Vec::new();
    let mut text = String::new();
    for id in tok.encode(&full).unwrap() {
        text.push_str(&tok.decode(&[id]).unwrap());
        ends.push(text.len());
    }
    let at = full.find(&stop).unwrap();
    let first = ends.iter().position(|&e| e > at).unwrap();
    let last = ends.iter().position(|&e| e >= at + stop.len()).unwrap();
    assert!(first < last, "{stop:?} lies in one token of {full:?}");
    let mut req = base.clone();
    req["stop"] = json!([stop]);
    let plain = complete(&mut e, req.clone())["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(
        plain.len() < full.len() && !plain.contains(&stop) && full.starts_with(&plain),
        "{stop:?}: {plain:?} of {full:?}"
    );
    req["stream"] = json!(true);
    let r = ChatRequest::from_json(&req.to_string()).unwrap();
    let mut run = ChatRun::new(&mut e, &r, 7, 0, "test".into()).unwrap();
    let mut streamed = String::new();
    while let Some(c) = block_on(run.next_chunk(&mut e)).unwrap() {
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            streamed.push_str(t);
        }
    }
    assert_eq!(streamed, plain, "stop {stop:?}");
}

//! The command line's contract on bad input and failed output (a hostile-input review's
//! findings): a clear one-line error and exit status 1, never a panic (101), a lost output with
//! status 0, or clap refusing a negative value as an unknown argument.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(p)
}

fn ferrolm(args: &[&str], stdout: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into()))
        .env("WGPU_BACKEND", std::env::var("WGPU_BACKEND").unwrap_or("vulkan".into()))
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("the ferrolm binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn model() -> String {
    fixture("arch/llama/model.gguf").display().to_string()
}

/// /dev/full, where the machine has one.
fn dev_full() -> Option<std::fs::File> {
    let f = std::fs::OpenOptions::new().write(true).open("/dev/full");
    f.map_err(|_| eprintln!("skipped: no /dev/full here")).ok()
}

#[test]
fn a_full_stdout_is_an_error_not_a_panic() {
    let Some(full) = dev_full() else { return };
    let m = model();
    for args in [
        vec!["inspect", "--model", &m],
        vec!["inspect", "--model", &m, "--json"],
        vec!["tokenize", "--model", &m, "--text", "hello"],
        vec!["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2", "--temperature", "0"],
        vec!["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2", "--json"],
    ] {
        let o = ferrolm(&args, Stdio::from(full.try_clone().unwrap()));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("cannot write stdout"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A full stderr (progress, notes, errors) is no reason to panic: the command does its work and
/// its exit status still tells failure from success.
#[test]
fn a_full_stderr_is_not_a_panic() {
    let Some(full) = dev_full() else { return };
    let m = model();
    for (args, code) in [
        (vec!["inspect", "--model", "/nonexistent/model.gguf"], 1),
        (vec!["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2"], 0),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
            .args(&args)
            .env("XDG_RUNTIME_DIR", std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into()))
            .env("WGPU_BACKEND", std::env::var("WGPU_BACKEND").unwrap_or("vulkan".into()))
            .stdout(Stdio::piped())
            .stderr(Stdio::from(full.try_clone().unwrap()))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{args:?}");
    }
}

/// Input files and standard input are read up to a cap: an endless one (`/dev/zero`) is an
/// error, not a process the kernel kills after it filled memory.
#[test]
fn endless_inputs_are_an_error() {
    if !std::path::Path::new("/dev/zero").exists() {
        return;
    }
    let m = model();
    for args in [
        vec!["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "1", "--grammar", "/dev/zero"],
        vec!["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "1", "--json-schema", "/dev/zero"],
        vec!["chat-completion", "--model", &m, "--request", "/dev/zero"],
    ] {
        let o = ferrolm(&args, Stdio::null());
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("/dev/zero: more than 64 MiB"), "{args:?}: {err}");
    }
}

#[test]
fn negative_values_reach_the_option_checks() {
    let m = model();
    let base = ["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "1"];
    // In range: accepted as a separate argument, not taken for a flag.
    let o = ferrolm(
        &[&base[..], &["--temperature", "0.5", "--frequency-penalty", "-0.5", "--seed", "1"]].concat(),
        Stdio::null(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Options that would do nothing are refused, and ids are exactly those given.
    for (extra, want) in [
        (&["--system", "be brief"][..], "--system goes with --chat"),
        (&["--top-logits", "3"][..], "add --json"),
        (&["--logprobs", "2"][..], "add --json"),
    ] {
        let o = ferrolm(&[&base[..], extra].concat(), Stdio::null());
        assert_eq!(o.status.code(), Some(1), "{extra:?}");
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    }
    let o = ferrolm(&["generate", "--model", &m, "--prompt-ids", "1,,2", "--max-tokens", "1"], Stdio::null());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("\"\" is not a token id"), "{}", stderr(&o));
    // Out of range: the engine's own message.
    let o = ferrolm(&[&base[..], &["--temperature", "-1"]].concat(), Stdio::null());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("temperature must be a finite number >= 0"), "{}", stderr(&o));
    // Named as typed: a float past f32 is not reported as `inf`, --logprobs by its own name.
    let o = ferrolm(&[&base[..], &["--top-p", "1e308"]].concat(), Stdio::null());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("1e308 is not a finite 32-bit number"), "{}", stderr(&o));
    let o = ferrolm(&[&base[..], &["--json", "--logprobs", "21"]].concat(), Stdio::null());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--logprobs takes 0 to 20 alternatives, got 21"), "{}", stderr(&o));
    // Nothing to do is not success.
    for (args, want) in [
        (
            vec!["generate", "--model", &m, "--chat", "hi", "--max-tokens", "1"],
            "has no chat template, and its vocabulary has no ChatML tokens",
        ),
        (
            vec!["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "0"],
            "--max-tokens must be at least 1",
        ),
        (vec!["bench", "--model", &m, "--depth", "0"], "--depth of at least 1"),
        (vec!["bench", "--model", &m, "--depth", "999999999"], "at most 131072"),
    ] {
        let o = ferrolm(&args, Stdio::null());
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn an_empty_constraint_language_is_one_line() {
    let dir = std::env::temp_dir().join(format!("ferrolm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("selfref.json");
    std::fs::write(&schema, r##"{"$ref": "#"}"##).unwrap();
    let m = model();
    let o = ferrolm(
        &[
            "generate",
            "--model",
            &m,
            "--prompt-ids",
            "1,2",
            "--max-tokens",
            "4",
            "--json-schema",
            schema.to_str().unwrap(),
        ],
        Stdio::null(),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(line.contains("no text can match it"), "{err}");
    assert!(!err.contains("<state>"), "{err}");
    // Output files that cannot be created are named as written, not read.
    let o = ferrolm(
        &[
            "make-gguf",
            "--shape",
            "smollm2-135m",
            "--type",
            "q4_0",
            "--layers",
            "1",
            "--out",
            "/nonexistent-dir/x.gguf",
            "--tokenizer-from",
            fixture("tokenizer/spm_tiny.gguf").to_str().unwrap(),
        ],
        Stdio::null(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot write /nonexistent-dir/x.gguf"), "{}", stderr(&o));
    // A borrowed vocabulary of another size is resized, and that is said.
    assert!(stderr(&o).contains("tokens, the smollm2-135m shape 49152: padded with"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn embed_takes_token_ids_as_generate_does() {
    // For models without a tokenizer (the engine's error says to pass token ids).
    let m = model();
    let o = ferrolm(&["embed", "--model", &m, "--ids", "1,2,3", "--ids", "4"], Stdio::piped());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<Vec<f32>> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|v| !v.is_empty() && v.len() == lines[0].len() && v.iter().all(|x| x.is_finite())));
    let o = ferrolm(&["embed", "--model", &m, "--ids", "1,x"], Stdio::null());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--ids: \"x\" is not a token id"), "{}", stderr(&o));
    let o = ferrolm(&["embed", "--model", &m, "--text", "hi", "--ids", "1"], Stdio::null());
    assert_eq!(o.status.code(), Some(2), "texts or ids, not both");
    let o = ferrolm(&["embed", "--model", &m, "--text", "-", "--text", "-"], Stdio::null());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("give `-` once"), "{}", stderr(&o));
}

#[test]
fn inspect_json_gives_metadata_typed() {
    let o = ferrolm(&["inspect", "--model", &model(), "--json"], Stdio::piped());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("inspect --json prints JSON");
    let m = &j["metadata"];
    assert_eq!(m["general.architecture"], "llama");
    assert_eq!(m["llama.block_count"], 2);
    assert_eq!(m["llama.rope.freq_base"], 500000.0);
    assert_eq!(m["llama.attention.layer_norm_rms_epsilon"], 1e-6);
    assert_eq!(m["tokenizer.ggml.merges"], serde_json::json!(["Ġ Ġ"]));
    // A 256-token vocabulary: its length, item type and first items.
    let tokens = &m["tokenizer.ggml.tokens"];
    assert_eq!(tokens["length"], 256);
    assert_eq!(tokens["type"], "string");
    assert_eq!(tokens["head"].as_array().map(Vec::len), Some(8));
    assert_eq!(j["tensors"].as_array().map(|t| !t.is_empty()), Some(true));
}

#[test]
fn a_model_that_is_not_a_regular_file_is_refused_at_once() {
    // A FIFO blocked the open until something wrote to it; a device read as an empty file.
    let fifo = std::env::temp_dir().join(format!("ferrolm-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
    let mut paths = vec!["/dev/zero".to_string()];
    if made {
        paths.push(fifo.display().to_string());
    }
    for p in &paths {
        let o = ferrolm(&["inspect", "--model", p], Stdio::piped());
        assert_eq!(o.status.code(), Some(1), "{p}: {}", stderr(&o));
        assert!(stderr(&o).contains("not a regular file"), "{p}: {}", stderr(&o));
    }
    let _ = std::fs::remove_file(&fifo);
}

#[test]
fn standard_input_is_one_request() {
    let o = ferrolm(&["chat-completion", "--model", &model(), "--request", "-", "--request", "-"], Stdio::piped());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--request - (standard input) can be given once"), "{}", stderr(&o));
}

#[test]
fn a_bad_request_file_is_named() {
    let dir = std::env::temp_dir().join(format!("ferrolm-cli-requests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    let bad = dir.join("bad.json");
    std::fs::write(&good, r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}"#).unwrap();
    std::fs::write(&bad, r#"{"messages": ["#).unwrap();
    let (g, b) = (good.display().to_string(), bad.display().to_string());
    let o = ferrolm(&["chat-completion", "--model", &model(), "--request", &g, "--request", &b], Stdio::piped());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{b}: ")), "the error names the file: {}", stderr(&o));
    // An option the request parses but the generation refuses, and standard input.
    let zero = dir.join("zero.json");
    std::fs::write(&zero, r#"{"messages": [{"role": "user", "content": "hi"}], "n": 0}"#).unwrap();
    let z = zero.display().to_string();
    let o = ferrolm(&["chat-completion", "--model", &model(), "--request", &z], Stdio::piped());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{z}: ")) && stderr(&o).contains("n must be"), "{}", stderr(&o));
    // A schema that fails as the generation starts.
    let schema = dir.join("schema.json");
    let body = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "banana"}}}}"#;
    std::fs::write(&schema, body).unwrap();
    let s = schema.display().to_string();
    // The default model: the fixture has no chat template.
    if let Ok(real) = std::env::var("FERROLM_MODEL") {
        let o = ferrolm(&["chat-completion", "--model", &real, "--request", &s], Stdio::piped());
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(&format!("{s}: JSON schema")), "{}", stderr(&o));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["chat-completion", "--model", &model(), "--request", "-"])
        .env("XDG_RUNTIME_DIR", std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into()))
        .env("WGPU_BACKEND", std::env::var("WGPU_BACKEND").unwrap_or("vulkan".into()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ferrolm binary runs");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"{").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("standard input: "), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stop_strings_need_a_tokenizer() {
    // Without one the output has no text to match: it ran to the end and printed nothing.
    let m = fixture("arch/llama").display().to_string();
    let args = ["generate", "--model", &m, "--prompt-ids", "1,2", "--max-tokens", "2", "--stop", "x"];
    let o = ferrolm(&args, Stdio::null());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("stop strings cannot match"), "{}", stderr(&o));
}

//! Whole-model parity with the reference (transformers, fp32, on the dequantized GGUF):
//! top-10 logits of the last prompt position within 0.1, and greedy tokens equal for the first
//! `steps` steps (or up to the reference's stop token): `FULL_STEPS` on the adapter's fastest
//! kernels, fewer where a run checks one path again (each step is a decode of the whole model).
//! Fixtures: tests/fixtures/smollm2/fixtures.json (the default model) and
//! tests/fixtures/gemma3-q4km/fixtures.json (a real K-quant mix), made by
//! tests/scripts/make_model_fixtures.py. Run by model_parity.rs (the adapter's fastest kernels),
//! portable_parity.rs (the kernels browsers run) and i8_prefill_parity.rs (8-bit prefill).

use ferrolm::engine::{Engine, GenerateOptions};
use ferrolm::gpu::block_on;
use ferrolm::weights::FileSource;
use serde_json::Value;

pub const SMOLLM2: &str = include_str!("../../../tests/fixtures/smollm2/fixtures.json");
pub const GEMMA3_Q4KM: &str = include_str!("../../../tests/fixtures/gemma3-q4km/fixtures.json");
const LOGIT_TOL: f32 = 0.1;
/// Greedy steps compared where parity is the claim (model_parity.rs).
pub const FULL_STEPS: usize = 16;

/// The real Gemma 3 270M Q4_K_M file (`scripts/fetch-test-models.sh`), if present; with
/// FERROLM_REQUIRE_MODELS=1 (as `make test` sets) its absence fails the test.
pub fn gemma3_path() -> Option<std::path::PathBuf> {
    let p = std::env::var("FERROLM_GEMMA3").map(std::path::PathBuf::from).unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        std::path::PathBuf::from(home).join(".cache/ferrolm/gemma-3-270m-q4_k_m.gguf")
    });
    if p.exists() {
        return Some(p);
    }
    let required = std::env::var_os("FERROLM_REQUIRE_MODELS").is_some_and(|v| v != "0");
    assert!(!required, "{} is missing (run scripts/fetch-test-models.sh)", p.display());
    eprintln!("SKIPPED: {} not found (run scripts/fetch-test-models.sh)", p.display());
    None
}

fn load(path: std::path::PathBuf) -> Engine {
    let src = FileSource::open(path).unwrap();
    block_on(Engine::load(&src, &Default::default(), &mut |_, _, _| {})).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Every fixture case of the default model, `steps` greedy steps each (a no-op without the
/// model file).
pub fn check_model_parity(steps: usize) {
    if let Some(path) = super::model_path() {
        check_parity(path, SMOLLM2, steps);
    }
}

/// Every case of `fixtures`: prefill logits and greedy decoding of the model at `path` against
/// the reference.
pub fn check_parity(path: std::path::PathBuf, fixtures: &str, steps: usize) {
    let mut engine = load(path);
    eprintln!("adapter: {:?}", engine.rt.gpu.summary);
    let fx: Value = serde_json::from_str(fixtures).unwrap();
    let mut failures = Vec::new();
    for case in fx["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prompt = ids(&case["prompt_ids"]);
        let want = ids(&case["greedy"]);
        let n = want.len().min(steps);
        // One prefill a case gives both checks: the prompt's logits, then greedy steps from its
        // cache (not reused from the case before: each case's prefill runs whole).
        let opts = GenerateOptions { max_tokens: n, prefix_cache: false, ..Default::default() };
        let mut g = block_on(engine.start(&prompt, &opts)).unwrap();
        let logits = g.prompt_logits().expect("the prompt's logits before the first step");
        let mut worst = 0f32;
        for pair in case["top_logits"].as_array().unwrap() {
            let (id, want) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap() as f32);
            worst = worst.max((logits[id] - want).abs());
        }
        if worst > LOGIT_TOL {
            failures.push(format!("{name}: top-10 logit error {worst:.4} > {LOGIT_TOL}"));
        }
        while block_on(engine.step(&mut g)).unwrap().is_some() {}
        let got = g.tokens.clone();
        eprintln!("{name}: max top-10 logit error {worst:.4}; greedy {:?} vs reference {:?}", &got, &want[..n]);
        if got[..] != want[..n] {
            failures.push(format!("{name}: greedy tokens {got:?} != reference {:?}", &want[..n]));
        }
    }
    assert!(failures.is_empty(), "parity failures:\n{}", failures.join("\n"));
}

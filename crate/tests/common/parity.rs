//! Whole-model parity with the reference (transformers, fp32, on the dequantized GGUF):
//! top-10 logits of the last prompt position within 0.1, and greedy tokens equal for the first
//! 16 steps (or up to the reference's stop token). Fixtures: tests/fixtures/smollm2/fixtures.json,
//! made by tests/scripts/make_model_fixtures.py. Run by model_parity.rs (the adapter's fastest
//! kernels) and portable_parity.rs (the kernels browsers run).

use ferrolm::engine::{Engine, GenerateOptions};
use ferrolm::gpu::block_on;
use ferrolm::weights::FileSource;
use serde_json::Value;

const FIXTURES: &str = include_str!("../../../tests/fixtures/smollm2/fixtures.json");
const LOGIT_TOL: f32 = 0.1;
const GREEDY_STEPS: usize = 16;

fn load() -> Option<Engine> {
    let path = super::model_path()?;
    let src = FileSource::open(path).unwrap();
    Some(block_on(Engine::load(&src, &Default::default(), &mut |_, _, _| {})).unwrap())
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Every fixture case: prefill logits and greedy decoding against the reference (a no-op without
/// the model file).
pub fn check_model_parity() {
    let Some(mut engine) = load() else { return };
    eprintln!("adapter: {:?}", engine.rt.gpu.summary);
    let fx: Value = serde_json::from_str(FIXTURES).unwrap();
    let mut failures = Vec::new();
    for case in fx["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prompt = ids(&case["prompt_ids"]);
        engine.rt.pos = 0;
        let logits = block_on(engine.rt.forward(&prompt)).unwrap();
        let mut worst = 0f32;
        for pair in case["top_logits"].as_array().unwrap() {
            let (id, want) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap() as f32);
            worst = worst.max((logits[id] - want).abs());
        }
        if worst > LOGIT_TOL {
            failures.push(format!("{name}: top-10 logit error {worst:.4} > {LOGIT_TOL}"));
        }

        let want = ids(&case["greedy"]);
        let n = want.len().min(GREEDY_STEPS);
        let opts = GenerateOptions { max_tokens: n, ..Default::default() };
        let got = block_on(engine.generate(&prompt, &opts, &mut |_, _| true)).unwrap().tokens;
        eprintln!("{name}: max top-10 logit error {worst:.4}; greedy {:?} vs reference {:?}", &got, &want[..n]);
        if got[..] != want[..n] {
            failures.push(format!("{name}: greedy tokens {got:?} != reference {:?}", &want[..n]));
        }
    }
    assert!(failures.is_empty(), "parity failures:\n{}", failures.join("\n"));
}

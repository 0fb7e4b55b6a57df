//! The GPU self-check: its synthetic model passes on this adapter (lavapipe in CI) with the
//! kernel variants it selects, the report says what was chosen, and the model check accepts
//! the transformers reference of a fixture model and refuses a wrong one.

use ferrolm::diagnose::Reference;
use ferrolm::engine::{Engine, LoadOptions};
use ferrolm::gpu::block_on;
use serde_json::Value;
use std::path::PathBuf;

fn arch(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/arch").join(name)
}

/// The fixture's prompt and the ten largest reference logits at its last position.
fn llama_reference() -> Reference {
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(arch("llama").join("reference.json")).unwrap()).unwrap();
    let tokens: Vec<u32> = r["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let bytes = std::fs::read(arch("llama").join("logits.f32")).unwrap();
    let all: Vec<f32> = bytes.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let last = &all[all.len() - 256..];
    let mut top: Vec<(u32, f32)> = last.iter().enumerate().map(|(i, v)| (i as u32, *v)).collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    top.truncate(10);
    Reference { tokens, top, tolerance: None }
}

#[test]
fn synthetic_model_passes_with_the_selected_variants() {
    let r = block_on(ferrolm::diagnose::run_without_model()).unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert_eq!(r["passed"], true, "{r}");
    let checks = r["checks"].as_array().unwrap();
    assert_eq!(checks.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["prefill", "decode"]);
    for c in checks {
        // A real comparison: a nonzero error, far below the tolerance.
        let e = c["maxError"].as_f64().unwrap();
        assert!(e > 0.0 && e < c["tolerance"].as_f64().unwrap(), "{c}");
    }
    for k in ["subgroups", "integerDot", "fusedAttention", "matrixUnits", "shaderF16"] {
        assert!(r["variants"][k].is_boolean(), "{k}");
    }
    assert!(r["adapter"]["name"].is_string() && r["limits"]["maxStorageBufferBindingSize"].as_u64().unwrap() > 0);
}

#[test]
fn model_check_accepts_the_reference_and_refuses_a_wrong_one() {
    let opts = LoadOptions { context_length: Some(64), ..Default::default() };
    let mut e = block_on(Engine::load_path(&arch("llama"), &opts, &mut |_, _, _| {})).unwrap();
    let good = llama_reference();
    let r = block_on(e.diagnose(Some(&good))).unwrap();
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["checks"][2]["name"], "model");
    // Another position's logits: the same tokens cannot give them.
    let mut wrong = good.clone();
    wrong.top.iter_mut().for_each(|(_, v)| *v += 0.5);
    let r = block_on(e.diagnose(Some(&wrong))).unwrap();
    assert_eq!(r["passed"], false, "{r}");
    assert_eq!(r["checks"][2]["passed"], false);
    let mut outside = good.clone();
    outside.top[0].0 = 999_999;
    let err = block_on(e.diagnose(Some(&outside))).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    // The engine generates normally afterwards.
    let out = block_on(e.generate(&good.tokens, &Default::default(), &mut |_, _| true)).unwrap();
    assert!(!out.tokens.is_empty());
}

//! HF config parsing and rope frequencies against transformers (tests/fixtures/arch, made by
//! tests/scripts/make_arch_fixtures.py), plus the tiny fixture models' safetensors read through
//! our reader and checked against their configs.

use ferrolm::model::hf_config::{GenerationConfig, HfConfig, LayerKind, TokenizerConfig};
use ferrolm::weights::safetensors::{open_dir, StDtype};
use serde_json::{json, Value};
use std::path::PathBuf;

fn arch_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/arch")
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)
}

#[test]
fn rope_inv_freq_matches_transformers() {
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(arch_dir().join("rope.json")).unwrap()).unwrap();
    assert!(cases.len() >= 16);
    let (mut worst64, mut worst32) = (0f64, 0f64);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let cfg = HfConfig::from_json(&c["config"].to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let kind = if c["layer_type"] == "sliding_attention" { LayerKind::Sliding } else { LayerKind::Full };
        let seq = c["seq_len"].as_u64();
        let got = cfg.rope_inv_freq(kind, seq).unwrap();
        let f64s = |k: &str| c[k].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect::<Vec<_>>();
        let (want, tf) = (f64s("inv_freq_f64"), f64s("inv_freq_transformers"));
        assert_eq!(got.len(), want.len(), "{name}");
        for i in 0..got.len() {
            worst64 = worst64.max(rel(got[i], want[i]));
            worst32 = worst32.max(rel(got[i], tf[i]));
            assert!(rel(got[i], want[i]) < 1e-12, "{name} {kind:?} seq {seq:?} [{i}]: {} vs {}", got[i], want[i]);
            assert!(rel(got[i], tf[i]) < 2e-6, "{name} [{i}]: {} vs transformers {}", got[i], tf[i]);
        }
        let att = c["attention_factor"].as_f64().unwrap();
        assert!(rel(cfg.rope_attention_factor(kind), att) < 1e-12, "{name}: attention factor");
    }
    eprintln!("rope: max rel error {worst64:.2e} vs the f64 port, {worst32:.2e} vs transformers' f32");
}

fn load(family: &str) -> HfConfig {
    HfConfig::from_json(&std::fs::read_to_string(arch_dir().join(family).join("config.json")).unwrap()).unwrap()
}

#[test]
fn fixture_configs_capture_each_family() {
    use LayerKind::{Full, Sliding};
    let l = load("llama");
    assert_eq!((l.rope.rope_type.as_str(), l.rope.theta, l.rope.factor), ("llama3", 500000.0, Some(8.0)));
    assert_eq!((l.num_key_value_heads, l.head_dim, l.tie_word_embeddings, l.qkv_bias), (2, 16, false, false));
    let q2 = load("qwen2");
    assert!(q2.qkv_bias && q2.tie_word_embeddings && !q2.qk_norm);
    assert_eq!(q2.eos_token_id, vec![2, 3]);
    assert_eq!(q2.layer_types, vec![Full; 2]);
    let q3 = load("qwen3");
    assert_eq!((q3.head_dim, q3.qk_norm, q3.qkv_bias), (32, true, false));
    let p = load("phi3");
    assert_eq!((p.rope.rope_type.as_str(), p.rope_dim(&p.rope), p.fused_qkv_gate_up), ("longrope", 8, true));
    assert_eq!(p.rope.original_max_position_embeddings, Some(32));
    let g2 = load("gemma2");
    assert_eq!(g2.layer_types, vec![Sliding, Full]);
    assert_eq!((g2.sliding_window, g2.query_pre_attn_scalar), (Some(8), Some(16.0)));
    assert_eq!((g2.attn_logit_softcapping, g2.final_logit_softcapping), (Some(50.0), Some(30.0)));
    assert_eq!(g2.hidden_act, "gelu_pytorch_tanh");
    let g3 = load("gemma3");
    assert_eq!((g3.model_type.as_str(), g3.qk_norm, g3.attn_logit_softcapping), ("gemma3_text", true, None));
    assert_eq!(g3.layer_types, vec![Sliding, Full]);
    assert_eq!(g3.rope_for(Full).rope_type, "linear");
    assert_eq!(g3.rope_for(Sliding).theta, 10000.0);
    let m = load("mistral");
    assert_eq!((m.layer_types.clone(), m.sliding_window), (vec![Sliding; 2], Some(8)));
}

#[test]
fn fixture_weights_read_and_fit_their_configs() {
    let mut dirs: Vec<_> =
        std::fs::read_dir(arch_dir()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    assert!(dirs.len() >= 12, "{dirs:?}");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        // MLX folders hold packed words, MLC folders no config.json or safetensors, Qwen3.5
        // DeltaNet layers: their loaders' tests (arch_parity.rs, mlc_folder.rs) check those.
        if name.contains("-mlx") || name.contains("-mlc") || name == "qwen3_5" {
            continue;
        }
        let family = name.split('-').next().unwrap();
        let cfg = HfConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        let m = open_dir(&dir).unwrap();
        let want = if name.ends_with("-f16") {
            StDtype::F16
        } else if name.ends_with("-bf16") {
            StDtype::BF16
        } else {
            StDtype::F32
        };
        let shape = |t: &str| m.get(t).unwrap_or_else(|| panic!("{name}: no {t}")).2.shape.clone();
        let (h, hd, nh, nkv) = (
            cfg.hidden_size as u64,
            cfg.head_dim as u64,
            cfg.num_attention_heads as u64,
            cfg.num_key_value_heads as u64,
        );
        assert_eq!(shape("model.embed_tokens.weight"), vec![cfg.vocab_size as u64, h], "{name}");
        assert_eq!(m.get("lm_head.weight").is_none(), cfg.tie_word_embeddings, "{name}");
        for i in 0..cfg.num_hidden_layers {
            let a = format!("model.layers.{i}.self_attn");
            if cfg.fused_qkv_gate_up {
                assert_eq!(shape(&format!("{a}.qkv_proj.weight")), vec![(nh + 2 * nkv) * hd, h]);
                assert_eq!(
                    shape(&format!("model.layers.{i}.mlp.gate_up_proj.weight")),
                    vec![2 * cfg.intermediate_size as u64, h]
                );
            } else {
                assert_eq!(shape(&format!("{a}.q_proj.weight")), vec![nh * hd, h], "{name}");
                assert_eq!(shape(&format!("{a}.k_proj.weight")), vec![nkv * hd, h], "{name}");
                assert_eq!(m.get(&format!("{a}.q_proj.bias")).is_some(), cfg.qkv_bias, "{name}");
            }
            // HunYuan names its q norm query_layernorm.
            let q_norm = ["q_norm", "query_layernorm"].iter().any(|n| m.get(&format!("{a}.{n}.weight")).is_some());
            assert_eq!(q_norm, cfg.qk_norm, "{name}");
        }
        for t in m.tensor_names() {
            assert_eq!(m.get(t).unwrap().2.dtype, want, "{name} {t}");
        }
        // Low-precision copies hold exactly the F32 weights rounded to their type.
        if want != StDtype::F32 {
            let full = open_dir(arch_dir().join(family)).unwrap();
            for t in m.tensor_names() {
                let (lo, hi) = (m.read_f32(t).unwrap(), full.read_f32(t).unwrap());
                let round = |x: f32| {
                    if want == StDtype::F16 {
                        half::f16::from_f32(x).to_f32()
                    } else {
                        half::bf16::from_f32(x).to_f32()
                    }
                };
                assert!(lo.iter().zip(&hi).all(|(a, b)| *a == round(*b)), "{name} {t}");
            }
        } else {
            let r: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
            let n = std::fs::metadata(dir.join("logits.f32")).unwrap().len();
            assert_eq!(n, 4 * r["logits_shape"][0].as_u64().unwrap() * cfg.vocab_size as u64, "{name}");
        }
    }
}

#[test]
fn legacy_and_nested_layouts() {
    // Gemma 3 multimodal wrapper in the transformers 4.x layout.
    let g3 = json!({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "eos_token_id": [1, 106],
        "torch_dtype": "bfloat16", "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
        "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "sliding_window": 1024, "sliding_window_pattern": 6}});
    let c = HfConfig::from_json(&g3.to_string()).unwrap();
    assert_eq!((c.outer_model_type.as_deref(), c.model_type.as_str()), (Some("gemma3"), "gemma3_text"));
    assert_eq!(
        (c.eos_token_id.clone(), c.dtype.as_deref(), c.tie_word_embeddings),
        (vec![1, 106], Some("bfloat16"), true)
    );
    assert_eq!(c.layer_types.iter().filter(|k| **k == LayerKind::Full).count(), 2);
    assert_eq!(c.layer_types[5], LayerKind::Full);
    assert_eq!((c.rope.theta, c.rope.factor, c.rope_for(LayerKind::Sliding).theta), (1e6, Some(8.0), 1e4));
    let full = c.rope_inv_freq(LayerKind::Full, None).unwrap();
    assert!(rel(full[1], 1e6f64.powf(-2.0 / 256.0) / 8.0) < 1e-14);
    assert_eq!((c.query_pre_attn_scalar, c.final_logit_softcapping), (Some(256.0), None));
    // Mistral without a window, Qwen2 whose window is switched off.
    let base = json!({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "vocab_size": 10});
    let with = |extra: Value| {
        let mut v = base.clone();
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        HfConfig::from_json(&v.to_string())
    };
    let m = with(json!({"model_type": "mistral", "sliding_window": null})).unwrap();
    assert_eq!((m.sliding_window, m.layer_types.clone(), m.num_key_value_heads), (None, vec![LayerKind::Full; 3], 4));
    let q = with(
        json!({"model_type": "qwen2", "sliding_window": 32768, "use_sliding_window": false, "max_window_layers": 1}),
    )
    .unwrap();
    assert_eq!((q.sliding_window, q.qkv_bias), (None, true));
    let q =
        with(json!({"model_type": "qwen2", "sliding_window": 16, "use_sliding_window": true, "max_window_layers": 1}))
            .unwrap();
    assert_eq!(q.layer_types, vec![LayerKind::Full, LayerKind::Sliding, LayerKind::Sliding]);
    // Errors name the key.
    let e = HfConfig::from_json(&json!({"hidden_size": 64}).to_string()).unwrap_err().to_string();
    assert!(e.contains("num_attention_heads"), "{e}");
    let e = with(json!({"rms_norm_eps": "x"})).unwrap_err().to_string();
    assert!(e.contains("rms_norm_eps"), "{e}");
    assert!(with(json!({"layer_types": ["full_attention"]})).is_err());
    assert!(with(json!({"num_key_value_heads": 3})).is_err());
    let bad_longrope = json!({"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}});
    assert!(with(bad_longrope).is_err());
    // YaRN is computed (rope.json checks its values); a type transformers has and we do not is refused.
    let yarn = with(json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})).unwrap();
    assert_eq!(yarn.rope.original_max_position_embeddings, Some(4096));
    assert!(yarn.rope_inv_freq(LayerKind::Full, None).is_ok());
    let other = with(json!({"rope_scaling": {"rope_type": "proportional", "factor": 4.0}})).unwrap();
    assert!(other.rope_inv_freq(LayerKind::Full, None).is_err());
    assert!(HfConfig::from_json("[1]").is_err() && HfConfig::from_json("<html>").is_err());
}

#[test]
fn generation_and_tokenizer_configs() {
    let g = GenerationConfig::from_json(
        r#"{"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": true}"#,
    )
    .unwrap();
    assert_eq!((g.bos_token_id, g.eos_token_id), (vec![128000], vec![128001, 128008, 128009]));
    let g =
        GenerationConfig::from_json(&std::fs::read_to_string(arch_dir().join("qwen2/generation_config.json")).unwrap())
            .unwrap();
    assert_eq!(g.eos_token_id, vec![2, 3]);
    let t = TokenizerConfig::from_json(r#"{"chat_template": "{{ x }}", "bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false}, "add_bos_token": true}"#).unwrap();
    assert_eq!(
        (t.chat_template.as_deref(), t.bos_token.as_deref(), t.eos_token.as_deref()),
        (Some("{{ x }}"), Some("<s>"), Some("</s>"))
    );
    assert_eq!(t.add_bos_token, Some(true));
    let t = TokenizerConfig::from_json(r#"{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}], "bos_token": null}"#).unwrap();
    assert_eq!((t.chat_template.as_deref(), t.chat_templates.len(), t.bos_token), (Some("D"), 2, None));
    assert!(TokenizerConfig::from_json(r#"{"chat_template": 3}"#).is_err());
    assert!(TokenizerConfig::from_json(r#"{"eos_token": {"x": 1}}"#).is_err());
}

#[test]
fn family_rules_for_biases_windows_and_wrappers() {
    use ferrolm::model::ModelConfig;
    let base = json!({"hidden_size": 64, "intermediate_size": 100, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 10});
    let with = |extra: Value| HfConfig::from_json(&with_raw(&base, extra)).unwrap();
    // Which projections carry biases follows each family's modeling code, not the key alone.
    let flags = |c: &HfConfig| (c.qkv_bias, c.o_bias, c.mlp_bias);
    let bias = json!({"attention_bias": true, "mlp_bias": true});
    for (family, want) in [
        ("llama", (true, true, true)),
        ("qwen2", (true, false, false)),
        ("qwen3", (true, true, false)),
        ("gemma2", (true, true, false)),
        ("mistral", (false, false, false)),
        ("phi3", (false, false, false)),
    ] {
        let mut extra = bias.clone();
        extra["model_type"] = json!(family);
        assert_eq!(flags(&with(extra)), want, "{family}");
    }
    assert_eq!(flags(&with(json!({"model_type": "qwen2"}))), (true, false, false));
    // Phi-3 slides every layer when it names a window; a layer marked sliding without a window
    // attends fully.
    let p = with(json!({"model_type": "phi3", "sliding_window": 12}));
    assert_eq!((p.layer_types.clone(), p.sliding_window), (vec![LayerKind::Sliding; 2], Some(12)));
    let q = with(json!({"model_type": "qwen2", "layer_types": ["full_attention", "sliding_attention"]}));
    assert_eq!((q.layer_types.clone(), q.sliding_window), (vec![LayerKind::Full; 2], None));
    // Gemma 1: head_dim^-0.5 scaling, legacy "gelu" is the tanh approximation, no post-norms.
    let g = with(json!({"model_type": "gemma", "hidden_act": "gelu", "head_dim": 16}));
    assert_eq!((g.query_pre_attn_scalar, g.hidden_act.as_str()), (None, "gelu_pytorch_tanh"));
    let m = ModelConfig::from_hf(&g).unwrap();
    assert!(!m.norms.post() && m.norm_offset == 1.0 && m.gelu);
    assert!((m.attn_scale - 0.25).abs() < 1e-12);
    // The intermediate size is padded to the kernels' multiple of 8.
    assert_eq!(m.ffn, 104);
    // Gemma3ForConditionalGeneration: the wrapper's tie flag decides, and its LM head has no
    // final soft-cap.
    let cg = json!({"model_type": "gemma3", "tie_word_embeddings": false, "text_config": {"model_type": "gemma3_text",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 16,
        "vocab_size": 10, "tie_word_embeddings": true, "final_logit_softcapping": 5.0, "sliding_window": 8}});
    let c = HfConfig::from_json(&cg.to_string()).unwrap();
    assert_eq!((c.tie_word_embeddings, c.final_logit_softcapping), (false, Some(5.0)));
    assert_eq!(ModelConfig::from_hf(&c).unwrap().final_softcap, 0.0);
    let mut text = cg["text_config"].clone();
    text["model_type"] = json!("gemma3_text");
    let t = ModelConfig::from_hf(&HfConfig::from_json(&text.to_string()).unwrap()).unwrap();
    assert_eq!((t.final_softcap, t.tied_embeddings), (5.0, true));
}

#[test]
fn length_dependent_rope_tables() {
    use ferrolm::model::forward::rope_table_for;
    use ferrolm::model::ModelConfig;
    // Phi-3 longrope with original context 4: position p of a generation rotates with the long
    // factors once max(prompt, p + 1) > 4 (a prompt past 4 uses them everywhere).
    let phi = json!({"model_type": "phi3", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "vocab_size": 10, "max_position_embeddings": 16, "original_max_position_embeddings": 4,
        "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": vec![1.0; 8],
        "long_factor": vec![2.0; 8]}});
    let cfg = ModelConfig::from_hf(&HfConfig::from_json(&phi.to_string()).unwrap()).unwrap();
    let att = (1.0 + 4f64.ln() / 4f64.ln()).sqrt();
    let angle = |t: &[f32], p: usize| (t[p * 16 + 1] as f64 / att).atan2(t[p * 16] as f64 / att);
    let short = rope_table_for(&cfg, 1, 16);
    let long = rope_table_for(&cfg, 5, 16);
    assert_eq!((cfg.rope_table_key(4), cfg.rope_table_key(5)), (0, 1));
    assert!((angle(&short, 3) - 3.0).abs() < 1e-6, "short factor 1 at position 3");
    assert!((angle(&short, 4) - 2.0).abs() < 1e-6, "long factor 2 from position 4 on");
    assert!((angle(&long, 3) - 1.5).abs() < 1e-6, "a 5-token prompt uses the long factors everywhere");
    assert!(cfg.rope_recompute_at(0, 5) && !cfg.rope_recompute_at(1, 6));
    // Dynamic NTK: the base grows with max(prompt, p + 1) past max_position_embeddings.
    let dynamic = json!({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "vocab_size": 10, "max_position_embeddings": 4,
        "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}});
    let cfg = ModelConfig::from_hf(&HfConfig::from_json(&dynamic.to_string()).unwrap()).unwrap();
    let table = rope_table_for(&cfg, 1, 8);
    for p in [2usize, 6] {
        let s = (p + 1).max(4) as f64;
        let base = 10000f64 * (2.0 * s / 4.0 - 1.0).powf(16.0 / 14.0);
        let want = p as f64 / base.powf(2.0 / 16.0);
        let got = (table[p * 16 + 3] as f64).atan2(table[p * 16 + 2] as f64);
        assert!((got - want).abs() < 1e-6, "position {p}: {got} vs {want}");
    }
    assert!(!cfg.rope_recompute_at(0, 7), "only Phi-3 recomputes its cache");
}

/// The layer rules of configs written without the lists transformers fills in (its config
/// classes' `__post_init__`): Ministral slides everywhere a window is given, SmolLM3 drops rope
/// on every `no_rope_layer_interval`-th layer and slides there only with `use_sliding_window`,
/// Granite's absent multipliers are 1, InternLM3 takes `qkv_bias` / `bias` and heads of 128.
#[test]
fn per_layer_defaults_follow_the_config_classes() {
    let base = json!({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                      "vocab_size": 256});
    let with = |extra: Value| HfConfig::from_json(&with_raw(&base, extra)).unwrap();
    let (s, f) = (LayerKind::Sliding, LayerKind::Full);
    assert_eq!(with(json!({"model_type": "ministral", "sliding_window": 8})).layer_types, vec![s; 4]);
    assert_eq!(with(json!({"model_type": "ministral", "sliding_window": null})).layer_types, vec![f; 4]);
    let m = with(json!({"model_type": "smollm3", "no_rope_layer_interval": 2, "sliding_window": 8}));
    assert_eq!((m.nope_layers, m.layer_types), (vec![false, true, false, true], vec![f; 4]));
    let m = with(json!({"model_type": "smollm3", "use_sliding_window": true, "sliding_window": 8}));
    assert_eq!((m.nope_layers, m.layer_types), (vec![false, false, false, true], vec![f, f, f, s]));
    let m = with(json!({"model_type": "smollm3", "no_rope_layers": [1, 0, 1, 1]}));
    assert_eq!(m.nope_layers, vec![false, true, false, false]);
    assert!(HfConfig::from_json(&with_raw(&base, json!({"model_type": "smollm3", "no_rope_layers": [1, 2, 1, 1]})))
        .is_err());
    assert!(HfConfig::from_json(&with_raw(&base, json!({"model_type": "smollm3", "no_rope_layers": [1, 1]}))).is_err());
    let g = with(json!({"model_type": "granite", "logits_scaling": 8.0})).multipliers.unwrap();
    assert_eq!((g.embedding, g.residual, g.attention, g.logits_scaling), (1.0, 1.0, 1.0, 8.0));
    assert!(
        HfConfig::from_json(&with_raw(&base, json!({"model_type": "granite", "residual_multiplier": -1.0}))).is_err()
    );
    let i = with(json!({"model_type": "internlm3", "qkv_bias": true, "bias": true}));
    assert_eq!((i.head_dim, i.qkv_bias, i.o_bias, i.mlp_bias, i.rms_norm_eps), (128, true, true, true, 1e-5));
    // The config classes' defaults where config.json leaves keys out.
    let e = with(json!({"model_type": "ernie4_5", "use_bias": true}));
    assert_eq!((e.head_dim, e.tie_word_embeddings, e.qkv_bias, e.o_bias, e.mlp_bias), (128, true, true, true, true));
    let so = with(json!({"model_type": "seed_oss"}));
    assert_eq!((so.qkv_bias, so.o_bias, so.head_dim), (true, false, 128));
    let so = with(json!({"model_type": "seed_oss", "attention_bias": false, "attention_out_bias": true}));
    assert_eq!((so.qkv_bias, so.o_bias), (false, true));
    let g = with(json!({"model_type": "glm4"}));
    assert_eq!((g.qkv_bias, g.o_bias, g.rope.partial_rotary_factor, g.rms_norm_eps), (true, false, 0.5, 1.5625e-7));
    // EXAONE 4: a 4096 window and three sliding layers per full one unless told otherwise; the
    // full layers rotate only while a window is set.
    let x = with(json!({"model_type": "exaone4"}));
    assert_eq!((x.sliding_window, x.layer_types.clone()), (Some(4096), vec![s, s, s, f]));
    assert_eq!(x.nope_layers, vec![false, false, false, true]);
    let x = with(json!({"model_type": "exaone4", "sliding_window": null, "layer_types": vec!["full_attention"; 4]}));
    assert_eq!((x.sliding_window, x.nope_layers), (None, vec![false; 4]));
    let a = with(json!({"model_type": "arcee"}));
    assert_eq!(a.hidden_act, "relu2");
    let h = with(json!({"model_type": "hunyuan_v1_dense",
                        "rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "alpha": 1000.0, "factor": 1.0}}));
    assert_eq!(h.rope.rope_type, "ntk_alpha");
    // Ministral 3: Ministral3Config's yarn default, and the query temperature it carries.
    let m = with(json!({"model_type": "ministral3"}));
    assert_eq!(
        (m.rope.rope_type.as_str(), m.rope.factor, m.q_temperature, m.head_dim),
        ("yarn", Some(16.0), Some((0.1, 16384)), 128)
    );
    let e = HfConfig::from_json(&with_raw(
        &base,
        json!({"model_type": "ministral3",
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}}),
    ))
    .unwrap_err();
    assert!(e.to_string().contains("llama_4_scaling_beta"), "{e}");
    let inv = h.rope_inv_freq(LayerKind::Full, Some(100_000)).unwrap();
    let base = 1e4 * 1000f64.powf(16.0 / 14.0);
    assert!((inv[1] - base.powf(-2.0 / 16.0)).abs() < 1e-12, "{inv:?}");
}

fn with_raw(base: &Value, extra: Value) -> String {
    let mut v = base.clone();
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    v.to_string()
}

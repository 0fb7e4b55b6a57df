//! Numbers in a model's configuration that no real model has — huge layer counts and widths,
//! zero periods, negative or non-finite rotary bases, factors far outside their range — end in
//! an error that names the key, before anything is sized from them: never an allocation
//! failure, a division by zero or a panic. Both readers: GGUF metadata and config.json.

use ferrolm::model::hf_config::HfConfig;
use ferrolm::model::ModelConfig;
use ferrolm::weights::gguf::{GgufFile, Value};
use ferrolm::weights::gguf_write::GgufWriter;
use ferrolm::weights::MemSource;

fn gguf_config(arch: &str, overrides: &[(&str, Value)]) -> ferrolm::Result<ModelConfig> {
    let k = |s: &str| format!("{arch}.{s}");
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (k("block_count"), Value::U32(2)),
        (k("embedding_length"), Value::U32(64)),
        (k("feed_forward_length"), Value::U32(128)),
        (k("attention.head_count"), Value::U32(4)),
        (k("attention.head_count_kv"), Value::U32(2)),
        (k("context_length"), Value::U32(256)),
        (k("vocab_size"), Value::U32(100)),
        (k("rope.freq_base"), Value::F32(10000.0)),
    ];
    for (key, v) in overrides {
        let key =
            if key.contains('.') && !key.starts_with('.') { key.to_string() } else { k(key.trim_start_matches('.')) };
        match meta.iter_mut().find(|(m, _)| *m == key) {
            Some(slot) => slot.1 = v.clone(),
            None => meta.push((key, v.clone())),
        }
    }
    let mut w = GgufWriter::new();
    for (key, v) in meta {
        w.add(key, v).unwrap();
    }
    let g = GgufFile::read(&MemSource::new(w.to_bytes().unwrap(), "hostile.gguf")).unwrap();
    ModelConfig::from_gguf(&g)
}

fn expect_err<T: std::fmt::Debug>(r: ferrolm::Result<T>, key: &str, what: &str) {
    match r {
        Err(e) => {
            eprintln!("{what}: {e}");
            assert!(e.to_string().contains(key), "{what}: error does not name {key}: {e}")
        }
        Ok(v) => panic!("{what}: accepted: {v:?}"),
    }
}

#[test]
fn gguf_metadata_out_of_range_is_refused() {
    gguf_config("llama", &[]).expect("the base file is fine");
    let big = Value::U64(1 << 40);
    let cases: Vec<(&str, &str, Value)> = vec![
        ("llama", ".block_count", big.clone()),
        ("llama", ".block_count", Value::U32(u32::MAX)),
        ("llama", ".block_count", Value::U32(0)),
        ("llama", ".embedding_length", big.clone()),
        ("llama", ".feed_forward_length", big.clone()),
        ("llama", ".attention.head_count", big.clone()),
        ("llama", ".attention.head_count_kv", Value::U64(1 << 33)),
        ("llama", ".attention.key_length", big.clone()),
        ("llama", ".vocab_size", big.clone()),
        ("llama", ".context_length", big.clone()),
        ("llama", ".rope.dimension_count", big.clone()),
        ("llama", ".rope.dimension_count", Value::U32(0)),
        ("llama", ".rope.scaling.type", Value::String("yarn".into())),
        ("llama", ".rope.scaling.type", Value::String("bogus".into())),
        ("llama", ".rope.freq_base", Value::F32(-1.0)),
        ("llama", ".rope.freq_base", Value::F32(f32::NAN)),
        ("llama", ".rope.freq_base", Value::F32(f32::INFINITY)),
        ("llama", ".attention.layer_norm_rms_epsilon", Value::F32(-1e-6)),
        ("llama", ".attention.sliding_window", big.clone()),
        ("gemma2", ".final_logit_softcapping", Value::F32(-30.0)),
        ("gemma2", ".attn_logit_softcapping", Value::F32(f32::NAN)),
        ("gemma3", ".attention.sliding_window_pattern", Value::U32(0)),
        ("gemma3", ".rope.freq_base_swa", Value::F32(0.0)),
    ];
    for (arch, key, v) in cases {
        let mut o: Vec<(&str, Value)> = vec![(key, v.clone())];
        if key.ends_with("sliding_window_pattern") {
            o.push((".attention.sliding_window", Value::U32(16)));
        }
        expect_err(gguf_config(arch, &o), key.trim_start_matches('.'), &format!("{arch}{key} = {v:?}"));
    }
}

fn hf(json: &str) -> ferrolm::Result<ModelConfig> {
    ModelConfig::from_hf(&HfConfig::from_json(json)?)
}

#[test]
fn config_json_out_of_range_is_refused() {
    let base = serde_json::json!({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0
    });
    hf(&base.to_string()).expect("the base config is fine");
    let with = |k: &str, v: serde_json::Value| {
        let mut c = base.clone();
        c[k] = v;
        c.to_string()
    };
    let big = serde_json::json!(1u64 << 40);
    for (key, v) in [
        ("num_hidden_layers", serde_json::json!(1_000_000_000_000u64)),
        ("num_hidden_layers", serde_json::json!(0)),
        ("head_dim", big.clone()),
        ("hidden_size", big.clone()),
        ("intermediate_size", big.clone()),
        ("num_attention_heads", big.clone()),
        ("num_key_value_heads", big.clone()),
        ("vocab_size", big.clone()),
        ("max_position_embeddings", big.clone()),
        ("rope_theta", serde_json::json!(-1.0)),
        ("rope_theta", serde_json::json!(0.0)),
        ("rms_norm_eps", serde_json::json!(-1.0)),
        ("partial_rotary_factor", serde_json::json!(1e300)),
        ("partial_rotary_factor", serde_json::json!(0.0)),
        ("text_config", serde_json::json!(5)),
        ("text_config", serde_json::json!("llama")),
    ] {
        expect_err(hf(&with(key, v.clone())), key, &format!("{key} = {v}"));
    }
    // No model_type at all is said so (it read as model_type "").
    let mut none = base.clone();
    none.as_object_mut().unwrap().remove("model_type");
    expect_err(hf(&none.to_string()), "no model_type in config.json", "no model_type");
    // Phi-3 with longrope factors, Gemma 3 with a zero period, Qwen2 with a huge window.
    let phi = serde_json::json!({
        "model_type": "phi3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 1024,
        "original_max_position_embeddings": 256, "partial_rotary_factor": 1e300,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}
    });
    expect_err(hf(&phi.to_string()), "partial_rotary_factor", "phi3 partial_rotary_factor 1e300");
    let mut phi2 = phi.clone();
    phi2["partial_rotary_factor"] = serde_json::json!(1.0);
    phi2["rope_scaling"]["short_factor"] = serde_json::json!(vec![-1.0; 8]);
    expect_err(hf(&phi2.to_string()), "short_factor", "negative longrope factor");
    let mut phi3 = phi.clone();
    phi3["partial_rotary_factor"] = serde_json::json!(1.0);
    phi3["original_max_position_embeddings"] = big.clone();
    expect_err(hf(&phi3.to_string()), "original_max_position_embeddings", "huge original context");
    let g3 = serde_json::json!({
        "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
        "sliding_window": 32, "sliding_window_pattern": 0
    });
    expect_err(hf(&g3.to_string()), "sliding_window_pattern", "gemma3 pattern 0");
    let mut g3b = g3.clone();
    g3b["sliding_window_pattern"] = serde_json::json!(2);
    g3b["final_logit_softcapping"] = serde_json::json!(-1.0);
    expect_err(hf(&g3b.to_string()), "final_logit_softcapping", "negative softcap");
}

/// Weights a transformers quantizer packed (GPTQ, AWQ, bitsandbytes ...) are refused by the
/// method's name (BitNet's online quantization too); MLX's quantization (no method) is read.
#[test]
fn quantized_folders_name_their_method() {
    let base = serde_json::json!({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100
    });
    let with = |q: serde_json::Value| {
        let mut c = base.clone();
        c["quantization_config"] = q;
        c.to_string()
    };
    for m in ["gptq", "awq", "bitsandbytes", "fp8", "compressed-tensors"] {
        let q = serde_json::json!({"quant_method": m, "bits": 4, "group_size": 128});
        expect_err(hf(&with(q)), &format!("quant_method \"{m}\" are not supported"), m);
    }
    expect_err(hf(&with(serde_json::json!({"quant_method": 4}))), "quant_method must be a string", "numeric method");
    hf(&with(serde_json::json!({"group_size": 64, "bits": 4}))).expect("MLX's quantization_config has no method");
    let online =
        serde_json::json!({"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "online"});
    expect_err(hf(&with(online)), "quant_method \"bitnet\"", "BitNet's online quantization");
    hf(&with(serde_json::Value::Null)).expect("a null quantization_config is none");
    // A multimodal wrapper's text model cannot hide the wrapper's quantization with a null.
    let mut wrapped = serde_json::json!({"model_type": "gemma3", "quantization_config": {"quant_method": "gptq"}});
    let mut text = base.clone();
    text["model_type"] = serde_json::json!("gemma3_text");
    text["head_dim"] = serde_json::json!(16);
    text["quantization_config"] = serde_json::Value::Null;
    wrapped["text_config"] = text;
    expect_err(hf(&wrapped.to_string()), "quant_method \"gptq\"", "wrapped gptq");
}

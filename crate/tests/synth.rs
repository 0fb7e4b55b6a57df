//! make-gguf (`ferrolm::synth`): the files it writes parse, carry the shape table's tensors and
//! metadata, load our tokenizer at the shape's vocabulary size, and (llama, qwen2) give a
//! `ModelConfig`. Real shapes are written sparse (header only, data left as holes) with one or two
//! layers; a small custom shape is written with random data and decoded.

mod common;

use ferrolm::model::ModelConfig;
use ferrolm::synth::{self, Fill, Shape, SynthOptions};
use ferrolm::tokenizer::Tokenizer;
use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::quant::{dequantize, GgmlType};
use ferrolm::weights::FileSource;
use std::path::PathBuf;

fn tokenizer_src() -> Option<GgufFile> {
    let p = common::model_path()?;
    Some(GgufFile::read(&FileSource::open(p).unwrap()).unwrap())
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrolm-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write(opts: &SynthOptions, tok: &GgufFile, name: &str) -> (PathBuf, GgufFile) {
    let path = tmp(name);
    let r = synth::write(opts, tok, &path, &mut |_| {}).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), r.bytes);
    let g = GgufFile::read(&FileSource::open(&path).unwrap()).unwrap();
    (path, g)
}

/// Names, shapes and types in the file are exactly the shape table's.
fn check_tensors(g: &GgufFile, shape: &Shape, ty: GgmlType) {
    let want = synth::tensors(shape, ty);
    assert_eq!(g.tensors.len(), want.len());
    for w in &want {
        let t = g.tensor(&w.name).unwrap_or_else(|| panic!("{} missing", w.name));
        assert_eq!(t.dims, w.dims, "{}", w.name);
        assert_eq!(t.ty, w.ty, "{}", w.name);
    }
    let (h, hd) = (shape.hidden, shape.head_dim);
    let dims = |n: &str| g.tensor(n).unwrap_or_else(|| panic!("{n} missing")).dims.clone();
    assert_eq!(dims("token_embd.weight"), vec![h, shape.vocab]);
    assert_eq!(g.tensor("output.weight").is_none(), shape.tied);
    if let Some(y) = shape.hybrid {
        // Layer 0 is a Gated DeltaNet layer, layer interval - 1 the first gated attention.
        let conv = 2 * y.key_heads * y.key_dim + y.value_heads * y.value_dim;
        assert_eq!(dims("blk.0.attn_qkv.weight"), vec![h, conv]);
        if shape.layers >= y.interval {
            assert_eq!(dims(&format!("blk.{}.attn_q.weight", y.interval - 1)), vec![h, 2 * shape.heads * hd]);
        }
        assert_eq!(dims("blk.0.ffn_gate.weight"), vec![h, shape.ffn]);
    } else if shape.fused {
        assert_eq!(dims("blk.0.attn_qkv.weight"), vec![h, (shape.heads + 2 * shape.kv_heads) * hd]);
        assert_eq!(dims("blk.0.ffn_up.weight"), vec![h, 2 * shape.ffn]);
        assert!(g.tensor("blk.0.ffn_gate.weight").is_none() && g.tensor("blk.0.attn_q.weight").is_none());
    } else {
        assert_eq!(dims("blk.0.attn_k.weight"), vec![h, shape.kv_heads * hd]);
        assert_eq!(dims("blk.0.ffn_gate.weight"), vec![h, shape.ffn]);
    }
    assert_eq!(dims("blk.0.ffn_down.weight"), vec![shape.ffn, h]);
    assert_eq!(g.tensor("blk.0.attn_q.bias").is_some(), shape.qkv_bias);
    assert_eq!(g.tensor("rope_freqs.weight").map(|t| t.dims.clone()), shape.llama3_rope.map(|_| vec![hd / 2]));
    for t in &g.tensors {
        let small = ["norm.weight", ".bias", "ssm_conv1d.weight", "ssm_a"];
        if small.iter().any(|s| t.name.ends_with(s)) || t.name.starts_with("rope_freqs") {
            assert_eq!(t.ty, GgmlType::F32, "{}", t.name);
        } else if t.dims[0] % ty.block_size() != 0 {
            assert_eq!(t.ty, synth::matrix_type(ty, t.dims[0]), "{}", t.name);
            assert!(t.dims[0] % t.ty.block_size() == 0, "{}", t.name);
        } else {
            assert_eq!(t.ty, ty, "{}", t.name);
        }
    }
}

fn check_metadata(g: &GgufFile, shape: &Shape, layers: u64) {
    let a = shape.arch;
    let u = |k: &str| g.get_u64(k).unwrap().unwrap_or_else(|| panic!("{k} missing"));
    assert_eq!(g.get_str("general.architecture").unwrap(), Some(a));
    assert_eq!(u(&format!("{a}.block_count")), layers);
    assert_eq!(u(&format!("{a}.embedding_length")), shape.hidden);
    assert_eq!(u(&format!("{a}.feed_forward_length")), shape.ffn);
    assert_eq!(u(&format!("{a}.attention.head_count")), shape.heads);
    assert_eq!(u(&format!("{a}.attention.head_count_kv")), shape.kv_heads);
    assert_eq!(u(&format!("{a}.context_length")), shape.context);
    assert_eq!(u(&format!("{a}.rope.dimension_count")), shape.hybrid.map_or(shape.head_dim, |y| y.rope_dim));
    assert_eq!(u(&format!("{a}.vocab_size")), shape.vocab);
    assert_eq!(g.get_f64(&format!("{a}.rope.freq_base")).unwrap(), Some(shape.rope_theta));
    assert_eq!(u("general.quantization_version"), 2);
    assert_eq!(g.get_array("tokenizer.ggml.tokens").unwrap().unwrap().len() as u64, shape.vocab);
    assert_eq!(g.get_array("tokenizer.ggml.token_type").unwrap().unwrap().len() as u64, shape.vocab);
    // llama.cpp tunes its tokenizer by model name, and a "phi-3" one then requires Phi-3's own
    // special tokens, which a borrowed vocabulary lacks: the file would not load there.
    let name = g.get_str("general.name").unwrap().unwrap();
    for key in ["phi-3", "phi3", "modern-bert"] {
        assert!(!name.contains(key), "general.name {name:?} contains {key:?}");
    }
}

/// The vocabulary is consistent: unique tokens, every merge's halves and result present, special
/// ids inside it.
fn check_vocab(g: &GgufFile, vocab: u64) {
    let toks = g.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
    let set: std::collections::HashSet<&str> = toks.iter().copied().collect();
    assert_eq!(set.len(), toks.len(), "tokens are not unique");
    for m in g.get_str_array("tokenizer.ggml.merges").unwrap().unwrap() {
        let (a, b) = m.split_once(' ').unwrap();
        assert!(set.contains(a) && set.contains(b) && set.contains(format!("{a}{b}").as_str()), "merge {m:?}");
    }
    for k in ["bos", "eos", "unknown", "padding"] {
        if let Some(id) = g.get_u64(&format!("tokenizer.ggml.{k}_token_id")).unwrap() {
            assert!(id < vocab, "{k} id {id}");
        }
    }
    let tok = Tokenizer::from_gguf(g).unwrap();
    assert_eq!(tok.vocab_size() as u64, vocab);
    let ids = tok.encode("Hello world, this is a test.").unwrap();
    assert!(!ids.is_empty() && ids.iter().all(|&i| (i as u64) < vocab));
    assert_eq!(tok.decode(&ids).unwrap(), "Hello world, this is a test.");
}

#[test]
fn real_shapes_header() {
    let Some(tok) = tokenizer_src() else { return };
    for shape in synth::SHAPES {
        for (ty, layers) in [(GgmlType::Q4_0, 1), (GgmlType::Q4_K, 2)] {
            let opts = SynthOptions { shape: shape.clone(), ty, seed: 1, layers: Some(layers), sparse: true };
            let (path, g) = write(&opts, &tok, &format!("{}-{}.gguf", shape.name, ty.name()));
            let cut = Shape { layers, ..shape.clone() };
            check_tensors(&g, &cut, ty);
            check_metadata(&g, shape, layers);
            let note = format!(
                "{} {}",
                g.get_str("general.name").unwrap().unwrap(),
                g.get_str("general.description").unwrap().unwrap()
            );
            assert_eq!(note.contains("Q5_0"), ty == GgmlType::Q4_K && shape.hidden % 256 != 0, "{note}");
            if ty == GgmlType::Q4_0 {
                check_vocab(&g, shape.vocab);
            }
            if shape.arch != "phi3" {
                let cfg = ModelConfig::from_gguf(&g).unwrap();
                assert_eq!(
                    (cfg.n_layers as u64, cfg.hidden as u64, cfg.vocab as u64),
                    (layers, shape.hidden, shape.vocab)
                );
                assert_eq!((cfg.head_dim as u64, cfg.ffn as u64), (shape.head_dim, shape.ffn));
                assert_eq!(cfg.qkv_bias, shape.qkv_bias);
                assert_eq!(cfg.tied_embeddings, shape.tied);
            }
            std::fs::remove_file(path).unwrap();
        }
    }
}

#[test]
fn llama3_rope_factors_match_convert_script() {
    // The shape of llama.cpp's convert_hf_to_gguf.py factors for Llama-3.2-1B (factor 32; checked
    // against a numpy port of the script by hand): the first pairs keep their frequency, the
    // last are divided by the factor, a smooth ramp between.
    let s = synth::shape("llama-3.2-1b").unwrap();
    let f = synth::llama3_rope_factors(&s.llama3_rope.unwrap(), s.rope_theta, s.head_dim);
    assert_eq!(f.len(), 32);
    assert!(f[..12].iter().all(|&x| x == 1.0), "{f:?}");
    assert!(f[20..].iter().all(|&x| x == 32.0), "{f:?}");
    assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
    assert!(f.iter().any(|&x| x > 1.0 && x < 32.0), "{f:?}");
}

#[test]
fn random_data_small_shape() {
    let Some(tok) = tokenizer_src() else { return };
    // A small llama with a vocabulary smaller than the borrowed one (truncation) and an input
    // dimension that Q4_K cannot take (fallback).
    let shape = Shape {
        name: "tiny",
        arch: "llama",
        hidden: 384,
        layers: 2,
        heads: 6,
        kv_heads: 2,
        head_dim: 64,
        ffn: 512,
        vocab: 1000,
        context: 2048,
        rope_theta: 10000.0,
        rms_eps: 1e-5,
        tied: false,
        qkv_bias: true,
        fused: false,
        llama3_rope: synth::shape("llama-3.2-1b").unwrap().llama3_rope,
        hybrid: None,
        sub_norms: false,
    };
    for ty in synth::TYPES {
        let opts = SynthOptions { shape: shape.clone(), ty, seed: 42, layers: None, sparse: false };
        let (path, g) = write(&opts, &tok, &format!("tiny-{}.gguf", ty.name()));
        check_tensors(&g, &shape, ty);
        check_metadata(&g, &shape, 2);
        check_vocab(&g, shape.vocab);
        ModelConfig::from_gguf(&g).unwrap();
        let file = FileSource::open(&path).unwrap();
        for t in &g.tensors {
            let bytes = g.read_tensor(&file, t).unwrap();
            let mut x = vec![0f32; t.n_elements as usize];
            dequantize(t.ty, &bytes, &mut x).unwrap();
            let want = synth::tensors(&shape, ty).into_iter().find(|w| w.name == t.name).unwrap();
            match want.fill {
                Fill::Const(v) => assert!(x.iter().all(|&y| y == v), "{}", t.name),
                Fill::Values(v) => assert_eq!(x, v, "{}", t.name),
                Fill::Random => {
                    let n = x.len() as f64;
                    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
                    let std = (x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
                    let amax = x.iter().fold(0f32, |a, &v| a.max(v.abs()));
                    assert!(x.iter().all(|v| v.is_finite()), "{}", t.name);
                    assert!(
                        std > 0.004 && std < 0.02 && amax < 0.04 && mean.abs() < 0.002,
                        "{}: std {std} mean {mean} max {amax}",
                        t.name
                    );
                }
            }
        }
        // Same seed, same bytes; another seed, other bytes.
        let again = tmp("again.gguf");
        synth::write(&opts, &tok, &again, &mut |_| {}).unwrap();
        assert!(std::fs::read(&path).unwrap() == std::fs::read(&again).unwrap());
        synth::write(&SynthOptions { seed: 43, ..opts.clone() }, &tok, &again, &mut |_| {}).unwrap();
        assert!(std::fs::read(&path).unwrap() != std::fs::read(&again).unwrap());
        std::fs::remove_file(path).unwrap();
        std::fs::remove_file(again).unwrap();
    }
}

#[test]
fn bad_options() {
    let Some(tok) = tokenizer_src() else { return };
    let shape = synth::shape("smollm2-135m").unwrap();
    let opts = SynthOptions { shape, ty: GgmlType::Q4_0, seed: 0, layers: Some(31), sparse: true };
    assert!(synth::build_writer(&opts, &tok).is_err());
    assert!(synth::parse_type("iq2_xxs").is_err());
    assert!(synth::parse_type("q4_0_m").is_err());
    assert_eq!(synth::parse_type("q3_k_m").unwrap(), GgmlType::Q3_K);
    assert_eq!(synth::parse_type("IQ4_xs").unwrap(), GgmlType::IQ4_XS);
    assert!(synth::shape("gpt-5").is_none());
    assert_eq!(synth::parse_type("Q4_K").unwrap(), GgmlType::Q4_K);
}

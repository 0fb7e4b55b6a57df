//! Random-weight GGUF files of real model shapes, for benchmarking.
//!
//! Decode and prefill speed depend on tensor shapes and types, not on the values, so a file with
//! the real hyper-parameters of a model and random quantized blocks benchmarks like the real
//! thing, without downloading it, for any type we care to try. The files use llama.cpp's names
//! and metadata keys, so llama.cpp can load (and benchmark) the very same file.
//!
//! ```text
//! ferrolm make-gguf --shape llama-3.2-1b --type q4_0 --out /tmp/llama-3.2-1b.q4_0.gguf
//! ferrolm make-gguf --shape phi-3-mini --type q4_k --out phi3.gguf --layers 4 --seed 7
//! ferrolm make-gguf --shape qwen2.5-0.5b --type q8_0 --out q.gguf --tokenizer-from other.gguf
//! ```
//!
//! * `--shape`: one of [`SHAPES`] (`smollm2-135m`, `llama-3.2-1b`, `smollm3-3b`, `qwen2.5-0.5b`,
//!   `phi-3-mini`, `llama-3.1-8b`, `qwen3.5-0.8b`, `bitnet-2b`).
//! * `--type`: one of [`TYPES`] (`f16`, `q8_0`, `q4_0`, `q4_1`, `q5_0`, `q5_1`, `q2_k` ... `q6_k`,
//!   `iq4_nl`, `iq4_xs`, `mxfp4`, `tq1_0`, `tq2_0`). Every matrix (embeddings and output included)
//!   gets that type; norms, biases and `rope_freqs` are F32. A matrix whose input dimension is not
//!   a multiple of a 256-element type's block (hidden 576 and 896 of SmolLM2 and Qwen2.5) gets
//!   the type llama.cpp's quantizer falls back to ([`matrix_type`]: Q4_K to Q5_0, Q5_K to Q5_1,
//!   Q6_K to Q8_0, Q2_K/Q3_K/IQ4_XS to IQ4_NL, TQ1_0/TQ2_0 to Q4_0). The file's `general.name`
//!   and `general.description` say so.
//! * `--layers N`: keep only the first N blocks (a quick, smaller file of the same widths).
//! * `--seed S`: the data is a function of the seed (and the shape and type) only.
//! * `--tokenizer-from GGUF`: the vocabulary is borrowed from this file (default: `$FERROLM_MODEL`
//!   or `~/.cache/ferrolm/SmolLM2-135M-Instruct.Q4_1.gguf`). Every `tokenizer.*` key is copied;
//!   the token list is padded to the shape's vocabulary size with `[PAD<i>]` tokens of type
//!   UNUSED (5), exactly as llama.cpp's `convert_hf_to_gguf.py` pads a short vocabulary, or, when
//!   the shape's vocabulary is smaller, truncated, keeping only the merges whose two halves and
//!   result survive and dropping special-token ids that fall outside it.
//!
//! Values: quant blocks are random bits under a small constant scale (Q4_0 d = 0.002, Q8_0
//! d = 0.000125, Q4_K d = 0.002 with every sub-block scale and min 1 and dmin = 8d, so Q4_K
//! decodes like Q4_0; the other types alike, see `template`), i.e. weights with a standard
//! deviation near 0.009, which keeps activations bounded through many layers. Norm weights are 1, biases 0. Random bytes come from
//! xoshiro256** on a second thread while the first writes, so generation runs at about disk speed.

use crate::error::{Error, Result};
use crate::sampler::Rng;
use crate::weights::gguf::{GgufFile, Value};
use crate::weights::gguf_write::{GgufWriter, PlannedTensor};
use crate::weights::quant::GgmlType;
use std::collections::HashSet;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Llama 3 rope scaling (`rope_scaling` with `rope_type: "llama3"` in config.json).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

impl Llama3Rope {
    /// Llama 3.1/3.2's scaling (frequencies 1 and 4 around an 8,192-token original context)
    /// stretched by `factor`.
    const fn llama3(factor: f64) -> Llama3Rope {
        Llama3Rope { factor, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 8192.0 }
    }
}

/// The hyper-parameters that fix every tensor shape and metadata value.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    /// GGUF `general.architecture`: `llama`, `qwen2` or `phi3`.
    pub arch: &'static str,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub context: u64,
    pub rope_theta: f64,
    pub rms_eps: f64,
    /// No `output.weight`: the output projection reuses `token_embd.weight`.
    pub tied: bool,
    /// F32 q/k/v biases (Qwen2).
    pub qkv_bias: bool,
    /// Phi-3 layout: fused `attn_qkv` and fused `ffn_up` holding [gate; up].
    pub fused: bool,
    pub llama3_rope: Option<Llama3Rope>,
    /// Qwen3.5 (`qwen35`): Gated DeltaNet layers, every layer but each `interval`-th, and
    /// gated full attention with partial rotary.
    pub hybrid: Option<Hybrid>,
    /// BitNet b1.58 (`bitnet-b1.58`): attention and FFN sub-norms (ReLU² comes with the arch).
    pub sub_norms: bool,
}

/// The Gated DeltaNet side of a Qwen3.5 shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hybrid {
    pub key_heads: u64,
    pub value_heads: u64,
    pub key_dim: u64,
    pub value_dim: u64,
    pub conv: u64,
    /// Every `interval`-th layer is full attention.
    pub interval: u64,
    /// Rotated dimensions per head.
    pub rope_dim: u64,
}

/// Real hyper-parameters, from each model's public `config.json` on the Hugging Face hub:
///
/// | shape | repo | hidden | layers | heads/kv | head_dim | ffn | vocab | rope_theta | ctx | rms_eps | tied |
/// |---|---|---|---|---|---|---|---|---|---|---|---|
/// | smollm2-135m | HuggingFaceTB/SmolLM2-135M | 576 | 30 | 9/3 | 64 | 1536 | 49152 | 100000 | 8192 | 1e-5 | yes |
/// | llama-3.2-1b | meta-llama/Llama-3.2-1B | 2048 | 16 | 32/8 | 64 | 8192 | 128256 | 500000 | 131072 | 1e-5 | yes |
/// | qwen2.5-0.5b | Qwen/Qwen2.5-0.5B | 896 | 24 | 14/2 | 64 | 4864 | 151936 | 1000000 | 32768 | 1e-6 | yes |
/// | phi-3-mini | microsoft/Phi-3-mini-4k-instruct | 3072 | 32 | 32/32 | 96 | 8192 | 32064 | 10000 | 4096 | 1e-5 | no |
/// | llama-3.1-8b | meta-llama/Llama-3.1-8B | 4096 | 32 | 32/8 | 128 | 14336 | 128256 | 500000 | 131072 | 1e-5 | no |
///
/// | smollm3-3b | HuggingFaceTB/SmolLM3-3B | 2048 | 36 | 16/4 | 128 | 11008 | 128256 | 5000000 | 65536 | 1e-6 | yes |
/// | bitnet-2b | microsoft/bitnet-b1.58-2B-4T | 2560 | 30 | 20/5 | 128 | 6912 | 128256 | 500000 | 4096 | 1e-5 | yes |
/// | qwen3.5-0.8b | Qwen/Qwen3.5-0.8B | 1024 | 24 | 8/2 | 256 | 3584 | 248320 | 10000000 | 262144 | 1e-6 | yes |
///
/// SmolLM3-3B's numbers are recalled from its public pages, not checked against the config file.
/// Qwen3.5-0.8B: 18 Gated DeltaNet layers (16 key and 16 value heads of 128, 4 convolution taps)
/// and 6 gated full-attention layers (every 4th) rotating a quarter of each head (64 dims).
/// Its hidden size, layers, heads and context are from the model's public pages; the DeltaNet
/// head counts and the FFN width are recalled, not checked against the config file.
/// Llama 3.2 1B's `rope_scaling` is {factor 32, low_freq_factor 1, high_freq_factor 4,
/// original_max_position_embeddings 8192}; Llama 3.1 8B's is the same with factor 8.
/// Qwen2.5 has q/k/v biases. Phi-3-mini's `sliding_window` (2047) is not written (llama.cpp
/// treats it as optional; ferrolm does not use it).
pub const SHAPES: &[Shape] = &[
    Shape {
        name: "smollm2-135m",
        arch: "llama",
        hidden: 576,
        layers: 30,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        ffn: 1536,
        vocab: 49152,
        context: 8192,
        rope_theta: 100000.0,
        rms_eps: 1e-5,
        tied: true,
        qkv_bias: false,
        fused: false,
        llama3_rope: None,
        hybrid: None,
        sub_norms: false,
    },
    Shape {
        name: "llama-3.2-1b",
        arch: "llama",
        hidden: 2048,
        layers: 16,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        ffn: 8192,
        vocab: 128256,
        context: 131072,
        rope_theta: 500000.0,
        rms_eps: 1e-5,
        tied: true,
        qkv_bias: false,
        fused: false,
        llama3_rope: Some(Llama3Rope::llama3(32.0)),
        hybrid: None,
        sub_norms: false,
    },
    // Every fourth layer without rope (llama.cpp's SmolLM3 graph; no GGUF key says so).
    Shape {
        name: "smollm3-3b",
        arch: "smollm3",
        hidden: 2048,
        layers: 36,
        heads: 16,
        kv_heads: 4,
        head_dim: 128,
        ffn: 11008,
        vocab: 128256,
        context: 65536,
        rope_theta: 5000000.0,
        rms_eps: 1e-6,
        tied: true,
        qkv_bias: false,
        fused: false,
        llama3_rope: None,
        hybrid: None,
        sub_norms: false,
    },
    Shape {
        name: "qwen2.5-0.5b",
        arch: "qwen2",
        hidden: 896,
        layers: 24,
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
        ffn: 4864,
        vocab: 151936,
        context: 32768,
        rope_theta: 1000000.0,
        rms_eps: 1e-6,
        tied: true,
        qkv_bias: true,
        fused: false,
        llama3_rope: None,
        hybrid: None,
        sub_norms: false,
    },
    Shape {
        name: "phi-3-mini",
        arch: "phi3",
        hidden: 3072,
        layers: 32,
        heads: 32,
        kv_heads: 32,
        head_dim: 96,
        ffn: 8192,
        vocab: 32064,
        context: 4096,
        rope_theta: 10000.0,
        rms_eps: 1e-5,
        tied: false,
        qkv_bias: false,
        fused: true,
        llama3_rope: None,
        hybrid: None,
        sub_norms: false,
    },
    Shape {
        name: "llama-3.1-8b",
        arch: "llama",
        hidden: 4096,
        layers: 32,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        ffn: 14336,
        vocab: 128256,
        context: 131072,
        rope_theta: 500000.0,
        rms_eps: 1e-5,
        tied: false,
        qkv_bias: false,
        fused: false,
        llama3_rope: Some(Llama3Rope::llama3(8.0)),
        hybrid: None,
        sub_norms: false,
    },
    Shape {
        name: "qwen3.5-0.8b",
        arch: "qwen35",
        hidden: 1024,
        layers: 24,
        heads: 8,
        kv_heads: 2,
        head_dim: 256,
        ffn: 3584,
        vocab: 248320,
        context: 262144,
        rope_theta: 10000000.0,
        rms_eps: 1e-6,
        tied: true,
        qkv_bias: false,
        fused: false,
        llama3_rope: None,
        hybrid: Some(Hybrid {
            key_heads: 16,
            value_heads: 16,
            key_dim: 128,
            value_dim: 128,
            conv: 4,
            interval: 4,
            rope_dim: 64,
        }),
        sub_norms: false,
    },
    Shape {
        name: "bitnet-2b",
        arch: "bitnet-b1.58",
        hidden: 2560,
        layers: 30,
        heads: 20,
        kv_heads: 5,
        head_dim: 128,
        ffn: 6912,
        vocab: 128256,
        context: 4096,
        rope_theta: 500000.0,
        rms_eps: 1e-5,
        tied: true,
        qkv_bias: false,
        fused: false,
        llama3_rope: None,
        hybrid: None,
        sub_norms: true,
    },
];

pub fn shape(name: &str) -> Option<Shape> {
    SHAPES.iter().find(|s| s.name.eq_ignore_ascii_case(name)).cloned()
}

pub fn shape_names() -> Vec<&'static str> {
    SHAPES.iter().map(|s| s.name).collect()
}

/// The types `--type` takes, as llama.cpp names them (any case; `q4_k_s` and friends too).
pub const TYPES: [GgmlType; 16] = {
    use GgmlType::*;
    [F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0]
};

/// Parses a `--type` value: a name of [`TYPES`], or a K-quant preset name (`q4_k_s`, `q3_k_m`:
/// the suffix only says how llama.cpp mixes types, and every matrix here gets the base type).
pub fn parse_type(s: &str) -> Result<GgmlType> {
    let lower = s.to_ascii_lowercase();
    let base = ["_s", "_m", "_l"].iter().find_map(|x| lower.strip_suffix(x).filter(|b| b.ends_with("_k")));
    if lower == "i2_s" {
        // bitnet.cpp's ternary type, for the bitnet-2b shape (rows of whole 128-element blocks).
        return Ok(GgmlType::I2_S);
    }
    GgmlType::from_name(base.unwrap_or(&lower)).filter(|t| TYPES.contains(t)).ok_or_else(|| {
        let names: Vec<String> = TYPES.iter().map(|t| t.name().to_ascii_lowercase()).collect();
        Error::InvalidOption(format!("--type {s:?}: expected one of {}", names.join(", ")))
    })
}

/// llama.cpp's `llama_ftype` for an all-`ty` file (the `_S` preset for K-quants; MXFP4 has
/// only its MoE preset).
fn file_type(ty: GgmlType) -> u32 {
    use GgmlType::*;
    match ty {
        F16 => 1,
        Q4_0 => 2,
        Q4_1 => 3,
        Q8_0 => 7,
        Q5_0 => 8,
        Q5_1 => 9,
        Q2_K => 10,
        Q3_K => 11,
        Q4_K => 14,
        Q5_K => 16,
        Q6_K => 18,
        IQ4_NL => 25,
        IQ4_XS => 30,
        TQ1_0 => 36,
        TQ2_0 => 37,
        MXFP4 => 38,
        _ => 0,
    }
}

/// The type a matrix with input dimension `ne0` gets: `ty`, or, when `ne0` is not a whole number
/// of `ty`'s 256-element blocks, the type llama.cpp's quantizer falls back to
/// (`llama_tensor_get_type`): the fallbacks real K-quant files of narrow models hold.
pub fn matrix_type(ty: GgmlType, ne0: u64) -> GgmlType {
    use GgmlType::*;
    if ne0.is_multiple_of(ty.block_size()) {
        return ty;
    }
    match ty {
        TQ1_0 | TQ2_0 => Q4_0,
        Q2_K | Q3_K | IQ4_XS => IQ4_NL,
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        _ => Q8_0,
    }
}

/// The `rope_freqs.weight` factors llama.cpp's `convert_hf_to_gguf.py` (LlamaModel) writes for
/// `rope_type: "llama3"`: one per rotated pair, computed in f32 like the script's torch code.
pub fn llama3_rope_factors(r: &Llama3Rope, theta: f64, head_dim: u64) -> Vec<f32> {
    let low_wavelen = r.original_max_position_embeddings / r.low_freq_factor;
    let high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
    (0..head_dim / 2)
        .map(|i| {
            // freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
            let exponent = (2 * i) as f32 / head_dim as f32;
            let freq = 1.0f32 / (theta as f32).powf(exponent);
            let wavelen = 2.0 * std::f64::consts::PI / freq as f64;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                r.factor as f32
            } else {
                let smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor)
                    / (r.high_freq_factor - r.low_freq_factor);
                (1.0 / ((1.0 - smooth) / r.factor + smooth)) as f32
            }
        })
        .collect()
}

/// How a tensor's bytes are produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Fill {
    /// Random blocks of the tensor's type under a constant small scale.
    Random,
    /// Every F32 element this value.
    Const(f32),
    /// These F32 values.
    Values(Vec<f32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SynthTensor {
    pub name: String,
    /// ggml order: `dims[0]` is the input (contiguous) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub fill: Fill,
}

/// The tensor table of `shape` with matrices of type `ty`, in llama.cpp's names and ggml order.
pub fn tensors(shape: &Shape, ty: GgmlType) -> Vec<SynthTensor> {
    use crate::model::family::tensor as t;
    let (h, q, kv, f) = (shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.ffn);
    // bitnet.cpp's I2_S files keep the embedding in F16 (the LM head ties to it).
    let embed_ty = if ty == GgmlType::I2_S { GgmlType::F16 } else { matrix_type(ty, h) };
    let embed =
        SynthTensor { name: t::EMBED.gguf.into(), dims: vec![h, shape.vocab], ty: embed_ty, fill: Fill::Random };
    let mut out = vec![embed];
    let mut mat = |name: String, ne0: u64, ne1: u64| {
        out.push(SynthTensor { name, dims: vec![ne0, ne1], ty: matrix_type(ty, ne0), fill: Fill::Random })
    };
    let linear = |i: u64| shape.hybrid.filter(|y| !(i + 1).is_multiple_of(y.interval));
    for i in 0..shape.layers {
        let b = |n: &str| format!("blk.{i}.{n}");
        if let Some(y) = linear(i) {
            let (conv_dim, vt) =
                (2 * y.key_heads * y.key_dim + y.value_heads * y.value_dim, y.value_heads * y.value_dim);
            mat(b(t::LIN_QKV.gguf), h, conv_dim);
            mat(b(t::LIN_Z.gguf), h, vt);
            mat(b(t::LIN_B.gguf), h, y.value_heads);
            mat(b(t::LIN_A.gguf), h, y.value_heads);
            mat(b(t::LIN_OUT.gguf), vt, h);
        } else if shape.hybrid.is_some() {
            // A gated attention's attn_q holds [q; gate] per head.
            mat(b(t::Q.gguf), h, 2 * q);
            mat(b(t::K.gguf), h, kv);
            mat(b(t::V.gguf), h, kv);
        } else if shape.fused {
            mat(b(t::QKV.gguf), h, q + 2 * kv);
        } else {
            mat(b(t::Q.gguf), h, q);
            mat(b(t::K.gguf), h, kv);
            mat(b(t::V.gguf), h, kv);
        }
        if linear(i).is_none() {
            mat(b(t::O.gguf), q, h);
        }
        if shape.fused {
            mat(b(t::GATE_UP.gguf), h, 2 * f);
        } else {
            mat(b(t::GATE.gguf), h, f);
            mat(b(t::UP.gguf), h, f);
        }
        mat(b(t::DOWN.gguf), f, h);
    }
    // The LM head last, as llama.cpp's converter writes it (and the loader reads it).
    if !shape.tied {
        mat(t::HEAD.gguf.into(), h, shape.vocab);
    }
    let vec = |name: String, n: u64, fill: Fill| SynthTensor { name, dims: vec![n], ty: GgmlType::F32, fill };
    let mut small = vec![vec(t::OUT_NORM.gguf.into(), h, Fill::Const(1.0))];
    if let Some(r) = &shape.llama3_rope {
        small.push(vec(
            "rope_freqs.weight".into(),
            shape.head_dim / 2,
            Fill::Values(llama3_rope_factors(r, shape.rope_theta, shape.head_dim)),
        ));
    }
    for i in 0..shape.layers {
        let b = |n: &str| format!("blk.{i}.{n}");
        small.push(vec(b(t::ATTN_NORM.gguf), h, Fill::Const(1.0)));
        if shape.hybrid.is_some() {
            // Qwen3.5 files name the pre-FFN norm post_attention_norm.
            small.push(vec(b(t::POST_ATTN_NORM.gguf), h, Fill::Const(1.0)));
            if let Some(y) = linear(i) {
                let conv_dim = 2 * y.key_heads * y.key_dim + y.value_heads * y.value_dim;
                small.push(SynthTensor {
                    name: b(t::CONV.gguf),
                    dims: vec![y.conv, conv_dim],
                    ty: GgmlType::F32,
                    fill: Fill::Const(0.25),
                });
                small.push(vec(b(t::DT_BIAS.gguf), y.value_heads, Fill::Const(0.0)));
                small.push(vec(b(t::A.gguf), y.value_heads, Fill::Const(-1.0)));
                small.push(vec(b(t::LIN_NORM.gguf), y.value_dim, Fill::Const(1.0)));
            } else {
                small.push(vec(b(t::Q_NORM.gguf), shape.head_dim, Fill::Const(1.0)));
                small.push(vec(b(t::K_NORM.gguf), shape.head_dim, Fill::Const(1.0)));
            }
            continue;
        }
        small.push(vec(b(t::FFN_NORM.gguf), h, Fill::Const(1.0)));
        if shape.sub_norms {
            small.push(vec(b(t::ATTN_SUB_NORM.gguf), q, Fill::Const(1.0)));
            small.push(vec(b(t::FFN_SUB_NORM.gguf), f, Fill::Const(1.0)));
        }
        if shape.qkv_bias {
            small.push(vec(b(t::Q_BIAS.gguf), q, Fill::Const(0.0)));
            small.push(vec(b(t::K_BIAS.gguf), kv, Fill::Const(0.0)));
            small.push(vec(b(t::V_BIAS.gguf), kv, Fill::Const(0.0)));
        }
    }
    // Small tensors first, then the matrices, layer by layer (as in converted files, roughly).
    small.extend(out);
    small
}

/// Matrices whose type falls back from `ty` (not the small F32 ones, nor I2_S files' F16
/// embedding, which is how bitnet.cpp writes them).
fn fallbacks(list: &[SynthTensor], ty: GgmlType) -> Vec<&SynthTensor> {
    list.iter()
        .filter(|t| t.dims.len() == 2 && t.ty != ty && t.ty != GgmlType::F32)
        .filter(|t| !(ty == GgmlType::I2_S && t.name == "token_embd.weight"))
        .collect()
}

/// The `tokenizer.*` keys of `src`, resized to `vocab` tokens (see the module docs).
pub fn tokenizer_metadata(src: &GgufFile, vocab: u64) -> Result<Vec<(String, Value)>> {
    let vocab = vocab as usize;
    let bad = |m: String| Error::Tokenizer(format!("{}: {m}", src.name));
    let tokens =
        src.get_str_array("tokenizer.ggml.tokens")?.ok_or_else(|| bad("has no tokenizer.ggml.tokens".into()))?;
    if tokens.is_empty() {
        return Err(bad("empty vocabulary".into()));
    }
    let n_src = tokens.len();
    let kept: Vec<String> = tokens.iter().take(vocab).map(|s| s.to_string()).collect();
    let mut seen: HashSet<String> = kept.iter().cloned().collect();
    let mut new_tokens = kept;
    let mut i = new_tokens.len();
    while new_tokens.len() < vocab {
        let mut t = format!("[PAD{i}]");
        while seen.contains(&t) {
            t.push('_');
        }
        seen.insert(t.clone());
        new_tokens.push(t);
        i += 1;
    }
    let mut out = Vec::new();
    for (k, v) in &src.metadata {
        if !k.starts_with("tokenizer.") {
            continue;
        }
        let value = match k.as_str() {
            "tokenizer.ggml.tokens" => Value::Array(new_tokens.iter().cloned().map(Value::String).collect()),
            "tokenizer.ggml.token_type" | "tokenizer.ggml.scores" => {
                let a = v.as_array().ok_or_else(|| bad(format!("{k} is not an array")))?;
                if a.len() != n_src {
                    return Err(bad(format!("{k} has {} entries for {n_src} tokens", a.len())));
                }
                let pad = if k.ends_with("token_type") {
                    // UNUSED, in the element type of the source array.
                    match a.first() {
                        Some(Value::U32(_)) => Value::U32(5),
                        _ => Value::I32(5),
                    }
                } else {
                    Value::F32(-1000.0)
                };
                let mut a: Vec<Value> = a.iter().take(vocab).cloned().collect();
                a.resize(vocab, pad);
                Value::Array(a)
            }
            "tokenizer.ggml.merges" if vocab < n_src => {
                let merges = src.get_str_array(k)?.unwrap_or_default();
                let kept = merges
                    .into_iter()
                    .filter(|m| match m.split_once(' ') {
                        Some((a, b)) => seen.contains(a) && seen.contains(b) && seen.contains(&format!("{a}{b}")),
                        None => false,
                    })
                    .map(|m| Value::String(m.to_string()))
                    .collect();
                Value::Array(kept)
            }
            _ if k.starts_with("tokenizer.ggml.") && k.ends_with("_token_id") => match v.as_u64() {
                Some(id) if id as usize >= vocab && id != u32::MAX as u64 => continue,
                _ => v.clone(),
            },
            _ => v.clone(),
        };
        out.push((k.clone(), value));
    }
    Ok(out)
}

/// What to write.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub shape: Shape,
    pub ty: GgmlType,
    pub seed: u64,
    /// Keep only this many blocks.
    pub layers: Option<u64>,
    /// Leave tensor data as holes (all zero, a sparse file) instead of random: instant, for tests
    /// of the header. Rotary factors are ones (a zero factor is refused at load).
    pub sparse: bool,
}

#[derive(Clone, Debug)]
pub struct SynthReport {
    pub bytes: u64,
    pub tensors: usize,
    pub seconds: f64,
    /// Matrices stored in llama.cpp's fallback type instead of the requested one (`matrix_type`).
    pub fallback: Vec<String>,
}

/// The header of the file `write` produces, with every tensor registered (data not yet given).
pub fn build_writer(opts: &SynthOptions, tokenizer: &GgufFile) -> Result<(GgufWriter, Vec<SynthTensor>)> {
    let mut shape = opts.shape.clone();
    if let Some(n) = opts.layers {
        if n == 0 || n > shape.layers {
            return Err(Error::InvalidOption(format!("--layers {n}: {} has 1 to {} layers", shape.name, shape.layers)));
        }
        shape.layers = n;
    }
    let ty = opts.ty;
    // I2_S files come from bitnet.cpp, whose file-type numbering is its own: no file type then.
    if file_type(ty) == 0 && ty != GgmlType::I2_S {
        return Err(Error::InvalidOption(format!("type {} is not one make-gguf writes", ty.name())));
    }
    let list = tensors(&shape, ty);
    let fallback = fallbacks(&list, ty);
    // Spaced out: llama.cpp adjusts its tokenizer by model name ("phi-3" expects Phi-3's own
    // special tokens, which the borrowed vocabulary lacks, and then fails to load the file).
    let mut name = format!("synthetic {} shape {}", shape.name.replace('-', " "), ty.name());
    if shape.layers != opts.shape.layers {
        name += &format!(" ({} of {} layers)", shape.layers, opts.shape.layers);
    }
    let mut desc = format!(
        "Random weights in the shape of {} ({} layers), every matrix {}, seed {}: for speed benchmarks only; the output is noise.",
        opts.shape.name, shape.layers, ty.name(), opts.seed
    );
    if let Some(f) = fallback.first() {
        name += &format!(", {} where the input dim is not a multiple of 256", f.ty.name());
        desc += &format!(
            " {} matrices whose input dimension is not a multiple of {} are {} instead, as llama.cpp falls back.",
            fallback.len(),
            ty.block_size(),
            f.ty.name()
        );
    }
    let a = shape.arch;
    let k = |s: &str| format!("{a}.{s}");
    let err = |e: crate::weights::gguf_write::GgufWriteError| Error::Model(e.to_string());
    let mut w = GgufWriter::new();
    let s = |x: &str| Value::String(x.to_string());
    let mut kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), s(a)),
        ("general.type".into(), s("model")),
        ("general.name".into(), Value::String(name)),
        ("general.description".into(), Value::String(desc)),
        ("general.alignment".into(), Value::U32(32)),
        (k("block_count"), Value::U32(shape.layers as u32)),
        (k("context_length"), Value::U32(shape.context as u32)),
        (k("embedding_length"), Value::U32(shape.hidden as u32)),
        (k("feed_forward_length"), Value::U32(shape.ffn as u32)),
        (k("attention.head_count"), Value::U32(shape.heads as u32)),
        (k("attention.head_count_kv"), Value::U32(shape.kv_heads as u32)),
        (k("rope.freq_base"), Value::F32(shape.rope_theta as f32)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(shape.rms_eps as f32)),
        (k("rope.dimension_count"), Value::U32(shape.head_dim as u32)),
        (k("vocab_size"), Value::U32(shape.vocab as u32)),
        ("general.quantization_version".into(), Value::U32(2)),
    ];
    if let Some(y) = shape.hybrid {
        kv.retain(|(key, _)| key != &k("rope.dimension_count"));
        kv.extend([
            (k("rope.dimension_count"), Value::U32(y.rope_dim as u32)),
            (k("ssm.conv_kernel"), Value::U32(y.conv as u32)),
            (k("ssm.state_size"), Value::U32(y.key_dim as u32)),
            (k("ssm.group_count"), Value::U32(y.key_heads as u32)),
            (k("ssm.time_step_rank"), Value::U32(y.value_heads as u32)),
            (k("ssm.inner_size"), Value::U32((y.value_heads * y.value_dim) as u32)),
            (k("full_attention_interval"), Value::U32(y.interval as u32)),
        ]);
    }
    if file_type(ty) != 0 {
        kv.push(("general.file_type".into(), Value::U32(file_type(ty))));
    }
    if shape.head_dim * shape.heads != shape.hidden {
        kv.push((k("attention.key_length"), Value::U32(shape.head_dim as u32)));
        kv.push((k("attention.value_length"), Value::U32(shape.head_dim as u32)));
    }
    kv.extend(tokenizer_metadata(tokenizer, shape.vocab)?);
    for (key, v) in kv {
        w.add(key, v).map_err(err)?;
    }
    for t in &list {
        w.add_tensor_info(t.name.clone(), &t.dims, t.ty).map_err(err)?;
    }
    Ok((w, list))
}

/// Bytes of one block: constant scale fields, random quants.
struct BlockTemplate {
    size: usize,
    /// (offset in the block, bytes) of each constant field (the scales).
    fields: Vec<(usize, Vec<u8>)>,
}

fn f16_bytes(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_le_bytes()
}

fn f16_pair(a: f32, b: f32) -> Vec<u8> {
    [f16_bytes(a), f16_bytes(b)].concat()
}

/// Scales chosen so every type's weights spread like Q4_0's (standard deviation near 0.009).
fn template(ty: GgmlType) -> Option<BlockTemplate> {
    use GgmlType::*;
    // K-quant sub-block (scale, min) of 1 each (get_scale_min_k4: j < 4 reads bytes j and j+4;
    // j >= 4 the nibbles of byte j+4 and the top bits of bytes j-4 and j).
    let k4_scales = [1, 1, 1, 1, 1, 1, 1, 1, 0x11, 0x11, 0x11, 0x11];
    let fields: Vec<(usize, Vec<u8>)> = match ty {
        Q4_0 => vec![(0, f16_bytes(0.002).to_vec())],
        Q4_1 => vec![(0, f16_pair(0.002, -0.016))],
        Q5_0 => vec![(0, f16_bytes(0.001).to_vec())],
        Q5_1 => vec![(0, f16_pair(0.001, -0.016))],
        Q8_0 => vec![(0, f16_bytes(0.000125).to_vec())],
        // d, dmin = 8d: a weight is d * (q - 8), like Q4_0.
        Q4_K => vec![(0, [f16_pair(0.002, 0.016), k4_scales.to_vec()].concat())],
        Q5_K => vec![(0, [f16_pair(0.001, 0.016), k4_scales.to_vec()].concat())],
        // Sixteen (scale 1, min 1) nibble pairs; d * q - dmin with q in 0..3.
        Q2_K => vec![(0, vec![0x11; 16]), (80, f16_pair(0.006, 0.009))],
        // Sixteen 6-bit scales of 33 (32 + 1): low nibbles 1, top bit pairs 2.
        Q3_K => vec![(96, [[0x11; 8].as_slice(), &[0xAA; 4]].concat()), (108, f16_bytes(0.0025).to_vec())],
        Q6_K => vec![(192, vec![1; 16]), (208, f16_bytes(0.0003).to_vec())],
        IQ4_NL => vec![(0, f16_bytes(0.00014).to_vec())],
        // Eight 6-bit sub-block scales of 33, as for Q3_K.
        IQ4_XS => vec![(0, [f16_bytes(0.00014).as_slice(), &[0xAA, 0xAA], &[0x11; 4]].concat())],
        MXFP4 => vec![(0, vec![119])], // 2^(119 - 128) times the doubled E2M1 values
        TQ1_0 => vec![(52, f16_bytes(0.008).to_vec())],
        TQ2_0 => vec![(64, f16_bytes(0.008).to_vec())],
        // Codes only; the tensor's scale is in its trailer (fill_chunk).
        I2_S => vec![],
        _ => return None,
    };
    Some(BlockTemplate { size: ty.type_size() as usize, fields })
}

fn fill_random(rng: &mut Rng, buf: &mut [u8]) {
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let rest = chunks.into_remainder();
    let r = rng.next_u64().to_le_bytes();
    let n = rest.len();
    rest.copy_from_slice(&r[..n]);
}

/// Fills `buf` (a whole number of elements or blocks of `t.ty`) with the next bytes of `t`.
fn fill_chunk(t: &SynthTensor, rng: &mut Rng, offset_elems: u64, buf: &mut [u8]) {
    match &t.fill {
        Fill::Const(v) => {
            for c in buf.chunks_exact_mut(4) {
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        Fill::Values(v) => {
            for (i, c) in buf.chunks_exact_mut(4).enumerate() {
                c.copy_from_slice(&v[offset_elems as usize + i].to_le_bytes());
            }
        }
        Fill::Random => {
            fill_random(rng, buf);
            match t.ty {
                GgmlType::F16 => {
                    // Random sign and mantissa, exponent 6..9: |x| in [2^-9, 2^-5).
                    for c in buf.chunks_exact_mut(2) {
                        let r = u16::from_le_bytes([c[0], c[1]]);
                        let e = 6 + ((r >> 10) & 3);
                        c.copy_from_slice(&((r & 0x83ff) | (e << 10)).to_le_bytes());
                    }
                }
                GgmlType::F32 => {
                    for c in buf.chunks_exact_mut(4) {
                        let r = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        let x = ((r >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.03;
                        c.copy_from_slice(&x.to_le_bytes());
                    }
                }
                GgmlType::I2_S => {
                    // 32-byte blocks of codes, then the trailer block with the tensor's scale.
                    let blocks = t.dims.iter().product::<u64>() / 128;
                    for (j, b) in buf.chunks_exact_mut(32).enumerate() {
                        if offset_elems / 128 + j as u64 >= blocks {
                            b.fill(0);
                            b[..4].copy_from_slice(&0.009f32.to_le_bytes());
                        } else {
                            // Ternary: the unused code 3 becomes 1 (a zero weight).
                            b.iter_mut().for_each(|x| *x &= !((*x & (*x >> 1) & 0x55) << 1));
                        }
                    }
                }
                ty => {
                    let tpl = template(ty).expect("matrix types have templates");
                    for b in buf.chunks_exact_mut(tpl.size) {
                        if ty == GgmlType::TQ2_0 {
                            // Ternary: quant 3 (weight 2d) never occurs in real files; make it 1 (0).
                            b[..64].iter_mut().for_each(|x| *x &= !((*x & (*x >> 1) & 0x55) << 1));
                        }
                        for (off, bytes) in &tpl.fields {
                            b[*off..off + bytes.len()].copy_from_slice(bytes);
                        }
                    }
                }
            }
        }
    }
}

const CHUNK: usize = 4 << 20;
static ZEROS: [u8; 1 << 16] = [0; 1 << 16];

/// A file writer that turns writes of [`ZEROS`] into seeks (holes), for sparse files.
struct HoleWriter {
    f: std::io::BufWriter<std::fs::File>,
    pos: u64,
}

impl Write for HoleWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if std::ptr::eq(buf.as_ptr(), ZEROS.as_ptr()) {
            self.f.seek(SeekFrom::Current(buf.len() as i64))?;
            self.pos += buf.len() as u64;
            return Ok(buf.len());
        }
        let n = self.f.write(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.f.flush()
    }
}

/// Writes the file; `progress(bytes_done)` is called now and then.
pub fn write(
    opts: &SynthOptions,
    tokenizer: &GgufFile,
    out: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<SynthReport> {
    let start = std::time::Instant::now();
    let (w, list) = build_writer(opts, tokenizer)?;
    let io = |e: std::io::Error| Error::write(out.display().to_string(), e);
    let file = std::fs::File::create(out).map_err(io)?;
    let mut hw = HoleWriter { f: std::io::BufWriter::with_capacity(1 << 20, file), pos: 0 };
    let plan = w.plan();
    let seed = opts.seed;
    let sparse = opts.sparse;
    let written = std::thread::scope(|scope| -> Result<u64> {
        // Generator thread: produces each tensor's bytes in order, in CHUNK-sized pieces, into
        // buffers the writer hands back.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        for _ in 0..3 {
            let _ = back_tx.send(Vec::with_capacity(CHUNK));
        }
        let gen_list = &list;
        let gen_plan = &plan;
        if !sparse {
            scope.spawn(move || {
                for (idx, (t, p)) in gen_list.iter().zip(gen_plan).enumerate() {
                    let mut rng = Rng::new(seed ^ (idx as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let (bs, ts) = (p.ty.block_size(), p.ty.type_size());
                    let per_chunk_blocks = (CHUNK as u64 / ts).max(1);
                    let n_blocks = p.n_bytes / ts;
                    let mut done = 0u64;
                    while done < n_blocks {
                        let k = per_chunk_blocks.min(n_blocks - done);
                        let Ok(mut buf) = back_rx.recv() else { return };
                        buf.resize((k * ts) as usize, 0);
                        fill_chunk(t, &mut rng, done * bs, &mut buf);
                        if tx.send(buf).is_err() {
                            return;
                        }
                        done += k;
                    }
                }
            });
        } else {
            drop(tx);
        }
        let mut last = 0u64;
        let res = w.write_with(&mut hw, |p: &PlannedTensor, dst: &mut dyn Write| {
            let mut left = p.n_bytes;
            if sparse && p.name.starts_with("rope_f") && p.ty == GgmlType::F32 {
                let ones: Vec<u8> = std::iter::repeat_n(1f32.to_le_bytes(), (left / 4) as usize).flatten().collect();
                dst.write_all(&ones)?;
                left = 0;
            }
            while left > 0 {
                if sparse {
                    let k = left.min(ZEROS.len() as u64) as usize;
                    dst.write_all(&ZEROS[..k])?;
                    left -= k as u64;
                    continue;
                }
                let buf = rx.recv().map_err(|_| std::io::Error::other("generator stopped"))?;
                dst.write_all(&buf)?;
                left -= buf.len() as u64;
                let _ = back_tx.send(buf);
            }
            if p.rel_offset - last > 256 << 20 {
                last = p.rel_offset;
                progress(p.rel_offset + p.n_bytes);
            }
            Ok(())
        });
        drop(rx);
        drop(back_tx);
        res.map_err(|e| Error::Model(format!("{}: {e}", out.display())))
    })?;
    hw.flush().map_err(io)?;
    let f = hw.f.into_inner().map_err(|e| io(e.into_error()))?;
    // Holes at the end need the length set explicitly.
    f.set_len(written).map_err(io)?;
    progress(written);
    Ok(SynthReport {
        bytes: written,
        tensors: list.len(),
        seconds: start.elapsed().as_secs_f64(),
        fallback: fallbacks(&list, opts.ty).iter().map(|t| format!("{} ({})", t.name, t.ty.name())).collect(),
    })
}

/// The default tokenizer source: `$FERROLM_MODEL`, else `~/.cache/ferrolm/SmolLM2-135M-Instruct.Q4_1.gguf`.
pub fn default_tokenizer_path() -> std::path::PathBuf {
    std::env::var_os("FERROLM_MODEL").map(Into::into).unwrap_or_else(|| {
        std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/ferrolm/SmolLM2-135M-Instruct.Q4_1.gguf")
    })
}

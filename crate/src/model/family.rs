//! One row per model family: what GGUF files (`general.architecture`), Hugging Face folders
//! (`model_type`) and MLC-LLM folders call it, and every way it differs from a plain Llama.
//! `config.rs` (GGUF metadata), `hf_config.rs` (config.json), `mlc.rs` (MLC parameter names),
//! the loaders (`weights.rs`, `hf.rs`), the chat template fallback and `synth.rs` read this table;
//! nothing else matches family names. [`tensor`] names each per-layer tensor in both styles.
//!
//! Adding a Llama-shaped family is one row: `Family { name: "x", gguf: &["x"], hf: &["x"], ..LLAMA }`.

/// Whether a projection has a bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bias {
    Never,
    Always,
    /// When config.json's `attention_bias` says so (GGUF: when the file has the tensor).
    IfAttentionBias,
    /// When this config.json key says so (Seed-OSS's `attention_out_bias`; GGUF: as above).
    IfKey(&'static str),
}

/// Which layers use the sliding window, each family's rule in transformers (and llama.cpp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sliding {
    /// config.json's `layer_types` when given, else none. GGUF: every layer when a window is given.
    Listed,
    /// Every layer when a window is given, `layer_types` ignored (Mistral, Phi-3).
    Everywhere,
    /// Every `n`-th layer is full, the others slide (Gemma 2: 2).
    Every(usize),
    /// The same with `n` from `sliding_window_pattern`, this default when absent (Gemma 3: 6).
    EveryKey(usize),
    /// `use_sliding_window` from layer `max_window_layers` on (Qwen2, Qwen3).
    FromLayer,
    /// Only with `use_sliding_window`: `layer_types` when given, else the layers without rope
    /// (SmolLM3).
    NoPeIfUsed,
    /// `layer_types` when given, else every layer when a window is given (Ministral).
    ListedElseAll,
}

/// A layer's norms, each with its tensor names (None: the layer has no such norm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Norms {
    /// Before the token mixer; without it the mixer reads the residual stream as it is (OLMo 2,
    /// EXAONE 4 normalise outputs only).
    pub attn: Option<Tensor>,
    /// On the token mixer's output, before the residual add (Gemma 2/3, OLMo 2, GLM-4).
    pub post_attn: Option<Tensor>,
    /// Before the FFN.
    pub ffn: Option<Tensor>,
    /// On the FFN's output, before the residual add.
    pub post_ffn: Option<Tensor>,
    /// The q and k norms' names, where the model has them (`QkNorm`).
    pub q: Tensor,
    pub k: Tensor,
}

impl Norms {
    /// Whether some output goes through a norm before the residual add.
    pub fn post(&self) -> bool {
        self.post_attn.is_some() || self.post_ffn.is_some()
    }
}

/// Llama's pre-norms.
pub const PRE_NORMS: Norms = Norms {
    attn: Some(tensor::ATTN_NORM),
    post_attn: None,
    ffn: Some(tensor::FFN_NORM),
    post_ffn: None,
    q: tensor::Q_NORM,
    k: tensor::K_NORM,
};
/// Gemma 2/3's pre- and post-norms.
pub const SANDWICH_NORMS: Norms = Norms {
    attn: Some(tensor::ATTN_NORM),
    post_attn: Some(tensor::POST_ATTN_NORM),
    ffn: Some(tensor::PRE_FFN_NORM),
    post_ffn: Some(tensor::POST_FFN_NORM),
    ..PRE_NORMS
};
/// Norms of the outputs only (OLMo 2, EXAONE 4).
pub const POST_NORMS: Norms = Norms {
    attn: None,
    post_attn: Some(tensor::POST_ATTN_NORM),
    ffn: None,
    post_ffn: Some(tensor::POST_FFN_NORM),
    ..PRE_NORMS
};
/// GLM-4's four norms a layer.
const GLM4_NORMS: Norms =
    Norms { post_attn: Some(tensor::POST_SELF_ATTN_NORM), post_ffn: Some(tensor::POST_MLP_NORM), ..PRE_NORMS };

/// The RMS norm of q and k, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum QkNorm {
    None,
    /// Per head, before the rotary embedding (Qwen3, Gemma 3, EXAONE 4).
    Head,
    /// Per head, after the rotary embedding (HunYuan).
    HeadAfterRope,
    /// Over the whole q and k projections, before the rotary embedding (OLMo 2).
    Whole,
}

impl QkNorm {
    pub fn on(self) -> bool {
        self != QkNorm::None
    }
}

/// A config.json default of a family's config class, applied where the key is absent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigDefault {
    Str(&'static str),
    /// A JSON value (an object: Ministral3Config's default `rope_parameters`).
    Json(&'static str),
    Bool(bool),
    Int(u64),
    Real(f64),
}

/// A family: its names in each format and the flags the configs and loaders take from it.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// The family's name in messages (its usual Hugging Face `model_type`).
    pub name: &'static str,
    /// GGUF `general.architecture` values (none: GGUF files of it are not read).
    pub gguf: &'static [&'static str],
    /// Hugging Face `model_type` values (`*_text`: the text config nested in a multimodal one).
    pub hf: &'static [&'static str],
    /// MLC-LLM folders of this family are read (MLC's `model_type` is the HF one), with these
    /// renames of MLC parameter names to the transformers ones.
    pub mlc: Option<&'static [(&'static str, &'static str)]>,
    /// llama.cpp stores q/k rows permuted into (2i, 2i+1) rotary pairs (else NeoX halves).
    pub gguf_rope_pairs: bool,
    /// Gemma: embeddings scaled by sqrt(hidden), GELU (tanh) by default, tied embeddings and 8192
    /// positions by default, (1 + w) norms; MLC stores its norm weights plus one.
    pub gemma: bool,
    pub norms: Norms,
    pub qk_norm: QkNorm,
    pub qkv_bias: Bias,
    pub o_bias: Bias,
    /// config.json's `mlp_bias` is read (Llama).
    pub mlp_bias: bool,
    /// BitNet b1.58: attention and FFN sub-norms (GGUF: and ReLU²).
    pub sub_norms: bool,
    /// Qwen3.5: Gated DeltaNet layers and gated full attention.
    pub hybrid: bool,
    /// HF norm weights are zero-centred, (1 + w) (Gemma, Qwen3.5).
    pub centred_norms: bool,
    /// HF checkpoints store fused `qkv_proj` and `gate_up_proj` (Phi-3).
    pub fused: bool,
    /// Longrope generations recompute the cache past the original context (Phi-3).
    pub longrope_recompute: bool,
    pub sliding: Sliding,
    /// Which layers of a GGUF file with a window slide, where llama.cpp's rule differs from
    /// transformers' (an OLMo 3 converted as olmo2: 3 sliding per full one).
    pub gguf_sliding: Option<Sliding>,
    /// Sliding layers rotate with their own base (Gemma 3's local rope).
    pub local_rope: bool,
    /// GGUF files attend both ways unless `<arch>.attention.causal` says otherwise
    /// (EmbeddingGemma as llama.cpp writes it).
    pub gguf_bidirectional: bool,
    /// config.json defaults: `rms_norm_eps`, `partial_rotary_factor`, `query_pre_attn_scalar`
    /// (None: the key is not read, the scale is head_dim^-0.5), and the attention / final
    /// logit soft-caps.
    pub rms_eps: f64,
    pub partial_rotary: Option<f64>,
    pub query_pre_attn_scalar: Option<f64>,
    pub softcaps: (Option<f64>, Option<f64>),
    /// A legacy `hidden_act: "gelu"` means the tanh approximation (Gemma 1's GemmaConfig).
    pub legacy_gelu: bool,
    /// Every `n`-th layer has no rotary embedding (NoPE): config.json's `no_rope_layers` (1:
    /// rope) or `no_rope_layer_interval` override it; GGUF files always take `n`, as llama.cpp
    /// hard-codes it (SmolLM3: 4). 0: every layer rotates.
    pub nope_every: usize,
    /// Granite's scalars are read: config.json's `embedding_multiplier`, `residual_multiplier`
    /// (each block's output), `attention_multiplier` (the attention scale) and `logits_scaling`
    /// (logits divided by it); GGUF's `embedding_scale`, `residual_scale`, `attention.scale`
    /// and `logit_scale`.
    pub multipliers: bool,
    /// config.json's `head_dim` when absent (None: hidden / heads; InternLM3Config: 128).
    pub head_dim: Option<usize>,
    /// Older names of `attention_bias` and `mlp_bias` the config class maps (InternLM3's
    /// `qkv_bias` and `bias`), read where the new one is absent.
    pub bias_aliases: Option<(&'static str, &'static str)>,
    /// Hugging Face checkpoints rotate interleaved pairs (2i, 2i+1) already (GLM-4, ERNIE 4.5),
    /// so the loader keeps their q/k rows as they are.
    pub hf_rope_pairs: bool,
    /// Sliding-window models: the full-attention layers attend without rope (EXAONE 4).
    pub nope_full: bool,
    /// The FFN is gated (act(gate) * up); else act(up) (Arcee's ReLU²).
    pub gated: bool,
    /// The activation: config.json's `hidden_act` when absent, and GGUF files' (llama.cpp's
    /// graph fixes it per architecture).
    pub act: &'static str,
    /// A "dynamic" rope with an `alpha` is NTK-alpha scaling: a fixed base of theta ·
    /// alpha^(d / (d - 2)) (HunYuan).
    pub ntk_alpha: bool,
    /// Queries scaled by Llama 4's attention temperature, from `rope_parameters`'
    /// `llama_4_scaling_beta` and `original_max_position_embeddings` (Ministral 3).
    pub llama4_scaling: bool,
    /// config.json defaults of the family's config class beyond the common ones.
    pub defaults: &'static [(&'static str, ConfigDefault)],
}

/// The plain Llama row the others start from.
pub const LLAMA: Family = Family {
    name: "llama",
    gguf: &["llama"],
    hf: &["llama"],
    mlc: Some(&[]),
    gguf_rope_pairs: true,
    gemma: false,
    norms: PRE_NORMS,
    qk_norm: QkNorm::None,
    qkv_bias: Bias::IfAttentionBias,
    o_bias: Bias::IfAttentionBias,
    mlp_bias: true,
    sub_norms: false,
    hybrid: false,
    centred_norms: false,
    fused: false,
    longrope_recompute: false,
    sliding: Sliding::Listed,
    gguf_sliding: None,
    local_rope: false,
    gguf_bidirectional: false,
    rms_eps: 1e-6,
    partial_rotary: None,
    query_pre_attn_scalar: None,
    softcaps: (None, None),
    legacy_gelu: false,
    nope_every: 0,
    multipliers: false,
    head_dim: None,
    bias_aliases: None,
    hf_rope_pairs: false,
    nope_full: false,
    gated: true,
    act: "silu",
    ntk_alpha: false,
    llama4_scaling: false,
    defaults: &[],
};

/// What config.json of an unknown model_type reads as (`ModelConfig::from_hf` then refuses it).
pub const OTHER: Family =
    Family { name: "", gguf: &[], hf: &[], mlc: None, o_bias: Bias::Never, mlp_bias: false, ..LLAMA };

/// MLC's Qwen names its fused q/k/v `c_attn`.
const MLC_QWEN: &[(&str, &str)] = &[(".self_attn.c_attn.", ".self_attn.qkv_proj.")];
/// MLC's Phi-3 keeps the original Phi module names.
const MLC_PHI3: &[(&str, &str)] = &[
    ("transformer.embd.", "model.embed_tokens."),
    ("transformer.h.", "model.layers."),
    ("transformer.norm.", "model.norm."),
    (".mixer.qkv_proj.", ".self_attn.qkv_proj."),
    (".mixer.out_proj.", ".self_attn.o_proj."),
    (".ln.", ".input_layernorm."),
];

const QWEN3: Family = Family {
    name: "qwen3",
    gguf: &["qwen3"],
    hf: &["qwen3"],
    mlc: Some(MLC_QWEN),
    gguf_rope_pairs: false,
    qk_norm: QkNorm::Head,
    mlp_bias: false,
    sliding: Sliding::FromLayer,
    ..LLAMA
};

const GEMMA: Family = Family {
    name: "gemma",
    gguf: &[],
    hf: &["gemma"],
    gguf_rope_pairs: false,
    gemma: true,
    centred_norms: true,
    mlp_bias: false,
    legacy_gelu: true,
    act: "gelu_pytorch_tanh",
    ..LLAMA
};

const GEMMA3: Family = Family {
    name: "gemma3",
    gguf: &["gemma3"],
    hf: &["gemma3", "gemma3_text"],
    mlc: None,
    norms: SANDWICH_NORMS,
    qk_norm: QkNorm::Head,
    sliding: Sliding::EveryKey(6),
    local_rope: true,
    query_pre_attn_scalar: Some(256.0),
    legacy_gelu: false,
    ..GEMMA
};

pub const FAMILIES: &[Family] = &[
    LLAMA,
    Family {
        name: "mistral",
        gguf: &["mistral"],
        hf: &["mistral"],
        qkv_bias: Bias::Never,
        o_bias: Bias::Never,
        mlp_bias: false,
        sliding: Sliding::Everywhere,
        ..LLAMA
    },
    Family {
        name: "qwen2",
        gguf: &["qwen2"],
        hf: &["qwen2"],
        qk_norm: QkNorm::None,
        qkv_bias: Bias::Always,
        o_bias: Bias::Never,
        ..QWEN3
    },
    QWEN3,
    Family {
        name: "qwen3_5",
        gguf: &["qwen35"],
        hf: &["qwen3_5", "qwen3_5_text"],
        mlc: None,
        o_bias: Bias::Never,
        hybrid: true,
        centred_norms: true,
        sliding: Sliding::Listed,
        partial_rotary: Some(0.25),
        ..QWEN3
    },
    Family {
        name: "phi3",
        gguf: &["phi3"],
        hf: &["phi3"],
        mlc: Some(MLC_PHI3),
        gguf_rope_pairs: false,
        qkv_bias: Bias::Never,
        o_bias: Bias::Never,
        mlp_bias: false,
        fused: true,
        longrope_recompute: true,
        sliding: Sliding::Everywhere,
        rms_eps: 1e-5,
        ..LLAMA
    },
    GEMMA,
    Family {
        name: "gemma2",
        gguf: &["gemma2"],
        hf: &["gemma2"],
        norms: SANDWICH_NORMS,
        sliding: Sliding::Every(2),
        query_pre_attn_scalar: Some(256.0),
        softcaps: (Some(50.0), Some(30.0)),
        legacy_gelu: false,
        ..GEMMA
    },
    GEMMA3,
    // EmbeddingGemma as llama.cpp writes it: Gemma 3 attending both ways. Its HF folders are
    // gemma3_text with `use_bidirectional_attention`.
    Family { name: "gemma-embedding", gguf: &["gemma-embedding"], hf: &[], gguf_bidirectional: true, ..GEMMA3 },
    // A Llama whose every fourth layer attends without rope; its sliding window (off in the
    // released configs) applies only with `use_sliding_window`.
    Family {
        name: "smollm3",
        gguf: &["smollm3"],
        hf: &["smollm3"],
        mlc: None,
        sliding: Sliding::NoPeIfUsed,
        nope_every: 4,
        ..LLAMA
    },
    // Mistral with a window per layer (`layer_types`).
    Family {
        name: "ministral",
        gguf: &[],
        hf: &["ministral"],
        mlc: None,
        qkv_bias: Bias::Never,
        o_bias: Bias::Never,
        mlp_bias: false,
        sliding: Sliding::ListedElseAll,
        ..LLAMA
    },
    // Mistral with yarn and Llama 4's query temperature (the text model of Ministral 3).
    Family {
        name: "ministral3",
        gguf: &[],
        hf: &["ministral3"],
        mlc: None,
        qkv_bias: Bias::Never,
        o_bias: Bias::Never,
        mlp_bias: false,
        sliding: Sliding::Everywhere,
        rms_eps: 1e-5,
        head_dim: Some(128),
        llama4_scaling: true,
        defaults: &[(
            "rope_parameters",
            ConfigDefault::Json(
                r#"{"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0, "original_max_position_embeddings": 16384,
                    "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1}"#,
            ),
        )],
        ..LLAMA
    },
    // Llama with InternLM's defaults and names (transformers builds it as LlamaForCausalLM).
    Family {
        name: "internlm3",
        gguf: &[],
        hf: &["internlm3"],
        mlc: None,
        rms_eps: 1e-5,
        head_dim: Some(128),
        bias_aliases: Some(("qkv_bias", "bias")),
        ..LLAMA
    },
    // Norms of the outputs only, and of q and k over their whole projections (AI2's OLMo 2).
    Family {
        name: "olmo2",
        gguf: &["olmo2"],
        hf: &["olmo2"],
        mlc: None,
        gguf_rope_pairs: false,
        norms: POST_NORMS,
        qk_norm: QkNorm::Whole,
        gguf_sliding: Some(Sliding::Every(4)),
        mlp_bias: false,
        rms_eps: 1e-5,
        ..LLAMA
    },
    // Output norms, per-head q/k norms, and 3 sliding layers with rope per full one without.
    Family {
        name: "exaone4",
        gguf: &["exaone4"],
        hf: &["exaone4"],
        mlc: None,
        gguf_rope_pairs: false,
        norms: POST_NORMS,
        qk_norm: QkNorm::Head,
        qkv_bias: Bias::Never,
        o_bias: Bias::Never,
        mlp_bias: false,
        sliding: Sliding::EveryKey(4),
        nope_full: true,
        rms_eps: 1e-5,
        defaults: &[("sliding_window", ConfigDefault::Int(4096))],
        ..LLAMA
    },
    // Four norms a layer, half the head rotated in interleaved pairs, fused gate_up_proj.
    Family {
        name: "glm4",
        gguf: &["glm4"],
        hf: &["glm4"],
        mlc: None,
        hf_rope_pairs: true,
        norms: GLM4_NORMS,
        o_bias: Bias::Never,
        mlp_bias: false,
        partial_rotary: Some(0.5),
        rms_eps: 1.5625e-7,
        defaults: &[("attention_bias", ConfigDefault::Bool(true))],
        ..LLAMA
    },
    // A Llama rotating interleaved pairs, its biases under one key (Baidu's ERNIE 4.5 dense).
    Family {
        name: "ernie4_5",
        gguf: &["ernie4_5"],
        hf: &["ernie4_5"],
        mlc: None,
        hf_rope_pairs: true,
        rms_eps: 1e-5,
        head_dim: Some(128),
        bias_aliases: Some(("use_bias", "use_bias")),
        defaults: &[("tie_word_embeddings", ConfigDefault::Bool(true))],
        ..LLAMA
    },
    // A Llama with q/k/v biases by default and the output bias under its own key (ByteDance).
    Family {
        name: "seed_oss",
        gguf: &["seed_oss"],
        hf: &["seed_oss"],
        mlc: None,
        gguf_rope_pairs: false,
        o_bias: Bias::IfKey("attention_out_bias"),
        head_dim: Some(128),
        defaults: &[("attention_bias", ConfigDefault::Bool(true))],
        ..LLAMA
    },
    // Per-head q/k norms of the rotated q and k, NTK-alpha rope (Tencent's Hunyuan dense).
    Family {
        name: "hunyuan_v1_dense",
        gguf: &["hunyuan-dense"],
        hf: &["hunyuan_v1_dense"],
        mlc: None,
        gguf_rope_pairs: false,
        norms: Norms { q: tensor::QUERY_LAYERNORM, k: tensor::KEY_LAYERNORM, ..PRE_NORMS },
        qk_norm: QkNorm::HeadAfterRope,
        mlp_bias: false,
        rms_eps: 1e-5,
        ntk_alpha: true,
        ..LLAMA
    },
    // A Llama whose FFN is relu(up)^2, no gate (Arcee's AFM).
    Family {
        name: "arcee",
        gguf: &["arcee"],
        hf: &["arcee"],
        mlc: None,
        gated: false,
        act: "relu2",
        rms_eps: 1e-5,
        ..LLAMA
    },
    // A Llama with four scalars (IBM Granite 3.x).
    Family { name: "granite", gguf: &["granite"], hf: &["granite"], mlc: None, multipliers: true, ..LLAMA },
    // llama.cpp's `bitnet`, bitnet.cpp's `bitnet-b1.58`.
    Family {
        name: "bitnet",
        gguf: &["bitnet", "bitnet-b1.58"],
        hf: &["bitnet"],
        mlc: None,
        o_bias: Bias::Never,
        mlp_bias: false,
        sub_norms: true,
        act: "relu2",
        ..LLAMA
    },
];

/// The family of a GGUF `general.architecture`.
pub fn by_gguf(arch: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.gguf.contains(&arch))
}

/// The family of a Hugging Face `model_type`.
pub fn by_hf(model_type: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.hf.contains(&model_type))
}

/// The family of an MLC-LLM `model_type`, if MLC folders of it are read.
pub fn by_mlc(model_type: &str) -> Option<&'static Family> {
    by_hf(model_type).filter(|f| f.mlc.is_some())
}

/// The family of a `ModelConfig::arch` (a GGUF architecture or an HF model_type).
pub fn of(arch: &str) -> Option<&'static Family> {
    by_gguf(arch).or_else(|| by_hf(arch))
}

/// Every name of `names(family)` over the table, for messages ("llama, mistral, ...").
pub fn names(names: impl Fn(&Family) -> Vec<&'static str>) -> String {
    FAMILIES.iter().flat_map(names).collect::<Vec<_>>().join(", ")
}

/// The MLC-LLM model types read.
pub fn mlc_names() -> String {
    names(|f| if f.mlc.is_some() { f.hf.to_vec() } else { vec![] })
}

/// A tensor's name in GGUF files (llama.cpp) and in Hugging Face checkpoints (transformers),
/// per layer (after `blk.{i}.` / `model.layers.{i}.`) or global (after `model.` for HF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Tensor {
    pub gguf: &'static str,
    pub hf: &'static str,
}

/// Every tensor the loaders read, in both styles.
pub mod tensor {
    use super::Tensor;
    const fn t(gguf: &'static str, hf: &'static str) -> Tensor {
        Tensor { gguf, hf }
    }
    pub const EMBED: Tensor = t("token_embd.weight", "embed_tokens.weight");
    pub const OUT_NORM: Tensor = t("output_norm.weight", "norm.weight");
    pub const HEAD: Tensor = t("output.weight", "lm_head.weight");

    pub const ATTN_NORM: Tensor = t("attn_norm.weight", "input_layernorm.weight");
    pub const Q: Tensor = t("attn_q.weight", "self_attn.q_proj.weight");
    pub const K: Tensor = t("attn_k.weight", "self_attn.k_proj.weight");
    pub const V: Tensor = t("attn_v.weight", "self_attn.v_proj.weight");
    /// Fused [q; k; v] (Phi-3; MLC's Llama, Qwen).
    pub const QKV: Tensor = t("attn_qkv.weight", "self_attn.qkv_proj.weight");
    pub const Q_BIAS: Tensor = t("attn_q.bias", "self_attn.q_proj.bias");
    pub const K_BIAS: Tensor = t("attn_k.bias", "self_attn.k_proj.bias");
    pub const V_BIAS: Tensor = t("attn_v.bias", "self_attn.v_proj.bias");
    pub const QKV_BIAS: Tensor = t("attn_qkv.bias", "self_attn.qkv_proj.bias");
    pub const Q_NORM: Tensor = t("attn_q_norm.weight", "self_attn.q_norm.weight");
    pub const K_NORM: Tensor = t("attn_k_norm.weight", "self_attn.k_norm.weight");
    pub const O: Tensor = t("attn_output.weight", "self_attn.o_proj.weight");
    pub const O_BIAS: Tensor = t("attn_output.bias", "self_attn.o_proj.bias");
    /// The pre-FFN norm of families without post-norms (HF calls it post_attention_layernorm).
    pub const FFN_NORM: Tensor = t("ffn_norm.weight", "post_attention_layernorm.weight");
    /// The pre-FFN norm of families with post-norms (Gemma 2/3).
    pub const PRE_FFN_NORM: Tensor = t("ffn_norm.weight", "pre_feedforward_layernorm.weight");
    /// GLM-4's norms of the attention and MLP outputs.
    pub const POST_SELF_ATTN_NORM: Tensor = t("post_attention_norm.weight", "post_self_attn_layernorm.weight");
    pub const POST_MLP_NORM: Tensor = t("post_ffw_norm.weight", "post_mlp_layernorm.weight");
    /// HunYuan's q and k norms.
    pub const QUERY_LAYERNORM: Tensor = t("attn_q_norm.weight", "self_attn.query_layernorm.weight");
    pub const KEY_LAYERNORM: Tensor = t("attn_k_norm.weight", "self_attn.key_layernorm.weight");
    /// Gemma 2/3's post-norms (and Qwen3.5 GGUF files' name for the pre-FFN norm).
    pub const POST_ATTN_NORM: Tensor = t("post_attention_norm.weight", "post_attention_layernorm.weight");
    pub const POST_FFN_NORM: Tensor = t("post_ffw_norm.weight", "post_feedforward_layernorm.weight");
    pub const GATE: Tensor = t("ffn_gate.weight", "mlp.gate_proj.weight");
    pub const UP: Tensor = t("ffn_up.weight", "mlp.up_proj.weight");
    /// Fused [gate; up] (Phi-3: llama.cpp keeps it as ffn_up).
    pub const GATE_UP: Tensor = t("ffn_up.weight", "mlp.gate_up_proj.weight");
    pub const DOWN: Tensor = t("ffn_down.weight", "mlp.down_proj.weight");
    pub const GATE_BIAS: Tensor = t("ffn_gate.bias", "mlp.gate_proj.bias");
    pub const UP_BIAS: Tensor = t("ffn_up.bias", "mlp.up_proj.bias");
    pub const DOWN_BIAS: Tensor = t("ffn_down.bias", "mlp.down_proj.bias");
    /// BitNet b1.58's sub-norms.
    pub const ATTN_SUB_NORM: Tensor = t("attn_sub_norm.weight", "self_attn.attn_sub_norm.weight");
    pub const FFN_SUB_NORM: Tensor = t("ffn_sub_norm.weight", "mlp.ffn_sub_norm.weight");
    /// Gated DeltaNet layers (Qwen3.5): the input projections, convolution, dt bias, A (GGUF
    /// stores -exp(A_log), HF A_log), gated norm and output projection.
    pub const LIN_QKV: Tensor = t("attn_qkv.weight", "linear_attn.in_proj_qkv.weight");
    pub const LIN_Z: Tensor = t("attn_gate.weight", "linear_attn.in_proj_z.weight");
    pub const LIN_B: Tensor = t("ssm_beta.weight", "linear_attn.in_proj_b.weight");
    pub const LIN_A: Tensor = t("ssm_alpha.weight", "linear_attn.in_proj_a.weight");
    pub const CONV: Tensor = t("ssm_conv1d.weight", "linear_attn.conv1d.weight");
    pub const DT_BIAS: Tensor = t("ssm_dt.bias", "linear_attn.dt_bias");
    pub const A: Tensor = t("ssm_a", "linear_attn.A_log");
    pub const LIN_NORM: Tensor = t("ssm_norm.weight", "linear_attn.norm.weight");
    pub const LIN_OUT: Tensor = t("ssm_out.weight", "linear_attn.out_proj.weight");

    /// The parts the loaders fuse into a layer's [q; k; v] (or DeltaNet input) matrix.
    pub const QKV_PARTS: [Tensor; 7] = [Q, K, V, QKV, LIN_Z, LIN_B, LIN_A];
    /// The parts fused into [gate; up].
    pub const GATE_UP_PARTS: [Tensor; 2] = [GATE, UP];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_belongs_to_one_family() {
        let mut seen = std::collections::HashSet::new();
        for f in FAMILIES {
            for n in f.gguf {
                assert!(seen.insert(("gguf", *n)), "{n} twice");
            }
            for n in f.hf {
                assert!(seen.insert(("hf", *n)), "{n} twice");
            }
        }
        assert_eq!(by_gguf("qwen35").unwrap().name, "qwen3_5");
        assert_eq!(by_hf("gemma3_text").unwrap().name, "gemma3");
        assert!(by_mlc("qwen3_5").is_none() && by_mlc("gemma2").is_some());
        assert_eq!(mlc_names(), "llama, mistral, qwen2, qwen3, phi3, gemma, gemma2");
    }
}

//! Hugging Face `config.json`, `generation_config.json` and `tokenizer_config.json`, read into
//! plain structs with the families' defaults applied (Llama 3.x, Qwen2/2.5, Qwen3, Phi-3, Gemma 2,
//! Gemma 3, Mistral). Unknown keys are ignored; a key that is present with the wrong type is an
//! error naming it. Both config layouts are read: transformers 4.x (`rope_theta` + `rope_scaling`,
//! Gemma 3's `rope_local_base_freq`) and 5.x (`rope_parameters`, flat or keyed by layer type).
//! Rope inverse frequencies follow transformers' `ROPE_INIT_FUNCTIONS`, evaluated in f64.

use crate::error::{Error, Result};
use crate::model::bounds;
use crate::model::family::{self, Bias, ConfigDefault, Family, Sliding};
use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    Full,
    Sliding,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RopeParams {
    /// "default", "linear", "dynamic", "llama3", "longrope", "yarn" are computed; others are kept
    /// so the loader can name them, and `rope_inv_freq` refuses them.
    pub rope_type: String,
    pub theta: f64,
    pub partial_rotary_factor: f64,
    pub factor: Option<f64>,
    pub low_freq_factor: Option<f64>,
    pub high_freq_factor: Option<f64>,
    pub original_max_position_embeddings: Option<u64>,
    pub short_factor: Option<Vec<f64>>,
    pub long_factor: Option<Vec<f64>>,
    pub attention_factor: Option<f64>,
    /// YaRN's ramp bounds (defaults 32 and 1), attention-factor terms and range truncation.
    pub beta_fast: Option<f64>,
    pub beta_slow: Option<f64>,
    pub mscale: Option<f64>,
    pub mscale_all_dim: Option<f64>,
    pub truncate: Option<bool>,
    /// NTK-alpha's stretch of the base (HunYuan's "dynamic" with `alpha`).
    pub alpha: Option<f64>,
    /// Llama 4's attention temperature (Ministral 3).
    pub llama_4_scaling_beta: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HfConfig {
    /// Of the text model (`gemma3_text` for a Gemma 3 whose text config is nested).
    pub model_type: String,
    /// The outer model_type when the text config was nested under `text_config`.
    pub outer_model_type: Option<String>,
    pub architectures: Vec<String>,
    /// `use_bidirectional_attention` (EmbeddingGemma): no causal mask.
    pub bidirectional: bool,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Explicit `head_dim`, else hidden_size / num_attention_heads.
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f64,
    pub max_position_embeddings: u64,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Vec<u64>,
    pub eos_token_id: Vec<u64>,
    /// `dtype` (transformers 5) or `torch_dtype` (4.x).
    pub dtype: Option<String>,
    pub hidden_act: String,
    /// q/k/v projections have biases (Qwen2 always; Llama, Qwen3, Gemma via `attention_bias`).
    pub qkv_bias: bool,
    /// The output projection has a bias (`attention_bias` on Llama, Qwen3, Gemma 2/3; never Qwen2).
    pub o_bias: bool,
    /// gate/up/down projections have biases (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// RMS norm on q and k per head (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Phi-3 stores fused `qkv_proj` and `gate_up_proj` tensors.
    pub fused_qkv_gate_up: bool,
    /// Rope of full-attention layers (of all layers when `rope_local` is None).
    pub rope: RopeParams,
    /// Rope of sliding layers when it differs (Gemma 3: `rope_local_base_freq`).
    pub rope_local: Option<RopeParams>,
    /// Window W of sliding layers: position i sees keys j with 0 <= i - j < W.
    pub sliding_window: Option<u64>,
    pub layer_types: Vec<LayerKind>,
    /// Gemma: attention scale is query_pre_attn_scalar^-0.5 instead of head_dim^-0.5.
    pub query_pre_attn_scalar: Option<f64>,
    pub attn_logit_softcapping: Option<f64>,
    pub final_logit_softcapping: Option<f64>,
    /// Gated DeltaNet (linear attention) layers and their shape (Qwen3.5); `None`: none.
    pub linear: Option<LinearAttn>,
    /// Which layers are linear-attention layers.
    pub linear_layers: Vec<bool>,
    /// Full-attention layers gate their output: q_proj also gives a gate per head (Qwen3.5).
    pub attn_output_gate: bool,
    /// Layers that attend without a rotary embedding (SmolLM3's NoPE layers).
    pub nope_layers: Vec<bool>,
    /// Queries times 1 + beta · ln(1 + floor(p / original)): (beta, original) (Ministral 3).
    pub q_temperature: Option<(f64, u64)>,
    /// Granite's four scalars (GraniteConfig's defaults, 1, where a key is absent).
    pub multipliers: Option<Multipliers>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Multipliers {
    pub embedding: f64,
    pub residual: f64,
    /// The attention scale itself (not a factor of head_dim^-0.5).
    pub attention: f64,
    /// Logits are divided by it.
    pub logits_scaling: f64,
}

/// The shape of Gated DeltaNet layers (Qwen3.5's `linear_*` keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LinearAttn {
    pub key_heads: usize,
    pub value_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    /// Taps of the short causal convolution.
    pub conv: usize,
    /// Value heads in llama.cpp's tiled order (GGUF: head h reads key head h % key_heads)
    /// instead of grouped by key head (HF: h / (value_heads / key_heads)).
    pub tiled: bool,
}

impl LinearAttn {
    /// Channels of the convolution: q and k of every key head, v of every value head.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }
    /// Rows of the fused input projection: the convolution's channels, z, b and a.
    pub fn in_rows(&self) -> usize {
        self.conv_dim() + self.value_heads * self.value_dim + 2 * self.value_heads
    }
    pub fn v_total(&self) -> usize {
        self.value_heads * self.value_dim
    }
    /// Columns of a value head's state one workgroup of delta_rule.wgsl takes: the largest
    /// power of two up to 32 that divides the value dimension.
    pub fn column_block(&self) -> usize {
        [32, 16, 8, 4, 2, 1].into_iter().find(|c| self.value_dim.is_multiple_of(*c)).unwrap_or(1)
    }
}

fn bad(file: &str, key: &str, want: &str, v: &Value) -> Error {
    Error::Model(format!("{file}: {key} should be {want}, found {v}"))
}

/// Typed accessors where absent and null both mean "not set"; errors name the file (the second
/// field).
struct Obj<'a>(&'a Map<String, Value>, &'static str);

impl<'a> Obj<'a> {
    fn get(&self, k: &str) -> Option<&'a Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }
    fn u64(&self, k: &str) -> Result<Option<u64>> {
        self.get(k).map(|v| v.as_u64().ok_or_else(|| bad(self.1, k, "a non-negative integer", v))).transpose()
    }
    /// A count inside `range` (`bounds`), if set.
    fn count(&self, k: &str, range: bounds::Ints) -> Result<Option<usize>> {
        self.u64(k)?.map(|v| bounds::int(self.1, k, v, range)).transpose()
    }
    fn need(&self, k: &str, range: bounds::Ints) -> Result<usize> {
        self.count(k, range)?.ok_or_else(|| Error::Model(format!("{}: missing {k}", self.1)))
    }
    fn f64(&self, k: &str) -> Result<Option<f64>> {
        self.get(k).map(|v| v.as_f64().ok_or_else(|| bad(self.1, k, "a number", v))).transpose()
    }
    /// A real number checked by `check` (one of `bounds`' functions), if set.
    fn real(&self, k: &str, check: fn(&str, &str, f64) -> Result<f64>) -> Result<Option<f64>> {
        self.f64(k)?.map(|v| check(self.1, k, v)).transpose()
    }
    fn str(&self, k: &str) -> Result<Option<&'a str>> {
        self.get(k).map(|v| v.as_str().ok_or_else(|| bad(self.1, k, "a string", v))).transpose()
    }
    fn bool(&self, k: &str) -> Result<Option<bool>> {
        self.get(k).map(|v| v.as_bool().ok_or_else(|| bad(self.1, k, "true or false", v))).transpose()
    }
    fn f64s(&self, k: &str) -> Result<Option<Vec<f64>>> {
        self.get(k)
            .map(|v| {
                v.as_array()
                    .and_then(|a| a.iter().map(Value::as_f64).collect())
                    .ok_or_else(|| bad(self.1, k, "a list of numbers", v))
            })
            .transpose()
    }
    fn strs(&self, k: &str) -> Result<Option<Vec<String>>> {
        self.get(k)
            .map(|v| {
                v.as_array()
                    .and_then(|a| a.iter().map(|x| x.as_str().map(String::from)).collect())
                    .ok_or_else(|| bad(self.1, k, "a list of strings", v))
            })
            .transpose()
    }
    /// A token id given as an integer or a list of integers.
    fn ids(&self, k: &str) -> Result<Vec<u64>> {
        match self.get(k) {
            None => Ok(vec![]),
            Some(Value::Array(a)) => {
                a.iter().map(|x| x.as_u64().ok_or_else(|| bad(self.1, k, "token ids", x))).collect()
            }
            Some(v) => Ok(vec![v.as_u64().ok_or_else(|| bad(self.1, k, "a token id or a list of them", v))?]),
        }
    }
}

/// Weights quantized by a transformers quantizer (GPTQ, AWQ, bitsandbytes, FP8 ...) are stored as
/// that method's packed tensors and scales, which the loader does not read: refused by name rather
/// than failing later on a missing `.weight`. BitNet's (`bitnet`) has transformers make the weights
/// ternary and the activations 8-bit as it runs, which folders do not do here: refused too (its
/// GGUF files carry the ternary weights). MLX's `quantization_config` (group_size and bits, no
/// method) is read.
fn quantization_method(config: &Map<String, Value>) -> Result<()> {
    let Some(q) = config.get("quantization_config").filter(|v| !v.is_null()) else { return Ok(()) };
    let method = match q.get("quant_method") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(m)) => m.chars().take(64).collect::<String>(),
        Some(v) => {
            return Err(Error::Model(format!(
                "config.json: quantization_config.quant_method must be a string, got {v}"
            )))
        }
    };
    Err(Error::Unsupported(match method.as_str() {
        "bitnet" => "config.json: quant_method \"bitnet\" (weights made ternary and activations 8-bit as \
                     transformers runs them) is not supported for folders; use the model's GGUF file (I2_S)"
            .to_string(),
        m => format!(
            "config.json: weights quantized with quant_method \"{m}\" are not supported (that method's packed \
             tensors are not read); use a GGUF file or the model's unquantized weights"
        ),
    }))
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    v.as_object().ok_or_else(|| Error::Model(format!("{what} must be a JSON object")))
}

fn parse_json(text: &str, what: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Model(format!("{what} is not valid JSON: {e}")))
}

impl HfConfig {
    pub fn from_json(text: &str) -> Result<HfConfig> {
        let root = parse_json(text, "config.json")?;
        let root = object(&root, "config.json")?;
        // Multimodal wrappers (Gemma 3) nest the text model; its keys win, the outer ones fill gaps
        // (token ids, dtype, tie_word_embeddings often live only at the top).
        let mut merged = root.clone();
        let mut outer_model_type = None;
        let text_config = match root.get("text_config") {
            None | Some(Value::Null) => None,
            Some(Value::Object(tc)) => Some(tc),
            Some(v) => {
                return Err(Error::Model(format!("config.json: text_config must be an object, got {v}")));
            }
        };
        if let Some(tc) = text_config {
            outer_model_type = root.get("model_type").and_then(Value::as_str).map(String::from);
            merged.remove("model_type");
            for (k, v) in tc {
                merged.insert(k.clone(), v.clone());
            }
            // The wrapper owns the LM head, so its own flag decides the tying (transformers reads
            // `tie_word_embeddings` of the top-level config; Gemma3Config defaults to true).
            match root.get("tie_word_embeddings").filter(|v| !v.is_null()) {
                Some(v) => merged.insert("tie_word_embeddings".into(), v.clone()),
                None => merged.remove("tie_word_embeddings"),
            };
        }
        // The wrapper's and the text model's own (a null in one does not hide the other).
        quantization_method(root)?;
        text_config.map_or(Ok(()), quantization_method)?;
        let model_type = Obj(&merged, "config.json").str("model_type")?.unwrap_or("").to_string();
        let fam = family::by_hf(&model_type).unwrap_or(&family::OTHER);
        // The family's config class defaults, where config.json leaves a key out.
        for (k, d) in fam.defaults {
            // A null is a value here (EXAONE 4's `"sliding_window": null`: no window).
            let inner = |r: &str| merged.get(r).and_then(Value::as_object).is_some_and(|o| o.contains_key(*k));
            if !(merged.contains_key(*k) || inner("rope_parameters") || inner("rope_scaling")) {
                let v = match *d {
                    ConfigDefault::Str(s) => Value::from(s),
                    ConfigDefault::Json(j) => serde_json::from_str(j).expect("a family's default is valid JSON"),
                    ConfigDefault::Bool(b) => Value::from(b),
                    ConfigDefault::Int(i) => Value::from(i),
                    ConfigDefault::Real(r) => Value::from(r),
                };
                merged.insert(k.to_string(), v);
            }
        }
        let o = Obj(&merged, "config.json");
        let gemma = fam.gemma;
        let hidden_size = o.need("hidden_size", bounds::HIDDEN)?;
        let num_attention_heads = o.need("num_attention_heads", bounds::HEADS)?;
        let num_key_value_heads = o.count("num_key_value_heads", bounds::HEADS)?.unwrap_or(num_attention_heads);
        let num_hidden_layers = o.need("num_hidden_layers", bounds::LAYERS)?;
        if num_attention_heads == 0 || num_key_value_heads == 0 || num_attention_heads % num_key_value_heads != 0 {
            return Err(Error::Model(format!(
                "config.json: {num_attention_heads} attention heads cannot share {num_key_value_heads} KV heads"
            )));
        }
        let head_dim =
            o.count("head_dim", bounds::HEAD_DIM)?.or(fam.head_dim).unwrap_or(hidden_size / num_attention_heads);
        let max_position_embeddings = o
            .count("max_position_embeddings", bounds::POSITIONS)?
            .map_or(if gemma { 8192 } else { 4096 }, |v| v as u64);
        let act_key = if o.get("hidden_activation").is_some() { "hidden_activation" } else { "hidden_act" };
        let mut hidden_act = o.str(act_key)?.unwrap_or(fam.act).to_string();
        if fam.legacy_gelu && hidden_act == "gelu" {
            // GemmaConfig turns the legacy "gelu" of the first releases into the tanh approximation.
            hidden_act = "gelu_pytorch_tanh".into();
        }

        let (mut rope, rope_local) = resolve_rope(&o, fam, max_position_embeddings)?;
        // HunYuan's rotary class: a "dynamic" rope with a (non-zero) alpha has fixed frequencies.
        if fam.ntk_alpha && rope.rope_type == "dynamic" && rope.alpha.is_some_and(|a| a != 0.0) {
            rope.rope_type = "ntk_alpha".into();
        }
        if let Some(p) = fam.partial_rotary.filter(|_| !has_key(&merged, "partial_rotary_factor")) {
            // Qwen3_5TextConfig's default.
            rope.partial_rotary_factor = p;
        }
        let (linear, linear_layers) = linear_layers(&o, fam, num_hidden_layers)?;
        let mut nope_layers = nope_layers(&o, fam, num_hidden_layers)?;
        let layer_types = layer_types(&o, fam, num_hidden_layers, &nope_layers)?;
        // EXAONE 4 rotates only its sliding layers once config.json names a window.
        if fam.nope_full && o.count("sliding_window", bounds::WINDOW)?.is_some() {
            nope_layers = layer_types.iter().map(|k| *k == LayerKind::Full).collect();
        }
        // transformers gives a layer marked sliding but no window (sliding_window null) full
        // attention: its sliding mask is only built from a window.
        let sliding_window = match layer_types.contains(&LayerKind::Sliding) {
            true => o.count("sliding_window", bounds::WINDOW)?.map(|v| v as u64),
            false => None,
        };
        let layer_types = match sliding_window {
            Some(_) => layer_types,
            None => vec![LayerKind::Full; num_hidden_layers],
        };
        // Which projections have biases follows each family's modeling code in transformers:
        // Mistral and Phi-3 have none whatever the config says, Qwen2 has q/k/v biases always.
        let (attn_alias, mlp_alias) = fam.bias_aliases.unwrap_or(("attention_bias", "mlp_bias"));
        let attention_bias = o.bool("attention_bias")?.or(o.bool(attn_alias)?).unwrap_or(false);
        let mlp_bias = o.bool("mlp_bias")?.or(o.bool(mlp_alias)?).unwrap_or(false);
        let absent_or = |k: &str, d: Option<f64>| -> Result<Option<f64>> {
            if merged.contains_key(k) {
                o.real(k, bounds::non_negative)
            } else {
                Ok(d)
            }
        };
        let q_temperature = match fam.llama4_scaling {
            true => {
                let need = |v: Option<f64>, k: &str| {
                    v.ok_or_else(|| Error::Model(format!("config.json: {model_type} needs rope_parameters.{k}")))
                };
                let beta = need(rope.llama_4_scaling_beta, "llama_4_scaling_beta")?;
                let orig =
                    need(rope.original_max_position_embeddings.map(|v| v as f64), "original_max_position_embeddings")?;
                Some((beta, orig as u64))
            }
            false => None,
        };
        let cfg = HfConfig {
            outer_model_type,
            architectures: o.strs("architectures")?.unwrap_or_default(),
            bidirectional: o.bool("use_bidirectional_attention")?.unwrap_or(false),
            hidden_size,
            intermediate_size: o.need("intermediate_size", bounds::FFN)?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            vocab_size: o.need("vocab_size", bounds::VOCAB)?,
            rms_norm_eps: o.real("rms_norm_eps", bounds::epsilon)?.unwrap_or(fam.rms_eps),
            max_position_embeddings,
            tie_word_embeddings: o.bool("tie_word_embeddings")?.unwrap_or(gemma),
            bos_token_id: o.ids("bos_token_id")?,
            eos_token_id: o.ids("eos_token_id")?,
            dtype: o.str("dtype")?.or(o.str("torch_dtype")?).map(String::from),
            hidden_act,
            qkv_bias: has_bias(&o, fam.qkv_bias, attention_bias)?,
            o_bias: has_bias(&o, fam.o_bias, attention_bias)?,
            mlp_bias: fam.mlp_bias && mlp_bias,
            qk_norm: fam.qk_norm.on(),
            fused_qkv_gate_up: fam.fused,
            rope,
            rope_local,
            sliding_window,
            layer_types,
            // Gemma 1 scales by head_dim^-0.5 and has no such key.
            query_pre_attn_scalar: match fam.query_pre_attn_scalar {
                Some(d) => absent_or("query_pre_attn_scalar", Some(d))?,
                None => None,
            },
            // Gemma 2's defaults; Gemma 3 has no soft-capping unless its config says so.
            attn_logit_softcapping: absent_or("attn_logit_softcapping", fam.softcaps.0)?,
            final_logit_softcapping: absent_or("final_logit_softcapping", fam.softcaps.1)?,
            linear,
            linear_layers,
            attn_output_gate: fam.hybrid,
            nope_layers,
            q_temperature,
            multipliers: match fam.multipliers {
                true => {
                    let m = |k: &str| -> Result<f64> { Ok(o.real(k, bounds::positive)?.unwrap_or(1.0)) };
                    Some(Multipliers {
                        embedding: m("embedding_multiplier")?,
                        residual: m("residual_multiplier")?,
                        attention: m("attention_multiplier")?,
                        logits_scaling: m("logits_scaling")?,
                    })
                }
                false => None,
            },
            model_type,
        };
        for r in std::iter::once(&cfg.rope).chain(cfg.rope_local.as_ref()) {
            if let Some(f) =
                [&r.short_factor, &r.long_factor].into_iter().flatten().find(|f| f.len() != cfg.rope_dim(r) / 2)
            {
                return Err(Error::Model(format!(
                    "config.json: longrope factor list has {} entries, the rotary dimension {} needs {}",
                    f.len(),
                    cfg.rope_dim(r),
                    cfg.rope_dim(r) / 2
                )));
            }
        }
        Ok(cfg)
    }

    /// Rope parameters of layer `i`.
    pub fn rope_for(&self, kind: LayerKind) -> &RopeParams {
        match (kind, &self.rope_local) {
            (LayerKind::Sliding, Some(r)) => r,
            _ => &self.rope,
        }
    }

    /// Rotated dimensions per head: `int(head_dim * partial_rotary_factor)` as transformers does.
    pub fn rope_dim(&self, r: &RopeParams) -> usize {
        (self.head_dim as f64 * r.partial_rotary_factor) as usize
    }

    /// Inverse frequencies for layers of `kind` at sequence length `seq_len` (dynamic NTK and
    /// longrope depend on it; `None` means the init-time value transformers caches).
    pub fn rope_inv_freq(&self, kind: LayerKind, seq_len: Option<u64>) -> Result<Vec<f64>> {
        let r = self.rope_for(kind);
        let dim = self.rope_dim(r);
        let need = |v: Option<f64>, k: &str| {
            v.ok_or_else(|| Error::Model(format!("config.json: {} rope needs {k}", r.rope_type)))
        };
        let default =
            |base: f64| -> Vec<f64> { (0..dim).step_by(2).map(|i| 1.0 / base.powf(i as f64 / dim as f64)).collect() };
        Ok(match r.rope_type.as_str() {
            "default" => default(r.theta),
            "linear" => {
                let f = need(r.factor, "factor")?;
                default(r.theta).into_iter().map(|x| x / f).collect()
            }
            "dynamic" => {
                let f = need(r.factor, "factor")?;
                let max = self.max_position_embeddings as f64;
                let seq = seq_len.map_or(max, |s| (s as f64).max(max));
                let base = r.theta * ((f * seq / max) - (f - 1.0)).powf(dim as f64 / (dim as f64 - 2.0));
                default(base)
            }
            "ntk_alpha" => {
                let alpha = need(r.alpha, "alpha")?;
                default(r.theta * alpha.powf(dim as f64 / (dim as f64 - 2.0)))
            }
            "llama3" => {
                let factor = need(r.factor, "factor")?;
                let low = need(r.low_freq_factor, "low_freq_factor")?;
                let high = need(r.high_freq_factor, "high_freq_factor")?;
                let old =
                    need(r.original_max_position_embeddings.map(|v| v as f64), "original_max_position_embeddings")?;
                let (low_wl, high_wl) = (old / low, old / high);
                default(r.theta)
                    .into_iter()
                    .map(|f| {
                        let wl = 2.0 * std::f64::consts::PI / f;
                        let scaled = if wl > low_wl { f / factor } else { f };
                        if wl < high_wl || wl > low_wl {
                            return scaled;
                        }
                        let smooth = (old / wl - low) / (high - low);
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    })
                    .collect()
            }
            "longrope" => {
                let orig =
                    need(r.original_max_position_embeddings.map(|v| v as f64), "original_max_position_embeddings")?;
                let long = seq_len.is_some_and(|s| s as f64 > orig);
                let ext = if long { &r.long_factor } else { &r.short_factor };
                let ext = ext
                    .as_ref()
                    .ok_or_else(|| Error::Model("config.json: longrope needs short_factor and long_factor".into()))?;
                (0..dim).step_by(2).zip(ext).map(|(i, e)| 1.0 / (e * r.theta.powf(i as f64 / dim as f64))).collect()
            }
            "yarn" => {
                let orig =
                    need(r.original_max_position_embeddings.map(|v| v as f64), "original_max_position_embeddings")?;
                let factor = r.factor.unwrap_or(self.max_position_embeddings as f64 / orig);
                // Python's `x or default`: an explicit 0 also takes the default.
                let beta_fast = r.beta_fast.filter(|v| *v != 0.0).unwrap_or(32.0);
                let beta_slow = r.beta_slow.filter(|v| *v != 0.0).unwrap_or(1.0);
                let d = dim as f64;
                let corr = |rot: f64| d * (orig / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * r.theta.ln());
                let (mut low, mut high) = (corr(beta_fast), corr(beta_slow));
                if r.truncate.unwrap_or(true) {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    high += 0.001;
                }
                default(r.theta)
                    .into_iter()
                    .enumerate()
                    .map(|(i, extrapolated)| {
                        let keep = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        extrapolated / factor * (1.0 - keep) + extrapolated * keep
                    })
                    .collect()
            }
            other => {
                return Err(Error::Unsupported(format!(
                    "rope type {other:?} (default, linear, dynamic, llama3, longrope and yarn are implemented)"
                )))
            }
        })
    }

    /// The factor transformers multiplies cos and sin by (longrope's and YaRN's attention
    /// scaling; else 1).
    pub fn rope_attention_factor(&self, kind: LayerKind) -> f64 {
        let r = self.rope_for(kind);
        if r.rope_type == "yarn" {
            let orig = r.original_max_position_embeddings.unwrap_or(self.max_position_embeddings) as f64;
            let factor = r.factor.unwrap_or(self.max_position_embeddings as f64 / orig);
            let mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
            return r.attention_factor.unwrap_or(match (r.mscale, r.mscale_all_dim) {
                (Some(m), Some(a)) if m != 0.0 && a != 0.0 => mscale(factor, m) / mscale(factor, a),
                _ => mscale(factor, 1.0),
            });
        }
        if r.rope_type != "longrope" {
            return 1.0;
        }
        let orig = r.original_max_position_embeddings.unwrap_or(self.max_position_embeddings) as f64;
        let factor = r.factor.unwrap_or(self.max_position_embeddings as f64 / orig);
        r.attention_factor.unwrap_or(if factor <= 1.0 { 1.0 } else { (1.0 + factor.ln() / orig.ln()).sqrt() })
    }
}

fn rope_from(d: &Obj, top: &Obj, default_theta: f64, max_pos: u64) -> Result<RopeParams> {
    let rope_type = d.str("rope_type")?.or(d.str("type")?).unwrap_or("default");
    // transformers 4.x called longrope "su" (Phi-3 128k); 5.x renames it when loading.
    let rope_type = if rope_type == "su" { "longrope" } else { rope_type }.to_string();
    let scaled = matches!(rope_type.as_str(), "llama3" | "yarn" | "longrope");
    // Phi-3 keeps the pretraining length at the top level, and it takes priority there.
    let orig_key = "original_max_position_embeddings";
    let orig = match top.count(orig_key, bounds::POSITIONS)? {
        Some(v) if scaled => Some(v as u64),
        _ => d.count(orig_key, bounds::POSITIONS)?.map(|v| v as u64).or(scaled.then_some(max_pos)),
    };
    let factors = |k: &str| -> Result<Option<Vec<f64>>> {
        let list = d.f64s(k)?;
        for &v in list.iter().flatten() {
            bounds::positive("config.json", k, v)?;
        }
        Ok(list)
    };
    let pos = bounds::positive;
    Ok(RopeParams {
        theta: d.real("rope_theta", pos)?.or(top.real("rope_theta", pos)?).unwrap_or(default_theta),
        partial_rotary_factor: d
            .real("partial_rotary_factor", bounds::fraction)?
            .or(top.real("partial_rotary_factor", bounds::fraction)?)
            .unwrap_or(1.0),
        factor: d.real("factor", pos)?,
        low_freq_factor: d.real("low_freq_factor", pos)?,
        high_freq_factor: d.real("high_freq_factor", pos)?,
        original_max_position_embeddings: orig,
        short_factor: factors("short_factor")?,
        long_factor: factors("long_factor")?,
        attention_factor: d.real("attention_factor", pos)?,
        beta_fast: d.real("beta_fast", pos)?,
        beta_slow: d.real("beta_slow", pos)?,
        mscale: d.real("mscale", bounds::non_negative)?,
        mscale_all_dim: d.real("mscale_all_dim", bounds::non_negative)?,
        truncate: d.bool("truncate")?,
        alpha: d.real("alpha", bounds::non_negative)?,
        llama_4_scaling_beta: d.real("llama_4_scaling_beta", bounds::non_negative)?,
        rope_type,
    })
}

/// (rope of full layers, rope of sliding layers if different), mirroring transformers'
/// `convert_rope_params_to_dict` + `standardize_rope_params` (and Gemma 3's override of them).
fn resolve_rope(o: &Obj, fam: &Family, max_pos: u64) -> Result<(RopeParams, Option<RopeParams>)> {
    let empty = Map::new();
    let pick = |k: &str| -> Result<Option<&Map<String, Value>>> {
        o.get(k).map(|v| v.as_object().ok_or_else(|| bad(o.1, k, "an object", v))).transpose()
    };
    let scaling = pick("rope_scaling")?;
    let params = pick("rope_parameters")?;
    let nested = params.filter(|p| p.contains_key("full_attention") || p.contains_key("sliding_attention"));
    if let Some(p) = nested {
        let sub = |k: &str| p.get(k).and_then(Value::as_object).unwrap_or(&empty);
        let g3 = fam.local_rope;
        let full = rope_from(&Obj(sub("full_attention"), o.1), o, if g3 { 1e6 } else { 1e4 }, max_pos)?;
        let local = rope_from(&Obj(sub("sliding_attention"), o.1), o, 1e4, max_pos)?;
        return Ok((full, Some(local)));
    }
    if fam.local_rope {
        // 4.x layout: rope_theta/rope_scaling for global layers, rope_local_base_freq for local ones.
        let full = rope_from(&Obj(scaling.or(params).unwrap_or(&empty), o.1), o, 1e6, max_pos)?;
        let mut local = rope_from(&Obj(&empty, o.1), &Obj(&empty, o.1), 1e4, max_pos)?;
        local.theta = o.real("rope_local_base_freq", bounds::positive)?.unwrap_or(1e4);
        local.partial_rotary_factor = full.partial_rotary_factor;
        return Ok((full, Some(local)));
    }
    Ok((rope_from(&Obj(scaling.or(params).unwrap_or(&empty), o.1), o, 1e4, max_pos)?, None))
}

/// Whether a projection of the family's `rule` has a bias, given config.json's `attention_bias`.
fn has_bias(o: &Obj, rule: Bias, attention_bias: bool) -> Result<bool> {
    Ok(match rule {
        Bias::Never => false,
        Bias::Always => true,
        Bias::IfAttentionBias => attention_bias,
        Bias::IfKey(k) => o.bool(k)?.unwrap_or(false),
    })
}

/// Whether `key` is set at the top level or inside `rope_parameters` / `rope_scaling`.
fn has_key(m: &Map<String, Value>, key: &str) -> bool {
    let inner = |k: &str| m.get(k).and_then(Value::as_object).is_some_and(|o| o.get(key).is_some_and(|v| !v.is_null()));
    m.get(key).is_some_and(|v| !v.is_null()) || inner("rope_parameters") || inner("rope_scaling")
}

/// Qwen3.5's Gated DeltaNet layers: `layer_types` entries "linear_attention", else every layer
/// but each `full_attention_interval`-th (default 4), as Qwen3_5TextConfig sets them.
fn linear_layers(o: &Obj, fam: &Family, n: usize) -> Result<(Option<LinearAttn>, Vec<bool>)> {
    if !fam.hybrid {
        return Ok((None, vec![false; n]));
    }
    let flags: Vec<bool> = match o.strs("layer_types")? {
        Some(list) => list.iter().map(|s| s == "linear_attention").collect(),
        None => {
            let every = o.count("full_attention_interval", bounds::PATTERN)?.unwrap_or(4);
            (0..n).map(|i| (i + 1) % every != 0).collect()
        }
    };
    let shape = LinearAttn {
        key_heads: o.count("linear_num_key_heads", bounds::HEADS)?.unwrap_or(16),
        value_heads: o.count("linear_num_value_heads", bounds::HEADS)?.unwrap_or(32),
        key_dim: o.count("linear_key_head_dim", bounds::HEAD_DIM)?.unwrap_or(128),
        value_dim: o.count("linear_value_head_dim", bounds::HEAD_DIM)?.unwrap_or(128),
        conv: o.count("linear_conv_kernel_dim", bounds::CONV)?.unwrap_or(4),
        tiled: false,
    };
    if !shape.value_heads.is_multiple_of(shape.key_heads) {
        return Err(Error::Model(format!(
            "config.json: {} linear value heads cannot share {} key heads",
            shape.value_heads, shape.key_heads
        )));
    }
    Ok((flags.contains(&true).then_some(shape), flags))
}

/// Which layers have no rotary embedding: SmolLM3Config's `no_rope_layers` (1: the layer rotates,
/// 0: NoPE), else every `no_rope_layer_interval`-th layer (the family's default interval).
fn nope_layers(o: &Obj, fam: &Family, n: usize) -> Result<Vec<bool>> {
    if fam.nope_every == 0 {
        return Ok(vec![false; n]);
    }
    if let Some(v) = o.get("no_rope_layers").filter(|v| !v.is_null()) {
        let flags = v
            .as_array()
            .and_then(|a| a.iter().map(|x| x.as_u64().filter(|&b| b <= 1).map(|b| b == 0)).collect::<Option<Vec<_>>>())
            .ok_or_else(|| bad("config.json", "no_rope_layers", "a list of 0s and 1s", v))?;
        if flags.len() != n {
            return Err(Error::Model(format!(
                "config.json: no_rope_layers has {} entries for {n} layers",
                flags.len()
            )));
        }
        return Ok(flags);
    }
    let every = o.count("no_rope_layer_interval", bounds::PATTERN)?.unwrap_or(fam.nope_every);
    Ok((0..n).map(|i| (i + 1) % every == 0).collect())
}

/// Attention kind of each layer: `layer_types` when given, else each family's rule in transformers.
fn layer_types(o: &Obj, fam: &Family, n: usize, nope: &[bool]) -> Result<Vec<LayerKind>> {
    let window = o.count("sliding_window", bounds::WINDOW)?;
    // SmolLM3 slides only with use_sliding_window, by default on its NoPE layers.
    if fam.sliding == Sliding::NoPeIfUsed {
        if !(o.bool("use_sliding_window")?.unwrap_or(false) && window.is_some()) {
            return Ok(vec![LayerKind::Full; n]);
        }
        if o.strs("layer_types")?.is_none() {
            return Ok(nope.iter().map(|&np| if np { LayerKind::Sliding } else { LayerKind::Full }).collect());
        }
    }
    // Mistral and Phi-3 apply their window (if any) to every layer and ignore layer_types.
    if fam.sliding == Sliding::Everywhere {
        return Ok(vec![if window.is_some() { LayerKind::Sliding } else { LayerKind::Full }; n]);
    }
    if let Some(list) = o.strs("layer_types")? {
        if list.len() != n {
            return Err(Error::Model(format!("config.json: layer_types has {} entries for {n} layers", list.len())));
        }
        return list
            .iter()
            .map(|s| match s.as_str() {
                // Qwen3.5's Gated DeltaNet layers (`linear_layers`) have no attention window.
                "full_attention" | "linear_attention" => Ok(LayerKind::Full),
                "sliding_attention" => Ok(LayerKind::Sliding),
                other => Err(Error::Unsupported(format!("layer type {other:?}"))),
            })
            .collect();
    }
    let pattern = match fam.sliding {
        Sliding::ListedElseAll => {
            return Ok(vec![if window.is_some() { LayerKind::Sliding } else { LayerKind::Full }; n]);
        }
        Sliding::Every(n) => n,
        Sliding::EveryKey(n) => o.count("sliding_window_pattern", bounds::PATTERN)?.unwrap_or(n),
        Sliding::FromLayer => {
            let on = o.bool("use_sliding_window")?.unwrap_or(false) && window.is_some();
            let from = o.count("max_window_layers", bounds::WINDOW)?.unwrap_or(28);
            return Ok((0..n).map(|i| if on && i >= from { LayerKind::Sliding } else { LayerKind::Full }).collect());
        }
        _ => return Ok(vec![LayerKind::Full; n]),
    } as usize;
    Ok((0..n)
        .map(|i| if pattern != 0 && (i + 1) % pattern != 0 { LayerKind::Sliding } else { LayerKind::Full })
        .collect())
}

/// `generation_config.json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    pub bos_token_id: Vec<u64>,
    pub eos_token_id: Vec<u64>,
    pub pad_token_id: Vec<u64>,
}

impl GenerationConfig {
    pub fn from_json(text: &str) -> Result<GenerationConfig> {
        let v = parse_json(text, "generation_config.json")?;
        let o = Obj(object(&v, "generation_config.json")?, "generation_config.json");
        Ok(GenerationConfig {
            bos_token_id: o.ids("bos_token_id")?,
            eos_token_id: o.ids("eos_token_id")?,
            pad_token_id: o.ids("pad_token_id")?,
        })
    }
}

/// The parts of `tokenizer_config.json` the engine uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenizerConfig {
    /// The template named "default" when several are given as `[{name, template}]`.
    pub chat_template: Option<String>,
    /// All named templates (one unnamed "default" for a plain string).
    pub chat_templates: Vec<(String, String)>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub add_bos_token: Option<bool>,
}

impl TokenizerConfig {
    pub fn from_json(text: &str) -> Result<TokenizerConfig> {
        let v = parse_json(text, "tokenizer_config.json")?;
        let m = object(&v, "tokenizer_config.json")?;
        let o = Obj(m, "tokenizer_config.json");
        let err = |k: &str, v: &Value| Error::Model(format!("tokenizer_config.json: unexpected {k}: {v}"));
        let chat_templates = match o.get("chat_template") {
            None => vec![],
            Some(Value::String(s)) => vec![("default".to_string(), s.clone())],
            Some(Value::Array(a)) => a
                .iter()
                .map(|t| match (t.get("name").and_then(Value::as_str), t.get("template").and_then(Value::as_str)) {
                    (Some(n), Some(s)) => Ok((n.to_string(), s.to_string())),
                    _ => Err(err("chat_template entry", t)),
                })
                .collect::<Result<_>>()?,
            Some(v) => return Err(err("chat_template", v)),
        };
        // Special tokens are plain strings or AddedToken objects {"content": ..., ...}.
        let token = |k: &str| -> Result<Option<String>> {
            match o.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => {
                    v.get("content").and_then(Value::as_str).map(|s| Some(s.to_string())).ok_or_else(|| err(k, v))
                }
            }
        };
        Ok(TokenizerConfig {
            chat_template: chat_templates.iter().find(|(n, _)| n == "default").map(|(_, t)| t.clone()),
            chat_templates,
            bos_token: token("bos_token")?,
            eos_token: token("eos_token")?,
            add_bos_token: o.bool("add_bos_token").map_err(|_| err("add_bos_token", &m["add_bos_token"]))?,
        })
    }
}

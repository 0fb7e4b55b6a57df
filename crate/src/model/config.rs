//! `ModelConfig`: the shapes and behaviour flags the single forward pass needs, read from GGUF
//! metadata (`<arch>.*` keys). Architectures differ only in these flags, never in code paths.

use crate::error::{Error, Result};
use crate::model::bounds;
use crate::model::family::{self, Bias, Family, Norms, QkNorm, Sliding};
use crate::weights::gguf::GgufFile;

#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelConfig {
    pub arch: String,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub context_train: usize,
    pub rms_eps: f32,
    pub rope_theta: f64,
    /// Rotated dimensions per head (partial rotary when < head_dim).
    pub rope_dim: usize,
    /// Rotate halves (i, i + d/2) (GPT-NeoX, HF layout) instead of pairs (2i, 2i+1)
    /// (llama.cpp's permuted Llama q/k).
    pub rope_neox: bool,
    /// Per-frequency divisors (Llama 3 rope scaling, Phi-3 longrope), if any.
    pub rope_freq_factors: Option<Vec<f32>>,
    pub rope_linear_scale: f64,
    /// Added q/k/v biases (Qwen2; Llama, Qwen3 and Gemma with `attention_bias`).
    pub qkv_bias: bool,
    /// Added output-projection bias (`attention_bias` on Llama, Qwen3, Gemma).
    pub o_bias: bool,
    /// Added gate/up/down biases (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    pub tied_embeddings: bool,
    /// Inverse rotary frequencies given by the model folder (HF rope types); `None`: from theta.
    pub rope_inv: Option<Vec<f64>>,
    /// Frequencies of sliding-window layers when they differ (Gemma 3's local rope).
    pub rope_local_inv: Option<Vec<f64>>,
    /// cos/sin multiplier (Phi-3 longrope's attention factor).
    pub rope_attn_factor: f64,
    /// Rotary frequencies that depend on the sequence length (longrope, dynamic NTK); the engine
    /// rebuilds the table for each prompt (see `rope_table_key`).
    pub rope_dynamic: Option<RopeDynamic>,
    /// Added to every norm weight: Gemma's (1 + w) in HF files (GGUF stores w + 1 already).
    pub norm_offset: f32,
    /// Embeddings are multiplied by this (Gemma: sqrt(hidden)).
    pub embed_scale: f32,
    /// Each block's attention and FFN output times this before the residual add (Granite).
    pub residual_scale: f32,
    /// Logits times this (Granite: 1 / logits_scaling).
    pub logit_scale: f32,
    /// GELU (tanh approximation) instead of SiLU in the gated FFN.
    pub gelu: bool,
    /// ReLU² instead of SiLU in the gated FFN (BitNet b1.58).
    pub relu2: bool,
    /// RMS norms of the attention output before the o-projection and of the FFN's inner
    /// activations before the down projection (BitNet b1.58's `attn_sub_norm` / `ffn_sub_norm`).
    pub sub_norms: bool,
    /// Attention score scale (1/sqrt(head_dim), or 1/sqrt(query_pre_attn_scalar)).
    pub attn_scale: f64,
    /// Soft-capping of attention scores and of final logits (0: off).
    pub attn_softcap: f32,
    pub final_softcap: f32,
    pub qk_norm: QkNorm,
    /// Queries at position p times 1 + beta · ln(1 + floor(p / original)) (Llama 4's attention
    /// temperature, Ministral 3): (beta, original).
    pub q_temperature: Option<(f32, usize)>,
    /// Which norms a layer has (and their tensor names).
    pub norms: Norms,
    /// act(gate) * up FFN (else act(up): the [gate; up] matrix holds the up rows only).
    pub gated: bool,
    /// Sliding window in positions (0: none) and which layers use it. Causal models: a query
    /// sees the last `sliding_window` positions up to itself; bidirectional ones: every position
    /// less than `sliding_window` away on either side.
    pub sliding_window: usize,
    pub layer_sliding: Vec<bool>,
    /// Layers whose q and k are not rotated (NoPE: SmolLM3's every fourth).
    pub layer_nope: Vec<bool>,
    /// Queries see only earlier positions. `false` for bidirectional encoders (EmbeddingGemma):
    /// every token sees the whole input, which then goes through in one prefill step and cannot
    /// generate.
    pub causal: bool,
    /// Gated DeltaNet layers (Qwen3.5): their shape, and which layers they are. Their state is a
    /// per-head matrix and a convolution window instead of a KV cache.
    pub linear: Option<crate::model::hf_config::LinearAttn>,
    pub layer_linear: Vec<bool>,
    /// Full-attention output multiplied by sigmoid of a per-head gate that q_proj also gives
    /// (Qwen3.5); the gate rows follow [q; k; v] in the fused projection.
    pub attn_gate: bool,
}

/// How transformers' `dynamic_rope_update` changes the rotary frequencies of full-attention layers
/// with the sequence length `s` of a forward call (s = last position + 1).
#[derive(Clone, Debug, serde::Serialize)]
pub enum RopeDynamic {
    /// Longrope (Phi-3): the short factors' frequencies (`rope_inv`) while s <= `original`, the
    /// long factors' (`long`) past it. The attention factor is the same for both. `recompute`:
    /// when a KV-cached generation reaches s = original + 1, the cache is dropped and the whole
    /// sequence recomputed with the long factors (Phi3ForCausalLM.prepare_inputs_for_generation);
    /// without it the cached keys keep their short-factor rotation.
    LongRope { original: usize, long: Vec<f64>, recompute: bool },
    /// Dynamic NTK: while s <= `max_positions` the initial frequencies, past it the base becomes
    /// theta * (factor * s / max_positions - (factor - 1))^(dim / (dim - 2)).
    Ntk { max_positions: usize, factor: f64, theta: f64, dim: usize },
}

/// Which layers use the sliding window, the way llama.cpp sets them for each architecture:
/// Gemma 2 alternates starting with a sliding layer, Gemma 3 has (pattern - 1) sliding layers
/// per full one, Mistral-style files slide everywhere when they name a window.
fn gguf_sliding_layers(g: &GgufFile, arch: &str, fam: &Family, n_layers: usize) -> Result<Vec<bool>> {
    let window = count(g, &format!("{arch}.attention.sliding_window"), bounds::WINDOW)?.unwrap_or(0);
    // llama.cpp's SmolLM3 graph attends to the whole cache whatever the file says.
    if window == 0 || fam.sliding == Sliding::NoPeIfUsed {
        return Ok(vec![false; n_layers]);
    }
    let key = format!("{arch}.attention.sliding_window_pattern");
    // A per-layer list (gguf-py's add_sliding_window_pattern takes one) says it outright.
    if let Some(list) = g.get_array(&key).ok().flatten() {
        let flags: Vec<bool> = list.iter().map(|v| matches!(v, crate::weights::gguf::Value::Bool(true))).collect();
        if flags.len() != n_layers || list.iter().any(|v| !matches!(v, crate::weights::gguf::Value::Bool(_))) {
            return Err(Error::Model(format!("{}: {key} lists {} flags for {n_layers} layers", g.name, list.len())));
        }
        return Ok(flags);
    }
    let pattern = match fam.gguf_sliding.unwrap_or(fam.sliding) {
        Sliding::Every(n) => n,
        Sliding::EveryKey(n) => count(g, &key, bounds::PATTERN)?.unwrap_or(n),
        _ => 0,
    };
    Ok((0..n_layers).map(|il| pattern == 0 || il % pattern < pattern - 1).collect())
}

/// Qwen3.5's Gated DeltaNet layers as llama.cpp writes them: every layer but each
/// `full_attention_interval`-th, with the `ssm.*` shape keys; value heads in tiled order.
fn gguf_linear_layers(
    g: &GgufFile,
    arch: &str,
    fam: &Family,
    n_layers: usize,
) -> Result<(Option<crate::model::hf_config::LinearAttn>, Vec<bool>)> {
    if !fam.hybrid {
        return Ok((None, vec![false; n_layers]));
    }
    let k = |s: &str| format!("{arch}.{s}");
    let every = count(g, &k("full_attention_interval"), bounds::PATTERN)?.unwrap_or(4);
    let value_heads = need(g, &k("ssm.time_step_rank"), bounds::HEADS)?;
    let inner = need(g, &k("ssm.inner_size"), bounds::FFN)?;
    let l = crate::model::hf_config::LinearAttn {
        key_heads: need(g, &k("ssm.group_count"), bounds::HEADS)?,
        value_heads,
        key_dim: need(g, &k("ssm.state_size"), bounds::HEAD_DIM)?,
        value_dim: inner / value_heads.max(1),
        conv: need(g, &k("ssm.conv_kernel"), bounds::CONV)?,
        tiled: true,
    };
    if l.key_heads == 0 || value_heads % l.key_heads != 0 || inner % value_heads != 0 {
        return Err(Error::Model(format!(
            "{}: {} linear value heads ({} values) cannot share {} key heads",
            g.name, value_heads, inner, l.key_heads
        )));
    }
    let flags: Vec<bool> = (0..n_layers).map(|i| (i + 1) % every != 0).collect();
    Ok((flags.contains(&true).then_some(l), flags))
}

fn need(g: &GgufFile, key: &str, range: bounds::Ints) -> Result<usize> {
    count(g, key, range)?.ok_or_else(|| Error::Model(format!("{}: missing metadata key {key}", g.name)))
}

/// An integer key, if present, inside `range` (`bounds`).
fn count(g: &GgufFile, key: &str, range: bounds::Ints) -> Result<Option<usize>> {
    g.get_u64(key)?.map(|v| bounds::int(&g.name, key, v, range)).transpose()
}

/// A real key, if present, checked by `check` (one of `bounds`' functions).
fn real(g: &GgufFile, key: &str, check: fn(&str, &str, f64) -> Result<f64>) -> Result<Option<f64>> {
    g.get_f64(key)?.map(|v| check(&g.name, key, v)).transpose()
}

impl ModelConfig {
    pub fn from_gguf(g: &GgufFile) -> Result<ModelConfig> {
        let arch = g
            .get_str("general.architecture")?
            .ok_or_else(|| Error::Model(format!("{}: missing general.architecture", g.name)))?
            .to_string();
        let fam = family::by_gguf(&arch).ok_or_else(|| {
            Error::Unsupported(format!(
                "architecture {arch:?} (GGUF files of {} run)",
                family::names(|f| f.gguf.to_vec())
            ))
        })?;
        // llama.cpp stores Llama q/k rows permuted into (2i, 2i+1) rotary pairs; the other
        // families keep the NeoX halves, which the loader reorders.
        let rope_neox = !fam.gguf_rope_pairs;
        let gemma = fam.gemma;
        let causal = g.get_bool(&format!("{arch}.attention.causal"))?.unwrap_or(!fam.gguf_bidirectional);
        let k = |s: &str| format!("{arch}.{s}");
        // Qwen3.5 files may append multi-token-prediction blocks, which generation does not use.
        let nextn = count(g, &k("nextn_predict_layers"), bounds::LAYERS)?.unwrap_or(0);
        let n_layers = need(g, &k("block_count"), bounds::LAYERS)?
            .checked_sub(nextn)
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::Model(format!("{}: {} prediction layers leave no decoder layer", g.name, nextn)))?;
        let (linear, layer_linear) = gguf_linear_layers(g, &arch, fam, n_layers)?;
        let hidden = need(g, &k("embedding_length"), bounds::HIDDEN)?;
        let n_heads = need(g, &k("attention.head_count"), bounds::HEADS)?;
        let n_kv_heads = count(g, &k("attention.head_count_kv"), bounds::HEADS)?.unwrap_or(n_heads);
        let ffn = need(g, &k("feed_forward_length"), bounds::FFN)?;
        if n_heads == 0 || n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
            return Err(Error::Model(format!(
                "{}: {n_heads} attention heads with {n_kv_heads} KV heads and hidden size {hidden} do not fit together",
                g.name
            )));
        }
        let head_dim = match count(g, &k("attention.key_length"), bounds::HEAD_DIM)? {
            Some(d) => d,
            None if !hidden.is_multiple_of(n_heads) => {
                return Err(Error::Model(format!(
                    "{}: {} {hidden} is not a multiple of {} {n_heads} (and {} is not given)",
                    g.name,
                    k("embedding_length"),
                    k("attention.head_count"),
                    k("attention.key_length")
                )))
            }
            None => hidden / n_heads,
        };
        let vocab = match g.get_u64(&k("vocab_size"))? {
            Some(v) => bounds::int(&g.name, &k("vocab_size"), v, bounds::VOCAB)?,
            None => match g.get_array("tokenizer.ggml.tokens")? {
                Some(a) => bounds::int(&g.name, "tokenizer.ggml.tokens (count)", a.len() as u64, bounds::VOCAB)?,
                None => 0,
            },
        };
        let rope_dim = count(g, &k("rope.dimension_count"), bounds::ROPE_DIM)?.unwrap_or(head_dim);
        let rope_theta = real(g, &k("rope.freq_base"), bounds::positive)?.unwrap_or(10000.0);
        let rms_eps = real(g, &k("attention.layer_norm_rms_epsilon"), bounds::epsilon)?.unwrap_or(1e-5) as f32;
        let context_train = count(g, &k("context_length"), bounds::POSITIONS)?.unwrap_or(4096);
        let rope_linear_scale = match g.get_str(&k("rope.scaling.type"))? {
            Some("linear") => real(g, &k("rope.scaling.factor"), bounds::positive)?.unwrap_or(1.0),
            None | Some("none") => 1.0,
            // Running YaRN (or anything else) as plain rope would drift silently past the
            // original context: refused until it is implemented for GGUF files.
            Some(other) => {
                return Err(Error::Unsupported(format!(
                    "{}: {} = {other:?} (GGUF files: linear or none; a YaRN model runs from its safetensors folder)",
                    g.name,
                    k("rope.scaling.type")
                )))
            }
        };
        if rope_linear_scale <= 0.0 || !rope_linear_scale.is_finite() || rope_theta <= 0.0 || !rope_theta.is_finite() {
            return Err(Error::Model(format!(
                "{}: rope base {rope_theta} / scale {rope_linear_scale} are not usable",
                g.name
            )));
        }
        let window = count(g, &k("attention.sliding_window"), bounds::WINDOW)?.unwrap_or(0);
        let layer_sliding = gguf_sliding_layers(g, &arch, fam, n_layers)?;
        let cfg = ModelConfig {
            arch: arch.clone(),
            n_layers,
            hidden,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn,
            vocab,
            context_train,
            rms_eps,
            rope_theta,
            rope_dim,
            rope_neox,
            // Filled by the loader from `rope_freqs.weight` (Llama 3) or `rope_factors_*` (Phi-3).
            rope_freq_factors: None,
            rope_inv: None,
            rope_local_inv: None,
            rope_attn_factor: real(g, &k("rope.scaling.attn_factor"), bounds::positive)?.unwrap_or(1.0),
            // Filled by the loader for Phi-3 files with both `rope_factors_*` tensors.
            rope_dynamic: None,
            // llama.cpp's converter already added Gemma's 1 to the norm weights.
            norm_offset: 0.0,
            embed_scale: match fam.multipliers {
                true => real(g, &k("embedding_scale"), bounds::positive)?.unwrap_or(1.0) as f32,
                false if gemma => (hidden as f32).sqrt(),
                false => 1.0,
            },
            residual_scale: match fam.multipliers {
                true => real(g, &k("residual_scale"), bounds::positive)?.unwrap_or(1.0) as f32,
                false => 1.0,
            },
            // llama.cpp divides the logits by `logit_scale`.
            logit_scale: match fam.multipliers {
                true => 1.0 / real(g, &k("logit_scale"), bounds::positive)?.unwrap_or(1.0) as f32,
                false => 1.0,
            },
            gelu: fam.act.starts_with("gelu"),
            relu2: fam.act == "relu2",
            sub_norms: fam.sub_norms,
            attn_scale: match fam.multipliers {
                true => real(g, &k("attention.scale"), bounds::positive)?.unwrap_or(1.0 / (head_dim as f64).sqrt()),
                false => 1.0 / (head_dim as f64).sqrt(),
            },
            attn_softcap: real(g, &k("attn_logit_softcapping"), bounds::non_negative)?.unwrap_or(0.0) as f32,
            final_softcap: real(g, &k("final_logit_softcapping"), bounds::non_negative)?.unwrap_or(0.0) as f32,
            qk_norm: fam.qk_norm,
            q_temperature: None,
            norms: fam.norms,
            gated: fam.gated,
            // A bidirectional file keeps the configured window W, which transformers applies as
            // |i - j| < W / 2 + 1 (as from_hf does).
            sliding_window: match (window, causal) {
                (w, false) if w > 0 => w / 2 + 1,
                (w, _) => w,
            },
            layer_sliding: layer_sliding.clone(),
            // llama.cpp takes the NoPE step from the architecture, never from a key; EXAONE 4
            // rotates only the sliding layers of a file with a window.
            layer_nope: match fam.nope_full && window > 0 {
                true => layer_sliding.iter().map(|s| !s).collect(),
                false => (0..n_layers).map(|i| fam.nope_every > 0 && (i + 1) % fam.nope_every == 0).collect(),
            },
            rope_linear_scale,
            // Biases are where the file has them (llama.cpp writes whichever the model had).
            qkv_bias: fam.qkv_bias == Bias::Always || g.tensor("blk.0.attn_q.bias").is_some(),
            o_bias: g.tensor("blk.0.attn_output.bias").is_some(),
            mlp_bias: g.tensor("blk.0.ffn_down.bias").is_some(),
            tied_embeddings: g.tensor("output.weight").is_none(),
            causal,
            linear,
            layer_linear,
            attn_gate: fam.hybrid,
        };
        let mut cfg = cfg;
        if fam.local_rope {
            // Gemma 3's local layers rotate with their own base and no scaling (llama.cpp: 10000
            // unless the file says otherwise); the global ones use freq_base and the scale.
            let local_base = real(g, &k("rope.freq_base_swa"), bounds::positive)?.unwrap_or(10000.0);
            cfg.rope_local_inv =
                Some((0..cfg.rope_dim / 2).map(|i| local_base.powf(-(2.0 * i as f64) / cfg.rope_dim as f64)).collect());
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Limits of the kernels, checked once so the GPU never sees a shape it cannot handle.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Unsupported(m));
        if self.n_layers == 0 || self.n_layers > 1024 || self.hidden == 0 || self.ffn == 0 || self.vocab == 0 {
            return bad(format!(
                "implausible sizes: {} layers, hidden {}, ffn {}, vocab {}",
                self.n_layers, self.hidden, self.ffn, self.vocab
            ));
        }
        if self.n_heads == 0 || self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!("{} attention heads cannot share {} KV heads", self.n_heads, self.n_kv_heads));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(8) || self.head_dim > 256 {
            return bad(format!("head dimension {} (must be a multiple of 8, at most 256)", self.head_dim));
        }
        if self.rope_dim > self.head_dim || self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) {
            return bad(format!(
                "rotary dimension {} for heads of {} (an even number from 2 to the head dimension)",
                self.rope_dim, self.head_dim
            ));
        }
        if !(self.rms_eps >= 0.0 && self.rms_eps.is_finite()) {
            return bad(format!("norm epsilon {} (a finite number >= 0)", self.rms_eps));
        }
        if [self.layer_sliding.len(), self.layer_linear.len(), self.layer_nope.len()]
            .iter()
            .any(|&l| l != self.n_layers)
        {
            return bad(format!("{} layer types for {} layers", self.layer_sliding.len(), self.n_layers));
        }
        if let Some(l) = &self.linear {
            // delta_rule.wgsl keeps at most 32 rows of a state column per invocation, its row
            // slices splitting 128 invocations with the column block; q/k staging holds 256 and
            // delta_prep.wgsl / gated_norm.wgsl reduce 128 / 256 values per head.
            let slices = 128 / l.column_block();
            if l.key_dim > 128
                || l.key_dim > 32 * slices
                || l.value_dim > 256
                || l.value_dim < 4
                || !l.value_dim.is_multiple_of(4)
            {
                return bad(format!(
                    "linear attention heads of key dimension {} / value dimension {} (at most 128 / 256; value dimension a multiple of 4)",
                    l.key_dim, l.value_dim
                ));
            }
        }
        if self.sub_norms && self.q_dim() != self.hidden {
            return bad(format!("BitNet sub-norms with q dimension {} != hidden size {}", self.q_dim(), self.hidden));
        }
        for (what, v) in [("hidden size", self.hidden), ("feed-forward size", self.ffn)] {
            if v % 8 != 0 {
                return bad(format!("{what} {v} is not a multiple of 8"));
            }
        }
        Ok(())
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// Floats per token of a full-attention layer's fused projection: [q; k; v] and the gates.
    pub fn attn_rows(&self) -> usize {
        self.q_dim() + 2 * self.kv_dim() + if self.attn_gate { self.q_dim() } else { 0 }
    }
    /// Values of the q and k norm weights: a head's, or the whole projections' (OLMo 2).
    pub fn qk_norm_widths(&self) -> (usize, usize) {
        match self.qk_norm {
            QkNorm::Whole => (self.q_dim(), self.kv_dim()),
            _ => (self.head_dim, self.head_dim),
        }
    }
    /// Rows of the FFN's first matrix: [gate; up], or up alone.
    pub fn ffn_rows(&self) -> usize {
        if self.gated {
            2 * self.ffn
        } else {
            self.ffn
        }
    }
    /// Floats per token of any layer's fused input projection (`Buffers::qkv`).
    pub fn proj_rows(&self) -> usize {
        self.attn_rows().max(self.linear.map_or(0, |l| l.in_rows()))
    }
    /// Floats per token of any layer's attention (or DeltaNet) output (`Buffers::attn`).
    pub fn mix_width(&self) -> usize {
        self.q_dim().max(self.linear.map_or(0, |l| l.v_total()))
    }
    /// Whether some layer keeps a recurrent state (whose past cannot be rewound like a KV cache).
    pub fn recurrent(&self) -> bool {
        self.layer_linear.contains(&true)
    }

    /// Which rotary table a generation whose prompt has `prompt_len` tokens needs: equal keys,
    /// equal tables (0 for every prompt when the frequencies never change).
    pub fn rope_table_key(&self, prompt_len: usize) -> usize {
        match &self.rope_dynamic {
            None => 0,
            Some(RopeDynamic::LongRope { original, .. }) => (prompt_len > *original) as usize,
            Some(RopeDynamic::Ntk { max_positions, .. }) if prompt_len > *max_positions => prompt_len,
            Some(RopeDynamic::Ntk { .. }) => 0,
        }
    }

    /// Whether a KV-cached generation that reaches `seq_len` positions, having started with a
    /// prompt whose table key is `key`, must recompute its cache from scratch (Phi-3 longrope).
    pub fn rope_recompute_at(&self, key: usize, seq_len: usize) -> bool {
        matches!(self.rope_dynamic, Some(RopeDynamic::LongRope { recompute: true, .. }))
            && self.rope_table_key(seq_len) != key
    }

    /// Inverse frequencies of full-attention layers for a forward call over a sequence of
    /// `seq_len` positions (transformers' `dynamic_rope_update`).
    pub fn rope_inv_freq_at(&self, seq_len: usize) -> Vec<f64> {
        match &self.rope_dynamic {
            Some(RopeDynamic::LongRope { original, long, .. }) if seq_len > *original => long.clone(),
            Some(RopeDynamic::Ntk { max_positions, factor, theta, dim }) if seq_len > *max_positions => {
                let (s, m, d) = (seq_len as f64, *max_positions as f64, *dim as f64);
                let base = theta * (factor * s / m - (factor - 1.0)).powf(d / (d - 2.0));
                (0..dim / 2).map(|i| 1.0 / base.powf((2 * i) as f64 / d)).collect()
            }
            _ => self.rope_inv_freq(),
        }
    }

    /// Inverse frequencies of the rotary embedding, in f64.
    pub fn rope_inv_freq(&self) -> Vec<f64> {
        if let Some(v) = &self.rope_inv {
            return v.clone();
        }
        (0..self.rope_dim / 2)
            .map(|i| {
                let mut f = self.rope_theta.powf(-(2.0 * i as f64) / self.rope_dim as f64);
                if let Some(ff) = &self.rope_freq_factors {
                    f /= ff.get(i).copied().unwrap_or(1.0) as f64;
                }
                f / self.rope_linear_scale
            })
            .collect()
    }
}

impl ModelConfig {
    /// The engine's config for a Hugging Face model folder's config.json.
    pub fn from_hf(h: &super::hf_config::HfConfig) -> Result<ModelConfig> {
        use super::hf_config::LayerKind;
        let family = h.model_type.as_str();
        let fam = family::by_hf(family).ok_or_else(|| {
            let named = if family.is_empty() {
                "no model_type in config.json".into()
            } else {
                format!("model_type {family:?}")
            };
            Error::Unsupported(format!(
                "{named} (supported: {})",
                family::names(|f| f.hf.iter().copied().take(1).collect())
            ))
        })?;
        let gemma = fam.gemma;
        let n_layers = h.num_hidden_layers;
        let rope_dim = h.rope_dim(&h.rope);
        let rope_inv = h.rope_inv_freq(LayerKind::Full, None)?;
        let rope_local_inv = match &h.rope_local {
            Some(_) => Some(h.rope_inv_freq(LayerKind::Sliding, None)?),
            None => None,
        };
        // transformers re-evaluates these rope types per forward call (`dynamic_rope_update`).
        let rope_dynamic = match (h.rope.rope_type.as_str(), h.rope.original_max_position_embeddings) {
            ("longrope", Some(orig)) => Some(RopeDynamic::LongRope {
                original: orig as usize,
                long: h.rope_inv_freq(LayerKind::Full, Some(orig + 1))?,
                recompute: fam.longrope_recompute,
            }),
            ("dynamic", _) => Some(RopeDynamic::Ntk {
                max_positions: h.max_position_embeddings as usize,
                factor: h.rope.factor.ok_or_else(|| Error::Model("config.json: dynamic rope needs factor".into()))?,
                theta: h.rope.theta,
                dim: rope_dim,
            }),
            _ => None,
        };
        let layer_sliding: Vec<bool> = if h.layer_types.len() == n_layers {
            h.layer_types.iter().map(|k| *k == LayerKind::Sliding).collect()
        } else {
            vec![h.sliding_window.is_some(); n_layers]
        };
        if fam.sub_norms && !h.intermediate_size.is_multiple_of(8) {
            // The FFN sub-norm averages over the padded width the kernels would use.
            return Err(Error::Unsupported(format!(
                "BitNet with intermediate size {} (a multiple of 8 is needed)",
                h.intermediate_size
            )));
        }
        let act = h.hidden_act.as_str();
        let gelu = match act {
            "silu" | "swish" => false,
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" | "gelu_fast" => true,
            "relu2" => false,
            other => {
                return Err(Error::Unsupported(format!(
                    "activation {other:?} (silu, gelu_pytorch_tanh and relu2 are supported)"
                )))
            }
        };
        let cfg = ModelConfig {
            arch: family.to_string(),
            n_layers,
            hidden: h.hidden_size,
            n_heads: h.num_attention_heads,
            n_kv_heads: h.num_key_value_heads,
            head_dim: h.head_dim,
            // Padded to the kernels' step of 8 by the loader (model/load.rs, `TensorSource::rows`).
            ffn: h.intermediate_size.next_multiple_of(8),
            vocab: h.vocab_size,
            context_train: h.max_position_embeddings as usize,
            rms_eps: h.rms_norm_eps as f32,
            rope_theta: h.rope.theta,
            rope_dim,
            // HF checkpoints rotate halves (the loader reorders q/k rows into pairs), but for
            // the families whose modeling code rotates pairs.
            rope_neox: !fam.hf_rope_pairs,
            rope_freq_factors: None,
            rope_linear_scale: 1.0,
            qkv_bias: h.qkv_bias,
            o_bias: h.o_bias,
            mlp_bias: h.mlp_bias,
            tied_embeddings: h.tie_word_embeddings,
            rope_inv: Some(rope_inv),
            rope_local_inv,
            rope_attn_factor: h.rope_attention_factor(LayerKind::Full),
            rope_dynamic,
            norm_offset: if fam.centred_norms { 1.0 } else { 0.0 },
            embed_scale: match h.multipliers {
                Some(m) => m.embedding as f32,
                None if gemma => (h.hidden_size as f32).sqrt(),
                None => 1.0,
            },
            residual_scale: h.multipliers.map_or(1.0, |m| m.residual as f32),
            logit_scale: h.multipliers.map_or(1.0, |m| (1.0 / m.logits_scaling) as f32),
            gelu,
            relu2: act == "relu2",
            sub_norms: fam.sub_norms,
            attn_scale: match h.multipliers {
                Some(m) => m.attention,
                None => 1.0 / h.query_pre_attn_scalar.unwrap_or(h.head_dim as f64).sqrt(),
            },
            attn_softcap: h.attn_logit_softcapping.unwrap_or(0.0) as f32,
            // Gemma3ForConditionalGeneration (the multimodal wrapper, which AutoModelForCausalLM
            // also builds for model_type gemma3) applies its LM head without the final soft-cap
            // that Gemma3ForCausalLM applies.
            final_softcap: match h.outer_model_type.as_deref() {
                Some("gemma3") => 0.0,
                _ => h.final_logit_softcapping.unwrap_or(0.0) as f32,
            },
            qk_norm: if h.qk_norm { fam.qk_norm } else { QkNorm::None },
            norms: fam.norms,
            gated: fam.gated,
            q_temperature: h.q_temperature.map(|(b, o)| (b as f32, o as usize)),
            // transformers turns a bidirectional model's window W into |i - j| < W / 2 + 1
            // (Gemma3TextConfig.__post_init__); config.json keeps W.
            sliding_window: match (h.sliding_window, h.bidirectional) {
                (Some(w), true) => w as usize / 2 + 1,
                (w, _) => w.unwrap_or(0) as usize,
            },
            layer_sliding,
            layer_nope: h.nope_layers.clone(),
            causal: !h.bidirectional,
            linear: h.linear,
            layer_linear: h.linear_layers.clone(),
            attn_gate: h.attn_output_gate,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

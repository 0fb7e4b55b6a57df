//! `ModelConfig`: the shapes and behaviour flags the single forward pass needs, read from GGUF
//! metadata (`<arch>.*` keys). Architectures differ only in these flags, never in code paths.

use crate::error::{Error, Result};
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
    /// Added q/k/v biases (Qwen2).
    pub qkv_bias: bool,
    pub tied_embeddings: bool,
}

fn need(g: &GgufFile, key: &str) -> Result<u64> {
    g.get_u64(key)?.ok_or_else(|| Error::Model(format!("{}: missing metadata key {key}", g.name)))
}

impl ModelConfig {
    pub fn from_gguf(g: &GgufFile) -> Result<ModelConfig> {
        let arch = g
            .get_str("general.architecture")?
            .ok_or_else(|| Error::Model(format!("{}: missing general.architecture", g.name)))?
            .to_string();
        let (rope_neox, qkv_bias) = match arch.as_str() {
            "llama" | "mistral" => (false, false),
            "qwen2" => (true, true),
            other => {
                return Err(Error::Unsupported(format!(
                    "architecture {other:?} (this build runs llama, mistral and qwen2 GGUF files)"
                )))
            }
        };
        let k = |s: &str| format!("{arch}.{s}");
        let n_layers = need(g, &k("block_count"))? as usize;
        let hidden = need(g, &k("embedding_length"))? as usize;
        let n_heads = need(g, &k("attention.head_count"))? as usize;
        let n_kv_heads = g.get_u64(&k("attention.head_count_kv"))?.unwrap_or(n_heads as u64) as usize;
        let ffn = need(g, &k("feed_forward_length"))? as usize;
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 || hidden % n_heads != 0 {
            return Err(Error::Model(format!(
                "{}: {n_heads} attention heads with {n_kv_heads} KV heads and hidden size {hidden} do not fit together",
                g.name
            )));
        }
        let head_dim = g.get_u64(&k("attention.key_length"))?.map(|v| v as usize).unwrap_or(hidden / n_heads);
        let vocab = match g.get_u64(&k("vocab_size"))? {
            Some(v) => v as usize,
            None => g.get_array("tokenizer.ggml.tokens")?.map(|a| a.len()).unwrap_or(0),
        };
        let rope_dim = g.get_u64(&k("rope.dimension_count"))?.map(|v| v as usize).unwrap_or(head_dim);
        let rope_theta = g.get_f64(&k("rope.freq_base"))?.unwrap_or(10000.0);
        let rms_eps = g.get_f64(&k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5) as f32;
        let context_train = g.get_u64(&k("context_length"))?.unwrap_or(4096) as usize;
        let rope_linear_scale = match g.get_str(&k("rope.scaling.type"))? {
            Some("linear") => g.get_f64(&k("rope.scaling.factor"))?.unwrap_or(1.0),
            _ => 1.0,
        };
        let cfg = ModelConfig {
            arch,
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
            // Filled by the loader from the `rope_freqs.weight` tensor (Llama 3) when present.
            rope_freq_factors: None,
            rope_linear_scale,
            qkv_bias,
            tied_embeddings: g.tensor("output.weight").is_none(),
        };
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
        if self.head_dim % 8 != 0 || self.head_dim > 256 {
            return bad(format!("head dimension {} (must be a multiple of 8, at most 256)", self.head_dim));
        }
        if self.rope_dim > self.head_dim || self.rope_dim % 2 != 0 {
            return bad(format!("rope dimension {} with head dimension {}", self.rope_dim, self.head_dim));
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

    /// Inverse frequencies of the rotary embedding, in f64.
    pub fn rope_inv_freq(&self) -> Vec<f64> {
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

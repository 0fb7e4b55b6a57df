//! Hugging Face model folders: config.json, *.safetensors (one file or shards with
//! model.safetensors.index.json), tokenizer.json, tokenizer_config.json, generation_config.json.
//! Weights map onto the same per-layer parts as GGUF tensors, so the forward pass is shared.

use super::config::ModelConfig;
use super::hf_config::{GenerationConfig, HfConfig, TokenizerConfig};
use super::weights::{GpuMatrix, LayerParts, ModelWeights};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::weights::pack::{self, Packed};
use crate::weights::quant::{self, GgmlType};
use crate::weights::safetensors::{SafetensorsModel, StDtype};
use crate::weights::ByteSource;

/// How to store F32/F16/BF16 weights on the GPU: as they are, or quantized at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Quantize {
    #[default]
    None,
    Q8_0,
    Q4_0,
}

impl std::str::FromStr for Quantize {
    type Err = Error;
    fn from_str(s: &str) -> Result<Quantize> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "" => Ok(Quantize::None),
            "q8_0" | "q8" => Ok(Quantize::Q8_0),
            "q4_0" | "q4" => Ok(Quantize::Q4_0),
            other => Err(Error::InvalidOption(format!("quantize {other:?}: expected none, q8_0 or q4_0"))),
        }
    }
}

/// The text files of a model folder, read by the caller (natively from disk, in the browser by
/// fetch); weights come through `open`.
pub struct HfFiles {
    pub config: String,
    pub generation_config: Option<String>,
    pub tokenizer: Option<String>,
    pub tokenizer_config: Option<String>,
    pub index: Option<Vec<u8>>,
}

pub struct HfModel<S: ByteSource> {
    pub hf: HfConfig,
    pub cfg: ModelConfig,
    pub st: SafetensorsModel<S>,
    pub generation: Option<GenerationConfig>,
    pub tokenizer_config: Option<TokenizerConfig>,
}

impl<S: ByteSource> HfModel<S> {
    pub fn open(files: &HfFiles, open: impl FnMut(&str) -> Result<S>) -> Result<HfModel<S>> {
        let hf = HfConfig::from_json(&files.config)?;
        let cfg = ModelConfig::from_hf(&hf)?;
        let st = SafetensorsModel::open(files.index.as_deref(), open)?;
        let generation = files.generation_config.as_deref().map(GenerationConfig::from_json).transpose()?;
        let tokenizer_config = files.tokenizer_config.as_deref().map(TokenizerConfig::from_json).transpose()?;
        Ok(HfModel { hf, cfg, st, generation, tokenizer_config })
    }

    /// Stop token ids from generation_config.json, else config.json.
    pub fn eos_ids(&self) -> Vec<u32> {
        let ids = self
            .generation
            .as_ref()
            .map(|g| g.eos_token_id.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| self.hf.eos_token_id.clone());
        ids.into_iter().filter_map(|i| u32::try_from(i).ok()).collect()
    }

    fn has(&self, name: &str) -> bool {
        self.st.get(name).is_some()
    }

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let (_, _, t) = self.st.get(name).ok_or_else(|| Error::Model(format!("missing tensor {name}")))?;
        if t.shape.iter().product::<u64>() != n as u64 || t.shape.len() != 1 {
            return Err(Error::Model(format!("tensor {name} has shape {:?}, expected [{n}]", t.shape)));
        }
        self.st.read_f32(name)
    }

    /// A matrix of `rows` x `cols` ([out, in] in the file), packed as stored or quantized.
    fn matrix(&self, name: &str, rows: usize, cols: usize, q: Quantize) -> Result<Packed> {
        let (_, _, t) = self.st.get(name).ok_or_else(|| Error::Model(format!("missing tensor {name}")))?;
        if t.shape != [rows as u64, cols as u64] {
            return Err(Error::Model(format!("tensor {name} has shape {:?}, expected [{rows}, {cols}]", t.shape)));
        }
        let ty = match t.dtype {
            StDtype::F32 => GgmlType::F32,
            StDtype::F16 => GgmlType::F16,
            StDtype::BF16 => GgmlType::BF16,
            ref other => {
                return Err(Error::Unsupported(format!(
                    "tensor {name} has dtype {other:?} (F32, F16 and BF16 are supported)"
                )))
            }
        };
        let target = match q {
            Quantize::Q8_0 if cols % 32 == 0 => Some(GgmlType::Q8_0),
            Quantize::Q4_0 if cols % 32 == 0 => Some(GgmlType::Q4_0),
            _ => None,
        };
        match target {
            None => {
                let raw = self.st.read_bytes(name)?;
                pack::pack(ty, rows, cols, &raw)
            }
            Some(qt) => {
                let x = self.st.read_f32(name)?;
                pack::pack(qt, rows, cols, &quant::quantize(qt, &x)?)
            }
        }
    }

    /// Upload every weight (HF tensor names), quantizing matrices when asked.
    pub fn load(&self, gpu: &Gpu, q: Quantize) -> Result<ModelWeights> {
        let c = &self.cfg;
        let (h, qd, kvd, f) = (c.hidden, c.q_dim(), c.kv_dim(), c.ffn);
        let embed = GpuMatrix::upload(gpu, "embed", &self.matrix("model.embed_tokens.weight", c.vocab, h, q)?)?;
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let n = |s: &str| format!("model.layers.{i}.{s}");
            let qkv = if self.has(&n("self_attn.qkv_proj.weight")) {
                vec![self.matrix(&n("self_attn.qkv_proj.weight"), qd + 2 * kvd, h, q)?]
            } else {
                vec![
                    self.matrix(&n("self_attn.q_proj.weight"), qd, h, q)?,
                    self.matrix(&n("self_attn.k_proj.weight"), kvd, h, q)?,
                    self.matrix(&n("self_attn.v_proj.weight"), kvd, h, q)?,
                ]
            };
            let qkv_bias = if c.qkv_bias {
                let mut b = self.vector(&n("self_attn.q_proj.bias"), qd)?;
                b.extend(self.vector(&n("self_attn.k_proj.bias"), kvd)?);
                b.extend(self.vector(&n("self_attn.v_proj.bias"), kvd)?);
                Some(b)
            } else {
                None
            };
            let gate_up = if self.has(&n("mlp.gate_up_proj.weight")) {
                vec![self.matrix(&n("mlp.gate_up_proj.weight"), 2 * f, h, q)?]
            } else {
                vec![self.matrix(&n("mlp.gate_proj.weight"), f, h, q)?, self.matrix(&n("mlp.up_proj.weight"), f, h, q)?]
            };
            let qk = |s: &str| -> Result<Option<Vec<f32>>> {
                if c.qk_norm {
                    self.vector(&n(s), c.head_dim).map(Some)
                } else {
                    Ok(None)
                }
            };
            // Llama-style files call the pre-FFN norm post_attention_layernorm; Gemma has both.
            let (ffn_norm, post_attn_norm, post_ffn_norm) = if c.post_norms {
                (
                    self.vector(&n("pre_feedforward_layernorm.weight"), h)?,
                    Some(self.vector(&n("post_attention_layernorm.weight"), h)?),
                    Some(self.vector(&n("post_feedforward_layernorm.weight"), h)?),
                )
            } else {
                (self.vector(&n("post_attention_layernorm.weight"), h)?, None, None)
            };
            let parts = LayerParts {
                attn_norm: self.vector(&n("input_layernorm.weight"), h)?,
                ffn_norm,
                qkv,
                qkv_bias,
                q_norm: qk("self_attn.q_norm.weight")?,
                k_norm: qk("self_attn.k_norm.weight")?,
                o: self.matrix(&n("self_attn.o_proj.weight"), h, qd, q)?,
                gate_up,
                down: self.matrix(&n("mlp.down_proj.weight"), h, f, q)?,
                post_attn_norm,
                post_ffn_norm,
            };
            layers.push(parts.upload(gpu, c, &format!("layer {i}"))?);
            gpu.check()?;
        }
        let out_norm = self.vector("model.norm.weight", h)?;
        let lm_head = if self.has("lm_head.weight") && !c.tied_embeddings {
            Some(GpuMatrix::upload(gpu, "lm_head", &self.matrix("lm_head.weight", c.vocab, h, q)?)?)
        } else {
            None
        };
        ModelWeights::new(gpu, c, embed, layers, &out_norm, lm_head)
    }
}

/// Read a model folder's files from disk.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_dir_files(dir: &std::path::Path) -> Result<HfFiles> {
    let read = |name: &str| -> Result<Option<String>> {
        let p = dir.join(name);
        match std::fs::read_to_string(&p) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(p.display().to_string(), e)),
        }
    };
    let config = read("config.json")?
        .ok_or_else(|| Error::Model(format!("{}: no config.json (not a Hugging Face model folder)", dir.display())))?;
    Ok(HfFiles {
        config,
        generation_config: read("generation_config.json")?,
        tokenizer: read("tokenizer.json")?,
        tokenizer_config: read("tokenizer_config.json")?,
        index: read("model.safetensors.index.json")?.map(String::into_bytes),
    })
}

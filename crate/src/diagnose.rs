//! A GPU self-check for bug reports (`ferrolm diagnose`, `engine.diagnose()`): a small random
//! Llama-shaped model in Q8_0 runs through the prefill and decode programs with the kernel
//! variants this adapter selected (subgroups, integer dot products, fused attention, matrix
//! units) against a CPU reference of the same weights; with a reference (token ids and expected
//! top logits) the loaded model's own first logits are checked too. The report names the
//! adapter, its limits, the variants and each check's error.

use crate::engine::{Engine, LoadOptions};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::config::ModelConfig;
use crate::model::streamed::StreamedMatrix;
use crate::model::weights::{LayerParts, ModelWeights};
use crate::runtime::Runtime;
use crate::sampler::Rng;
use crate::weights::pack::{self, Layout};
use crate::weights::quant::{self, GgmlType};
use serde::Deserialize;
use serde_json::{json, Value};

/// The synthetic model: hidden 128, 4 heads / 2 KV heads of 32, FFN 256, 2 layers, vocab 384.
const H: usize = 128;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HD: usize = 32;
const FFN: usize = 256;
const VOCAB: usize = 384;
const LAYERS: usize = 2;
const PROMPT: usize = 12;
const EPS: f32 = 1e-5;
const THETA: f64 = 10000.0;

/// One check's outcome.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// Largest error relative to the largest reference value.
    #[serde(rename = "maxError")]
    pub max_error: f64,
    pub tolerance: f64,
    pub detail: String,
}

/// A known answer for the loaded model: its top logits after `tokens` (run from position 0).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    pub tokens: Vec<u32>,
    /// (token id, logit) pairs, e.g. the reference's ten largest.
    pub top: Vec<(u32, f32)>,
    /// Largest error allowed relative to the largest |logit| (default 0.02).
    pub tolerance: Option<f64>,
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    ffn_norm: Vec<f32>,
    wg: Vec<f32>,
    wu: Vec<f32>,
    wd: Vec<f32>,
}

/// A matrix of random Q8_0 blocks (the file bytes) and its values.
fn q8(rng: &mut Rng, rows: usize, cols: usize, scale: f32) -> (Vec<u8>, Vec<f32>) {
    let mut raw = Vec::with_capacity(rows * cols / 32 * 34);
    for _ in 0..rows * cols / 32 {
        let d = half::f16::from_f32(scale * (0.5 + rng.next_f64() as f32));
        raw.extend(d.to_le_bytes());
        raw.extend((0..32).map(|_| ((rng.next_f64() * 255.0) as i32 - 127) as i8 as u8));
    }
    let mut dense = vec![0f32; rows * cols];
    quant::dequantize(GgmlType::Q8_0, &raw, &mut dense).expect("whole blocks");
    (raw, dense)
}

fn norm_weights(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| 0.9 + 0.2 * rng.next_f64() as f32).collect()
}

fn config() -> ModelConfig {
    ModelConfig {
        arch: "llama".into(),
        n_layers: LAYERS,
        hidden: H,
        n_heads: HEADS,
        n_kv_heads: KV_HEADS,
        head_dim: HD,
        ffn: FFN,
        vocab: VOCAB,
        context_train: 64,
        rms_eps: EPS,
        rope_theta: THETA,
        rope_dim: HD,
        rope_neox: false,
        rope_freq_factors: None,
        rope_linear_scale: 1.0,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        tied_embeddings: true,
        rope_inv: None,
        rope_local_inv: None,
        rope_attn_factor: 1.0,
        rope_dynamic: None,
        norm_offset: 0.0,
        embed_scale: 1.0,
        residual_scale: 1.0,
        logit_scale: 1.0,
        gelu: false,
        relu2: false,
        sub_norms: false,
        attn_scale: 1.0 / (HD as f64).sqrt(),
        attn_softcap: 0.0,
        final_softcap: 0.0,
        qk_norm: crate::model::family::QkNorm::None,
        norms: crate::model::family::PRE_NORMS,
        gated: true,
        q_temperature: None,
        sliding_window: 0,
        layer_sliding: vec![false; LAYERS],
        layer_nope: vec![false; LAYERS],
        causal: true,
        linear: None,
        layer_linear: vec![false; LAYERS],
        attn_gate: false,
    }
}

fn rms(x: &[f32], w: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + EPS as f64).sqrt();
    x.iter().zip(w).map(|(v, w)| (*v as f64 * inv) as f32 * w).collect()
}

fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    let k = x.len();
    w.chunks_exact(k).map(|r| r.iter().zip(x).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() as f32).collect()
}

/// Rotate pairs (2i, 2i + 1) of each head by position `p` (the layout the loader makes).
fn rope(v: &mut [f32], p: usize) {
    for head in v.chunks_exact_mut(HD) {
        for i in 0..HD / 2 {
            let a = p as f64 * THETA.powf(-(2.0 * i as f64) / HD as f64);
            let (c, s) = (a.cos(), a.sin());
            let (x, y) = (head[2 * i] as f64, head[2 * i + 1] as f64);
            head[2 * i] = (x * c - y * s) as f32;
            head[2 * i + 1] = (y * c + x * s) as f32;
        }
    }
}

/// The CPU reference: logits after each of `tokens`.
fn reference(embed: &[f32], layers: &[Layer], out_norm: &[f32], tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut keys: Vec<Vec<Vec<f32>>> = vec![Vec::new(); LAYERS];
    let mut values: Vec<Vec<Vec<f32>>> = vec![Vec::new(); LAYERS];
    let mut out = Vec::new();
    for (p, &t) in tokens.iter().enumerate() {
        let mut x = embed[t as usize * H..(t as usize + 1) * H].to_vec();
        for (l, w) in layers.iter().enumerate() {
            let xn = rms(&x, &w.attn_norm);
            let (mut q, mut k, v) = (matvec(&w.wq, &xn), matvec(&w.wk, &xn), matvec(&w.wv, &xn));
            rope(&mut q, p);
            rope(&mut k, p);
            keys[l].push(k);
            values[l].push(v);
            let mut attn = vec![0f32; HEADS * HD];
            for h in 0..HEADS {
                let kvh = h / (HEADS / KV_HEADS);
                let qh = &q[h * HD..(h + 1) * HD];
                let scores: Vec<f64> = keys[l]
                    .iter()
                    .map(|k| {
                        let kh = &k[kvh * HD..(kvh + 1) * HD];
                        qh.iter().zip(kh).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() / (HD as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, v) in values[l].iter().enumerate() {
                    for d in 0..HD {
                        attn[h * HD + d] += (e[j] / z * v[kvh * HD + d] as f64) as f32;
                    }
                }
            }
            x.iter_mut().zip(matvec(&w.wo, &attn)).for_each(|(a, b)| *a += b);
            let xn = rms(&x, &w.ffn_norm);
            let (g, u) = (matvec(&w.wg, &xn), matvec(&w.wu, &xn));
            let hmid: Vec<f32> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            x.iter_mut().zip(matvec(&w.wd, &hmid)).for_each(|(a, b)| *a += b);
        }
        out.push(matvec(embed, &rms(&x, out_norm)));
    }
    out
}

/// Largest |got - want| over the largest |want|.
fn rel_error(got: &[f32], want: &[f32]) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(1e-9);
    got.iter().zip(want).map(|(g, w)| (*g as f64 - *w as f64).abs()).fold(0f64, f64::max) / scale
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |b, (i, x)| if *x > v[b] { i } else { b })
}

/// The synthetic-model checks on `gpu`'s device with its kernel variants.
pub async fn kernel_checks(gpu: &Gpu) -> Result<Vec<Check>> {
    let gpu = gpu.sibling();
    let mut rng = Rng::new(20261126);
    let cfg = config();
    let (embed_raw, embed) = q8(&mut rng, VOCAB, H, 0.004);
    let mut layers = Vec::new();
    let mut parts = Vec::new();
    for _ in 0..LAYERS {
        let s = 0.0008;
        let (wq, wk, wv, wo) = (
            q8(&mut rng, H, H, s),
            q8(&mut rng, KV_HEADS * HD, H, s),
            q8(&mut rng, KV_HEADS * HD, H, s),
            q8(&mut rng, H, H, s),
        );
        let (wg, wu, wd) = (q8(&mut rng, FFN, H, s), q8(&mut rng, FFN, H, s), q8(&mut rng, H, FFN, s));
        let (attn_norm, ffn_norm) = (norm_weights(&mut rng, H), norm_weights(&mut rng, H));
        let p = |raw: &[u8], rows: usize, cols: usize| pack::pack(GgmlType::Q8_0, rows, cols, raw);
        parts.push(LayerParts {
            attn_norm: Some(attn_norm.clone()),
            ffn_norm: Some(ffn_norm.clone()),
            qkv: vec![p(&wq.0, H, H)?, p(&wk.0, KV_HEADS * HD, H)?, p(&wv.0, KV_HEADS * HD, H)?],
            qkv_bias: None,
            q_norm: None,
            k_norm: None,
            o: p(&wo.0, H, H)?,
            gate_up: vec![p(&wg.0, FFN, H)?, p(&wu.0, FFN, H)?],
            down: p(&wd.0, H, FFN)?,
            post_attn_norm: None,
            post_ffn_norm: None,
            o_bias: None,
            gate_up_bias: None,
            down_bias: None,
            linear: None,
            sub_norms: None,
        });
        layers.push(Layer {
            attn_norm,
            wq: wq.1,
            wk: wk.1,
            wv: wv.1,
            wo: wo.1,
            ffn_norm,
            wg: wg.1,
            wu: wu.1,
            wd: wd.1,
        });
    }
    let out_norm = norm_weights(&mut rng, H);
    let embed_gpu = StreamedMatrix::alloc(&gpu, "diagnose embed", Layout::Q8 { block: 32 }, true, (VOCAB, H))?;
    let packed = pack::pack(GgmlType::Q8_0, VOCAB, H, &embed_raw)?;
    // One range: VOCAB x H is far below any binding limit.
    embed_gpu.parts[0].write_rows(&gpu, "diagnose embed", 0, &packed)?;
    let uploaded = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| p.upload(&gpu, &cfg, &format!("diagnose layer {i}")))
        .collect::<Result<Vec<_>>>()?;
    let weights = ModelWeights::new(&gpu, &cfg, embed_gpu, uploaded, &out_norm, None)?;
    let opts = LoadOptions { context_length: Some(64), max_batch: 64, ..Default::default() };
    let mut rt = Runtime::new(gpu, cfg, weights, &opts, &mut |_, _, _| {})?;
    let tokens: Vec<u32> = (0..PROMPT).map(|_| (rng.next_f64() * VOCAB as f64) as u32 % VOCAB as u32).collect();
    let want = reference(&embed, &layers, &out_norm, &tokens);

    let s = rt.gpu.summary.clone();
    // Integer activations (decode; prefill with i8_prefill, which needs them) and f16 matrix
    // units round more than f32 does.
    let loose = s.integer_dot || s.matrix_units;
    let tol = if loose { 5e-3 } else { 2e-3 };
    let mut checks = Vec::new();
    rt.pos = 0;
    let prefill = rt.forward(&tokens).await?;
    let e = rel_error(&prefill, want.last().expect("tokens"));
    checks.push(Check {
        name: "prefill".into(),
        passed: e <= tol,
        max_error: e,
        tolerance: tol,
        detail: format!(
            "{PROMPT} tokens in one step: matmul{}, rmsnorm, rope_kv, attention, ffn_act, lm head",
            if s.matrix_units {
                " on matrix units"
            } else if s.i8_prefill {
                " with 8-bit activations"
            } else {
                ""
            }
        ),
    });
    rt.pos = 0;
    let (mut worst, mut same_argmax) = (0f64, 0);
    for (p, &t) in tokens.iter().enumerate() {
        let got = rt.forward(&[t]).await?;
        worst = worst.max(rel_error(&got, &want[p]));
        same_argmax += (argmax(&got) == argmax(&want[p])) as usize;
    }
    checks.push(Check {
        name: "decode".into(),
        passed: worst <= tol,
        max_error: worst,
        tolerance: tol,
        detail: format!(
            "{PROMPT} single-token steps: matvec{}, qkv_rope, attn_decode{}; top token agrees at {same_argmax} of {PROMPT}",
            if s.integer_dot { " with 8-bit activations" } else { "" },
            if s.fused_attention { " merging its own splits" } else { " + merge" }
        ),
    });
    rt.gpu.check()?;
    Ok(checks)
}

/// The loaded model's logits after `r.tokens` against `r.top`.
async fn model_check(engine: &mut Engine, r: &Reference) -> Result<Check> {
    if r.tokens.is_empty() || r.top.is_empty() {
        return Err(Error::InvalidOption("diagnose: the reference needs tokens and top logits".into()));
    }
    if let Some(t) = r.tolerance.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(Error::InvalidOption(format!(
            "diagnose: the reference's tolerance must be a number >= 0, got {t}"
        )));
    }
    if let Some((id, v)) = r.top.iter().find(|(_, v)| !v.is_finite()) {
        return Err(Error::InvalidOption(format!(
            "diagnose: the reference's logit of token {id} is {v}, not a number"
        )));
    }
    engine.kv_tokens.clear();
    engine.rt.pos = 0;
    let logits = engine.rt.forward(&r.tokens).await?;
    let scale = r.top.iter().fold(0f64, |m, (_, v)| m.max(v.abs() as f64)).max(1e-9);
    let mut worst = 0f64;
    for &(id, v) in &r.top {
        let got = *logits
            .get(id as usize)
            .ok_or_else(|| Error::InvalidOption(format!("diagnose: reference token {id} is outside the vocabulary")))?;
        worst = worst.max((got as f64 - v as f64).abs() / scale);
    }
    let want_top = r.top.iter().fold(r.top[0], |b, p| if p.1 > b.1 { *p } else { b }).0;
    let got_top = argmax(&logits) as u32;
    let tol = r.tolerance.unwrap_or(0.02);
    Ok(Check {
        name: "model".into(),
        passed: worst <= tol && got_top == want_top,
        max_error: worst,
        tolerance: tol,
        detail: format!(
            "{} reference logits after {} tokens; top token {got_top} (reference {want_top})",
            r.top.len(),
            r.tokens.len()
        ),
    })
}

/// The report: adapter, limits, variants chosen, checks, and whether all passed.
pub fn report(gpu: &Gpu, checks: &[Check]) -> Value {
    let s = &gpu.summary;
    let l = &gpu.limits;
    json!({
        "adapter": {"name": s.name, "backend": s.backend, "deviceType": s.device_type, "driver": s.driver},
        "limits": {
            "maxBufferSize": l.max_buffer_size,
            "maxStorageBufferBindingSize": l.max_storage_buffer_binding_size,
            "maxComputeWorkgroupStorageSize": l.max_compute_workgroup_storage_size,
            "maxComputeInvocationsPerWorkgroup": l.max_compute_invocations_per_workgroup,
        },
        "variants": {
            "subgroups": s.subgroups,
            "integerDot": s.integer_dot,
            "fusedAttention": s.fused_attention,
            "matrixUnits": s.matrix_units,
            "i8Prefill": s.i8_prefill,
            "shaderF16": s.shader_f16,
            "timestamps": s.timestamps,
        },
        "checks": checks,
        "passed": checks.iter().all(|c| c.passed),
    })
}

/// The self-check on a fresh device (no model): `ferrolm diagnose` without `--model`.
pub async fn run_without_model() -> Result<Value> {
    let gpu = Gpu::new().await?;
    let checks = kernel_checks(&gpu).await?;
    Ok(report(&gpu, &checks))
}

impl Engine {
    /// The self-check on this engine's device, and with `reference` the model's known answer.
    /// Leaves the cache empty (the next generation runs its prompt in full).
    pub async fn diagnose(&mut self, reference: Option<&Reference>) -> Result<Value> {
        let mut checks = kernel_checks(&self.rt.gpu).await?;
        if let Some(r) = reference {
            checks.push(model_check(self, r).await?);
        }
        let mut out = report(&self.rt.gpu, &checks);
        out["model"] = json!({"source": self.source_name, "arch": self.rt.cfg.arch});
        Ok(out)
    }
}

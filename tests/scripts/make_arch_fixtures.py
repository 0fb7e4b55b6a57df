#!/usr/bin/env python3
"""Tiny random-weight Hugging Face models of each architecture family, with fp32 reference logits.

For every family (llama with llama3 rope scaling, qwen2, qwen3, phi3 with longrope and partial
rotary, gemma2, gemma3 text-only, mistral with a sliding window) this builds a model from a config
object with a fixed seed (no hub access), re-initialises the weights with a larger spread so logits
are not flat, and writes a Hugging Face folder:

    tests/fixtures/arch/<family>/            F32 weights (model.safetensors), config.json,
                                             generation_config.json, reference.json, logits.f32
    tests/fixtures/arch/<family>-f16/        same weights cast to F16 (llama, qwen3)
    tests/fixtures/arch/<family>-bf16/       same weights cast to BF16 (llama, qwen3, gemma3)

The F16/BF16 folders hold weights only (no reference of their own): the reference is the F32
model's; a reader must widen them exactly (F16/BF16 -> F32 is exact) and will then compute on the
rounded weights, so compare those with a looser tolerance.

reference.json: {"prompt": [ids], "greedy": [8 ids], "greedy_margins": [top1 - top2 per step],
"argmax": [argmax per prompt position], "logits_file": "logits.f32", "logits_shape": [n_pos, vocab],
"sliding_window", "layer_types", "versions"}. logits.f32 is raw little-endian float32, row-major
[prompt position][vocab], the model's fp32 logits at EVERY prompt position (no KV cache, one forward
over the whole prompt). Greedy tokens are produced by re-running the full sequence each step.

rope.json: inverse rotary frequencies for the tiny configs and for real-shaped configs
(Llama-3.2-1B: llama3 scaling; Phi-3-mini-128k: longrope, written in the transformers 4.x layout),
each with `inv_freq_f64` (a float64 port of transformers' ROPE_INIT_FUNCTIONS, the value a Rust
reader should match to ~1e-12) and `inv_freq_transformers` (transformers' own float32 result; the
script asserts the two agree to float32 precision), plus `attention_factor`.

GGUF: the `gguf` pip package (gguf-py) has only the reader/writer and small metadata scripts; the
HF -> GGUF converter (`convert_hf_to_gguf.py`) lives in the llama.cpp repository and is not
installed here, so no GGUF variants are made.

Usage: python3 tests/scripts/make_arch_fixtures.py [--out tests/fixtures/arch]
Versions used for the committed fixtures are recorded in versions.json.
"""

import argparse
import copy
import json
import math
import os
import platform
import shutil

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, ArceeConfig, Ernie4_5Config, Exaone4Config, Glm4Config,
                          HunYuanDenseV1Config, Ministral3Config, Olmo2Config, SeedOssConfig, Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig,
                          GraniteConfig, InternLM3Config, MinistralConfig, Phi3Config, Qwen2Config, Qwen3Config,
                          SmolLM3Config)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

SEED = 1234
N_PROMPT = 20
N_GREEDY = 8
VOCAB = 256
COMMON = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, rms_norm_eps=1e-6,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)

FAMILIES = {
    "llama": (LlamaConfig, dict(rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                    low_freq_factor=1.0, high_freq_factor=4.0,
                                                    original_max_position_embeddings=16))),
    "qwen2": (Qwen2Config, dict(tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1e6),
                                eos_token_id=[2, 3])),
    "qwen3": (Qwen3Config, dict(head_dim=32, tie_word_embeddings=True,
                                rope_parameters=dict(rope_type="default", rope_theta=1e6))),
    # original_max 32 > prompt + greedy (28): the short factors apply throughout; factor 64/32 = 2
    # gives attention_factor sqrt(1 + ln 2 / ln 32).
    "phi3": (Phi3Config, dict(head_dim=16, partial_rotary_factor=0.5, original_max_position_embeddings=32,
                              rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                   short_factor=[1.0, 1.1, 1.3, 1.7],
                                                   long_factor=[1.0, 2.0, 4.0, 8.0]))),
    # Gemma is untied here: with tied embeddings a random model's greedy output repeats its input
    # token (logit |e_t|^2 wins), which would make the greedy check blind to attention.
    "gemma2": (Gemma2Config, dict(head_dim=16, tie_word_embeddings=False, sliding_window=8, query_pre_attn_scalar=16,
                                  attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                  hidden_activation="gelu_pytorch_tanh")),
    "gemma3": (Gemma3TextConfig, dict(head_dim=16, tie_word_embeddings=False, sliding_window=8, query_pre_attn_scalar=16,
                                      layer_types=["sliding_attention", "full_attention"],
                                      rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                                       "full_attention": dict(rope_type="linear", factor=2.0,
                                                                              rope_theta=1e6)})),
    "mistral": (MistralConfig, dict(head_dim=16, sliding_window=8, rope_parameters=dict(rope_type="default",
                                                                                        rope_theta=1e6))),
    # Four layers, so the fourth is a NoPE layer (no_rope_layer_interval 4). Untied, as Gemma above.
    "smollm3": (SmolLM3Config, dict(num_hidden_layers=4, head_dim=16, tie_word_embeddings=False,
                                    rope_parameters=dict(rope_type="default", rope_theta=5e6))),
    # A window on the first layer only (Ministral's layer_types; Mistral slides everywhere).
    "ministral": (MinistralConfig, dict(head_dim=16, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                                        rope_parameters=dict(rope_type="default", rope_theta=1e6))),
    # InternLM3 (built as a Llama) with its biases on: q/k/v/o and gate/up/down alike.
    "internlm3": (InternLM3Config, dict(head_dim=16, attention_bias=True, mlp_bias=True,
                                        rope_parameters=dict(rope_type="default", rope_theta=5e6))),
    # Granite's four scalars, each away from 1 (Granite 3.x: 12, 0.22, 1/128 and 8), with biases.
    "granite": (GraniteConfig, dict(embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.15,
                                    logits_scaling=2.5, attention_bias=True, tie_word_embeddings=False,
                                    rope_parameters=dict(rope_type="default", rope_theta=1e4))),
    # Output norms and whole-projection q/k norms, with OLMo 2's optional biases on.
    "olmo2": (Olmo2Config, dict(attention_bias=True, tie_word_embeddings=False,
                                rope_parameters=dict(rope_type="default", rope_theta=5e5))),
    # Three sliding layers with rope, then a full one without (sliding_window_pattern 4).
    "exaone4": (Exaone4Config, dict(num_hidden_layers=4, head_dim=16, sliding_window=8, sliding_window_pattern=4,
                                    rope_parameters=dict(rope_type="default", rope_theta=1e6))),
    # Half of each head rotated in interleaved pairs, four norms a layer, q/k/v biases.
    "glm4": (Glm4Config, dict(head_dim=16, attention_bias=True, partial_rotary_factor=0.5,
                              rope_parameters=dict(rope_type="default", rope_theta=1e4, partial_rotary_factor=0.5))),
    # Interleaved pairs over the whole head, every bias on (use_bias), tied embeddings.
    "ernie4_5": (Ernie4_5Config, dict(head_dim=16, use_bias=True, tie_word_embeddings=True,
                                      rope_parameters=dict(rope_type="default", rope_theta=5e5))),
    # q/k/v, output and MLP biases under their three keys.
    "seed_oss": (SeedOssConfig, dict(head_dim=16, attention_bias=True, attention_out_bias=True, mlp_bias=True,
                                     rope_parameters=dict(rope_type="default", rope_theta=1e7))),
    # q/k norms after rope; NTK-alpha rope (HunYuan's "dynamic" with alpha).
    "hunyuan_v1_dense": (HunYuanDenseV1Config, dict(head_dim=16, tie_word_embeddings=False,
                                                    rope_parameters=dict(rope_type="dynamic", rope_theta=1e4,
                                                                         alpha=1000.0, factor=1.0))),
    # Yarn and Llama 4's query temperature past an original context of 8 (of the 20-token prompt).
    "ministral3": (Ministral3Config, dict(head_dim=16, rope_parameters=dict(
        rope_type="yarn", rope_theta=1e6, factor=4.0, original_max_position_embeddings=8, beta_fast=32.0, beta_slow=1.0,
        mscale=1.0, mscale_all_dim=1.0, llama_4_scaling_beta=0.5))),
    # relu(up)^2 without a gate, MLP biases on.
    "arcee": (ArceeConfig, dict(head_dim=16, mlp_bias=True, rope_parameters=dict(rope_type="default", rope_theta=1e4))),
    # The same with use_sliding_window (off in the released configs): the NoPE layer slides.
    "smollm3-swa": (SmolLM3Config, dict(num_hidden_layers=4, head_dim=16, tie_word_embeddings=False,
                                        use_sliding_window=True, sliding_window=8,
                                        rope_parameters=dict(rope_type="default", rope_theta=5e6))),
}
LOW_PRECISION = {"llama": ["f16", "bf16"], "qwen3": ["f16", "bf16"], "gemma3": ["bf16"]}

# Real-shaped configs for the rope check, written by hand in the transformers 4.x layout.
LLAMA_32_1B = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=2048, intermediate_size=8192,
                   num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                   max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                   bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16",
                   rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=8192))
# Factor lists as published for the Phi-3 128k models (Phi-3-vision-128k-instruct's config.json,
# which shares Phi-3-mini-128k's shape: head_dim 96, 48 factors).
PHI3_LONG = [1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547, 1.2299998998641968,
             1.2299998998641968, 1.2999999523162842, 1.4499999284744263, 1.5999999046325684, 1.6499998569488525,
             1.8999998569488525, 2.859999895095825, 3.68999981880188, 5.419999599456787, 5.489999771118164,
             5.489999771118164, 9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
             15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055, 30.009998321533203,
             32.35000228881836, 32.590003967285156, 35.56000518798828, 39.95000457763672, 53.840003967285156,
             56.20000457763672, 57.95000457763672, 59.29000473022461, 59.77000427246094, 59.920005798339844,
             61.190006256103516, 61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
             63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922, 64.760009765625,
             64.80001068115234, 64.81001281738281, 64.81001281738281]
PHI3_SHORT = [1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002, 1.4000000000000004,
              1.4500000000000004, 1.5500000000000005, 1.8500000000000008, 1.9000000000000008] + [2.000000000000001] * 19 + \
             [2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996, 2.3499999999999996, 2.3499999999999996,
              2.3499999999999996, 2.3999999999999995, 2.3999999999999995, 2.6499999999999986, 2.6999999999999984,
              2.8999999999999977, 2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997]
PHI3_MINI_128K = dict(model_type="phi3", architectures=["Phi3ForCausalLM"], hidden_size=3072, intermediate_size=8192,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
                      max_position_embeddings=131072, original_max_position_embeddings=4096, rms_norm_eps=1e-5,
                      rope_theta=10000.0, sliding_window=262144, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=32000, torch_dtype="bfloat16",
                      rope_scaling=dict(type="longrope", short_factor=PHI3_SHORT, long_factor=PHI3_LONG))
CONFIG_CLASSES = {"llama": LlamaConfig, "phi3": Phi3Config}


def init_weights(model, family, seed=SEED):
    """Wider weights than the default init (std 0.02 gives near-flat logits in a tiny model).
    A multimodal wrapper's vision tower keeps its own init (the engine never reads it)."""
    g = torch.Generator().manual_seed(seed)
    gemma = family.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name or "multi_modal" in name:
                continue
            if "norm" in name:
                # Gemma's RMSNorm multiplies by (1 + w), the others by w: both end up near 1 +- 0.1.
                base = 0.0 if gemma else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name or "lm_head" in name:
                # Gemma multiplies embeddings by sqrt(hidden) = 8; at 0.3 they would swamp the
                # layers' (post-normed) outputs and the logits would ignore attention.
                p.copy_((0.12 if gemma and "embed" in name else 0.3) * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def rope_port(cfg, layer_type, seq_len):
    """float64 port of transformers' rope init (default, linear, dynamic, llama3, longrope)."""
    rp = cfg.rope_parameters[layer_type] if layer_type else cfg.rope_parameters
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    base = rp["rope_theta"]
    t = rp["rope_type"]
    exps = np.arange(0, dim, 2, dtype=np.float64) / dim
    attention = 1.0
    if t == "dynamic":
        s = max(seq_len or cfg.max_position_embeddings, cfg.max_position_embeddings)
        f = rp["factor"]
        base = base * ((f * s / cfg.max_position_embeddings) - (f - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** exps)
    if t == "linear":
        inv = inv / rp["factor"]
    elif t == "llama3":
        f, lo, hi, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        scaled = np.where(wl > old / lo, inv / f, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / f + smooth * scaled
        medium = ~(wl < old / hi) & ~(wl > old / lo)
        inv = np.where(medium, smoothed, scaled)
    elif t == "yarn":
        f, orig = rp["factor"], rp["original_max_position_embeddings"]
        beta_fast, beta_slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1
        corr = lambda rot: dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
        low, high = corr(beta_fast), corr(beta_slow)
        if rp.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        keep = 1 - np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        inv = inv / f * (1 - keep) + inv * keep
        mscale = lambda s, m=1.0: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0  # noqa: E731
        attention = rp.get("attention_factor") or (
            mscale(f, rp["mscale"]) / mscale(f, rp["mscale_all_dim"]) if rp.get("mscale") and rp.get("mscale_all_dim")
            else mscale(f))
    elif t == "longrope":
        orig = rp["original_max_position_embeddings"]
        ext = np.array(rp["long_factor"] if seq_len and seq_len > orig else rp["short_factor"], dtype=np.float64)
        inv = 1.0 / (ext * base ** exps)
        f = rp.get("factor") or cfg.max_position_embeddings / orig
        attention = rp.get("attention_factor") or (1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig)))
    return inv, attention


def rope_transformers(cfg, layer_type, seq_len):
    rp = cfg.rope_parameters[layer_type] if layer_type else cfg.rope_parameters
    t = rp["rope_type"]
    if t == "default":
        # Each model's RotaryEmbedding has its own default; they agree (base ** (arange / dim)).
        model_cls = transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)]
        module = __import__(model_cls.__module__, fromlist=["x"])
        rot = next(getattr(module, n) for n in dir(module) if n.endswith("RotaryEmbedding"))
        kw = {"layer_type": layer_type} if layer_type else {}
        inv, att = rot.compute_default_rope_parameters(cfg, device=None, seq_len=seq_len, **kw)
    else:
        inv, att = ROPE_INIT_FUNCTIONS[t](cfg, None, seq_len, layer_type=layer_type)
    return inv.double().numpy(), float(att)


def rope_cases(cfg, name, config_json, seq_lens=(None,)):
    out = []
    if (cfg.rope_parameters or {}).get("alpha"):
        # HunYuan's own NTK-alpha init, which ROPE_INIT_FUNCTIONS does not have: checked through
        # the model's logits only.
        return out
    kinds = ["full_attention", "sliding_attention"] if "full_attention" in (cfg.rope_parameters or {}) else [None]
    for lt in kinds:
        for s in seq_lens:
            port, att = rope_port(cfg, lt, s)
            tf, tf_att = rope_transformers(cfg, lt, s)
            rel = np.max(np.abs(port - tf) / np.abs(port))
            assert rel < 2e-6, (name, lt, s, rel)
            assert abs(att - tf_att) < 1e-6, (name, att, tf_att)
            out.append(dict(name=name, config=config_json, layer_type=lt or "full_attention", seq_len=s,
                            inv_freq_f64=port.tolist(), inv_freq_transformers=tf.tolist(), attention_factor=att,
                            max_rel_diff_f64_vs_transformers=float(rel)))
    return out


def run_family(family, out_dir):
    cls, extra = FAMILIES[family]
    cfg = cls(**{**COMMON, **extra}, attn_implementation="eager")
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    init_weights(model, family)
    if getattr(cfg, "tie_word_embeddings", False):
        model.tie_weights()
    rng = np.random.default_rng(SEED)
    prompt = [int(x) for x in rng.integers(3, VOCAB, N_PROMPT)]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy()
        seq, margins = list(prompt), []
        for _ in range(N_GREEDY):
            last = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(last, 2)
            seq.append(int(top.indices[0]))
            margins.append(round(float(top.values[0] - top.values[1]), 6))
        # How much the window matters: the same weights with a window longer than the prompt.
        sliding_effect = None
        if getattr(cfg, "sliding_window", None):
            wide = cls(**{**COMMON, **extra, "sliding_window": 4096}, attn_implementation="eager")
            m2 = AutoModelForCausalLM.from_config(wide, dtype=torch.float32).eval()
            m2.load_state_dict(model.state_dict())
            sliding_effect = float(np.abs(m2(torch.tensor([prompt])).logits[0].numpy() - logits).max())
    d = os.path.join(out_dir, family)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    logits.astype("<f4").tofile(os.path.join(d, "logits.f32"))
    ref = dict(family=family, prompt=prompt, greedy=seq[N_PROMPT:], greedy_margins=margins,
               argmax=[int(i) for i in logits.argmax(-1)], logits_file="logits.f32", logits_shape=list(logits.shape),
               sliding_window=getattr(cfg, "sliding_window", None), layer_types=getattr(cfg, "layer_types", None),
               logits_std=float(logits.std()), sliding_effect_max_abs_logit_diff=sliding_effect)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    for p in LOW_PRECISION.get(family, []):
        dt = {"f16": torch.float16, "bf16": torch.bfloat16}[p]
        dl = f"{d}-{p}"
        shutil.rmtree(dl, ignore_errors=True)
        # A copy: casting `model` itself and back would leave it rounded for the next dtype.
        copy.deepcopy(model).to(dt).save_pretrained(dl, safe_serialization=True)
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    print(f"{family}: logits std {logits.std():.3f}, greedy {seq[N_PROMPT:]}, sliding effect {sliding_effect}")
    return rope_cases(cfg, family, saved)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/arch")
    ap.add_argument("--rope-only", action="store_true",
                    help="rewrite rope.json only, from the configs already in --out (no models)")
    ap.add_argument("--only", help="comma-separated families: write only their folders (rope.json and "
                                   "versions.json stay as they are)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    if args.only:
        for fam in args.only.split(","):
            run_family(fam, args.out)
        return
    rope = []
    for fam in FAMILIES:
        if args.rope_only:
            cls, extra = FAMILIES[fam]
            with open(os.path.join(args.out, fam, "config.json")) as f:
                rope += rope_cases(cls(**{**COMMON, **extra}), fam, json.load(f))
        else:
            rope += run_family(fam, args.out)
    for name, raw in [("llama-3.2-1b", LLAMA_32_1B), ("phi-3-mini-128k", PHI3_MINI_128K)]:
        cfg = CONFIG_CLASSES[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
        rope += rope_cases(cfg, name, raw, seq_lens=(None, 200000) if name.startswith("phi") else (None,))
    # Extra rope types not used by a tiny model: linear, dynamic NTK and YaRN on a Llama shape
    # (YaRN as Qwen2.5 / Qwen3 publish it, and with every optional key set).
    for t, extra in [("linear", dict(factor=4.0)), ("dynamic", dict(factor=2.0)),
                     ("yarn", dict(factor=4.0, original_max_position_embeddings=512)),
                     ("yarn", dict(factor=8.0, original_max_position_embeddings=256, beta_fast=16.0, beta_slow=2.0,
                                   mscale=1.0, mscale_all_dim=0.5, truncate=False))]:
        raw = {**LLAMA_32_1B, "rope_scaling": dict(rope_type=t, **extra), "max_position_embeddings": 2048}
        cfg = LlamaConfig(**{k: v for k, v in raw.items() if k != "model_type"})
        name = f"llama-{t}" + ("-mscale" if "mscale" in extra else "")
        rope += rope_cases(cfg, name, raw, seq_lens=(None, 5000) if t == "dynamic" else (None,))
    with open(os.path.join(args.out, "rope.json"), "w") as f:
        json.dump(rope, f)
    if args.rope_only:
        return
    versions = dict(torch=torch.__version__, transformers=transformers.__version__, numpy=np.__version__,
                    python=platform.python_version(), seed=SEED)
    with open(os.path.join(args.out, "versions.json"), "w") as f:
        json.dump(versions, f, indent=1)
    print(versions)


if __name__ == "__main__":
    main()

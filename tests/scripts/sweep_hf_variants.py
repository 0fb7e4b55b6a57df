#!/usr/bin/env python3
"""Sweep of Hugging Face config variations against transformers (fp32, eager attention).

For every variant below this script builds a tiny random-weight model from a config object (fixed
seed per variant, no hub access), writes it with `save_pretrained` (F32, F16 or BF16; optionally
sharded with a small `max_shard_size`, which writes `model.safetensors.index.json`), reloads the
folder with transformers in float32 as the reference, and runs

    ferrolm generate --model DIR --prompt-ids ... --max-tokens 1 --top-logits 10 --json

for each prompt length of the variant (1 and ~40 by default; longrope variants also cross their
original_max_position_embeddings). A case passes when ferrolm's top-10 ids are transformers' top-10
(up to near-ties) and every reported logit is within --tol (default 1%) of transformers' logit for
that id, relative to the largest |logit| of the reference's top 10.

Weights: `--init wide` (default) re-draws them wider than transformers' init (matrices N(0, 0.15),
embeddings N(0, 0.3), norms 1 +- 0.1 or 0 +- 0.1 for Gemma's (1 + w), biases N(0, 0.1)) so logits
are not flat and biases matter; `--init hf` keeps transformers' own init (std 0.02, zero biases,
unit norms), which is what a plain `from_config(...).save_pretrained(...)` gives.

Usage:
    python3 tests/scripts/sweep_hf_variants.py [--bin target/release/ferrolm] [--only REGEX]
        [--init wide|hf] [--keep DIR] [--tol 0.01] [--list]
    python3 tests/scripts/sweep_hf_variants.py --fixtures tests/fixtures/arch-variants [--only REGEX]
        writes the FIXTURES variants as committed test fixtures (see `write_fixture`); then
        python3 tests/scripts/make_arch_gguf.py --src tests/fixtures/arch-variants/phi3-longrope phi3
        adds their GGUF conversion (llama.cpp conventions) of the Phi-3 one.

Needs torch, transformers (5.x), safetensors, numpy; the ferrolm binary built with the cli feature.
Natively on lavapipe: WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, GemmaConfig, Gemma2Config, Gemma3Config, Gemma3ForConditionalGeneration,
                          Gemma3TextConfig, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config, Qwen3Config)

from make_arch_fixtures import init_weights  # the fixtures' initialisation, so variants match them

VOCAB = 256
# Small shapes: hidden 64, 4 heads of 16 (2 KV heads), 2 layers.
BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=VOCAB, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
# Smaller still, for committed fixtures (a few tens of KB per folder in BF16).
SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             vocab_size=256, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)

CLASSES = {"gemma": GemmaConfig, "llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config,
           "phi3": Phi3Config, "gemma2": Gemma2Config, "gemma3_text": Gemma3TextConfig, "gemma3": Gemma3Config}

# Phi-3 style longrope factor lists for rotary dims 16 (8 factors) and 12 (6 factors).
SHORT8 = [1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0]
LONG8 = [1.0, 1.5, 2.5, 4.0, 7.0, 12.0, 20.0, 32.0]
SHORT6 = [1.0, 1.05, 1.1, 1.3, 1.6, 2.0]
LONG6 = [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]


def V(name, family, prompts=(1, 40), dtype="f32", shard=None, base=BASE, legacy=False, gen_prompt=None, refused=None,
      rename=None, **cfg):
    """A variant: config kwargs `cfg` over `base`; `legacy` rewrites the saved config.json into the
    transformers 4.x layout (rope_theta + rope_scaling, torch_dtype; see `to_legacy_layout`);
    `gen_prompt`: prompt length of the --gen check (default: the first of `prompts`); `refused`: a
    known limitation, passing when ferrolm refuses the folder with an error containing this text;
    `rename`: (old, new) tensor-name prefix rewritten in the saved (single-file) weights."""
    return dict(name=name, family=family, prompts=list(prompts), dtype=dtype, shard=shard, base=base, cfg=cfg,
                legacy=legacy, gen_prompt=gen_prompt or prompts[0], refused=refused, rename=rename)


def gemma3_vision():
    from transformers import SiglipVisionConfig
    return SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=32, patch_size=8)


VARIANTS = [
    # --- Llama 3.x
    V("llama-default", "llama"),
    V("llama-tied", "llama", tie_word_embeddings=True),
    V("llama-head_dim32", "llama", head_dim=32),
    V("llama-head_dim8-gqa4", "llama", head_dim=8, num_attention_heads=8, num_key_value_heads=2),
    V("llama-mha", "llama", num_key_value_heads=4),
    V("llama-mqa", "llama", num_key_value_heads=1),
    V("llama-llama3", "llama", rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                    low_freq_factor=1.0, high_freq_factor=4.0,
                                                    original_max_position_embeddings=16)),
    V("llama-llama3-legacy", "llama", rope_theta=500000.0,
      rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                        original_max_position_embeddings=8)),
    V("llama-linear", "llama", rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0)),
    V("llama-dynamic", "llama", max_position_embeddings=16, gen_prompt=10,
      rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)),
    V("llama-attention_bias", "llama", attention_bias=True),
    V("llama-mlp_bias", "llama", mlp_bias=True),
    V("llama-both_bias-tied", "llama", attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    V("llama-f16", "llama", dtype="f16"),
    V("llama-bf16-sharded", "llama", dtype="bf16", shard="60KB"),
    V("llama-f32-sharded-tied", "llama", shard="100KB", tie_word_embeddings=True),
    V("llama-3layers-eps", "llama", num_hidden_layers=3, rms_norm_eps=1e-5),
    V("llama-short-maxpos", "llama", max_position_embeddings=16),
    V("llama-yarn", "llama", rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                  original_max_position_embeddings=32)),
    V("llama-longrope", "llama", prompts=(8, 40), rope_parameters=dict(
        rope_type="longrope", rope_theta=10000.0, short_factor=SHORT8, long_factor=LONG8,
        original_max_position_embeddings=16)),
    V("llama-head_dim128", "llama", head_dim=128, num_attention_heads=2, num_key_value_heads=1),
    V("llama-head_dim256", "llama", head_dim=256, num_attention_heads=2, num_key_value_heads=2),
    V("llama-hidden48-3heads", "llama", hidden_size=48, num_attention_heads=3, num_key_value_heads=1),
    V("llama-vocab1000", "llama", vocab_size=1000, tie_word_embeddings=True),
    V("llama-vocab250", "llama", vocab_size=250),
    # Known limit: the attention kernels read cached keys 8 dimensions at a time.
    V("llama-tiny-hd4", "llama", hidden_size=16, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
      refused="head dimension 4"),
    V("llama-hidden20", "llama", hidden_size=20, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
      refused="hidden size 20"),
    V("llama-ffn100-mlp_bias", "llama", intermediate_size=100, mlp_bias=True),
    V("llama-ffn37-bf16", "llama", intermediate_size=37, dtype="bf16"),
    V("llama-legacy-llama3", "llama", legacy=True, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16)),
    V("llama-hf-defaults-bf16", "llama", dtype="bf16", rms_norm_eps=1e-5, tie_word_embeddings=True,
      rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position_embeddings=8)),
    # --- Qwen2 / 2.5
    V("qwen2-untied", "qwen2"),
    V("qwen2-tied", "qwen2", tie_word_embeddings=True),
    V("qwen2-bf16-tied", "qwen2", dtype="bf16", tie_word_embeddings=True),
    V("qwen2-sliding", "qwen2", num_hidden_layers=3, use_sliding_window=True, sliding_window=8, max_window_layers=1),
    V("qwen2-yarnless-theta", "qwen2", rope_parameters=dict(rope_type="default", rope_theta=1e6)),
    V("qwen2-yarn", "qwen2", rope_parameters=dict(rope_type="yarn", rope_theta=1e6, factor=4.0,
                                                  original_max_position_embeddings=32)),
    V("qwen2-legacy-yarn", "qwen2", legacy=True, tie_word_embeddings=True, rope_parameters=dict(
        rope_type="yarn", rope_theta=1e6, factor=2.0, original_max_position_embeddings=16)),
    # --- Qwen3
    V("qwen3-default", "qwen3", head_dim=16),
    V("qwen3-head_dim32-tied", "qwen3", head_dim=32, tie_word_embeddings=True),
    V("qwen3-head_dim8", "qwen3", head_dim=8, num_attention_heads=8, num_key_value_heads=4),
    V("qwen3-bias", "qwen3", head_dim=16, attention_bias=True),
    V("qwen3-f16-sharded", "qwen3", head_dim=32, dtype="f16", shard="50KB"),
    V("qwen3-sliding", "qwen3", head_dim=16, num_hidden_layers=3, use_sliding_window=True, sliding_window=8,
      max_window_layers=1),
    V("qwen3-llama3rope", "qwen3", head_dim=16, rope_parameters=dict(rope_type="llama3", rope_theta=1e6, factor=4.0,
                                                                     low_freq_factor=1.0, high_freq_factor=4.0,
                                                                     original_max_position_embeddings=32)),
    V("qwen3-yarn-mscale", "qwen3", head_dim=16, rope_parameters=dict(
        rope_type="yarn", rope_theta=1e6, factor=8.0, original_max_position_embeddings=16, beta_fast=16.0,
        beta_slow=2.0, mscale=1.0, mscale_all_dim=0.5)),
    V("qwen3-legacy", "qwen3", head_dim=32, legacy=True, dtype="bf16", tie_word_embeddings=True),
    V("qwen3-head_dim-default", "qwen3"),
    # --- Mistral
    V("mistral-nowindow", "mistral", sliding_window=None),
    V("mistral-window8", "mistral", sliding_window=8),
    V("mistral-window8-head_dim32", "mistral", sliding_window=8, head_dim=32),
    V("mistral-window-default", "mistral"),
    V("mistral-bf16-tied", "mistral", dtype="bf16", sliding_window=12, tie_word_embeddings=True),
    # --- Phi-3 / Phi-3.5 / Phi-4-mini
    V("phi3-default", "phi3"),
    V("phi3-longrope", "phi3", prompts=(1, 12, 16, 17, 40), original_max_position_embeddings=16, gen_prompt=12,
      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=SHORT8, long_factor=LONG8)),
    V("phi3-longrope-legacy-su", "phi3", prompts=(10, 40), legacy=True, original_max_position_embeddings=16,
      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=SHORT8, long_factor=LONG8)),
    V("phi3-partial-default-rope", "phi3", partial_rotary_factor=0.5,
      rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)),
    V("phi3-longrope-attn_factor", "phi3", prompts=(8, 40), original_max_position_embeddings=16,
      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=SHORT8, long_factor=LONG8,
                           attention_factor=1.3)),
    V("phi3-longrope-factor", "phi3", prompts=(8, 40), original_max_position_embeddings=16,
      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=SHORT8, long_factor=LONG8,
                           factor=3.0)),
    V("phi4mini-partial", "phi3", prompts=(1, 12, 40), partial_rotary_factor=0.75, tie_word_embeddings=True, gen_prompt=12,
      original_max_position_embeddings=16, num_key_value_heads=1,
      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                           short_factor=SHORT6, long_factor=LONG6)),
    V("phi3-partial-bf16", "phi3", dtype="bf16", prompts=(40,), partial_rotary_factor=0.5,
      original_max_position_embeddings=16,
      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5,
                           short_factor=[1.0, 1.1, 1.3, 1.7], long_factor=[1.0, 2.0, 4.0, 8.0])),
    V("phi3-window", "phi3", sliding_window=8),
    V("phi3-ffn100", "phi3", intermediate_size=100),
    V("phi3-f16-sharded", "phi3", dtype="f16", shard="60KB"),
    # --- Gemma 2
    V("gemma2-default", "gemma2", head_dim=16, sliding_window=8),
    V("gemma2-qpas", "gemma2", head_dim=16, query_pre_attn_scalar=24, sliding_window=8,
      attn_logit_softcapping=20.0, final_logit_softcapping=5.0),
    V("gemma2-nocap", "gemma2", head_dim=32, sliding_window=8, attn_logit_softcapping=None,
      final_logit_softcapping=None, tie_word_embeddings=False),
    V("gemma2-3layers-bf16", "gemma2", head_dim=16, num_hidden_layers=3, sliding_window=6, dtype="bf16"),
    V("gemma2-bias", "gemma2", head_dim=16, sliding_window=8, attention_bias=True),
    V("gemma2-window-long", "gemma2", head_dim=16, sliding_window=4096, num_hidden_layers=4),
    V("gemma2-ffn90-f16", "gemma2", head_dim=16, sliding_window=8, intermediate_size=90, dtype="f16"),
    # --- Gemma (1): not in the supported list, checked to be refused or right
    V("gemma1", "gemma", head_dim=16),
    # --- Gemma 3 (text)
    V("gemma3-text", "gemma3_text", head_dim=16, sliding_window=8, query_pre_attn_scalar=16),
    V("gemma3-pattern", "gemma3_text", head_dim=16, num_hidden_layers=3, sliding_window=8, sliding_window_pattern=2),
    V("gemma3-layer_types", "gemma3_text", head_dim=16, num_hidden_layers=3, sliding_window=8,
      layer_types=["full_attention", "sliding_attention", "full_attention"]),
    V("gemma3-linear-global", "gemma3_text", head_dim=16, num_hidden_layers=2, sliding_window=8,
      layer_types=["sliding_attention", "full_attention"],
      rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                       "full_attention": dict(rope_type="linear", factor=8.0, rope_theta=1e6)}),
    V("gemma3-legacy-rope", "gemma3_text", head_dim=16, num_hidden_layers=2, sliding_window=8,
      sliding_window_pattern=2, rope_theta=100000.0, rope_local_base_freq=500.0,
      rope_scaling=dict(rope_type="linear", factor=4.0)),
    V("gemma3-softcap-bias", "gemma3_text", head_dim=16, sliding_window=8, final_logit_softcapping=8.0,
      attn_logit_softcapping=10.0, attention_bias=True),
    V("gemma3-bf16-sharded", "gemma3_text", head_dim=32, sliding_window=8, dtype="bf16", shard="50KB"),
    V("gemma3-7layers-pattern6", "gemma3_text", head_dim=16, num_hidden_layers=7, sliding_window=6),
    V("gemma3-defaults-hd256", "gemma3_text", sliding_window=16, num_attention_heads=2, num_key_value_heads=1),
    V("gemma3-legacy", "gemma3_text", head_dim=16, num_hidden_layers=3, sliding_window=8, legacy=True,
      layer_types=["sliding_attention", "sliding_attention", "full_attention"],
      rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=1000.0),
                       "full_attention": dict(rope_type="linear", factor=4.0, rope_theta=1e6)}),
    # --- Gemma 3 multimodal wrapper (text_config nested, model.language_model.* tensors)
    V("gemma3-cg", "gemma3", head_dim=16, sliding_window=8, sliding_window_pattern=2),
    V("gemma3-cg-bf16-sharded", "gemma3", head_dim=16, sliding_window=8, layer_types=["sliding_attention",
                                                                                     "full_attention"],
      rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                       "full_attention": dict(rope_type="linear", factor=8.0, rope_theta=1e6)},
      dtype="bf16", shard="40KB"),
    V("gemma3-cg-softcap", "gemma3", head_dim=16, sliding_window=8, final_logit_softcapping=5.0),
    V("gemma3-cg-untied", "gemma3", head_dim=16, sliding_window=8, tie_word_embeddings=False),
    # The module names of transformers 5 (model.language_model.*) instead of the saved ones.
    V("gemma3-cg-v5-names", "gemma3", head_dim=16, sliding_window=8, tie_word_embeddings=False,
      rename=("language_model.model.", "model.language_model.")),
    V("gemma3-cg-legacy", "gemma3", head_dim=16, sliding_window=8, legacy=True, num_hidden_layers=3,
      layer_types=["sliding_attention", "sliding_attention", "full_attention"],
      rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=1000.0),
                       "full_attention": dict(rope_type="linear", factor=4.0, rope_theta=1e6)}),
]
BY_NAME = {v["name"]: v for v in VARIANTS}


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def make_config(v):
    fam = v["family"]
    kw = {**v["base"], **v["cfg"]}
    if fam == "gemma3":
        text = Gemma3TextConfig(**kw)
        return Gemma3Config(text_config=text, vision_config=gemma3_vision(), mm_tokens_per_image=4,
                            tie_word_embeddings=kw.get("tie_word_embeddings", True), attn_implementation="eager")
    return CLASSES[fam](**kw, attn_implementation="eager")


def build_model(cfg, family):
    if family == "gemma3":
        return Gemma3ForConditionalGeneration(cfg).eval()
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


def prompt_ids(n, vocab, seed):
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(3, vocab, n)]


def save(v, out, init="wide"):
    """Build, initialise and save variant `v` to `out`; returns the reloaded fp32 reference model."""
    seed = seed_of(v["name"])
    torch.manual_seed(seed)
    cfg = make_config(v)
    model = build_model(cfg, v["family"])
    if init == "wide":
        init_weights(model, v["family"], seed)
    # (Re)tie after the re-draw: tied models keep one matrix.
    model.tie_weights()
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[v["dtype"]]
    shutil.rmtree(out, ignore_errors=True)
    kw = {"max_shard_size": v["shard"]} if v["shard"] else {}
    model.to(dt).save_pretrained(out, **kw)
    if v.get("legacy"):
        to_legacy_layout(out, v["family"])
    if v.get("rename"):
        from safetensors.torch import load_file, save_file
        old, new = v["rename"]
        path = os.path.join(out, "model.safetensors")
        t = load_file(path)
        save_file({(new + k[len(old):] if k.startswith(old) else k): x for k, x in t.items()}, path,
                  metadata={"format": "pt"})
    return load_reference(out, v["family"])


def to_legacy_layout(d, family):
    """Rewrite d/config.json the way transformers 4.x wrote it: `rope_theta` (+ `rope_scaling`
    without rope_theta, `type` for the rope type) instead of `rope_parameters`, `torch_dtype`
    instead of `dtype`; Gemma 3: the global rope at the top, `rope_local_base_freq` for local
    layers and `sliding_window_pattern` instead of `layer_types` when they agree; no layer_types."""
    path = os.path.join(d, "config.json")
    with open(path) as f:
        root = json.load(f)
    c = root.get("text_config", root)
    rp = c.pop("rope_parameters", None) or {}
    if "full_attention" in rp:
        full, local = rp["full_attention"], rp["sliding_attention"]
        c["rope_local_base_freq"] = local.get("rope_theta", 10000.0)
        rp = full
        types = c.pop("layer_types")
        n = len(types)
        for pat in range(1, n + 2):
            if types == ["sliding_attention" if (i + 1) % pat else "full_attention" for i in range(n)]:
                c["sliding_window_pattern"] = pat
                break
        else:
            c["layer_types"] = types
    else:
        c.pop("layer_types", None) if family in ("llama", "mistral", "phi3") else None
    rp = dict(rp)
    c["rope_theta"] = rp.pop("rope_theta", 10000.0)
    if "partial_rotary_factor" in rp:
        c["partial_rotary_factor"] = rp.pop("partial_rotary_factor")
    t = rp.pop("rope_type", "default")
    if t != "default":
        rp.pop("original_max_position_embeddings", None) if family == "phi3" else None
        # 4.x Phi-3 128k configs: {"type": "longrope", ...} ("su" in the oldest ones, which
        # transformers 5.24 no longer loads); others: {"rope_type": ...}.
        c["rope_scaling"] = {("type" if family == "phi3" else "rope_type"): t, **rp}
    else:
        c["rope_scaling"] = None
    if "dtype" in root:
        root["torch_dtype"] = root.pop("dtype")
    root["transformers_version"] = "4.51.3"
    with open(path, "w") as f:
        json.dump(root, f, indent=2)


def load_reference(d, family):
    if family == "gemma3":
        m = Gemma3ForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    else:
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    return m.eval()


def reference_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float().numpy()


def run_ferrolm(binary, d, ids, max_tokens=1):
    cmd = [binary, "generate", "--model", d, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens",
           str(max_tokens), "--top-logits", "10", "--json"]
    if max_tokens > 1:
        # Room for every token asked for, also past a small max_position_embeddings (transformers
        # generates past it; ferrolm's default context stops there).
        cmd += ["--context", str(len(ids) + max_tokens)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return (out["top_logits"] if max_tokens == 1 else out["tokens"]), None


def reference_greedy(model, ids, n, eos):
    """transformers' greedy continuation with its KV cache (`generate`), cut after a stop token,
    and the top1 - top2 margin of each step."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    toks = [int(t) for t in out.sequences[0, len(ids):]]
    margins = [float(torch.topk(sc[0], 2).values.diff().abs()) for sc in out.scores]
    return cut_at_stop(toks, eos), margins


def cut_at_stop(toks, eos):
    for i, t in enumerate(toks):
        if t in eos:
            return toks[:i + 1]
    return toks


def eos_ids(model):
    e = model.generation_config.eos_token_id
    return set(e if isinstance(e, list) else [] if e is None else [e])


def compare(top, ref, tol):
    """(ok, rel_err, note): ferrolm's [(id, logit)] top-10 against the reference logits."""
    order = np.argsort(-ref)
    ref_top = order[:len(top)]
    scale = max(abs(float(ref[ref_top[0]])), abs(float(ref[ref_top[-1]])), 1e-6)
    err = max(abs(l - float(ref[i])) for i, l in top) / scale
    got_ids = [i for i, _ in top]
    # Set equality up to near-ties at the cut: an id may differ only where the reference's
    # 10th and 11th logits are within the tolerance.
    missing = [int(i) for i in ref_top if int(i) not in got_ids]
    cut = float(ref[ref_top[-1]])
    real_missing = [i for i in missing if float(ref[i]) - tol * scale > cut]
    extra = [i for i in got_ids if i not in set(int(x) for x in ref_top)]
    real_extra = [i for i in extra if float(ref[i]) < cut - tol * scale]
    ok = err <= tol and not real_missing and not real_extra
    note = "" if not (missing or extra) else f"ids differ (missing {missing}, extra {extra})"
    # Also the stricter per-logit view: |ferrolm - ref| / |ref| for each reported id.
    per = max(abs(l - float(ref[i])) / max(abs(float(ref[i])), 1e-9) for i, l in top)
    note = f"per-logit {per:.1e} " + note
    return ok, err, note


def run_variant(v, binary, tol, keep=None, init="wide", gen=0):
    d = os.path.join(keep, v["name"]) if keep else tempfile.mkdtemp(prefix="ferrolm-sweep-")
    results = []
    try:
        ref_model = save(v, d, init)
        vocab = v["cfg"].get("vocab_size", v["base"]["vocab_size"])
        for n in v["prompts"]:
            ids = prompt_ids(n, vocab, seed_of(v["name"]) + n)
            ref = reference_logits(ref_model, ids)
            top, err = run_ferrolm(binary, d, ids)
            if v["refused"]:
                ok = top is None and v["refused"] in err
                results.append((n, ok, 0.0, f"refused as expected: {err}" if ok else f"expected a refusal: {err}"))
                return results
            if top is None:
                results.append((n, False, float("nan"), "ferrolm failed: " + err))
                continue
            ok, rel, note = compare(top, ref, tol)
            results.append((n, ok, rel, note))
        if gen:
            # KV-cached generation: ferrolm's greedy tokens against transformers' generate().
            n = v["gen_prompt"]
            ids = prompt_ids(n, vocab, seed_of(v["name"]) + n)
            want, margins = reference_greedy(ref_model, ids, gen, eos_ids(ref_model))
            got, err = run_ferrolm(binary, d, ids, gen)
            if got is None:
                results.append((f"{n}+{gen}", False, float("nan"), "ferrolm failed: " + err))
            else:
                got = cut_at_stop(got, eos_ids(ref_model))
                k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
                # A differing step is a failure unless transformers' own top two were within 1e-3.
                ok = k is None and len(got) == len(want) or (k is not None and margins[k] < 1e-3)
                note = "" if k is None else f"greedy differs at step {k} (ref margin {margins[k]:.2e})"
                results.append((f"{n}+{gen}", ok, 0.0, note or f"greedy {len(got)} tokens equal"))
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)
    return results


def write_fixture(v, root):
    """A committed fixture: the saved folder plus reference.json with, for each prompt, the ids and
    transformers' fp32 logits of the last position (full vocabulary, one forward over the prompt),
    and for the variant's `gen_prompt` the greedy tokens of transformers' generate() (KV cache,
    stop tokens switched off) with each step's top1 - top2 margin."""
    d = os.path.join(root, v["name"])
    ref_model = save(v, d, "wide")
    vocab = v["base"]["vocab_size"]
    cases = []
    for n in v["prompts"]:
        ids = prompt_ids(n, vocab, seed_of(v["name"]) + n)
        cases.append(dict(prompt=ids, logits=[round(float(x), 6) for x in reference_logits(ref_model, ids)]))
    n = v["gen_prompt"]
    ids = prompt_ids(n, vocab, seed_of(v["name"]) + n)
    ref_model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = ref_model.generate(torch.tensor([ids]), max_new_tokens=FIXTURE_GEN, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=0)
    greedy = dict(prompt=ids, tokens=[int(t) for t in out.sequences[0, len(ids):]],
                  margins=[round(float(torch.topk(sc[0], 2).values.diff().abs()), 6) for sc in out.scores])
    ref = dict(name=v["name"], family=v["family"], dtype=v["dtype"], shard=v["shard"], legacy=v["legacy"],
               config_kwargs=v["cfg"], cases=cases, greedy=greedy,
               versions=dict(torch=torch.__version__, transformers=transformers.__version__, seed=seed_of(v["name"])))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{v['name']}: {size / 1024:.0f} KB, prompts {[len(c['prompt']) for c in cases]}, "
          f"greedy {n}+{FIXTURE_GEN} min margin {min(greedy['margins']):.3f}")


# Variants committed as fixtures (tests/fixtures/arch-variants, crate/tests/arch_parity.rs), each
# one a case the sweep found broken. SMALL shapes in BF16 keep each folder at a few tens of KB.
FIXTURE_GEN = 10
FIXTURES = [
    # Llama attention_bias (q/k/v/o biases) + mlp_bias (gate/up/down) + tied + intermediate 60
    # (padded to 64 at load).
    V("llama-bias", "llama", dtype="bf16", base=SMALL, prompts=(1, 40), attention_bias=True, mlp_bias=True,
      tie_word_embeddings=True, intermediate_size=60),
    # Phi-4-mini style: longrope with a tiny original context (16): prompts of 16 (short factors)
    # and 17, 40 (long factors); the greedy run from 15 crosses 16, where Phi3ForCausalLM's
    # generate() recomputes the cache with the long factors; partial rotary 0.75; window 12.
    V("phi3-longrope", "phi3", dtype="bf16", base=SMALL, prompts=(1, 16, 17, 40), gen_prompt=15,
      original_max_position_embeddings=16, partial_rotary_factor=0.75, sliding_window=12,
      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                           short_factor=SHORT6, long_factor=LONG6)),
    # Gemma3ForConditionalGeneration: nested text_config, language_model.model.* tensors, a vision
    # tower to ignore, 3 shards; o bias; linear rope on the global layer; its LM head has no final
    # soft-cap although text_config sets one.
    V("gemma3-cg", "gemma3", dtype="bf16", base=SMALL, prompts=(1, 40), head_dim=16, sliding_window=8, shard="40KB",
      final_logit_softcapping=5.0, attention_bias=True, layer_types=["sliding_attention", "full_attention"],
      rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                       "full_attention": dict(rope_type="linear", factor=8.0, rope_theta=1e6)}),
    # Dynamic NTK with max_position_embeddings 16 < prompt 40: the context grows past the
    # default (max_position_embeddings) and the base follows the sequence length.
    V("llama-dynamic", "llama", dtype="f16", base=SMALL, prompts=(1, 40), gen_prompt=13, max_position_embeddings=16,
      rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)),
    # Qwen3 YaRN in the transformers 4.x layout (rope_scaling), mscale terms.
    V("qwen3-yarn", "qwen3", dtype="bf16", base=SMALL, prompts=(1, 40), legacy=True, head_dim=16,
      rope_parameters=dict(rope_type="yarn", rope_theta=1e6, factor=8.0, original_max_position_embeddings=16,
                           mscale=1.0, mscale_all_dim=0.5)),
    # Gemma 1: no post-norms, head_dim^-0.5 scaling.
    V("gemma1", "gemma", dtype="bf16", base=SMALL, prompts=(1, 40), head_dim=16),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("FERROLM_BIN", "target/release/ferrolm"))
    ap.add_argument("--only", default=None, help="regex on variant names")
    ap.add_argument("--init", default="wide", choices=["wide", "hf"])
    ap.add_argument("--keep", default=None, help="keep the generated folders under this directory")
    ap.add_argument("--tol", type=float, default=0.01)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--gen", type=int, default=0,
                    help="also compare N greedy tokens (KV-cached) with transformers' generate()")
    ap.add_argument("--fixtures", default=None, help="write the FIXTURES variants under this directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.fixtures:
        for v in FIXTURES:
            if args.only is None or re.search(args.only, v["name"]):
                write_fixture(v, args.fixtures)
        return
    todo = [v for v in VARIANTS if args.only is None or re.search(args.only, v["name"])]
    if args.list:
        for v in todo:
            print(v["name"], v["family"], v["dtype"], v["shard"] or "", v["prompts"], v["cfg"])
        return
    fails = 0
    t0 = time.time()
    for v in todo:
        try:
            res = run_variant(v, args.bin, args.tol, args.keep, args.init, args.gen)
        except Exception as e:  # a variant transformers itself cannot build
            print(f"SKIP {v['name']}: {type(e).__name__}: {e}")
            continue
        for n, ok, rel, note in res:
            fails += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {v['name']:32s} len {n!s:>5}  rel err {rel:.2e}  {note}", flush=True)
    print(f"{len(todo)} variants, {fails} failing cases, {time.time() - t0:.0f} s")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()

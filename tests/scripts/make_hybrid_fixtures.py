#!/usr/bin/env python3
"""Tiny random-weight Qwen3.5 (hybrid Gated DeltaNet + gated full attention) and BitNet b1.58 models
with fp32 transformers references, in the layout of tests/fixtures/arch (see make_arch_fixtures.py,
whose run_family writes them: config.json, model.safetensors, reference.json, logits.f32).

qwen3_5: Qwen3_5TextConfig, hidden 64, 4 layers [linear, linear, linear, full] (Qwen3.5's every-4th
full-attention pattern, which is all llama.cpp's GGUF can express), 4 heads / 2 KV heads
of 32 (q_proj also gives the output gate: 256 rows), partial rotary 0.25 (8 dims), linear
attention with 2 key heads / 4 value heads of 16, conv kernel 4, untied, vocab 256. Norm weights
are drawn around 0 for the zero-centred (1 + w) RMSNorms and around 1 for the gated norm of the
DeltaNet output (plain w), like the other families' "1 +- 0.1".

bitnet: BitNetConfig, hidden 128, 2 layers, 4 heads / 2 KV heads of 32, FFN 256, ReLU², the attention
and FFN sub-norms; every linear weight ternary times one scale per tensor (0.15 * {-1, 0, +1},
a third each), as BitNet b1.58's weights are, so an I2_S conversion (make_arch_gguf.py) is exact.
transformers' BitNetForCausalLM without a quantization config runs these weights in fp32 (no int8
activations): that is the reference.

Usage: ~/.cache/refenv/bin/python tests/scripts/make_hybrid_fixtures.py [--out tests/fixtures/arch] [families...]
"""

import argparse
import os
import sys

import torch
from transformers import BitNetConfig, Qwen3_5TextConfig

sys.path.insert(0, os.path.dirname(__file__))
import make_arch_fixtures as arch  # noqa: E402

arch.FAMILIES["qwen3_5"] = (Qwen3_5TextConfig, dict(
    num_hidden_layers=4, head_dim=32, tie_word_embeddings=False,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    rope_parameters=dict(rope_type="default", rope_theta=1e6, partial_rotary_factor=0.25)))

# Rows of whole 128-element blocks, as bitnet.cpp's I2_S quantizer requires: hidden 128, FFN 256.
arch.FAMILIES["bitnet"] = (BitNetConfig, dict(hidden_size=128, intermediate_size=256, hidden_act="relu2",
                                              tie_word_embeddings=False,
                                              rope_parameters=dict(rope_type="default", rope_theta=500000.0)))

plain_init = arch.init_weights


def init_weights(model, family, seed=arch.SEED):
    plain_init(model, family, seed)
    if family == "bitnet":
        g = torch.Generator().manual_seed(seed + 11)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.ndim == 2 and "embed" not in name and "lm_head" not in name:
                    p.copy_(0.15 * (torch.randint(0, 3, p.shape, generator=g) - 1).float())
        return
    if family != "qwen3_5":
        return
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and "linear_attn.norm" not in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))  # (1 + w) norms


arch.init_weights = init_weights


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/arch")
    ap.add_argument("families", nargs="*", default=["qwen3_5", "bitnet"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    for fam in args.families:
        arch.run_family(fam, args.out)


if __name__ == "__main__":
    main()

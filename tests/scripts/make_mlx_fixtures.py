#!/usr/bin/env python3
"""MLX-quantized copies of two tiny fixture models, with transformers references on the weights
MLX's own dequantizer gives back.

  tests/fixtures/arch/qwen3-mlx4   tests/fixtures/arch/qwen3 quantized with mlx.core.quantize,
                                   4 bits, group 64 (the embedding too: the head is tied)
  tests/fixtures/arch/llama-mlx8   tests/fixtures/arch/llama, 8 bits, group 32 (embedding and
                                   untied lm_head too)

Each folder is what `mlx_lm.convert -q` writes for these layers: every Linear and Embedding
weight whose input dimension is a multiple of the group size becomes `<name>.weight` (uint32,
[out, in * bits / 32], element j of a row in bits (j % (32/bits)) * bits of word j / (32/bits)),
`<name>.scales` and `<name>.biases` (float16, [out, in / group]; w = scales * q + biases); norms
stay float32; config.json gains "quantization" and "quantization_config" {"group_size", "bits"}.

reference.json / logits.f32 as in tests/fixtures/arch (prompt and greedy from the base family's
reference prompt): fp32 transformers logits of the model whose weights are replaced by
mlx.core.dequantize(weight, scales, biases) -- MLX's own dequantization, so a reader that gets the
packing or the affine form wrong disagrees with it.

Usage: ~/.cache/refenv/bin/python tests/scripts/make_mlx_fixtures.py   (needs mlx[cpu], torch,
transformers, safetensors)
"""

import json
import os
import shutil

import mlx.core as mx
import numpy as np
import torch
import transformers
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM

ARCH = os.path.join(os.path.dirname(__file__), "..", "fixtures", "arch")
JOBS = [("qwen3", "qwen3-mlx4", 4, 64), ("llama", "llama-mlx8", 8, 32)]


def quantizable(name: str, t: np.ndarray, group: int) -> bool:
    return t.ndim == 2 and name.endswith(".weight") and "norm" not in name and t.shape[1] % group == 0


def run(base: str, out_name: str, bits: int, group: int):
    src = os.path.join(ARCH, base)
    out = os.path.join(ARCH, out_name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    packed, dequantized = {}, {}
    for name, t in tensors.items():
        if quantizable(name, t, group):
            q, s, b = mx.quantize(mx.array(t), group_size=group, bits=bits)
            s16, b16 = np.array(s.astype(mx.float16)), np.array(b.astype(mx.float16))
            stem = name[: -len(".weight")]
            packed[name] = np.array(q)
            packed[stem + ".scales"] = s16
            packed[stem + ".biases"] = b16
            # MLX's own dequantizer, on the float16 scales and biases the folder holds.
            w = mx.dequantize(q, mx.array(s16).astype(mx.float32), mx.array(b16).astype(mx.float32),
                              group_size=group, bits=bits)
            dequantized[name] = np.array(w).astype(np.float32)
        else:
            packed[name] = t
            dequantized[name] = t
    save_file(packed, os.path.join(out, "model.safetensors"), metadata={"format": "mlx"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization"] = {"group_size": group, "bits": bits}
    config["quantization_config"] = {"group_size": group, "bits": bits}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copy(os.path.join(src, "generation_config.json"), out)

    with open(os.path.join(src, "reference.json")) as f:
        base_ref = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    state = {k: torch.from_numpy(v) for k, v in dequantized.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("lm_head" in m for m in missing), missing  # tied heads follow the embedding
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    prompt = base_ref["prompt"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy()
        seq, margins = list(prompt), []
        for _ in range(len(base_ref["greedy"])):
            last = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(last, 2)
            seq.append(int(top.indices[0]))
            margins.append(round(float(top.values[0] - top.values[1]), 6))
    logits.astype("<f4").tofile(os.path.join(out, "logits.f32"))
    ref = dict(family=out_name, base=base, bits=bits, group_size=group, prompt=prompt, greedy=seq[len(prompt):],
               greedy_margins=margins, argmax=[int(i) for i in logits.argmax(-1)], logits_file="logits.f32",
               logits_shape=list(logits.shape), logits_std=float(logits.std()),
               versions={"mlx": mx.__version__, "torch": torch.__version__, "transformers": transformers.__version__})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{out_name}: {sum(1 for n in packed if n.endswith('.scales'))} quantized tensors, greedy {ref['greedy']}")


def main():
    torch.set_num_threads(1)
    for job in JOBS:
        run(*job)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""numpy reference forward of a llama-arch GGUF (interleaved-pair rope, rope_freqs, GQA, SwiGLU)
compared with tests/fixtures/arch/llama/logits.f32. Usage: check_llama_gguf.py [model.gguf]"""
import json
import sys
from pathlib import Path

import numpy as np
import gguf

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "arch" / "llama"


def load(path):
    r = gguf.GGUFReader(str(path))
    kv = {f.name: f.parts[-1].tolist()[0] for f in r.fields.values()
          if f.types and f.types[0] not in (gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY)}
    t = {x.name: np.asarray(x.data, dtype=np.float32).reshape([int(d) for d in reversed(x.shape)]) for x in r.tensors}
    return kv, t


def rms(x, w, eps):
    return x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps) * w


def rope_interleaved(x, pos, base, ff):
    # ggml_rope mode 0 (LLAMA_ROPE_TYPE_NORM): rotate pairs (2i, 2i+1), theta = p * base^(-2i/d) / ff[i]
    d = x.shape[-1]
    i = np.arange(d // 2)
    theta = pos[:, None] * base ** (-2.0 * i / d) / ff[None, :]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def forward(kv, t, ids):
    a = "llama"
    n_layer, n_head, n_kv = kv[f"{a}.block_count"], kv[f"{a}.attention.head_count"], kv[f"{a}.attention.head_count_kv"]
    hd, eps, base = kv[f"{a}.attention.key_length"], kv[f"{a}.attention.layer_norm_rms_epsilon"], kv[f"{a}.rope.freq_base"]
    ff = t.get("rope_freqs.weight", np.ones(hd // 2, np.float32)).astype(np.float64)
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    x = t["token_embd.weight"][ids].astype(np.float64)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(n_layer):
        p = f"blk.{l}."
        h = rms(x, t[p + "attn_norm.weight"], eps)
        q = (h @ t[p + "attn_q.weight"].T).reshape(T, n_head, hd)
        k = (h @ t[p + "attn_k.weight"].T).reshape(T, n_kv, hd)
        v = (h @ t[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        q, k = rope_interleaved(q, pos, base, ff), rope_interleaved(k, pos, base, ff)
        rep = n_head // n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(T, n_head * hd)
        x = x + o @ t[p + "attn_output.weight"].T
        h = rms(x, t[p + "ffn_norm.weight"], eps)
        g, u = h @ t[p + "ffn_gate.weight"].T, h @ t[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p + "ffn_down.weight"].T
    x = rms(x, t["output_norm.weight"], eps)
    return x @ t.get("output.weight", t["token_embd.weight"]).T


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else FIX / "model.gguf"
    ref = json.loads((FIX / "reference.json").read_text())
    logits = np.fromfile(FIX / "logits.f32", dtype="<f4").reshape(ref["logits_shape"])
    kv, t = load(path)
    out = forward(kv, t, np.array(ref["prompt"]))
    err = np.abs(out - logits)
    print(f"{path}: rope_freqs={t.get('rope_freqs.weight')}")
    print(f"  max|err| position 0: {err[0].max():.3e}   all {len(err)} positions: {err.max():.3e}"
          f"   per-position max: {np.array2string(err.max(1), precision=2)}")
    print(f"  argmax agreement: {(out.argmax(1) == np.array(ref['argmax'])).mean():.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Convert the tiny HF fixtures in tests/fixtures/arch/<family>/ to GGUF the way llama.cpp does.

llama.cpp's converter is not installed here, so this script re-implements, for the seven fixture
families only, what llama.cpp's `convert_hf_to_gguf.py` (now split into `conversion/*.py`,
repo ggml-org/llama.cpp) writes. Only the `gguf` pip package (GGUFWriter, tensor-name tables from
gguf-py/gguf/constants.py + tensor_mapping.py) is used for the file format and tensor names.

Conventions applied (llama.cpp file / class / function in brackets):

* hparams = `AutoConfig.from_pretrained(dir).to_dict()` [base.py ModelBase.load_hparams];
  `rope_parameters` = hparams["rope_parameters"] (transformers-5 layout) [TextModel.__init__].
* Generic metadata [TextModel.set_gguf_parameters]: <arch>.block_count, .context_length
  (max_position_embeddings), .embedding_length, .feed_forward_length, .attention.head_count,
  .attention.head_count_kv, .rope.freq_base (rope_parameters["full_attention"] or rope_parameters,
  "rope_theta"), .rope.freq_base_swa (rope_parameters["sliding_attention"]["rope_theta"]),
  .attention.layer_norm_rms_epsilon, .attention.key_length/.value_length (when config has
  head_dim), rope scaling: linear -> .rope.scaling.type "linear" + .rope.scaling.factor;
  longrope -> .rope.scaling.type "longrope"; llama3 -> nothing (rope_freqs tensor instead);
  general.file_type.
* Tensor loop [ModelBase.prepare_tensors]: generate_extra_tensors() first, then the checkpoint
  tensors in file order; names via gguf.get_tensor_name_map(arch, n_layer); 1-D tensors and
  "*_norm.weight" always F32; other tensors F32 (--outtype f32, general.file_type 0) or F16
  (--outtype f16, general.file_type 1). GGUFWriter.add_tensor takes the numpy array in row-major
  (HF) shape [out, in] and stores ggml dims reversed: ne = [in, out].
* llama (LlamaForCausalLM) and mistral (MistralForCausalLM): arch "llama" [llama.py LlamaModel];
  q_proj/k_proj rows permuted with LlamaModel.permute (reshape(n_head, 2, d/2, ...).swapaxes(1, 2):
  HF half-split rope -> GGUF interleaved-pair rope; k uses n_head_kv); extra keys llama.vocab_size
  and llama.rope.dimension_count (= head_dim). llama3 rope scaling -> `rope_freqs.weight` F32
  [n_rot/2] computed as LlamaModel.generate_extra_tensors, whose old_context_len is
  `hparams.get("original_max_position_embeddings", 8192)` -- the TOP-LEVEL config key, not the one
  inside rope_parameters. Our llama config only has it inside rope_parameters (16), so llama.cpp
  uses 8192; this script reproduces that (see README "Known divergences"; --hf-faithful uses 16).
  LlamaModel writes no sliding_window: mistral's window 8 is dropped (--hf-faithful writes
  llama.attention.sliding_window).
* qwen2 / qwen3 [qwen.py Qwen2Model / Qwen3Model]: generic metadata only, no permutation (NeoX
  rope), q/k/v biases kept (attn_q.bias ...), attn_q_norm / attn_k_norm unchanged, tied
  embeddings -> no lm_head in the checkpoint -> no output.weight.
* phi3 [phi.py Phi3MiniModel]: own set_gguf_parameters (no generic call): context_length,
  rope.scaling.original_context_length, embedding_length, feed_forward_length, block_count,
  head_count, head_count_kv, layer_norm_rms_epsilon, rope.dimension_count =
  int(partial_rotary_factor * hidden) // n_head, rope.freq_base, file_type, attention.sliding_window
  (None -> 0). generate_extra_tensors: rope.scaling.attn_factor =
  sqrt(1 + ln(max_pos/orig) / ln(orig)) (longrope, scale > 1), rope_factors_long.weight and
  rope_factors_short.weight F32 [n_rot/2]. qkv_proj -> attn_qkv, gate_up_proj -> ffn_up (kept fused).
* gemma2 [gemma.py Gemma2Model]: own set_gguf_parameters: context_length, embedding_length,
  block_count, feed_forward_length, head_count, head_count_kv, layer_norm_rms_epsilon, key_length,
  value_length, file_type, attn_logit_softcapping, final_logit_softcapping, attention.sliding_window;
  no rope.freq_base (runtime default 10000). Every "*norm.weight" gets +1. filter_tensors DROPS
  lm_head.weight, so no output.weight (runtime falls back to token_embd) even though this fixture is
  untied (--hf-faithful keeps it as output.weight).
* gemma3 [gemma.py Gemma3Model, text model]: generic metadata, then overrides (context_length,
  head_count, rms eps, key/value_length, rope.freq_base = full_attention theta), final softcap only
  if set, attention.sliding_window when sliding_window_pattern != 1. The generic part writes
  rope.scaling.type linear / factor 2 (full_attention) and rope.freq_base_swa 10000
  (sliding_attention). No layer pattern key is written (llama.cpp's runtime hard-codes the gemma3
  pattern: 5 local : 1 global). "*norm.weight" +1 (incl. q_norm/k_norm); lm_head -> output.weight.
* Tokenizer (fixtures have none): tokenizer.ggml.model "gpt2", pre "default", 256 tokens = the
  GPT-2 bytes_to_unicode string of byte i (token id == byte value) except token 255 = "ĠĠ" with
  the single merge "Ġ Ġ" (a gpt2 vocabulary needs merges and gguf-py refuses an empty list),
  token_type all NORMAL (1), bos/eos/padding ids from
  config.json (eos list -> first id). Not llama.cpp output (it needs a real tokenizer); a stand-in.
* general.*: architecture, type "model", name (folder name), size_label, quantization_version 2
  [ModelBase.prepare_metadata]; general.file_type.

Outputs (default run): tests/fixtures/arch/<family>/model.gguf (llama.cpp-exact, F16 matrices) for
all 7 families, plus model-hf.gguf for llama, gemma2, mistral = the same conversion with the three
llama.cpp losses undone (--hf-faithful): rope_freqs from rope_parameters' original context (16),
gemma2 lm_head kept as output.weight, mistral window as llama.attention.sliding_window. Only the
model-hf.gguf files reproduce logits.f32 for those three families.

Usage: python tests/scripts/make_arch_gguf.py [--outtype f16|f32] [--hf-faithful] [--out-dir DIR]
       [--check] [families...]
Check: python tests/scripts/check_llama_gguf.py [path/to/llama/model.gguf]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

import gguf

ROOT = Path(__file__).resolve().parents[2]
ARCH_DIR = ROOT / "tests" / "fixtures" / "arch"
FAMILIES = ["llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "mistral", "smollm3", "granite", "olmo2", "exaone4",
            "glm4", "ernie4_5", "seed_oss", "hunyuan_v1_dense", "arcee"]

HF_TO_ARCH = {
    "LlamaForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "MistralForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "Qwen2ForCausalLM": gguf.MODEL_ARCH.QWEN2,
    "Qwen3ForCausalLM": gguf.MODEL_ARCH.QWEN3,
    "Phi3ForCausalLM": gguf.MODEL_ARCH.PHI3,
    "Gemma2ForCausalLM": gguf.MODEL_ARCH.GEMMA2,
    "Gemma3ForCausalLM": gguf.MODEL_ARCH.GEMMA3,
    "Qwen3_5ForCausalLM": gguf.MODEL_ARCH.QWEN35,
    "BitNetForCausalLM": gguf.MODEL_ARCH.BITNET,
    "SmolLM3ForCausalLM": gguf.MODEL_ARCH.SMOLLM3,
    "GraniteForCausalLM": gguf.MODEL_ARCH.GRANITE,
    "Olmo2ForCausalLM": gguf.MODEL_ARCH.OLMO2,
    "Exaone4ForCausalLM": gguf.MODEL_ARCH.EXAONE4,
    "Glm4ForCausalLM": gguf.MODEL_ARCH.GLM4,
    "Ernie4_5ForCausalLM": gguf.MODEL_ARCH.ERNIE4_5,
    "SeedOssForCausalLM": gguf.MODEL_ARCH.SEED_OSS,
    "HunYuanDenseV1ForCausalLM": gguf.MODEL_ARCH.HUNYUAN_DENSE,
    "ArceeForCausalLM": gguf.MODEL_ARCH.ARCEE,
    # EmbeddingGemma (gemma.py EmbeddingGemma): --src tests/fixtures/embed/embeddinggemma
    "Gemma3TextModel": gguf.MODEL_ARCH.GEMMA_EMBEDDING,
}
# bitnet.cpp (microsoft/BitNet) writes its BitNet b1.58 files under this name, with gguf-py's
# BITNET tensor names; its I2_S type (id 36) is not in upstream gguf-py (see write_i2s).
BITNET_ARCH_NAME = "bitnet-b1.58"
I2S_ID = 36


def i2s_bytes(w: np.ndarray) -> bytes:
    """bitnet.cpp's quantize_i2_s: code 2 for w > 0, 1 for w == 0, 0 for w < 0; 128-element
    blocks of 32 bytes, byte g holding elements g, g+32, g+64, g+96 in bits 7-6, 5-4, 3-2, 1-0;
    then the tensor's scale (max |w|) as f32 in a 32-byte trailer."""
    flat = w.reshape(-1).astype(np.float32)
    assert flat.size % 128 == 0
    scale = float(np.abs(flat).max())
    codes = np.where(flat > 1e-6, 2, np.where(flat < -1e-6, 0, 1)).astype(np.uint8).reshape(-1, 4, 32)
    packed = (codes[:, 0] << 6) | (codes[:, 1] << 4) | (codes[:, 2] << 2) | codes[:, 3]
    trailer = np.zeros(8, dtype=np.float32)
    trailer[0] = scale
    return packed.astype(np.uint8).tobytes() + trailer.tobytes()


def patch_i2s(path: Path, names: dict[str, tuple[int, int]]):
    """Rewrite the placeholder I8 tensor infos of `names` (name -> (cols, rows)) as I2_S."""
    data = bytearray(path.read_bytes())
    for name, (cols, rows) in names.items():
        key = len(name).to_bytes(8, "little") + name.encode()
        at = data.index(key) + len(key)
        assert int.from_bytes(data[at:at + 4], "little") == 2
        at += 4
        data[at:at + 16] = cols.to_bytes(8, "little") + rows.to_bytes(8, "little")
        at += 16
        assert int.from_bytes(data[at:at + 4], "little") == int(gguf.GGMLQuantizationType.I8)
        data[at:at + 4] = I2S_ID.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def load_hparams(d: Path) -> dict:
    try:
        from transformers import AutoConfig
        return AutoConfig.from_pretrained(d, trust_remote_code=False).to_dict()
    except Exception:  # same fallback as llama.cpp
        return json.loads((d / "config.json").read_text())


def rope_parameters_of(hp: dict) -> dict:
    # TextModel.__init__
    rp = dict(hp.get("rope_parameters", hp.get("rope_scaling")) or {})
    if "full_attention" not in rp and "sliding_attention" not in rp:
        for k in ("rope_theta",):
            if k not in rp and hp.get(k) is not None:
                rp[k] = hp[k]
        if "rope_type" not in rp and rp.get("type") is not None:
            rp["rope_type"] = rp["type"]
    return rp


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def llama_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    # LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


class Meta:
    """Ordered key/value store; a later add of the same key overwrites (as GGUFWriter does)."""

    def __init__(self, arch: str):
        self.arch = arch
        self.kv: dict[str, tuple[object, gguf.GGUFValueType, gguf.GGUFValueType | None]] = {}

    def a(self, key: str, val, vtype: gguf.GGUFValueType, sub: gguf.GGUFValueType | None = None):
        self.kv[key.format(arch=self.arch)] = (val, vtype, sub)

    def u32(self, k, v):
        self.a(k, int(v), gguf.GGUFValueType.UINT32)

    def f32(self, k, v):
        self.a(k, float(v), gguf.GGUFValueType.FLOAT32)


def generic_params(m: Meta, hp: dict, rp: dict, n_layer: int, ftype: int):
    """TextModel.set_gguf_parameters (the parts reachable for these configs)."""
    K = gguf.Keys
    m.u32(K.LLM.BLOCK_COUNT, n_layer)
    m.u32(K.LLM.CONTEXT_LENGTH, hp["max_position_embeddings"])
    m.u32(K.LLM.EMBEDDING_LENGTH, hp["hidden_size"])
    m.u32(K.LLM.FEED_FORWARD_LENGTH, hp["intermediate_size"])
    m.u32(K.Attention.HEAD_COUNT, hp["num_attention_heads"])
    m.u32(K.Attention.HEAD_COUNT_KV, hp["num_key_value_heads"])
    rope_params = rp.get("full_attention", rp)
    rope_type = rope_params.get("rope_type")
    if rope_type == "linear" and rope_params.get("factor") is not None:
        m.a(K.Rope.SCALING_TYPE, "linear", gguf.GGUFValueType.STRING)
        m.f32(K.Rope.SCALING_FACTOR, rope_params["factor"])
    elif rope_type in ("su", "longrope"):
        m.a(K.Rope.SCALING_TYPE, "longrope", gguf.GGUFValueType.STRING)
    elif rope_type not in (None, "default", "llama3", "dynamic"):
        raise NotImplementedError(rope_type)
    if rope_params.get("rope_theta") is not None:
        m.f32(K.Rope.FREQ_BASE, rope_params["rope_theta"])
    if (swa := rp.get("sliding_attention", {}).get("rope_theta")) is not None:
        m.f32(K.Rope.FREQ_BASE_SWA, swa)
    m.f32(K.Attention.LAYERNORM_RMS_EPS, hp["rms_norm_eps"])
    if hp.get("head_dim") is not None:
        m.u32(K.Attention.KEY_LENGTH, hp["head_dim"])
        m.u32(K.Attention.VALUE_LENGTH, hp["head_dim"])
    m.u32(K.General.FILE_TYPE, ftype)


def llama3_rope_freqs(hp: dict, rp: dict, hf_faithful: bool) -> np.ndarray:
    """LlamaModel.generate_extra_tensors."""
    rope_params = rp.get("full_attention", rp)
    base = rope_params.get("rope_theta", 10000.0)
    dim = hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]
    # torch.arange(0, dim, 2, float32) / dim, then base ** that, in float32 like the torch code
    expo = (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)).astype(np.float32)
    freqs = (np.float32(1.0) / np.power(np.float32(base), expo, dtype=np.float32)).astype(np.float32)
    factor = rope_params.get("factor", 8.0)
    low = rope_params.get("low_freq_factor", 1.0)
    high = rope_params.get("high_freq_factor", 4.0)
    if hf_faithful:
        old_ctx = rope_params.get("original_max_position_embeddings", 8192)
    else:
        old_ctx = hp.get("original_max_position_embeddings", 8192)  # llama.cpp reads the top-level key
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / float(f)
        if wl < high_wl:
            out.append(1)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def reorder_v_heads(t: np.ndarray, dim: int, nk: int, per_k: int, head_dim: int) -> np.ndarray:
    """_LinearAttentionVReorderBase._reorder_v_heads: V heads grouped by K head -> tiled."""
    shape = list(t.shape)
    dim %= len(shape)
    t = t.reshape(shape[:dim] + [nk, per_k, head_dim] + shape[dim + 1:])
    return np.swapaxes(t, dim, dim + 1).reshape(shape)


def qwen35_tensor(hp: dict, name: str, data: np.ndarray) -> tuple[str, np.ndarray]:
    """_LinearAttentionVReorderBase.modify_tensors, then Qwen3NextModel.modify_tensors."""
    nk, nv = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
    dk, dv = hp["linear_key_head_dim"], hp["linear_value_head_dim"]
    r = nv // nk
    if nk != nv and "linear_attn." in name:
        if ".in_proj_qkv." in name:
            qk = 2 * nk * dk
            data = np.concatenate([data[:qk], reorder_v_heads(data[qk:], 0, nk, r, dv)])
        elif ".in_proj_z." in name:
            data = reorder_v_heads(data, 0, nk, r, dv)
        elif ".in_proj_b." in name or ".in_proj_a." in name:
            data = reorder_v_heads(data, 0, nk, r, 1)
        elif ".A_log" in name or ".dt_bias" in name:
            data = reorder_v_heads(data[:, None], 0, nk, r, 1)[:, 0]
        elif ".conv1d" in name:
            c = data.squeeze()
            qk = 2 * nk * dk
            data = np.concatenate([c[:qk], reorder_v_heads(c[qk:], 0, nk, r, dv)])
        elif ".out_proj." in name:
            data = reorder_v_heads(data, 1, nk, r, dv)
    if name.endswith(".A_log"):
        data = -np.exp(data)
    elif name.endswith(".dt_bias"):
        name = name.rpartition(".dt_bias")[0] + ".dt_proj.bias"
    elif "conv1d" in name:
        data = data.squeeze()
    elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        data = data + np.float32(1.0)
    return name, data.astype(np.float32)


def load_tensors(d: Path) -> dict:
    """The checkpoint's tensors in file order, as float32 numpy arrays (BF16 through torch:
    numpy has no bfloat16)."""
    try:
        return load_file(str(d / "model.safetensors"))
    except TypeError:
        from safetensors import safe_open
        with safe_open(str(d / "model.safetensors"), "pt") as f:
            return {k: f.get_tensor(k).float().numpy() for k in f.keys()}


def convert(family: str, out_path: Path, outtype: str, hf_faithful: bool, src: Path | None = None) -> Path:
    d = src or ARCH_DIR / family
    hp = load_hparams(d)
    rp = rope_parameters_of(hp)
    hf_arch = hp["architectures"][0]
    arch = HF_TO_ARCH[hf_arch]
    arch_name = BITNET_ARCH_NAME if arch == gguf.MODEL_ARCH.BITNET else gguf.MODEL_ARCH_NAMES[arch]
    n_layer = hp["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(arch, n_layer)
    ftype = {"f32": 0, "f16": 1}[outtype]
    K = gguf.Keys
    m = Meta(arch_name)
    extra: list[tuple[str, np.ndarray]] = []
    n_head, n_kv = hp["num_attention_heads"], hp["num_key_value_heads"]

    # ---- set_gguf_parameters + generate_extra_tensors -------------------------------------
    # SmolLM3Model and GraniteModel are LlamaModels with their own architecture names (llama.cpp
    # hard-codes SmolLM3's NoPE step and reads no sliding window for it; GraniteModel renames the
    # four multipliers to *_scale keys, each written only when set and non-zero).
    if arch in (gguf.MODEL_ARCH.LLAMA, gguf.MODEL_ARCH.SMOLLM3, gguf.MODEL_ARCH.GRANITE, gguf.MODEL_ARCH.ARCEE):
        generic_params(m, hp, rp, n_layer, ftype)
        if arch == gguf.MODEL_ARCH.GRANITE:
            for hk, gk in [("attention_multiplier", K.Attention.SCALE), ("embedding_multiplier", K.LLM.EMBEDDING_SCALE),
                           ("residual_multiplier", K.LLM.RESIDUAL_SCALE), ("logits_scaling", K.LLM.LOGIT_SCALE)]:
                if hp.get(hk):
                    m.f32(gk, hp[hk])
        m.u32(K.LLM.VOCAB_SIZE, hp["vocab_size"])
        m.u32(K.Rope.DIMENSION_COUNT, hp.get("head_dim") or hp["hidden_size"] // n_head)
        if rp.get("full_attention", rp).get("rope_type", "").lower() == "llama3":
            extra.append(("rope_freqs.weight", llama3_rope_freqs(hp, rp, hf_faithful)))
        if hf_faithful and hp.get("sliding_window") is not None and arch == gguf.MODEL_ARCH.LLAMA:
            m.u32(K.Attention.SLIDING_WINDOW, hp["sliding_window"])
    elif arch in (gguf.MODEL_ARCH.QWEN2, gguf.MODEL_ARCH.QWEN3, gguf.MODEL_ARCH.OLMO2, gguf.MODEL_ARCH.ERNIE4_5,
                  gguf.MODEL_ARCH.SEED_OSS):
        # Olmo2Model, Ernie4_5Model (HF rotates pairs already: no permutation) and SeedOssModel:
        # the generic metadata only.
        generic_params(m, hp, rp, n_layer, ftype)
    elif arch == gguf.MODEL_ARCH.GLM4:
        # Glm4Model: the rotated part of a head (partial_rotary_factor, default 0.5).
        generic_params(m, hp, rp, n_layer, ftype)
        head_dim = hp.get("head_dim") or hp["hidden_size"] // n_head
        m.u32(K.Rope.DIMENSION_COUNT, int(head_dim * rp.get("partial_rotary_factor", 0.5)))
    elif arch == gguf.MODEL_ARCH.EXAONE4:
        # Exaone4Model: the window, and which layers slide as a per-layer list.
        generic_params(m, hp, rp, n_layer, ftype)
        m.u32(K.LLM.VOCAB_SIZE, hp["vocab_size"])
        if hp.get("sliding_window") is not None:
            m.u32(K.Attention.SLIDING_WINDOW, hp["sliding_window"])
            m.a(K.Attention.SLIDING_WINDOW_PATTERN, [t == "sliding_attention" for t in hp["layer_types"]],
                gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)
    elif arch == gguf.MODEL_ARCH.HUNYUAN_DENSE:
        # HunYuanModel: NTK-alpha folded into the base; scaling none; a 256k context written for
        # "dynamic" (its assert on the base and max_position_embeddings of the released models
        # is not reproduced: the fixture is tiny).
        generic_params(m, hp, rp, n_layer, ftype)
        if rp.get("rope_type") in ("dynamic", "xdrope"):
            alpha, base, dim = rp.get("alpha", 50), rp.get("rope_theta", 10000.0), hp["head_dim"]
            m.f32(K.Rope.FREQ_BASE, base * (alpha ** (dim / (dim - 2))))
            m.a(K.Rope.SCALING_TYPE, "none", gguf.GGUFValueType.STRING)
            m.f32(K.Rope.SCALING_FACTOR, 1)
            if rp.get("rope_type") == "dynamic":
                m.u32(K.Rope.SCALING_ORIG_CTX_LEN, 256 * 1024)
                m.u32(K.LLM.CONTEXT_LENGTH, 256 * 1024)
    elif arch == gguf.MODEL_ARCH.PHI3:
        n_embd = hp["hidden_size"]
        max_pos = hp["max_position_embeddings"]
        orig = rp["original_max_position_embeddings"]
        rope_dims = int(rp.get("partial_rotary_factor", 1.0) * n_embd) // n_head
        m.u32(K.LLM.CONTEXT_LENGTH, max_pos)
        m.u32(K.Rope.SCALING_ORIG_CTX_LEN, orig)
        m.u32(K.LLM.EMBEDDING_LENGTH, n_embd)
        m.u32(K.LLM.FEED_FORWARD_LENGTH, hp["intermediate_size"])
        m.u32(K.LLM.BLOCK_COUNT, n_layer)
        m.u32(K.Attention.HEAD_COUNT, n_head)
        m.u32(K.Attention.HEAD_COUNT_KV, n_kv)
        m.f32(K.Attention.LAYERNORM_RMS_EPS, hp["rms_norm_eps"])
        m.u32(K.Rope.DIMENSION_COUNT, rope_dims)
        m.f32(K.Rope.FREQ_BASE, rp.get("full_attention", rp)["rope_theta"])
        m.u32(K.General.FILE_TYPE, ftype)
        m.u32(K.Attention.SLIDING_WINDOW, hp.get("sliding_window") or 0)
        long_f, short_f = rp.get("long_factor"), rp.get("short_factor")
        if long_f:
            scale = max_pos / orig
            rt = rp.get("rope_type", "").lower()
            if rt in ("su", "longrope"):
                attn_factor = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0
            elif rt == "yarn":
                attn_factor = 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0
            else:
                raise NotImplementedError(rt)
            m.f32(K.Rope.SCALING_ATTN_FACTOR, attn_factor)
            assert len(long_f) == len(short_f) == rope_dims // 2
            extra.append(("rope_factors_long.weight", np.array(long_f, dtype=np.float32)))
            extra.append(("rope_factors_short.weight", np.array(short_f, dtype=np.float32)))
    elif arch == gguf.MODEL_ARCH.GEMMA2:
        m.u32(K.LLM.CONTEXT_LENGTH, hp["max_position_embeddings"])
        m.u32(K.LLM.EMBEDDING_LENGTH, hp["hidden_size"])
        m.u32(K.LLM.BLOCK_COUNT, n_layer)
        m.u32(K.LLM.FEED_FORWARD_LENGTH, hp["intermediate_size"])
        m.u32(K.Attention.HEAD_COUNT, n_head)
        m.u32(K.Attention.HEAD_COUNT_KV, n_kv)
        m.f32(K.Attention.LAYERNORM_RMS_EPS, hp["rms_norm_eps"])
        m.u32(K.Attention.KEY_LENGTH, hp["head_dim"])
        m.u32(K.Attention.VALUE_LENGTH, hp["head_dim"])
        m.u32(K.General.FILE_TYPE, ftype)
        m.f32(K.LLM.ATTN_LOGIT_SOFTCAPPING, hp["attn_logit_softcapping"])
        m.f32(K.LLM.FINAL_LOGIT_SOFTCAPPING, hp["final_logit_softcapping"])
        m.u32(K.Attention.SLIDING_WINDOW, hp["sliding_window"])
    elif arch in (gguf.MODEL_ARCH.GEMMA3, gguf.MODEL_ARCH.GEMMA_EMBEDDING):
        generic_params(m, hp, rp, n_layer, ftype)
        m.u32(K.LLM.CONTEXT_LENGTH, hp.get("max_position_embeddings", 131072))
        m.u32(K.Attention.HEAD_COUNT, hp.get("num_attention_heads", 8))
        m.f32(K.Attention.LAYERNORM_RMS_EPS, hp.get("rms_norm_eps", 1e-6))
        m.u32(K.Attention.KEY_LENGTH, hp.get("head_dim", 256))
        m.u32(K.Attention.VALUE_LENGTH, hp.get("head_dim", 256))
        m.f32(K.Rope.FREQ_BASE, rp.get("full_attention", rp).get("rope_theta", 1_000_000.0))
        assert hp.get("attn_logit_softcapping") is None
        if hp.get("final_logit_softcapping"):
            m.f32(K.LLM.FINAL_LOGIT_SOFTCAPPING, hp["final_logit_softcapping"])
        if hp.get("sliding_window_pattern") != 1:
            m.u32(K.Attention.SLIDING_WINDOW, hp["sliding_window"])
        m.u32(K.Attention.HEAD_COUNT_KV, hp.get("num_key_value_heads", 4))
        if arch == gguf.MODEL_ARCH.GEMMA_EMBEDDING:
            # EmbeddingGemma.set_gguf_parameters after Gemma3Model's: the window as config.json
            # gives it, the Dense layers' sizes, the pooling type from 1_Pooling (mean = 1).
            raw_cfg = json.loads((d / "config.json").read_text())
            m.u32(K.Attention.SLIDING_WINDOW, raw_cfg["sliding_window"])
            for mod in json.loads((d / "modules.json").read_text()):
                if mod["type"].endswith("Dense"):
                    mc = json.loads((d / mod["path"] / "config.json").read_text())
                    dense = "dense_2" if mod["path"] == "2_Dense" else "dense_3"
                    m.u32(K.LLM.DENSE_FEAT_IN_SIZE.format(arch="{arch}", dense=dense), mc["in_features"])
                    m.u32(K.LLM.DENSE_FEAT_OUT_SIZE.format(arch="{arch}", dense=dense), mc["out_features"])
                    st = load_file(str(d / mod["path"] / "model.safetensors"))
                    extra.append((f"{dense}.weight", np.asarray(st["linear.weight"], dtype=np.float32)))
            m.u32(K.LLM.POOLING_TYPE, 1)
            # Not written by llama.cpp (its runtime assumes Gemma 3's 5 local : 1 global layers):
            # the fixture's two layers are [sliding, full], so the pattern is given per layer.
            m.a(K.Attention.SLIDING_WINDOW_PATTERN, [t == "sliding_attention" for t in hp["layer_types"]],
                gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)
    elif arch == gguf.MODEL_ARCH.BITNET:
        generic_params(m, hp, rp, n_layer, ftype)
        m.u32(K.LLM.VOCAB_SIZE, hp["vocab_size"])
        m.u32(K.Rope.DIMENSION_COUNT, hp["hidden_size"] // n_head)
    elif arch == gguf.MODEL_ARCH.QWEN35:
        # Qwen3NextModel.set_gguf_parameters (through Qwen2MoeModel: the generic part) and
        # _Qwen35MRopeMixin. rope.dimension_count reads a TOP-LEVEL partial_rotary_factor
        # (default 0.25); Qwen3.5 configs keep theirs inside rope_parameters.
        generic_params(m, hp, rp, n_layer, ftype)
        m.u32(K.SSM.CONV_KERNEL, hp["linear_conv_kernel_dim"])
        m.u32(K.SSM.STATE_SIZE, hp["linear_key_head_dim"])
        m.u32(K.SSM.GROUP_COUNT, hp["linear_num_key_heads"])
        m.u32(K.SSM.TIME_STEP_RANK, hp["linear_num_value_heads"])
        m.u32(K.SSM.INNER_SIZE, hp["linear_value_head_dim"] * hp["linear_num_value_heads"])
        m.u32(K.LLM.FULL_ATTENTION_INTERVAL, hp.get("full_attention_interval", 4))
        m.u32(K.Rope.DIMENSION_COUNT, int(hp["head_dim"] * hp.get("partial_rotary_factor", 0.25)))
        m.a(K.Rope.DIMENSION_SECTIONS, [11, 11, 10, 0], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
    else:
        raise NotImplementedError(arch_name)

    # ---- tensors (ModelBase.prepare_tensors + per-arch modify_tensors) ---------------------
    st = load_tensors(d)
    tensors: list[tuple[str, np.ndarray]] = list(extra)
    for name, data in st.items():
        data = np.asarray(data, dtype=np.float32)
        if name.endswith((".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")):
            continue
        if arch == gguf.MODEL_ARCH.GEMMA2 and name == "lm_head.weight" and not hf_faithful:
            continue  # Gemma2Model.filter_tensors
        if arch == gguf.MODEL_ARCH.HUNYUAN_DENSE and name == "lm_head.weight" and hp.get("tie_word_embeddings"):
            continue  # HunYuanModel.modify_tensors
        if arch in (gguf.MODEL_ARCH.LLAMA, gguf.MODEL_ARCH.BITNET, gguf.MODEL_ARCH.SMOLLM3, gguf.MODEL_ARCH.GRANITE,
                    gguf.MODEL_ARCH.ARCEE):
            if name.endswith(("q_proj.weight", "q_proj.bias")):
                data = llama_permute(data, n_head, n_head)
            if name.endswith(("k_proj.weight", "k_proj.bias")):
                data = llama_permute(data, n_head, n_kv)
        if arch == gguf.MODEL_ARCH.GEMMA_EMBEDDING and not name.startswith("model."):
            name = "model." + name  # Gemma3TextModel's tensors, as the CausalLM names them
        if arch in (gguf.MODEL_ARCH.GEMMA2, gguf.MODEL_ARCH.GEMMA3, gguf.MODEL_ARCH.GEMMA_EMBEDDING) and name.endswith("norm.weight"):
            data = data + np.float32(1.0)
        if arch == gguf.MODEL_ARCH.QWEN35:
            name, data = qwen35_tensor(hp, name, data)
        if arch == gguf.MODEL_ARCH.BITNET:
            # gguf-py knows the first BitNet release's names for the sub-norms.
            name = name.replace("self_attn.attn_sub_norm", "self_attn.inner_attn_ln")
            name = name.replace("mlp.ffn_sub_norm", "mlp.ffn_layernorm")
        new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            if arch == gguf.MODEL_ARCH.GEMMA2 and name == "lm_head.weight":
                new = "output.weight"  # --hf-faithful only
            elif arch == gguf.MODEL_ARCH.BITNET and name == "lm_head.weight":
                new = "output.weight"  # gguf-py's BITNET table lacks OUTPUT (the 2B model is tied)
            else:
                raise ValueError(f"cannot map {name}")
        tensors.append((new, data))

    size = sum(t.size for n, t in tensors if not n.startswith("rope_"))

    # ---- write --------------------------------------------------------------------------------
    out_path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(out_path), arch_name)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(family)
    w.add_size_label(gguf.size_label(size, 0, 0, 0))
    for k, (v, vt, sub) in m.kv.items():
        w.add_key_value(k, v, vt, sub_type=sub)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # stand-in tokenizer (see docstring)
    b2u = bytes_to_unicode()
    n_vocab = hp["vocab_size"]
    assert n_vocab == 256 or arch == gguf.MODEL_ARCH.GEMMA_EMBEDDING
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    # A gpt2 vocabulary needs merges (llama.cpp and ferrolm refuse one without), and GGUFWriter
    # refuses an empty list: so the last byte's slot holds the merge "Ġ Ġ" -> "ĠĠ" instead (the
    # fixtures feed token ids, so no text ever needs byte 0xFF).
    tokens = [b2u[i] for i in range(256)] + [f"<unused{i}>" for i in range(256, n_vocab)]
    tokens[255] = b2u[32] + b2u[32]
    w.add_token_list(tokens)
    w.add_token_types([int(gguf.TokenType.NORMAL)] * n_vocab)
    w.add_token_merges([b2u[32] + " " + b2u[32]])
    cfg = json.loads((d / "config.json").read_text())
    first = lambda v: v[0] if isinstance(v, list) else v  # noqa: E731
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(first(cfg["bos_token_id"]))
    if cfg.get("eos_token_id") is not None:
        w.add_eos_token_id(first(cfg["eos_token_id"]))
    if cfg.get("pad_token_id") is not None:
        w.add_pad_token_id(first(cfg["pad_token_id"]))

    i2s: dict[str, tuple[int, int]] = {}
    for new, data in tensors:
        n_dims = data.ndim
        if arch == gguf.MODEL_ARCH.BITNET and n_dims == 2 and new.startswith("blk."):
            # Every layer matrix in I2_S, written as an I8 placeholder of the same byte count
            # and patched afterwards (gguf-py knows no type 36).
            raw = np.frombuffer(i2s_bytes(data), dtype=np.uint8)
            w.add_tensor(new, raw.reshape(1, -1), raw_shape=(1, raw.size), raw_dtype=gguf.GGMLQuantizationType.I8)
            i2s[new] = (data.shape[1], data.shape[0])
            continue
        # ssm_conv1d stays F32 like llama.cpp's ggml_ssm_conv wants it.
        if n_dims <= 1 or new.endswith("_norm.weight") or "ssm_conv1d" in new or outtype == "f32":
            arr = data.astype(np.float32)
        else:
            arr = data.astype(np.float16)
        w.add_tensor(new, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if i2s:
        patch_i2s(out_path, i2s)
    return out_path


def check(family: str, path: Path):
    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    print(f"== {family}: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
          f"({path.stat().st_size} bytes) arch={arch}")
    for f in r.fields.values():
        if f.name.startswith("tokenizer.ggml.tokens") or f.name.startswith("tokenizer.ggml.token_type"):
            print(f"   {f.name}: [{len(f.data)} items]")
            continue
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            val = bytes(f.parts[-1]).decode()
        elif f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            val = f"[{len(f.data)} items]"
        else:
            val = f.parts[-1].tolist()
        print(f"   {f.name} = {val}")
    for t in r.tensors:
        print(f"   T {t.name:32s} {t.tensor_type.name:4s} ne={list(map(int, t.shape))}")


HF_FAITHFUL_DIFFERS = ["llama", "gemma2", "mistral"]  # families where --hf-faithful changes the file


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", default=FAMILIES)
    ap.add_argument("--outtype", choices=["f16", "f32"], default="f16")
    ap.add_argument("--hf-faithful", action="store_true",
                    help="only write the HF-faithful variant (fixes the three llama.cpp-converter losses, see README)")
    ap.add_argument("--out-dir", type=Path, default=None,
                    help="write <out-dir>/<family>/model.gguf instead of into the fixture folders")
    ap.add_argument("--check", action="store_true", help="dump each written file with GGUFReader")
    ap.add_argument("--src", type=Path, default=None,
                    help="convert this folder (one family given) into <src>/model.gguf instead of the fixture")
    a = ap.parse_args()
    if a.src:
        assert len(a.families) == 1, "--src converts one folder: name its family"
        out = convert(a.families[0], a.src / "model.gguf", a.outtype, False, a.src)
        print(f"wrote {out} ({out.stat().st_size} bytes)")
        if a.check:
            check(a.families[0], out)
        return
    jobs = []
    for fam in a.families:
        base = a.out_dir / fam if a.out_dir else ARCH_DIR / fam
        if a.hf_faithful:
            jobs.append((fam, base / "model.gguf" if a.out_dir else base / "model-hf.gguf", True))
        else:
            jobs.append((fam, base / "model.gguf", False))
            if not a.out_dir and fam in HF_FAITHFUL_DIFFERS:  # default run: also the HF-faithful variant
                jobs.append((fam, base / "model-hf.gguf", True))
    for fam, out, hf in jobs:
        convert(fam, out, a.outtype, hf)
        if a.check:
            check(fam, out)
        else:
            print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    sys.exit(main())

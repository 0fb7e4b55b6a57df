#!/usr/bin/env python3
"""MLC-LLM folders (what WebLLM runs) made from three tiny fixture models, with transformers
references on the weights MLC's own dequantization gives back.

  tests/fixtures/arch/llama-mlc   tests/fixtures/arch/llama, q4f16_1, `tensor-cache.json` (the
                                  name MLC-LLM writes since Sep 2025), shards cut at 16 KiB
                                  instead of MLC's 32 MiB so the folder has several (and
                                  out-of-band ones), tokenizer.json + tokenizer_config.json
  tests/fixtures/arch/phi3-mlc    tests/fixtures/arch/phi3, q4f16_1, `ndarray-cache.json` (the
                                  name in the folders published before that), Phi-3's own MLC
                                  names (transformer.h.{i}.mixer.qkv_proj, ...)
  tests/fixtures/arch/qwen2-mlc   tests/fixtures/arch/qwen2, q4f32_1 (float32 scales and norms,
                                  which the f32-to-bf16 encoding stores as bfloat16), Qwen's fused
                                  c_attn with its bias, tied embedding, eos [2, 3]
  tests/fixtures/arch/gemma2-mlc  tests/fixtures/arch/gemma2, q4f16_2 (embedding left float16),
                                  norm weights stored plus one (gemma2_loader.py `add_one`); MLC's
                                  Gemma has no lm_head (the embedding is the head), so the
                                  fixture's untied head is dropped and the reference is tied

Ported from the sources (mlc-ai/mlc-llm 79d603f085f50500e9509fa01785ffa7ecfaaa93, apache/tvm
5d4dc8721307cf9677becacf0395c19be130e206), since neither package is installed here:
- python/mlc_llm/quantization/group_quantization.py `GroupQuantize._quantize` and utils.py
  `pack_weight` (q4f16_1 / q4f32_1 from quantization.py: group 32, int4 in uint32, max_int 7,
  "NK" layout): per row and group of 32, scale = max|w| / 7 and q = clip(round(w / scale + 7),
  0, 14), every operation in the model dtype (float16 / float32; numpy's float16 ops round each
  result as LLVM's promoted ones do); round is TVM's `tirx.round`, which the CPU (llvm) target
  lowers to `llvm.nearbyint` (half to even, as np.round). Element i of a row goes to bits 4 (i % 8)
  of word i / 8. Linear and Embedding weights are quantized (q4f16_1 quantizes the embedding and
  the LM head too) into `<name>.q_weight` / `<name>.q_scale`; every other parameter is cast to
  the model dtype (`model.to(dtype)`; loader map functions `x.astype(dtype)`).
- python/mlc_llm/loader/standard_loader.py (q/k/v and gate/up concatenated on axis 0 into
  qkv_proj / gate_up_proj; Qwen's target c_attn with the biases too), phi3_loader.py (Phi-3's
  names), huggingface_loader.py `_loading_order` (parameters in the order the source file lists
  the tensors they come from).
- python/tvm/contrib/tvmjs.py `dump_tensor_cache` with `encode_format="f32-to-bf16"` (as
  interface/convert_weight.py calls it; `_convert_f32_to_bf16` for float32 arrays, every record's
  "format" "f32-to-bf16", the `-b16.json` copy when one was converted) and
  `TensorCacheShardingManager` (shard cap, out-of-band shards), metadata as convert_weight's
  `_metadata_callback`.
- python/mlc_llm/interface/gen_config.py + protocol/mlc_chat_config.py (mlc-chat-config.json:
  model_config = the model's config dataclass fields, generation_config.json's values for unset
  fields, system defaults, the registered "LM" conversation template), model/*_model.py config
  classes' `__post_init__` (position_embedding_base, context_window_size, prefill_chunk_size,
  head_dim, Phi-3's rope_scaling). The source configs are given to MLC in the transformers 4.x
  layout (rope_theta + rope_scaling), as the published MLC models were converted from.

reference.json / logits.f32 as in tests/fixtures/arch (prompt and greedy length from the base
family's reference): fp32 transformers logits of the base model whose weights are replaced by
what the folder holds, decoded as MLC documents it: quantized weights w = (q - 7) * scale
(computed exactly; MLC's own TE kernel evaluates that product in the model dtype, float16 for
q4f16_1, which rounds it to 11 bits), other tensors decoded from their stored dtype.

tokenizer.json (llama-mlc only): a stand-in byte-level BPE with one token per byte (id = byte, as
the GGUF fixtures' stand-in vocabulary) and no merges; tokenizer_config.json a small chat template.

Usage: ~/.cache/refenv/bin/python tests/scripts/make_mlc_fixtures.py   (needs numpy, torch,
transformers, safetensors, tokenizers)
"""

import hashlib
import json
import os
import shutil

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import AutoModelForCausalLM

ARCH = os.path.join(os.path.dirname(__file__), "..", "fixtures", "arch")
# (base fixture, output, quantization, tensor cache file name, shard cap in bytes, tokenizer)
JOBS = [
    ("llama", "llama-mlc", "q4f16_1", "tensor-cache.json", 16 << 10, True),
    ("phi3", "phi3-mlc", "q4f16_1", "ndarray-cache.json", 32 << 20, False),
    ("qwen2", "qwen2-mlc", "q4f32_1", "tensor-cache.json", 32 << 20, False),
    ("gemma2", "gemma2-mlc", "q4f16_2", "tensor-cache.json", 32 << 20, False),
]
MODEL_DTYPE = {"q4f16_1": np.float16, "q4f32_1": np.float32, "q4f16_2": np.float16}
# q4f16_2 keeps the embedding and the LM head as floats (quantize_embedding / quantize_final_fc).
QUANTIZE_EMBEDDING = {"q4f16_1": True, "q4f32_1": True, "q4f16_2": False}
GROUP = 32
MAX_INT = 7  # 2 ** (4 - 1) - 1


# --- group_quantization.py -------------------------------------------------------------------

def group_quantize(w: np.ndarray, dt) -> tuple[np.ndarray, np.ndarray]:
    """GroupQuantize._quantize + pack_weight for a [out, in] weight in the model dtype `dt`."""
    out, k = w.shape
    assert k % GROUP == 0, "the fixtures' rows are whole groups (MLC pads them otherwise)"
    g = w.astype(dt).reshape(out, k // GROUP, GROUP)
    max_int = dt(MAX_INT)
    max_abs = np.abs(g).max(axis=2)
    scale = (max_abs.astype(dt) / max_int).astype(dt)
    scaled = np.round(g / scale[..., None] + max_int)
    scaled = np.minimum(np.maximum(scaled, dt(0)), max_int * dt(2)).astype(np.uint32)
    assert scaled.dtype == np.uint32 and scaled.max() <= 14
    q = scaled.reshape(out, k // 8, 8)
    words = np.zeros((out, k // 8), np.uint32)
    for r in range(8):
        words |= q[..., r] << np.uint32(4 * r)
    return words, scale


def dequantize(words: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """w = (q - 7) * scale, element i of a row from bits 4 (i % 8) of word i / 8 (exact)."""
    out, n = words.shape
    q = np.stack([(words >> np.uint32(4 * r)) & np.uint32(15) for r in range(8)], axis=-1).reshape(out, n * 8)
    s = np.repeat(scale.astype(np.float64), GROUP, axis=1)
    return ((q.astype(np.float64) - MAX_INT) * s).astype(np.float32)


# --- tvmjs.py --------------------------------------------------------------------------------

def f32_to_bf16(value: np.ndarray) -> np.ndarray:
    """tvmjs._convert_f32_to_bf16: round to nearest even inside the bf16 range, else truncate."""
    cap = np.finfo("float32").max
    bf16_limit = ((np.array([cap.view("uint32")]) >> 16) << 16).view("float32")[0]
    data = value.view("uint32")
    bias = np.where(np.logical_and(value < bf16_limit, value > -bf16_limit), ((data >> 16) & 1) + 0x7FFF,
                    np.zeros_like(data))
    return ((data + bias) >> 16).astype("uint16")


def bf16_to_f32(v: np.ndarray) -> np.ndarray:
    return (v.astype("uint32") << 16).view("float32")


class Shards:
    """tvmjs.TensorCacheShardingManager (no updates)."""

    def __init__(self, out_dir: str, cap: int):
        self.out_dir, self.cap = out_dir, cap
        self.records, self.data, self.shards = [], bytearray(), []

    def append(self, data: bytes, rec: dict):
        if len(self.data) + len(data) >= self.cap:
            if len(data) * 2 >= self.cap:  # out of band: a shard of its own
                self._commit(data, [{**rec, "byteOffset": 0}])
                return
            self.commit()
        self.records.append({**rec, "byteOffset": len(self.data)})
        self.data += data

    def commit(self):
        if self.data:
            self._commit(self.data, self.records)
            self.records, self.data = [], bytearray()

    def _commit(self, data, records):
        path = f"params_shard_{len(self.shards)}.bin"
        with open(os.path.join(self.out_dir, path), "wb") as f:
            f.write(data)
        self.shards.append({"dataPath": path, "format": "raw-shard", "nbytes": len(data), "records": records,
                            "md5sum": hashlib.md5(bytes(data)).hexdigest()})


def dump_tensor_cache(params, out_dir: str, cache_name: str, cap: int, meta: dict) -> dict:
    """dump_tensor_cache(params, out_dir, encode_format="f32-to-bf16"): returns {name: stored array}
    (what a reader decodes: float32 arrays come back from bfloat16)."""
    shards = Shards(out_dir, cap)
    stored, converted = {}, False
    for name, v in params:
        dtype = str(v.dtype)
        if dtype == "float32":
            data, converted = f32_to_bf16(v).tobytes(), True
            stored[name] = bf16_to_f32(f32_to_bf16(v)).reshape(v.shape)
        else:
            data = v.tobytes()
            stored[name] = v
        shards.append(data, {"name": name, "shape": list(v.shape), "dtype": dtype, "format": "f32-to-bf16",
                             "nbytes": len(data)})
    shards.commit()
    cache = {"metadata": meta, "records": shards.shards}
    with open(os.path.join(out_dir, cache_name), "w") as f:
        json.dump(cache, f, indent=4)
    if converted:
        b16 = json.loads(json.dumps(cache))
        for s in b16["records"]:
            for r in s["records"]:
                if r["dtype"] == "float32":
                    r["format"], r["dtype"] = "raw", "bfloat16"
        with open(os.path.join(out_dir, cache_name.replace(".json", "-b16.json")), "w") as f:
            json.dump(b16, f, indent=4)
    return stored


# --- the loaders: HF tensors -> MLC parameters -----------------------------------------------

def mlc_params(family: str, tensors: dict, order: list, n_layers: int):
    """[(MLC name, [HF names], kind)] in `_loading_order`: kind 'linear', 'embed' or 'other'."""
    fused = {}
    for i in range(n_layers):
        a, m = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        if family == "phi3":
            h = f"transformer.h.{i}"
            fused[f"{a}.qkv_proj.weight"] = f"{h}.mixer.qkv_proj.weight"
            fused[f"{a}.o_proj.weight"] = f"{h}.mixer.out_proj.weight"
            fused[f"{m}.gate_up_proj.weight"] = f"{h}.mlp.gate_up_proj.weight"
            fused[f"{m}.down_proj.weight"] = f"{h}.mlp.down_proj.weight"
            fused[f"model.layers.{i}.input_layernorm.weight"] = f"{h}.ln.weight"
            fused[f"model.layers.{i}.post_attention_layernorm.weight"] = f"{h}.post_attention_layernorm.weight"
            continue
        qkv = "c_attn" if family == "qwen2" else "qkv_proj"
        for p in "qkv":
            fused[f"{a}.{p}_proj.weight"] = f"{a}.{qkv}.weight"
            fused[f"{a}.{p}_proj.bias"] = f"{a}.{qkv}.bias"
        fused[f"{m}.gate_proj.weight"] = fused[f"{m}.up_proj.weight"] = f"{m}.gate_up_proj.weight"
    if family == "phi3":
        fused["model.embed_tokens.weight"] = "transformer.embd.weight"
        fused["model.norm.weight"] = "transformer.norm.weight"
    sources: dict = {}
    for hf in order:
        if family == "gemma2" and hf == "lm_head.weight":
            continue  # GemmaForCausalLM has no lm_head parameter
        sources.setdefault(fused.get(hf, hf), []).append(hf)
    out = []
    for mlc, hfs in sources.items():
        # concatenation order of the standard loader: q, k, v and gate, up
        hfs.sort(key=lambda n: ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"].index(n.split(".")[-2])
                 if n.split(".")[-2] in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj") else 0)
        is_embed = mlc.endswith(("embed_tokens.weight", "embd.weight"))
        is_linear = mlc.endswith(".weight") and tensors[hfs[0]].ndim == 2 and not is_embed
        out.append((mlc, hfs, "embed" if is_embed else "linear" if is_linear else "other"))
    return out


# --- mlc-chat-config.json --------------------------------------------------------------------

def legacy_rope(cfg: dict) -> tuple[float, dict | None]:
    """The transformers 5 `rope_parameters` as 4.x's rope_theta + rope_scaling."""
    rp = dict(cfg.get("rope_parameters") or {})
    theta = rp.pop("rope_theta", 10000.0)
    rp.pop("partial_rotary_factor", None)
    return theta, (rp if rp.get("rope_type", "default") != "default" else None)


def model_config(family: str, cfg: dict) -> dict:
    """The MLC config dataclass's fields (`asdict`, kwargs dropped) after `__post_init__`."""
    theta, scaling = legacy_rope(cfg)
    ctx = cfg["max_position_embeddings"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    common = dict(hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
                  num_attention_heads=cfg["num_attention_heads"], num_hidden_layers=cfg["num_hidden_layers"],
                  rms_norm_eps=cfg["rms_norm_eps"], vocab_size=cfg["vocab_size"])
    if family == "llama":
        assert scaling["rope_type"] == "llama3"
        return dict(**common, tie_word_embeddings=cfg["tie_word_embeddings"], position_embedding_base=theta,
                    rope_scaling=scaling, context_window_size=ctx, prefill_chunk_size=min(ctx, 8192),
                    num_key_value_heads=cfg["num_key_value_heads"], head_dim=head_dim, tensor_parallel_shards=1,
                    pipeline_parallel_stages=1, max_batch_size=128, disaggregation=False)
    if family == "phi3":
        # Phi3Config: rope_scaling needs "type" (4.x); __post_init__ adds rope_type and the sizes.
        rs = {"type": "longrope", "long_factor": scaling["long_factor"], "short_factor": scaling["short_factor"],
              "rope_type": "longrope", "max_position_embeddings": ctx,
              "original_max_position_embeddings": cfg["original_max_position_embeddings"]}
        return dict(model_type="phi3", hidden_size=cfg["hidden_size"], vocab_size=cfg["vocab_size"],
                    num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
                    intermediate_size=cfg["intermediate_size"], rms_norm_eps=cfg["rms_norm_eps"],
                    num_key_value_heads=cfg["num_key_value_heads"], max_position_embeddings=ctx,
                    position_embedding_base=theta, rope_scaling=rs,
                    original_max_position_embeddings=cfg["original_max_position_embeddings"],
                    context_window_size=ctx, prefill_chunk_size=min(ctx, 8192), head_dim=head_dim,
                    tensor_parallel_shards=1, max_batch_size=128, tie_word_embeddings=cfg["tie_word_embeddings"],
                    partial_rotary_factor=cfg["partial_rotary_factor"])
    if family == "qwen2":
        return dict(hidden_act=cfg["hidden_act"], **common, num_key_value_heads=cfg["num_key_value_heads"],
                    rope_theta=theta, tie_word_embeddings=cfg["tie_word_embeddings"], context_window_size=ctx,
                    prefill_chunk_size=min(ctx, 8192), tensor_parallel_shards=1, head_dim=head_dim,
                    dtype="float32", max_batch_size=128)
    if family == "gemma2":
        # Gemma2Config.__post_init__ sets context_window_size to the sliding window.
        return dict(**common, attention_bias=cfg["attention_bias"], num_key_value_heads=cfg["num_key_value_heads"],
                    head_dim=head_dim, hidden_activation=cfg["hidden_activation"], position_embedding_base=theta,
                    context_window_size=cfg["sliding_window"], prefill_chunk_size=min(ctx, 8192),
                    tensor_parallel_shards=1, max_batch_size=128,
                    attn_logit_softcapping=cfg["attn_logit_softcapping"],
                    final_logit_softcapping=cfg["final_logit_softcapping"],
                    query_pre_attn_scalar=cfg["query_pre_attn_scalar"], sliding_window=cfg["sliding_window"])
    raise ValueError(family)


def chat_config(family: str, quant: str, cfg: dict, gen: dict, tokenizer_files: list) -> dict:
    mc = model_config(family, cfg)
    c = {"version": "0.1.0", "model_type": family, "quantization": quant, "model_config": mc,
         "vocab_size": mc["vocab_size"], "context_window_size": mc["context_window_size"],
         "sliding_window_size": -1, "prefill_chunk_size": mc["prefill_chunk_size"], "attention_sink_size": -1,
         "tensor_parallel_shards": 1, "pipeline_parallel_stages": 1, "active_vocab_size": mc["vocab_size"],
         "temperature": None, "presence_penalty": None, "frequency_penalty": None, "repetition_penalty": None,
         "top_p": None, "tokenizer_files": tokenizer_files,
         "tokenizer_info": {"token_postproc_method": "byte_level", "prepend_space_in_encode": False,
                            "strip_space_in_decode": False},
         # ConvTemplateRegistry "LM" (conversation_template/registry.py), to_json_dict()
         "conv_template": {"name": "LM", "system_template": "{system_message}", "system_message": "",
                           "system_prefix_token_ids": [1], "add_role_after_system_message": True,
                           "roles": {"user": "", "assistant": ""},
                           "role_templates": {"user": "{user_message}", "assistant": "{assistant_message}",
                                              "tool": "{tool_message}"},
                           "messages": [], "seps": [""], "role_content_sep": "", "role_empty_sep": "",
                           "stop_str": [], "stop_token_ids": [2], "strip_reasoning_in_history": False,
                           "function_string": "", "use_function_calling": False},
         "pad_token_id": None, "bos_token_id": None, "eos_token_id": None, "model_task": "chat",
         "embedding_metadata": None}
    for src in (gen, cfg):  # gen_config step 2: generation_config.json, then config.json
        for k, v in src.items():
            if k in c and c[k] is None:
                c[k] = v
    defaults = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "temperature": 1.0,
                "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "top_p": 1.0}
    for k, v in defaults.items():
        if c[k] is None:
            c[k] = v
    return c


def write_tokenizer(out: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    b2u = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(out, "tokenizer.json"))
    template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": template, "model_max_length": 64}, f, indent=2)


def run(base: str, out_name: str, quant: str, cache_name: str, cap: int, tokenizer: bool):
    src, out = os.path.join(ARCH, base), os.path.join(ARCH, out_name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    dt = MODEL_DTYPE[quant]
    with safe_open(os.path.join(src, "model.safetensors"), "np") as f:
        order = list(f.keys())
        tensors = {k: f.get_tensor(k) for k in order}
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(src, "generation_config.json")) as f:
        gen = json.load(f)

    params, n_params = [], 0
    for mlc, hfs, kind in mlc_params(base, tensors, order, cfg["num_hidden_layers"]):
        x = np.concatenate([tensors[h] for h in hfs], axis=0)
        if base == "gemma2" and mlc.endswith("norm.weight"):
            x = x + 1  # gemma2_loader.py add_one: (x + 1).astype(dtype)
        x = x.astype(dt)  # the loaders' map functions: .astype(dtype)
        n_params += x.size
        if kind == "other" or (kind == "embed" and not QUANTIZE_EMBEDDING[quant]):
            params.append((mlc, x))
        else:
            words, scale = group_quantize(x, dt)
            stem = mlc[: -len(".weight")]
            params += [(f"{stem}.q_weight", words), (f"{stem}.q_scale", scale)]
    total = sum(v.size * v.itemsize for _, v in params)
    meta = {"ParamSize": len(params), "ParamBytes": float(total), "BitsPerParam": total * 8.0 / n_params}
    stored = dump_tensor_cache(params, out, cache_name, cap, meta)

    tokenizer_files = []
    if tokenizer:
        write_tokenizer(out)
        tokenizer_files = ["tokenizer.json", "tokenizer_config.json"]
    with open(os.path.join(out, "mlc-chat-config.json"), "w") as f:
        json.dump(chat_config(base, quant, cfg, gen, tokenizer_files), f, indent=2)

    # The weights as a reader of the folder gets them, under the transformers names.
    weights = {}
    for mlc, hfs, kind in mlc_params(base, tensors, order, cfg["num_hidden_layers"]):
        stem = mlc[: -len(".weight")]
        if mlc in stored:
            w = np.asarray(stored[mlc], np.float64)
            if base == "gemma2" and mlc.endswith("norm.weight"):
                w = w - 1  # transformers' Gemma norms add the one back
        else:
            w = dequantize(stored[f"{stem}.q_weight"], stored[f"{stem}.q_scale"])
        w = np.asarray(w, np.float32)
        at = 0
        for h in hfs:
            n = tensors[h].shape[0]
            weights[h] = w[at:at + n]
            at += n

    with open(os.path.join(src, "reference.json")) as f:
        base_ref = json.load(f)
    # MLC's Gemma ties the head to the embedding whatever the source config says.
    tie = {"tie_word_embeddings": True} if base == "gemma2" else {}
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, **tie).eval()
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()},
                                                strict=False)
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
    with open(os.path.join(src, "logits.f32"), "rb") as f:
        f32_logits = np.frombuffer(f.read(), "<f4").reshape(logits.shape)
    ref = dict(family=out_name, base=base, quantization=quant, tensor_cache=cache_name, prompt=prompt,
               greedy=seq[len(prompt):], greedy_margins=margins, argmax=[int(i) for i in logits.argmax(-1)],
               logits_file="logits.f32", logits_shape=list(logits.shape), logits_std=float(logits.std()),
               # how far quantization moved the logits from the float model's: a reader that ignored the
               # codes or the scales would be off by about this much
               max_abs_logit_diff_from_float=float(np.abs(logits - f32_logits).max()),
               shards=[s for s in sorted(os.listdir(out)) if s.startswith("params_shard_")],
               versions={"numpy": np.__version__, "torch": torch.__version__,
                         "transformers": transformers.__version__})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{out_name}: {len(params)} parameters in {len(ref['shards'])} shards, {total} bytes, "
          f"greedy {ref['greedy']}, {ref['max_abs_logit_diff_from_float']:.3f} from the float model")


def main():
    torch.set_num_threads(1)
    for job in JOBS:
        run(*job)


if __name__ == "__main__":
    main()

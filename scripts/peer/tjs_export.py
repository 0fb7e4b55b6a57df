#!/usr/bin/env python3
"""The weights of a ferrolm benchmark GGUF as a transformers.js model folder (the peer benchmark).

    tjs_export.py GGUF OUTDIR [--check] [--keep-fp32] [--opset N] [--attn eager|sdpa]

The issue asks for transformers.js on WebGPU "if you can make an ONNX export of the same weights":
the random-weight files `ferrolm make-gguf` writes (scripts/gpu-browser/device-bench.sh) are
dequantized here with a small numpy GGUF reader (the `gguf` package is not on the GPU machine),
put into a Hugging Face model of the same architecture (LlamaForCausalLM for SmolLM2 and
Llama 3.2; Phi3ForCausalLM for Phi-3), exported to ONNX through transformers' own exporter
(torch.export + torch.onnx, dynamo) with the decoder-with-cache signature transformers.js 4.x
feeds, and quantized to 4 bits the way transformers.js's `dtype: 'q4'` files are made
(scripts/quantize.py of transformers.js, mode q4: onnxruntime's MatMul4BitsQuantizer, called
MatMulNBitsQuantizer in onnxruntime 1.30, 4 bits, block 32, symmetric, default accuracy level;
only MatMul weights, the embedding Gather stays float32). OUTDIR then holds what
`AutoModelForCausalLM.from_pretrained(OUTDIR, { device: 'webgpu', dtype: 'q4' })` reads:

    OUTDIR/config.json             model_type, sizes, eos id and `transformers.js_config`
    OUTDIR/generation_config.json
    OUTDIR/onnx/model_q4.onnx      graph (MatMulNBits)
    OUTDIR/onnx/model_q4.onnx_data weights (external data: Phi-3-mini's pass 2 GB)

Graph signature (what transformers.js 4.3.1 reads, src/models/modeling_utils.js and configs.js):
inputs input_ids, attention_mask, position_ids [batch_size, sequence_length] int64,
num_logits_to_keep (int64 scalar: transformers.js sets it to 1 while generating, so the prefill
computes one row of logits, not 512 x vocab; 0 means all rows), past_key_values.{i}.key/value
[batch_size, kv_heads, past_sequence_length, head_dim]; outputs logits and present.{i}.key/value.
The first cache dimension must be named exactly `batch_size`: transformers.js makes the empty
first-step cache from the session's input shapes and knows only that symbol (other symbolic
dims become 0).

Same function as ferrolm: llama.cpp's converter stores Llama q/k rows permuted so that rotary
pairs are (2i, 2i+1) (ferrolm's loader keeps that layout and rotates pairs, `rope_neox = false`);
the HF model rotates halves (i, i + d/2), so the permutation is undone here and both compute the
same thing. Phi-3 GGUFs are not permuted. Llama 3's `rope_freqs.weight` becomes the `llama3`
rope parameters of config.json (the values make-gguf writes are those parameters' factors; a
check compares them).

Attention is traced from transformers' eager implementation (MatMul, mask Add, Softmax,
MatMul, as optimum's exports for transformers.js look): the SDPA path lowers with an IsNaN
that ONNX Runtime Web's WebGPU provider lacks, which would put every layer's scores on the CPU.

--check compares, on a 12-token prompt and one cached step, the fp32 ONNX graph and the q4 one
(onnxruntime, CPU) with the torch model: the fp32 graph must agree to float rounding; q4 differs
by the requantization (a Q4_0 block whose largest magnitude is positive does not round-trip:
about 11% of the weights move by up to one quantization step). With --ferrolm BIN it also
compares the torch model's last logits after a 64-token prompt with `ferrolm generate
--top-logits` on the GGUF itself (the test that the conversion, permutation included, is right).
"""
import argparse
import json
import os
import struct
import time
from collections import Counter

import numpy as np

# ggml type ids (ggml.h) and block geometry: (elements per block, bytes per block).
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 3, 8, 30
BLOCKS = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q4_0: (32, 18), GGML_Q4_1: (32, 20), GGML_Q8_0: (32, 34), GGML_BF16: (1, 2)}


def log(*a):
    print(f"[tjs_export {time.strftime('%H:%M:%S')}]", *a, flush=True)


# ---------------------------------------------------------------------------------------------
# GGUF reading (format v2/v3): the header by hand, tensor data through a read-only memmap.


class Gguf:
    def __init__(self, path):
        self.path = path
        self.meta = {}
        self.tensors = {}  # name -> (ggml type, dims in ggml order, absolute offset)
        with open(path, "rb") as f:
            buf = f.read(1 << 20)
            self._f, self._buf, self._pos = f, buf, 0
            if self._take(4) != b"GGUF":
                raise ValueError(f"{path}: not a GGUF file")
            version = self._u32()
            if version < 2:
                raise ValueError(f"{path}: GGUF version {version} is not supported")
            n_tensors, n_kv = self._u64(), self._u64()
            for _ in range(n_kv):
                key = self._str()
                self.meta[key] = self._value(self._u32())
            infos = []
            for _ in range(n_tensors):
                name = self._str()
                dims = [self._u64() for _ in range(self._u32())]
                ty, off = self._u32(), self._u64()
                infos.append((name, ty, dims, off))
            align = int(self.meta.get("general.alignment", 32))
            data_start = (self._consumed() + align - 1) // align * align
        for name, ty, dims, off in infos:
            self.tensors[name] = (ty, dims, data_start + off)
        self._mm = np.memmap(path, dtype=np.uint8, mode="r")

    # A small buffered cursor: the vocabulary of Llama 3 is 128k strings, read one by one.
    def _consumed(self):
        return self._base + self._pos if hasattr(self, "_base") else self._pos

    def _take(self, n):
        if self._pos + n > len(self._buf):
            self._base = getattr(self, "_base", 0) + self._pos
            self._buf = self._buf[self._pos:] + self._f.read(max(n, 1 << 20))
            self._pos = 0
        b = self._buf[self._pos:self._pos + n]
        if len(b) < n:
            raise ValueError(f"{self.path}: truncated header")
        self._pos += n
        return b

    def _u32(self):
        return struct.unpack("<I", self._take(4))[0]

    def _u64(self):
        return struct.unpack("<Q", self._take(8))[0]

    def _str(self):
        return self._take(self._u64()).decode("utf-8", errors="replace")

    # GGUF value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array,
    # 10 u64, 11 i64, 12 f64.
    _SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def _value(self, t):
        if t in self._SCALARS:
            fmt = self._SCALARS[t]
            return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u32(), self._u64()
            if et in self._SCALARS:
                fmt = self._SCALARS[et]
                size = struct.calcsize(fmt)
                return list(np.frombuffer(self._take(size * n), dtype=np.dtype(fmt)))
            return [self._value(et) for _ in range(n)]
        raise ValueError(f"{self.path}: unknown GGUF value type {t}")

    def array(self, name):
        """The tensor as float32 in numpy order (ggml dims reversed: a matrix is [out, in])."""
        ty, dims, off = self.tensors[name]
        n = int(np.prod(dims))
        if ty not in BLOCKS:
            raise ValueError(f"{name}: ggml type {ty} is not one this reader dequantizes (F32, F16, BF16, Q4_0, Q4_1, Q8_0)")
        per, size = BLOCKS[ty]
        raw = self._mm[off:off + n // per * size]
        shape = tuple(reversed([int(d) for d in dims]))
        if ty == GGML_F32:
            return raw.view(np.float32).reshape(shape).copy()
        if ty == GGML_F16:
            return raw.view(np.float16).astype(np.float32).reshape(shape)
        if ty == GGML_BF16:
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        b = raw.reshape(-1, size)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)  # [blocks, 1]
        if ty == GGML_Q8_0:  # d, 32 x int8: x = q * d
            x = b[:, 2:].copy().view(np.int8).astype(np.float32) * d
        else:
            # Q4_0: d, 16 bytes; element j is the low nibble of byte j, element j + 16 the high
            # nibble; x = (q - 8) * d. Q4_1: d, m, 16 bytes; x = q * d + m.
            qs = b[:, 4:] if ty == GGML_Q4_1 else b[:, 2:]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
            if ty == GGML_Q4_0:
                x = (q - 8.0) * d
            else:
                m = b[:, 2:4].copy().view(np.float16).astype(np.float32)
                x = q * d + m
        return x.reshape(shape)


# ---------------------------------------------------------------------------------------------
# GGUF -> Hugging Face config and state dict.


def unpermute(w, n_head):
    """Undo llama.cpp's convert_hf_to_gguf `permute` of q/k rows (pairs back to halves)."""
    # permute: rows (head, t, j) -> (head, j, t), t in {0, 1} the half, j < d/2 the pair; back:
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(theta, head_dim, factor, low, high, orig):
    """The `rope_freqs.weight` values llama.cpp's converter writes for rope_type llama3."""
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen, high_wavelen = orig / low, orig / high
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def hf_config(g):
    """config.json fields (a plain dict) for the GGUF's architecture."""
    arch = g.meta["general.architecture"]
    k = lambda s, d=None: g.meta.get(f"{arch}.{s}", d)
    heads, kv = int(k("attention.head_count")), int(k("attention.head_count_kv", k("attention.head_count")))
    hidden = int(k("embedding_length"))
    head_dim = int(k("attention.key_length", hidden // heads))
    vocab = int(k("vocab_size", len(g.meta.get("tokenizer.ggml.tokens", [])) or 0))
    theta = float(k("rope.freq_base", 10000.0))
    cfg = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(k("feed_forward_length")),
        num_hidden_layers=int(k("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        max_position_embeddings=int(k("context_length", 4096)),
        rms_norm_eps=float(k("attention.layer_norm_rms_epsilon", 1e-5)),
        tie_word_embeddings="output.weight" not in g.tensors,
        bos_token_id=int(g.meta.get("tokenizer.ggml.bos_token_id", 1)),
        eos_token_id=int(g.meta.get("tokenizer.ggml.eos_token_id", 2)),
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        use_cache=True,
    )
    rope = {"rope_type": "default", "rope_theta": theta}
    if arch == "llama":
        cfg.update(model_type="llama", architectures=["LlamaForCausalLM"])
        if "rope_freqs.weight" in g.tensors:
            # The file holds only the resulting factors: find the Llama 3 parameters (factor 32
            # for 3.2, 8 for 3.1; low 1, high 4, original context 8192) that reproduce them.
            got = g.array("rope_freqs.weight")
            for factor in (32.0, 8.0, 16.0, 4.0):
                want = llama3_factors(theta, head_dim, factor, 1.0, 4.0, 8192.0)
                if np.allclose(got, want, rtol=1e-5):
                    rope = {"rope_type": "llama3", "rope_theta": theta, "factor": factor, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
                    break
            else:
                raise ValueError(f"rope_freqs.weight is not Llama 3 scaling of a known factor: {got[:8]} ...")
    elif arch == "phi3":
        if any(n.startswith("rope_factors") for n in g.tensors):
            raise ValueError("Phi-3 long-rope files are not handled (make-gguf's phi-3-mini 4k has none)")
        cfg.update(model_type="phi3", architectures=["Phi3ForCausalLM"], pad_token_id=None)
    else:
        raise ValueError(f"architecture {arch!r}: only llama and phi3 are exported")
    cfg["rope_parameters"] = rope
    return arch, cfg


def hf_state_dict(g, arch, cfg):
    """name -> float32 numpy array, HF names and layout."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    sd = {"model.embed_tokens.weight": g.array("token_embd.weight"), "model.norm.weight": g.array("output_norm.weight")}
    if not cfg["tie_word_embeddings"]:
        sd["lm_head.weight"] = g.array("output.weight")
    for i in range(cfg["num_hidden_layers"]):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = g.array(b + "attn_norm.weight")
        sd[p + "post_attention_layernorm.weight"] = g.array(b + "ffn_norm.weight")
        sd[p + "self_attn.o_proj.weight"] = g.array(b + "attn_output.weight")
        sd[p + "mlp.down_proj.weight"] = g.array(b + "ffn_down.weight")
        if arch == "llama":
            sd[p + "self_attn.q_proj.weight"] = unpermute(g.array(b + "attn_q.weight"), heads)
            sd[p + "self_attn.k_proj.weight"] = unpermute(g.array(b + "attn_k.weight"), kv)
            sd[p + "self_attn.v_proj.weight"] = g.array(b + "attn_v.weight")
            sd[p + "mlp.gate_proj.weight"] = g.array(b + "ffn_gate.weight")
            sd[p + "mlp.up_proj.weight"] = g.array(b + "ffn_up.weight")
        else:  # phi3: fused [q; k; v] and [gate; up], NeoX rotary already (no permutation)
            sd[p + "self_attn.qkv_proj.weight"] = g.array(b + "attn_qkv.weight")
            sd[p + "mlp.gate_up_proj.weight"] = g.array(b + "ffn_up.weight")
    return sd


# ---------------------------------------------------------------------------------------------
# The torch model and its ONNX export.


def torch_model(arch, cfg, sd, attn="eager"):
    import torch
    import transformers

    conf_cls = transformers.LlamaConfig if arch == "llama" else transformers.Phi3Config
    model_cls = transformers.LlamaForCausalLM if arch == "llama" else transformers.Phi3ForCausalLM
    conf = conf_cls(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    # Eager attention: MatMul, Add(mask), Softmax, MatMul, as optimum's exports (transformers.js's
    # converter) trace it. SDPA lowers through onnxscript to the same plus IsNaN/Where after the
    # Softmax (for fully masked rows, which a causal mask never has); ONNX Runtime's WebGPU
    # provider has no IsNaN, so every layer's scores would go to the CPU and back.
    conf._attn_implementation = attn
    # Built on the meta device and given the GGUF's tensors: no random init of a billion weights.
    with torch.device("meta"):
        model = model_cls(conf)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False, assign=True)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg["tie_word_embeddings"])]
    if missing or unexpected:
        raise ValueError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if cfg["tie_word_embeddings"]:
        model.lm_head.weight = model.model.embed_tokens.weight
    # The rotary module's inv_freq is a buffer computed at construction: make it on the CPU.
    model.model.rotary_emb = type(model.model.rotary_emb)(conf)
    model.eval()
    return model


def cache_wrapper(model, n_layers):
    """A module with forward(input_ids, attention_mask, position_ids, past) -> (logits, present
    k/v ...): flat tensors in and out, so that torch.onnx gives every cache tensor its own graph
    input and output, named as transformers.js expects (io_names)."""
    import torch
    from transformers import DynamicCache

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, position_ids, past):
            cache = DynamicCache(config=self.m.config)
            for i in range(n_layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
            flat = [out.logits]
            for layer in out.past_key_values.layers[:n_layers]:
                flat += [layer.keys, layer.values]
            return tuple(flat)

    return Wrapper().eval()


def io_names(n_layers):
    kv = [f"{i}.{x}" for i in range(n_layers) for x in ("key", "value")]
    return (["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{n}" for n in kv],
            ["logits"] + [f"present.{n}" for n in kv])


def export_fp32(model, cfg, path, opset):
    """torch.export + torch.onnx (dynamo) with transformers' own ONNX patches (the ones its
    OnnxExporter applies), then the fixes in `finish_graph`. Writes path (+ path.data)."""
    import torch
    from torch.export import Dim
    from transformers.exporters import exporter_onnx
    from transformers.exporters.utils import apply_patches

    n, kvh, hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    # Sample sizes above 1 everywhere: torch.export specializes dimensions of size 0 and 1.
    B, S, P = 2, 5, 3
    ids = torch.randint(0, min(cfg["vocab_size"], 1000), (B, S))
    mask = torch.ones(B, P + S, dtype=torch.int64)
    pos = torch.arange(P, P + S).repeat(B, 1)
    past = [torch.zeros(B, kvh, P, hd) for _ in range(2 * n)]
    b, s, p, t = Dim("batch_size"), Dim("sequence_length"), Dim("past_sequence_length"), Dim("total_sequence_length")
    shapes = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: t}, "position_ids": {0: b, 1: s},
              "past": [{0: b, 2: p} for _ in range(2 * n)]}
    ins, outs = io_names(n)
    w = cache_wrapper(model, n)
    with torch.no_grad(), apply_patches("onnx"):
        prog = torch.onnx.export(w, (ids, mask, pos, past), None, dynamo=True, input_names=ins, output_names=outs,
                                 dynamic_shapes=shapes, opset_version=opset,
                                 custom_translation_table=exporter_onnx._ONNX_TRANSLATION_TABLE, verbose=False)
    exporter_onnx.apply_onnx_ir_fixes(prog)
    proto = prog.model_proto  # weights held in memory by the program
    finish_graph(proto)
    ops = Counter(nd.op_type for nd in proto.graph.node)
    log("graph ops:", dict(sorted(ops.items())))
    if ops.get("IsNaN"):
        log("warning: IsNaN in the graph (ONNX Runtime Web runs it on the CPU): trace eager attention")
    save(proto, path)


def finish_graph(m):
    """In place: (1) the tied LM head reads Transpose(embedding) at run time; give its MatMul
    a transposed copy as an initializer, so that the 4-bit quantizer (constant weights only)
    quantizes it as it does in transformers.js's converted models; (2) a `num_logits_to_keep`
    input slicing the hidden states before the head (transformers.js feeds 1 while generating,
    so prefill computes one row of logits); (3) every leading dimension named `batch_size`."""
    from onnx import TensorProto, helper, numpy_helper

    g = m.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: nd for nd in g.node for o in nd.output}
    head = next(nd for nd in g.node if nd.output[0] == "logits" or "logits" in nd.output)
    if head.op_type != "MatMul":
        raise ValueError(f"logits come from {head.op_type}, expected the LM head MatMul")
    wname = head.input[1]
    if wname not in inits:
        tr = producer.get(wname)
        if tr is None or tr.op_type != "Transpose" or tr.input[0] not in inits:
            raise ValueError(f"LM head weight {wname} is neither an initializer nor Transpose(initializer)")
        arr = numpy_helper.to_array(inits[tr.input[0]], base_dir="")
        new = numpy_helper.from_array(np.ascontiguousarray(arr.T), "lm_head.weight.T")
        g.initializer.append(new)
        head.input[1] = new.name
        if not any(tr.output[0] in nd.input for nd in g.node if nd is not head):
            g.node.remove(tr)
    # (2): Slice(hidden, starts=-k, ends=INT64_MAX, axes=1); k = 0 keeps every row.
    k = helper.make_tensor_value_info("num_logits_to_keep", TensorProto.INT64, [])
    g.input.append(k)
    hidden = head.input[0]
    g.initializer.extend([numpy_helper.from_array(np.array([1], np.int64), "tjs_axes1"),
                          numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64), "tjs_end"),
                          numpy_helper.from_array(np.array([1], np.int64), "tjs_shape1")])
    nodes = [helper.make_node("Neg", ["num_logits_to_keep"], ["tjs_negk"], name="tjs_neg_keep"),
             helper.make_node("Reshape", ["tjs_negk", "tjs_shape1"], ["tjs_start"], name="tjs_keep_start"),
             helper.make_node("Slice", [hidden, "tjs_start", "tjs_end", "tjs_axes1"], ["tjs_kept_hidden"], name="tjs_keep_rows")]
    idx = list(g.node).index(head)
    for j, nd in enumerate(nodes):
        g.node.insert(idx + j, nd)
    head.input[0] = "tjs_kept_hidden"
    # The logits' row count is no longer sequence_length.
    for o in g.output:
        if o.name == "logits":
            o.type.tensor_type.shape.dim[1].dim_param = "logits_rows"
    # (3)
    for v in list(g.input) + list(g.output):
        dims = v.type.tensor_type.shape.dim
        if len(dims) >= 2 and v.name != "num_logits_to_keep":
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "batch_size"
    # Drop stale intermediate shape annotations (ORT re-infers them).
    del g.value_info[:]


def save(proto, path):
    """Weights in one external file beside the graph, as transformers.js's converter writes
    files over 2 GB (config `use_external_data_format`)."""
    import onnx

    data = os.path.basename(path) + "_data"
    if os.path.exists(path + "_data"):
        os.remove(path + "_data")
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                    size_threshold=1024, convert_attribute=False)


def quantize_q4(src, dst):
    """transformers.js scripts/quantize.py, mode q4: MatMul weights to MatMulNBits, 4 bits,
    block 32, symmetric, accuracy level unset; Gather (the embedding) stays float32."""
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    # It logs every node at INFO.
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    m = onnx.load(src)
    q = MatMulNBitsQuantizer(m, bits=4, block_size=32, is_symmetric=True, accuracy_level=None)
    q.process()
    save(q.model.model, dst)


def write_configs(outdir, cfg, gguf_path, arch):
    c = dict(cfg)
    c["torch_dtype"] = "float32"
    c["transformers.js_config"] = {
        # The weights live in onnx/model_q4.onnx_data (one chunk).
        "use_external_data_format": {"model_q4.onnx": 1, "model.onnx": 1},
        "dtype": "q4",
    }
    c["_ferrolm_source"] = os.path.basename(gguf_path)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": False}
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=1)


# ---------------------------------------------------------------------------------------------
# The check: onnxruntime (CPU) against torch.


def run_ort(path, cfg, ids, past=None, keep=0):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    n, kvh, hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    B, S = ids.shape
    P = 0 if past is None else past[0].shape[2]
    feed = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((B, P + S), np.int64),
            "position_ids": np.tile(np.arange(P, P + S, dtype=np.int64), (B, 1)),
            "num_logits_to_keep": np.array(keep, np.int64)}
    ins, outs = io_names(n)
    for j, name in enumerate(ins[3:]):
        feed[name] = past[j] if past is not None else np.zeros((B, kvh, 0, hd), np.float32)
    r = s.run(outs, feed)
    return r[0], r[1:]


def check(model, cfg, fp32_path, q4_path):
    import torch

    rng = np.random.default_rng(0)
    ids = rng.integers(100, min(cfg["vocab_size"], 20000), size=(1, 12))
    nxt = rng.integers(100, min(cfg["vocab_size"], 20000), size=(1, 1))
    w = cache_wrapper(model, cfg["num_hidden_layers"])
    n, kvh, hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    with torch.no_grad():
        r = w(torch.from_numpy(ids), torch.ones(1, 12, dtype=torch.int64), torch.arange(12)[None],
              [torch.zeros(1, kvh, 0, hd) for _ in range(2 * n)])
        ref, ref_past = r[0].numpy(), [x.numpy() for x in r[1:]]
        r2 = w(torch.from_numpy(nxt), torch.ones(1, 13, dtype=torch.int64), torch.tensor([[12]]),
               [torch.from_numpy(x) for x in ref_past])
        ref2 = r2[0].numpy()
    res = {}
    for tag, path in (("fp32", fp32_path), ("q4", q4_path)):
        if path is None:
            continue
        lg, past = run_ort(path, cfg, ids, keep=0)
        lg1, _ = run_ort(path, cfg, ids, keep=1)
        lg2, _ = run_ort(path, cfg, nxt, past=past, keep=1)
        scale = float(np.abs(ref).max())
        res[tag] = {
            "prefill_max_abs_diff": float(np.abs(lg - ref).max()),
            "ref_max_abs": scale,
            "keep1_equals_last_row": float(np.abs(lg1[:, -1] - lg[:, -1]).max()),
            "cached_step_max_abs_diff": float(np.abs(lg2[:, -1] - ref2[:, -1]).max()),
            "argmax_agree_prefill": float((lg.argmax(-1) == ref.argmax(-1)).mean()),
            "argmax_agree_step": bool(lg2[0, -1].argmax() == ref2[0, -1].argmax()),
            "corr_prefill": float(np.corrcoef(lg.ravel(), ref.ravel())[0, 1]),
        }
        log(f"check {tag}:", json.dumps(res[tag]))
    return res


def check_ferrolm(model, cfg, gguf, binary):
    """The torch model against ferrolm itself on the GGUF: the 8 largest last-position logits
    ferrolm reports after 64 prompt ids, and the same ids' logits from torch."""
    import subprocess

    import torch

    ids = [min(100 + (i * 7919) % 20000, cfg["vocab_size"] - 1) for i in range(64)]
    r = subprocess.run([binary, "generate", "--model", gguf, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "1",
                        "--top-logits", "8", "--temperature", "0", "--json"], capture_output=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        log(f"ferrolm check skipped: {binary} exited {r.returncode}: {r.stderr.strip()[-300:]}")
        return None
    top = json.loads(lines[-1])["top_logits"]
    with torch.no_grad():
        lg = model(input_ids=torch.tensor([ids])).logits[0, -1].numpy()
    res = {"ferrolm_top8": top, "max_abs_diff_on_top8": float(max(abs(lg[i] - v) for i, v in top)),
           "same_argmax": int(lg.argmax()) == top[0][0], "logit_std": float(lg.std()), "adapter": json.loads(lines[-1])["stats"].get("adapter", {}).get("name")}
    log("check ferrolm:", json.dumps({k: v for k, v in res.items() if k != "ferrolm_top8"}))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("outdir")
    ap.add_argument("--check", action="store_true", help="compare onnxruntime (fp32 and q4 graphs) with torch")
    ap.add_argument("--keep-fp32", action="store_true", help="keep onnx/model.onnx (+ _data), the unquantized export")
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--ferrolm", metavar="BIN", help="with --check: also compare with `BIN generate --top-logits` on the GGUF")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"], help="transformers attention implementation traced")
    a = ap.parse_args()
    t0 = time.time()
    g = Gguf(a.gguf)
    arch, cfg = hf_config(g)
    cfg["rms_norm_eps"] = float(f"{cfg['rms_norm_eps']:.7g}")  # the f32 1e-5, as config.json writes it
    log(f"{a.gguf}: {arch}, {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab {cfg['vocab_size']}, rope {cfg['rope_parameters']}")
    sd = hf_state_dict(g, arch, cfg)
    log(f"dequantized {sum(v.size for v in sd.values()) / 1e6:.1f} M weights in {time.time() - t0:.1f} s")
    model = torch_model(arch, cfg, sd, a.attn)
    del sd
    onnx_dir = os.path.join(a.outdir, "onnx")
    os.makedirs(onnx_dir, exist_ok=True)
    fp32 = os.path.join(onnx_dir, "model.onnx")
    q4 = os.path.join(onnx_dir, "model_q4.onnx")
    export_fp32(model, cfg, fp32, a.opset)
    log(f"exported {fp32} in {time.time() - t0:.1f} s")
    quantize_q4(fp32, q4)
    log(f"quantized {q4} ({os.path.getsize(q4 + '_data') / 1e6:.0f} MB of weights) at {time.time() - t0:.1f} s")
    write_configs(a.outdir, cfg, a.gguf, arch)
    if a.check:
        res = check(model, cfg, fp32, q4)
        if a.ferrolm:
            res["ferrolm"] = check_ferrolm(model, cfg, a.gguf, a.ferrolm)
        with open(os.path.join(a.outdir, "check.json"), "w") as f:
            json.dump(res, f, indent=1)
    if not a.keep_fp32:
        for p in (fp32, fp32 + "_data"):
            if os.path.exists(p):
                os.remove(p)
    log(f"done in {time.time() - t0:.1f} s: {a.outdir}")


if __name__ == "__main__":
    main()

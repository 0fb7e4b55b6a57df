#!/usr/bin/env python3
"""Copy a GGUF's metadata (tokenizer, chat template, architecture keys) into a GGUF without
tensors: a vocabulary for `ferrolm make-gguf --tokenizer-from` that is small enough to carry.

    python3 scripts/gguf-vocab-only.py MODEL.gguf OUT.gguf
"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(b, p, t):
    if t in SIZES:
        return p + SIZES[t]
    if t == 8:
        (n,) = struct.unpack_from("<Q", b, p)
        return p + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, p)
        p += 12
        if et in SIZES:
            return p + SIZES[et] * n
        for _ in range(n):
            p = skip_value(b, p, et)
        return p
    raise ValueError(f"GGUF value type {t}")


def main(src, dst):
    b = open(src, "rb").read()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    assert magic == b"GGUF", "not a GGUF file"
    p = 24
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", b, p)
        p += 8 + klen
        (t,) = struct.unpack_from("<I", b, p)
        p = skip_value(b, p + 4, t)
    out = struct.pack("<4sIQQ", magic, version, 0, n_kv) + b[24:p]
    out += b"\0" * (-len(out) % 32)
    open(dst, "wb").write(out)
    print(f"{dst}: {len(out)} bytes, {n_kv} metadata keys")


if __name__ == "__main__":
    main(*sys.argv[1:3])

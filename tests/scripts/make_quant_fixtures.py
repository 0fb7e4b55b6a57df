#!/usr/bin/env python3
"""Regenerate the dequantize/quantize fixtures in tests/fixtures/quant/ from gguf-py.

gguf-py (llama.cpp's Python package) is the oracle: its numpy dequantizers mirror ggml-quants.c,
and its Q8_0/Q4_0/Q4_1 quantizers claim bit-exactness with ggml's `quantize_row_*_ref`.

Run from the repository root (needs numpy and gguf: `pip install numpy gguf`):

    python3 tests/scripts/make_quant_fixtures.py

The seed is fixed, so rerunning with the same gguf-py version rewrites identical files.
Checked by crate/tests/quant.rs (`cargo test --release -p ferrolm --test quant`).

Files: `<TYPE>.json` = {"type", "type_id", "n_elements", "raw_hex" (GGUF block bytes),
"expected_hex" (little-endian f32 from gguf.quants.dequantize)};
`quantize_<TYPE>.json` = {"type", "type_id", "n_elements", "input_hex" (little-endian f32),
"expected_hex" (block bytes from gguf.quants.quantize)}.
"""
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

SEED = 20240917
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "quant")

# (type, number of blocks, byte offsets of the f16 scale fields inside a block)
QUANT_TYPES = [
    (T.Q8_0, 8, [0]),
    (T.Q4_0, 8, [0]),
    (T.Q4_1, 8, [0, 2]),
    (T.Q4_K, 4, [0, 2]),
    (T.Q5_K, 4, [0, 2]),
    (T.Q6_K, 4, [208]),
]

# Types added later, drawn from their own generator so the files above stay byte-identical.
# MXFP4's scale is an E8M0 byte, set in `random_blocks`.
SEED_LATER = 20261126
LATER_TYPES = [
    (T.Q5_0, 8, [0]),
    (T.Q5_1, 8, [0, 2]),
    (T.Q2_K, 4, [80, 82]),
    (T.Q3_K, 4, [108]),
    (T.IQ4_NL, 8, [0]),
    (T.IQ4_XS, 4, [0]),
    (T.MXFP4, 8, []),
    (T.TQ1_0, 4, [52]),
    (T.TQ2_0, 4, [64]),
]


def write(name, obj):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(obj, f, indent=0)
        f.write("\n")


def random_blocks(rng, ty, n_blocks, f16_fields):
    _, type_size = quants.GGML_QUANT_SIZES[ty]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    # Random bytes are valid quants, but scale fields must be finite. Block 0 gets a negative
    # d, block 1 a subnormal f16 d, block 2 a large one; the rest look like real weights.
    for b in range(n_blocks):
        for k, off in enumerate(f16_fields):
            v = rng.normal() * 0.01
            if k == 0 and b == 0:
                v = -abs(v)
            elif k == 0 and b == 1:
                v = 3.0e-6
            elif k == 0 and b == 2:
                v = 37.5
            raw[b, off:off + 2] = np.array([v], dtype=np.float16).view(np.uint8)
    if ty == T.MXFP4:
        # E8M0 exponents: the two subnormal encodings (0, 1), 127 (scale 2^-1), 250 (2^122), and
        # weight-like ones near 2^-8.
        raw[:4, 0] = [0, 1, 127, 250]
        raw[4:, 0] = rng.integers(112, 124, size=n_blocks - 4)
    return raw.reshape(-1)


def main():
    rng = np.random.default_rng(SEED)
    np.seterr(over="ignore")
    os.makedirs(OUT, exist_ok=True)

    specials = [0.0, -0.0, np.inf, -np.inf, 1.0, -2.5, 6.0e-8, 65504.0, 1.0e-40, 3.0e38]
    floats = np.concatenate([np.array(specials), rng.normal(size=54) * 3.0]).astype(np.float32)
    for ty, arr in [
        (T.F32, floats),
        (T.F16, floats.astype(np.float16)),  # 3e38 -> inf, 1e-40 -> 0 on purpose
        # gguf-py's BF16 quantizer rounds to nearest even like ggml.
        (T.BF16, quants.quantize(floats, T.BF16).view(np.uint16)),
    ]:
        raw = arr.view(np.uint8).reshape(-1)
        out = quants.dequantize(raw, ty).astype(np.float32).reshape(-1)
        write(f"{ty.name}.json", {"type": ty.name, "type_id": int(ty), "n_elements": int(out.size),
                                  "raw_hex": raw.tobytes().hex(), "expected_hex": out.tobytes().hex()})

    for ty, n_blocks, fields in QUANT_TYPES:
        raw = random_blocks(rng, ty, n_blocks, fields)
        out = quants.dequantize(raw, ty).astype(np.float32).reshape(-1)
        assert np.all(np.isfinite(out)), ty.name
        write(f"{ty.name}.json", {"type": ty.name, "type_id": int(ty), "n_elements": int(out.size),
                                  "raw_hex": raw.tobytes().hex(), "expected_hex": out.tobytes().hex()})

    later = np.random.default_rng(SEED_LATER)
    for ty, n_blocks, fields in LATER_TYPES:
        raw = random_blocks(later, ty, n_blocks, fields)
        out = quants.dequantize(raw, ty).astype(np.float32).reshape(-1)
        assert np.all(np.isfinite(out)), ty.name
        write(f"{ty.name}.json", {"type": ty.name, "type_id": int(ty), "n_elements": int(out.size),
                                  "raw_hex": raw.tobytes().hex(), "expected_hex": out.tobytes().hex()})

    for ty in [T.Q8_0, T.Q4_0, T.Q4_1]:
        x = (rng.normal(size=(8, 32)) * rng.uniform(0.001, 2.0, size=(8, 1))).astype(np.float32)
        x[0] = 0.0                      # all-zero block: d = 0, id = 0
        x[1] = 0.75                     # constant block
        x[2, 5] = -40.0                 # one dominant negative outlier
        x[3, :16] = np.float32(1e-30)   # tiny values
        x = x.reshape(-1)
        q = quants.quantize(x.reshape(1, -1), ty).reshape(-1)
        write(f"quantize_{ty.name}.json", {"type": ty.name, "type_id": int(ty), "n_elements": int(x.size),
                                           "input_hex": x.tobytes().hex(), "expected_hex": q.tobytes().hex()})


if __name__ == "__main__":
    main()

#!/bin/sh
# Seeds both fuzz targets with the small valid files that tests/gguf_read.rs writes
# (every value type, nested arrays, v2/v3, alignments 1/32/64, 9 tensor types, an empty file).
set -e
cd "$(dirname "$0")/.."
FERROLM_GGUF_SAMPLES="$PWD/fuzz/corpus/gguf_parse" \
    cargo test --release -p ferrolm --test gguf_read write_samples_if_asked
mkdir -p fuzz/corpus/gguf_roundtrip
cp fuzz/corpus/gguf_parse/*.gguf fuzz/corpus/gguf_roundtrip/

#!/bin/sh
# Seeds the fuzz targets from the repository's own small valid inputs:
# - gguf_parse / gguf_roundtrip: the files tests/gguf_read.rs writes (every value type, nested
#   arrays, v2/v3, alignments 1/32/64, 9 tensor types, an empty file);
# - model_config: every config.json / generation_config.json of tests/fixtures/arch*, and the
#   small GGUF files (metadata of each family);
# - tokenizer_json: the tokenizer.json fixtures of each family;
# - chat_template: the real chat templates of each family.
set -e
cd "$(dirname "$0")/.."
FERROLM_GGUF_SAMPLES="$PWD/fuzz/corpus/gguf_parse" \
    cargo test --release -p ferrolm --test gguf_read write_samples_if_asked
mkdir -p fuzz/corpus/gguf_roundtrip fuzz/corpus/model_config fuzz/corpus/tokenizer_json fuzz/corpus/chat_template
cp fuzz/corpus/gguf_parse/*.gguf fuzz/corpus/gguf_roundtrip/
for f in tests/fixtures/arch*/*/*config.json; do
    cp "$f" "fuzz/corpus/model_config/$(echo "$f" | tr / _)"
done
cp tests/fixtures/tokenizer/spm_tiny.gguf fuzz/corpus/model_config/
cp tests/fixtures/tokenizer/spm_tiny.tokenizer.json tests/fixtures/tokenizer/families/*.json \
    fuzz/corpus/tokenizer_json/
cp tests/fixtures/chat_templates/*.jinja fuzz/corpus/chat_template/

#!/usr/bin/env bash
# On the lent GPU machine (see /work/.library/device/README.md): the chat-API benchmark
# (scripts/bench-chat.py) on random-weight models with SmolLM2's real vocabulary.
#   carry: .gl .bench/ferrolm.xz .bench/smollm2-vocab.gguf   (make the vocab with scripts/gguf-vocab-only.py)
#   run:   scripts/device-bench-chat.sh $OUT [shapes]
set -euo pipefail
out=$(realpath -m "$1"); shapes=${2:-smollm2-135m,llama-3.2-1b,phi-3-mini}
mkdir -p "$out"
. "$(dirname "$0")/device-env.sh"
device_env "$out"
xz -dc .bench/ferrolm.xz > /tmp/ferrolm && chmod +x /tmp/ferrolm
models=()
for s in ${shapes//,/ }; do
  f=/tmp/$s.q4_0.gguf
  /tmp/ferrolm make-gguf --shape "$s" --type q4_0 --out "$f" --tokenizer-from .bench/smollm2-vocab.gguf > /dev/null 2>&1
  models+=("$f")
done
python3 scripts/bench-chat.py /tmp/ferrolm "${models[@]}" | tee "$out/chat.jsonl"

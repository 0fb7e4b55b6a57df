#!/usr/bin/env bash
# On the lent GPU machine (see /work/.library/device/README.md): the chat-API benchmark
# (scripts/bench-chat.py) on random-weight models with SmolLM2's real vocabulary.
#   carry: .gl .bench/ferrolm.xz .bench/smollm2-vocab.gguf   (make the vocab with scripts/gguf-vocab-only.py)
#   run:   scripts/device-bench-chat.sh $OUT [shapes]
set -euo pipefail
out=$(realpath -m "$1"); shapes=${2:-smollm2-135m,llama-3.2-1b,phi-3-mini}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
xz -dc .bench/ferrolm.xz > /tmp/ferrolm && chmod +x /tmp/ferrolm
models=()
for s in ${shapes//,/ }; do
  f=/tmp/$s.q4_0.gguf
  /tmp/ferrolm make-gguf --shape "$s" --type q4_0 --out "$f" --tokenizer-from .bench/smollm2-vocab.gguf > /dev/null 2>&1
  models+=("$f")
done
python3 scripts/bench-chat.py /tmp/ferrolm "${models[@]}" | tee "$out/chat.jsonl"

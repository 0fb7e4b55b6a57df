#!/usr/bin/env bash
# Qwen3.5 (Gated DeltaNet), BitNet b1.58 and embeddings on the lent GPU machine, in one command: the
# architecture parity tests (every family, Qwen3.5 from its folder and its GGUF, the recurrent
# state across chunks, prefix reuse and a growing context) and the embedding tests against
# sentence-transformers with whatever the adapter selects, then `ferrolm bench` of the
# qwen3.5-0.8b shape beside qwen2.5-0.5b (a dense model of similar size), and of the bitnet-2b
# shape in I2_S beside the same shape in TQ2_0 and Q4_0, in the same command.
#
#   carry: .gl .bench/ferrolm.xz .bench/arch_parity.xz .bench/embeddings.xz
#   run:   scripts/device-bench-hybrid.sh   (results in $OUT; SKIP_TESTS=1 for the bench alone,
#          JOBS="shape:type ..." for other make-gguf files, PROMPTS="512 ...", REPS=n)
set -uo pipefail
source scripts/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/b
device_env "$OUT"
for f in ferrolm arch_parity embeddings; do xz -dc ".bench/$f.xz" > "/tmp/b/$f" && chmod +x "/tmp/b/$f"; done
mkdir -p /work && [ -e /work/main ] || ln -s "$PWD" /work/main
export WGPU_BACKEND=vulkan
if [ -z "${SKIP_TESTS:-}" ]; then
  # Separate processes: the NVIDIA driver stops offering an adapter after about seven tests'
  # devices in one process.
  (cd crate && for t in every_family hybrid gguf_conversions; do /tmp/b/arch_parity --test-threads 1 --nocapture "$t"; done 2>&1 | grep -E "error|test result|panicked|FAIL" ) > "$OUT/arch_parity.txt"
  (cd crate && /tmp/b/embeddings --test-threads 1 --nocapture 2>&1 | grep -E "worst|test result|panicked|FAIL") > "$OUT/embeddings.txt"
  cat "$OUT/arch_parity.txt"; grep -E "test result|panicked" "$OUT/embeddings.txt"; grep worst "$OUT/embeddings.txt" | sort -k5 | head -3
fi
for job in ${JOBS:-qwen3.5-0.8b:q4_0 qwen2.5-0.5b:q4_0 bitnet-2b:i2_s bitnet-2b:tq2_0 bitnet-2b:q4_0}; do
  shape=${job%%:*}; ty=${job##*:}
  f=/tmp/b/$shape-$ty.gguf
  /tmp/b/ferrolm make-gguf --shape "$shape" --type "$ty" --out "$f" --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null
  for pl in ${PROMPTS:-512 4096}; do
    line=$(/tmp/b/ferrolm bench --model "$f" --prompt-len $pl --gen 128 --reps ${REPS:-3} --json 2>/dev/null | tail -n 1)
    echo "{\"shape\":\"$shape\",\"type\":\"$ty\",\"prompt_len\":$pl,\"bench\":$line}" | tee -a "$OUT/bench.jsonl" | python3 -c "
import json,sys
r=json.loads(sys.stdin.read()); b=r['bench']
print(r['shape'], r['type'], 'pp%d'%r['prompt_len'], round(b['prefill_tok_s']), 'tok/s; tg128', round(b['decode_tok_s'],1), 'tok/s;', b['dispatches_per_token'], 'dispatches;', b['weight_bytes_per_token']>>20, 'MiB/token')" 2>/dev/null
  done
  rm -f "$f"
done

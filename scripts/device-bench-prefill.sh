#!/usr/bin/env bash
# Prefill on the matrix units (issue 17) on the lent GPU machine, in one command: the kernel
# tests and the architecture parity tests with whatever the adapter selects (cooperative
# matrices on the H100), then `ferrolm bench` prefill and decode of each shape with the
# matrix path and with FERROLM_NO_COOP=1 (the f32 matmul), and a 4,096-token prompt.
#
#   carry: .gl .bench/ferrolm.xz .bench/kernels.xz .bench/arch_parity.xz
#   run:   scripts/device-bench-prefill.sh   (results in $OUT; SKIP_TESTS=1 for the bench alone,
#          SHAPES="..." for other make-gguf shapes, REPS=n for more repetitions)
set -uo pipefail
source scripts/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/b
device_env "$OUT"
for f in ferrolm kernels arch_parity; do xz -dc ".bench/$f.xz" > "/tmp/b/$f" && chmod +x "/tmp/b/$f"; done
export WGPU_BACKEND=vulkan
if [ -z "${SKIP_TESTS:-}" ]; then
  device_tests "$OUT"
fi
for shape in ${SHAPES:-smollm2-135m llama-3.2-1b phi-3-mini}; do
  f=/tmp/b/$shape.gguf
  /tmp/b/ferrolm make-gguf --shape "$shape" --type q4_0 --out "$f" --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null
  for mode in coop f32; do
    env=(); [ $mode = f32 ] && env=(FERROLM_NO_COOP=1)
    for pl in 512 $([ $shape = phi-3-mini ] && echo 4064 || echo 4096); do
      line=$(env "${env[@]}" /tmp/b/ferrolm bench --model "$f" --prompt-len $pl --gen 32 --reps ${REPS:-3} --json 2>/dev/null | tail -n 1)
      echo "{\"shape\":\"$shape\",\"mode\":\"$mode\",\"prompt_len\":$pl,\"bench\":$line}" | tee -a "$OUT/prefill.jsonl"
    done
  done
  rm -f "$f"
done

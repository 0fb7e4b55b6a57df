#!/usr/bin/env bash
# A/B of two ferrolm binaries on the lent GPU machine in one command (a refactor that must not
# change speed, or a kernel change that should): the kernel and architecture parity tests of the
# new build, then per shape `ferrolm bench` of both binaries, interleaved round by round so that
# clock and thermal drift fall on both: pp512, greedy decode and sampled decode (temperature 0.7,
# top-p 0.9) of 128 tokens after the 512-token prompt.
#
#   carry: .gl .bench/ferrolm.xz .bench/ferrolm-base.xz [.bench/kernels.xz .bench/arch_parity.xz]
#   run:   scripts/device-ab.sh   (results in $OUT/ab.jsonl; TESTS=1 runs the tests first,
#          SHAPES="..." other make-gguf shapes, ROUNDS=n rounds of REPS=n repetitions)
set -uo pipefail
source scripts/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/b
device_env "$OUT"
for f in ferrolm ferrolm-base kernels arch_parity; do
  [ -f ".bench/$f.xz" ] && xz -dc ".bench/$f.xz" > "/tmp/b/$f" && chmod +x "/tmp/b/$f"
done
export WGPU_BACKEND=vulkan
if [ -n "${TESTS:-}" ]; then
  device_tests "$OUT"
fi
for shape in ${SHAPES:-smollm2-135m llama-3.2-1b phi-3-mini}; do
  f=/tmp/b/$shape.gguf
  /tmp/b/ferrolm make-gguf --shape "$shape" --type q4_0 --out "$f" --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null
  for round in $(seq "${ROUNDS:-2}"); do
    for bin in ferrolm-base ferrolm; do
      for mode in greedy sampled; do
        args=(); [ $mode = sampled ] && args=(--temperature 0.7 --top-p 0.9 --seed 1)
        line=$(/tmp/b/$bin bench --model "$f" --prompt-len 512 --gen 128 --reps ${REPS:-3} "${args[@]}" --json 2>/dev/null | tail -n 1)
        echo "{\"shape\":\"$shape\",\"bin\":\"$bin\",\"mode\":\"$mode\",\"round\":$round,\"bench\":$line}" >> "$OUT/ab.jsonl"
        echo "$shape $bin $mode $round $(echo "$line" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["prefill_tok_s"]), round(d["decode_tok_s"]))' 2>/dev/null)"
      done
    done
  done
  rm -f "$f"
done

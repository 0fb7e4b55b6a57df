#!/usr/bin/env bash
# Prefill variants on the lent GPU machine in one command: binaries, each optionally with one
# environment switch (FERROLM_NO_COOP, FERROLM_NO_COOP_ATTENTION, ...), interleaved round by
# round, with each run's per-kernel GPU times (the bench's prefill profile) summed over the
# layers. What issue 17's matmul experiments were measured with.
#
#   carry: .gl .bench/<binary>.xz for each binary named [.bench/kernels.xz .bench/arch_parity.xz]
#   run:   PAIRS="ferrolm-base:base ferrolm:base ferrolm:FERROLM_NO_COOP" scripts/device-variants.sh
#          (a switch NAME=value is passed as written, e.g. FERROLM_SHADER_DIR=.bench/shaders-x to
#          run kernel files of that directory in place of the built-in ones: a carried folder;
#          several switches joined by '+')
#          (results in $OUT/var.jsonl; TESTS=1 runs the new build's tests first, SHAPES, ROUNDS,
#          REPS, GEN, PLS="512 4096" prompt lengths; Phi-3's 4096 becomes 4,064)
set -uo pipefail
source scripts/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/b
device_env "$OUT"
for f in $(for p in $PAIRS; do echo "${p%%:*}"; done | sort -u) kernels arch_parity; do
  [ -f ".bench/$f.xz" ] && xz -dc ".bench/$f.xz" > "/tmp/b/$f" && chmod +x "/tmp/b/$f"
done
export WGPU_BACKEND=vulkan
if [ -n "${TESTS:-}" ]; then
  device_tests "$OUT"
fi
summary='
import json, sys
d = json.load(sys.stdin); p = {}
for (k, n, ms) in d.get("prefill_profile") or []: p[k] = p.get(k, 0) + ms
top = sorted(p.items(), key=lambda x: -x[1])[:8]
print(round(d["prefill_tok_s"]), round(d.get("decode_tok_s", 0)), " ".join("%s=%.2f" % kv for kv in top))'
for shape in ${SHAPES:-llama-3.2-1b phi-3-mini smollm2-135m}; do
  f=/tmp/b/$shape.gguf
  first=${PAIRS%%:*}
  /tmp/b/$first make-gguf --shape "$shape" --type q4_0 --out "$f" --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null
  for round in $(seq "${ROUNDS:-2}"); do
    for p in $PAIRS; do
      bin=${p%%:*}; var=${p#*:}
      env=()
      if [ "$var" != base ]; then
        for v in ${var//+/ }; do
          case $v in *=*) env+=("$v") ;; *) env+=("$v=1") ;; esac
        done
      fi
      for pl in ${PLS:-512}; do
        [ "$shape" = phi-3-mini ] && [ "$pl" = 4096 ] && pl=4064
        line=$(env "${env[@]}" /tmp/b/$bin bench --model "$f" --prompt-len "$pl" --gen "${GEN:-8}" --reps "${REPS:-3}" --json 2>/dev/null | tail -n 1)
        echo "{\"shape\":\"$shape\",\"bin\":\"$bin\",\"var\":\"$var\",\"prompt\":$pl,\"bench\":${line:-null}}" >> "$OUT/var.jsonl"
        echo "$shape $bin $var $pl $(echo "$line" | python3 -c "$summary" 2>&1 | tail -n 1)"
      done
    done
  done
  rm -f "$f"
done

#!/usr/bin/env bash
# Decode/prefill speed of every GGUF weight type on one shape, for BENCHMARKS.md: writes a
# random-weight file of SHAPE per type with `ferrolm make-gguf` and runs `ferrolm bench --json`
# on each, one JSON line per type on stdout (progress on stderr).
#
#   scripts/bench-types.sh BIN SHAPE DIR [TYPES...]
#     BIN    the ferrolm binary (release)
#     SHAPE  a make-gguf shape (llama-3.2-1b, ...)
#     DIR    where the files go (about 1 GB each for the 1B shape; removed after each bench)
#     TYPES  default: every type make-gguf writes but f16
#   BENCH_ARGS  extra bench arguments (default: --prompt-len 512 --gen 128 --reps 3)
#   TOKENIZER   GGUF whose vocabulary the files borrow (default: the tiny test fixture; the bench
#               feeds token ids, so any vocabulary will do)
set -euo pipefail
BIN=$1 SHAPE=$2 DIR=$3
shift 3
TYPES=("$@")
if [[ ${#TYPES[@]} -eq 0 ]]; then
  TYPES=(q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4 tq1_0 tq2_0)
fi
mkdir -p "$DIR"
for ty in "${TYPES[@]}"; do
  f="$DIR/$SHAPE.$ty.gguf"
  "$BIN" make-gguf --shape "$SHAPE" --type "$ty" --out "$f" \
    --tokenizer-from "${TOKENIZER:-tests/fixtures/tokenizer/spm_tiny.gguf}" >&2
  # shellcheck disable=SC2086
  line=$("$BIN" bench --model "$f" ${BENCH_ARGS:---prompt-len 512 --gen 128 --reps 3} --json | tail -n 1)
  echo "{\"type\":\"$ty\",\"shape\":\"$SHAPE\",\"file_bytes\":$(stat -c %s "$f"),\"bench\":$line}"
  rm -f "$f"
done

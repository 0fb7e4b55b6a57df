#!/usr/bin/env bash
# On the GPU machine (the device tool runs this in the repository root; see README.md): native
# `ferrolm bench` greedy and sampled beside the npm package in headless Chromium, same card, same
# files, one command. Prints the summary and leaves native.jsonl, browser.jsonl and chrome.log in
# OUTDIR.
#   scripts/gpu-browser/device-bench.sh OUTDIR [SHAPES] [REPS]
#     SHAPES  make-gguf shapes, comma-separated (default smollm2-135m,llama-3.2-1b,phi-3-mini), Q4_0
#   Environment: MODES (bench.html modes), FLOOR=1 (also the raw-WebGPU dispatch floor), SMX=1
#   (also the raw rate of Chromium's 8-bit subgroup matrices),
#   INFLIGHTS=2,8 (the raw mode's greedy loop again with that many decode steps in flight, in
#   the browser and natively)
#   Carried: .gl (Vulkan loader debs), .bench/ferrolm.xz (release binary), optional
#   .bench/ferrolm-base.xz (a baseline binary: its greedy rows run too, for an A/B in the same
#   command), pkg/ (make pkg), and the Chromium parts (.bench/chr: fetch-chromium.sh), those that
#   do not fit this command's 64 MiB carried and copied to ~/chrparts by an earlier command.
set -uo pipefail
out=$(realpath -m "$1"); shapes=${2:-smollm2-135m,llama-3.2-1b,phi-3-mini}; reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
. "$(dirname "$0")/../device-env.sh"
device_env "$out"
bins=(new)
xz -dc .bench/ferrolm.xz > /tmp/ferrolm-new && chmod +x /tmp/ferrolm-new
if [ -f .bench/ferrolm-base.xz ]; then xz -dc .bench/ferrolm-base.xz > /tmp/ferrolm-base && chmod +x /tmp/ferrolm-base && bins+=(base); fi
www=$HOME/www
mkdir -p "$www"
cp -r pkg "$www/" && cp "$here/bench.html" "$www/"
bench_models "$www" "$shapes"
tag() { python3 -c 'import json,sys; [print(json.dumps({**json.loads(l), "binary": sys.argv[1]})) for l in sys.stdin if l.startswith("{")]' "$1"; }
: > "$out/native.jsonl"
for f in "${models[@]}"; do
  for b in "${bins[@]}"; do
    /tmp/ferrolm-$b bench --model "$www/$f" --prompt-len 512 --gen 128 --reps "$reps" --json | tag "$b" >> "$out/native.jsonl"
  done
  /tmp/ferrolm-new bench --model "$www/$f" --prompt-len 512 --gen 128 --reps "$reps" --temperature 0.7 --top-p 0.9 --seed 1 --json \
    | tag new >> "$out/native.jsonl"
  for n in ${INFLIGHTS:+${INFLIGHTS//,/ }}; do
    /tmp/ferrolm-new bench --model "$www/$f" --prompt-len 512 --gen 128 --reps "$reps" --inflight "$n" --json | tag "inflight $n" >> "$out/native.jsonl"
  done
done
list=$(IFS=,; echo "${models[*]}")
mkdir -p ~/chrparts && cp .bench/chr/chr.a* ~/chrparts/ 2>/dev/null
"$here/run-chromium.sh" "$HOME/chrparts/chr.a*" .bench/chr/chrextra.tar.xz "$www" \
  "bench.html?models=$list&pp=512&tg=128&reps=$reps&modes=${MODES:-greedy,sampled,raw,rawsampled}&floor=${FLOOR:-0}&smx=${SMX:-0}&inflights=${INFLIGHTS:-}" "$out" 420
python3 "$here/summarize.py" "$out" | tee "$out/summary.txt"

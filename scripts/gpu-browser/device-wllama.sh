#!/usr/bin/env bash
# The peer in the same browser and card (issue 11 item 5): wllama (llama.cpp in wasm, with its
# WebGPU backend) in headless Chromium on the GPU machine, on the same random-weight Q4_0 files
# as device-bench.sh. Steps 1-2 of README.md first (the Chromium parts in ~/chrparts); then carry
# `.gl .bench/ferrolm.xz .bench/wllama .bench/chr/chrextra.tar.xz` (`.bench/wllama`: the package's
# `esm/` from `npm pack @wllama/wllama@3.13.0`) and run: scripts/gpu-browser/device-wllama.sh $OUT/wl
set -uo pipefail
here=scripts/gpu-browser
out=$1; mkdir -p "$out"
. scripts/device-env.sh
device_env "$out"
www=$HOME/www; mkdir -p "$www"
cp -r .bench/wllama "$www/" && cp "$here/wllama.html" "$www/"
xz -dc .bench/ferrolm.xz > /tmp/ferrolm && chmod +x /tmp/ferrolm
models=()
for s in ${SHAPES:-smollm2-135m llama-3.2-1b}; do
  f=$s.q4_0.gguf
  [ -f "$www/$f" ] || /tmp/ferrolm make-gguf --shape "$s" --type q4_0 --out "$www/$f" --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null 2>&1
  models+=("$f")
done
list=$(IFS=,; echo "${models[*]}")
"$here/run-chromium.sh" "$HOME/chrparts/chr.a*" .bench/chr/chrextra.tar.xz "$www" \
  "wllama.html?models=$list&tg=${TG:-128}&reps=${REPS:-3}&words=${WORDS:-400}" "$out" ${TMO:-420} > /dev/null 2>&1
python3 - "$out/browser.jsonl" <<'PY'
import json, statistics as st, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "runs" in j:
        runs = [r for r in j["runs"][1:] if r]
        pp = st.median(r["prompt_per_second"] for r in runs) if runs else None
        tg = st.median(r["predicted_per_second"] for r in runs) if runs else None
        n = runs[0]["prompt_n"] if runs else None
        print("wllama", j["model"], "prompt tokens", n, "pp", pp and round(pp), "tg", tg and round(tg, 1), "mt", j["multithread"], "webgpu-api", j["webgpu"], "load ms", round(j["loadMs"]))
        for s in j.get("logs", [])[:12]: print("   log:", s)
    elif "error" in j:
        print("ERROR", j["error"][:400]); [print("   log:", s) for s in j.get("logs", [])[:12]]
PY

#!/usr/bin/env bash
# The second peer in the same browser and card: transformers.js 4.3.1 (ONNX Runtime Web with its
# WebGPU execution provider) in headless Chromium on the GPU machine, on the same random weights
# as device-bench.sh: the make-gguf Q4_0 files, exported to ONNX there (a 1B model's ONNX is too
# big to carry) by scripts/peer/tjs_export.py and quantized as transformers.js's `q4` files are.
#   scripts/gpu-browser/device-transformersjs.sh OUTDIR [SHAPES] [REPS]
#     SHAPES  make-gguf shapes, comma-separated (default smollm2-135m,llama-3.2-1b; phi-3-mini
#             exports too, but its export alone takes minutes: see README.md)
#   Environment: PP (512), TG (128), TMO (seconds for the browser, 420), CHECK=1 (tjs_export.py
#   --check --ferrolm: onnxruntime CPU against torch, torch against ferrolm's logits; in
#   OUTDIR/export-<shape>.log and printed), EXPORT_ONLY=1 (make the folders, no browser).
# Steps 1-2 of README.md first (the Chromium parts in ~/chrparts); carry `.gl .bench/ferrolm.xz
# .bench/tjs.tar.xz .bench/chr/chrextra.tar.xz` (.bench/tjs.tar.xz: pack-transformersjs.sh, here).
# Uses the machine's python3 (torch, transformers, onnx, onnxruntime, onnxscript). Exports and
# GGUF files stay in ~/www for the next command on the same warm machine: a second run (or one
# after device-bench.sh) only benchmarks.
set -uo pipefail
here=scripts/gpu-browser
out=$(realpath -m "$1"); shapes=${2:-smollm2-135m,llama-3.2-1b}; reps=${3:-3}
mkdir -p "$out"
. scripts/device-env.sh
device_env "$out"
# Whatever Chromium parts this command carries wait in ~/chrparts (an export-only command can
# bring one along: the four parts do not fit one command's carry).
mkdir -p ~/chrparts && cp .bench/chr/chr.a* ~/chrparts/ 2>/dev/null
www=$HOME/www; mkdir -p "$www/tjs"
tar xJf .bench/tjs.tar.xz -C "$www" && cp "$here/transformersjs.html" "$www/"
cat "$www/tjs-lib/VERSIONS"
xz -dc .bench/ferrolm.xz > /tmp/ferrolm-tjs && chmod +x /tmp/ferrolm-tjs
models=()
for s in ${shapes//,/ }; do
  f=$www/$s.q4_0.gguf
  # The same file device-bench.sh and device-wllama.sh benchmark (same name, seed 0).
  [ -f "$f" ] || /tmp/ferrolm-tjs make-gguf --shape "$s" --type q4_0 --out "$f" \
    --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null
  d=$www/tjs/$s
  if [ ! -f "$d/config.json" ] || [ "$f" -nt "$d/config.json" ]; then
    rm -rf "$d"; t0=$(date +%s)
    # On the CPU (torch.export traces, onnxruntime quantizes). On a 2-core machine: SmolLM2
    # 1.5 min, Llama-3.2-1B 2.5 min and 15 GB of memory; Phi-3-mini, three times the 1B.
    # CHECK=1: onnxruntime against torch, and torch against this ferrolm on the card.
    if python3 scripts/peer/tjs_export.py "$f" "$d" ${CHECK:+--check --ferrolm /tmp/ferrolm-tjs} > "$out/export-$s.log" 2>&1; then
      echo "exported $s in $(( $(date +%s) - t0 )) s: $(du -sh "$d" | cut -f1)"
    else
      echo "EXPORT FAILED $s:"; grep -v "^W[0-9]" "$out/export-$s.log" | tail -15; rm -rf "$d"; continue
    fi
  fi
  grep -h "check " "$out/export-$s.log" 2>/dev/null | cut -c1-300
  models+=("$s")
done
[ -n "${EXPORT_ONLY:-}" ] && exit 0
[ ${#models[@]} -gt 0 ] || { echo "no model to run"; exit 1; }
list=$(IFS=,; echo "${models[*]}")
: > "$out/browser.jsonl"
"$here/run-chromium.sh" "$HOME/chrparts/chr.a*" .bench/chr/chrextra.tar.xz "$www" \
  "transformersjs.html?models=$list&pp=${PP:-512}&tg=${TG:-128}&reps=$reps&dtype=q4&device=webgpu" "$out" ${TMO:-420} > /dev/null 2>&1
# Medians over the repetitions after the warm-up, one line per model (the same quantities as
# summarize.py's browser columns: prefill = pp / time to first token, decode = (n-1) / the rest).
python3 - "$out/browser.jsonl" <<'PY' | tee "$out/summary.txt"
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for j in rows:
    if "adapter" in j:
        a = j["adapter"]
        print("adapter:", a.get("vendor"), a.get("architecture"), a.get("description"), "| f16:", "shader-f16" in a.get("features", []), "| isolated:", j.get("crossOriginIsolated"))
print(f"{'engine':16} {'model':14} {'pp':>4} {'tg':>4} {'prefill tok/s':>14} {'decode tok/s':>13} {'load s':>7}  runs (prefill/decode tok/s)")
for j in rows:
    if "runs" in j:
        runs = [r for r in j["runs"] if not r.get("warmup")] or j["runs"]
        pp = st.median(r["prefill_tok_s"] for r in runs)
        tgs = [r["decode_tok_s"] for r in runs if r["decode_tok_s"]]
        tg = st.median(tgs) if tgs else float("nan")
        each = " ".join(f"{r['prefill_tok_s']:.0f}/{r['decode_tok_s'] or 0:.1f}" for r in j["runs"])
        print(f"{'transformers.js':16} {j['model']:14} {j['pp']:>4} {j['tg']:>4} {pp:>14.1f} {tg:>13.2f} {j['loadMs'] / 1000:>7.1f}  {each} (first = warm-up)")
        for s in j.get("logs", [])[:8]: print("   log:", s[:300])
    elif "error" in j:
        print("ERROR", j.get("model", ""), j["error"][:400]); [print("   log:", s[:300]) for s in j.get("logs", [])[:12]]
if not any(j.get("done") for j in rows): print("no {done: true}: the page did not finish (TMO?); see chrome.log")
PY

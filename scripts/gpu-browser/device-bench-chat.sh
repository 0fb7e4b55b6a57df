#!/usr/bin/env bash
# On the GPU machine, after the two commands that leave the Chromium parts in ~/chrparts (README):
# the chat paths in Chromium beside native, same card, same files: greedy, sampled and JSON-schema
# decode (tg128 after pp512 ids) and prefix reuse (16 new tokens after 512 cached, against cold).
# Models: make-gguf Q4_0 shapes with SmolLM2's real vocabulary (.bench/smollm2-vocab.gguf, made by
# scripts/gguf-vocab-only.py), so constraint masks cost what they cost on a real vocabulary.
#   carry: .gl pkg .bench/ferrolm.xz .bench/smollm2-vocab.gguf .bench/chr/chrextra.tar.xz
#   run:   scripts/gpu-browser/device-bench-chat.sh $OUT/run [shapes] [reps]
set -uo pipefail
out=$(realpath -m "$1"); shapes=${2:-smollm2-135m,llama-3.2-1b,phi-3-mini}; reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
. "$(dirname "$0")/../device-env.sh"
device_env "$out"
xz -dc .bench/ferrolm.xz > /tmp/ferrolm && chmod +x /tmp/ferrolm
www=$HOME/www; mkdir -p "$www"; cp -r pkg "$www/" && cp "$here/bench.html" "$www/"
ids=$(python3 -c 'print(",".join(str(100 + (i * 7919) % 20000) for i in range(512)))')
echo '{"type":"object","properties":{"items":{"type":"array","items":{"type":"string"}}},"required":["items"]}' > /tmp/schema.json
models=()
: > "$out/native.jsonl"
for s in ${shapes//,/ }; do
  f=$s.q4_0.gguf
  /tmp/ferrolm make-gguf --shape "$s" --type q4_0 --out "$www/$f" --tokenizer-from .bench/smollm2-vocab.gguf > /dev/null 2>&1
  models+=("$f")
  for mode in greedy sampled json; do
    case $mode in
      greedy) extra=() ;;
      sampled) extra=(--temperature 0.7 --top-p 0.9 --seed 1) ;;
      json) extra=(--temperature 0.7 --top-p 0.9 --seed 1 --json-schema /tmp/schema.json) ;;
    esac
    for r in $(seq 1 "$reps"); do
      /tmp/ferrolm generate --model "$www/$f" --prompt-ids "$ids" --max-tokens 128 --json "${extra[@]}" 2>/dev/null | tail -1 \
        | python3 -c 'import json,sys; d=json.load(sys.stdin)["stats"]; print(json.dumps({"model": sys.argv[1], "mode": sys.argv[2], "decode_tok_s": d["decode_tok_s"], "n": d["generated_tokens"]}))' "$f" "$mode" >> "$out/native.jsonl"
    done
  done
done
list=$(IFS=,; echo "${models[*]}")
"$here/run-chromium.sh" "$HOME/chrparts/chr.a*" .bench/chr/chrextra.tar.xz "$www" \
  "bench.html?models=$list&pp=512&tg=128&reps=$reps&modes=greedy,sampled,json,reuse" "$out" 480
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
nat = {}
for l in open(f"{out}/native.jsonl"):
    d = json.loads(l); nat.setdefault((d["model"], d["mode"]), []).append(d["decode_tok_s"])
rows = []
for l in open(f"{out}/browser.jsonl"):
    d = json.loads(l)
    if "error" in d: print("browser error:", d); continue
    if "mode" not in d: continue
    runs = d["runs"][1:]  # the first run warms up
    if d["mode"] == "reuse":
        print(f'{d["model"]} reuse: warm {statistics.median(r["warm_ms"] for r in runs):.1f} ms ({runs[0]["cached"]} cached of {runs[0]["prompt"]}), cold {statistics.median(r["cold_ms"] for r in runs):.1f} ms')
        continue
    b = statistics.median(r["stats"]["decode_tok_s"] for r in runs)
    n = statistics.median(nat.get((d["model"], d["mode"]), [0]))
    print(f'{d["model"]} {d["mode"]}: native {n:.1f} tok/s, Chromium {b:.1f} tok/s ({b / n if n else 0:.2f}), browser runs {[round(r["stats"]["decode_tok_s"]) for r in runs]}')
PY

#!/usr/bin/env bash
# On the GPU machine: packages against each other in Chromium, rounds interleaved (a, b, a, b...)
# so that the host's drift between runs falls on both. Each page runs bench.html's `raw` mode
# (the engine's own loop: prefill, greedy decode, GPU time a step and per kernel).
#   scripts/gpu-browser/device-ab.sh OUTDIR "PKG[?QUERY] PKG[?QUERY] ..." [SHAPES] [REPS]
#     PKG      a package folder in the tree (pkg, .bench/pkg-b); QUERY adds page parameters
#              (e.g. pkg?maxbatch=512); a suffix |SWITCH|SWITCH starts Chromium with those
#              switches for that variant (e.g. pkg|--enable-dawn-features=disable_robustness)
#   Environment: ROUNDS (default 2), MODES (default raw), PP (prompt tokens, default 512).
#   Carried: as device-bench.sh (.gl, .bench/ferrolm.xz, .bench/chr/chrextra.tar.xz, Chromium
#   parts in ~/chrparts) and every package folder named.
set -uo pipefail
out=$(realpath -m "$1"); variants=$2; shapes=${3:-smollm2-135m,llama-3.2-1b}; reps=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
. "$(dirname "$0")/../device-env.sh"
device_env "$out"
xz -dc .bench/ferrolm.xz > /tmp/ferrolm-new && chmod +x /tmp/ferrolm-new
www=$HOME/www
mkdir -p "$www" && cp "$here/bench.html" "$www/"
bench_models "$www" "$shapes"
list=$(IFS=,; echo "${models[*]}")
i=0
for v in $variants; do
  dir=${v%%[?|]*}; name=pkg$i; i=$((i + 1))
  rm -rf "$www/$name" && cp -r "$dir" "$www/$name"
done
for r in $(seq 1 "${ROUNDS:-2}"); do
  i=0
  for v in $variants; do
    q=${v%%|*}; extra=""; [ "$q" != "${q#*\?}" ] && extra="&${q#*\?}"
    flags=""; [ "$v" != "${v#*|}" ] && flags=${v#*|}
    CHROMIUM_FLAGS="${flags//|/ }" "$here/run-chromium.sh" "$HOME/chrparts/chr.a*" .bench/chr/chrextra.tar.xz "$www" \
      "bench.html?pkg=pkg$i&models=$list&pp=${PP:-512}&tg=128&reps=$reps&modes=${MODES:-raw}$extra" "$out/r$r-v$i" 300 > /dev/null
    python3 - "$out/r$r-v$i/browser.jsonl" "$r" "$v" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "error" in j: print("ERROR", j["error"][:300])
    if "report" in j:
        r = j["report"]
        print(f"round {sys.argv[2]} {sys.argv[3]:28s} {j['model']:24s} {j['mode']:6s} pp {r['prefill_tok_s']:8.0f}  tg {r['decode_tok_s']:7.1f}  gpu ms/step {r.get('gpu_ms_per_step') or float('nan'):.3f}  dispatches {r['dispatches_per_token']}")
        # A sampled loop's profile: the sampler's phases, µs each.
        phases = [(k, ms) for k, _, ms in r.get("decode_profile") or [] if k.startswith("sample")]
        if phases:
            print("    " + "  ".join(f"{k[7:]} {ms * 1e3:.1f}" for k, ms in phases))
    if "runs" in j and j["runs"] and "stats" in j["runs"][0]:
        # The JavaScript API (greedy / sampled modes): medians after the first run.
        runs = j["runs"][1:] or j["runs"]
        med = lambda k: sorted(x["stats"][k] for x in runs)[len(runs) // 2]
        tg = [round(x["stats"]["decode_tok_s"]) for x in runs]
        print(f"round {sys.argv[2]} {sys.argv[3]:28s} {j['model']:24s} {j['mode']:6s} pp {med('prefill_tok_s'):8.0f}  tg {med('decode_tok_s'):7.1f}  (API, runs {tg})")
PY
    i=$((i + 1))
  done
done

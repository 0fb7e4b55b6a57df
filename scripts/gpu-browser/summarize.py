#!/usr/bin/env python3
"""Summary of one browser-bench run: OUTDIR/native.jsonl (`ferrolm bench --json` lines, one per
model and mode) beside OUTDIR/browser.jsonl (bench.html posts). One line per model and mode with
prefill and decode tok/s natively and in Chromium (medians over the reps; the browser's first run
is warm-up), the browser/native ratios, sampled/greedy, and the bytes a load downloaded."""
import json, os, statistics as st, sys

d = sys.argv[1]


def lines(name):
    p = os.path.join(d, name)
    for l in open(p) if os.path.exists(p) else []:
        try:
            yield json.loads(l)
        except ValueError:
            pass


native = {}
for j in lines("native.jsonl"):
    model = j["model"]["source"].split("/")[-1]
    mode = "sampled" if j.get("sampling") else "greedy"
    native[(model, mode, j.get("binary", "new"))] = j
browser = {}
for j in lines("browser.jsonl"):
    if "error" in j:
        print("ERROR", j["error"][:400])
    elif "adapter" in j:
        a = j["adapter"]
        print("browser:", j.get("userAgent", "?"), "| adapter", a.get("vendor"), a.get("architecture"),
              "| subgroups", "subgroups" in a.get("features", []), "| shader-f16", "shader-f16" in a.get("features", []))
    elif "floor" in j:
        # bench.html's raw-WebGPU floor of a decode-like step (no ferrolm code).
        print("browser floor (raw WebGPU, tiny chained kernels, 4 steps in flight):")
        for f in j["floor"]:
            v = f" ({f['variant']})" if f.get("variant") else ""
            print(f"  {f['dispatches']:4d} dispatches/step{v}: {f['wall_ms_per_step']:.3f} ms/step wall, {f['cpu_ms_per_step']:.3f} ms/step to encode and submit")
    elif "smx" in j or "smxError" in j:
        # bench.html's raw-WebGPU rate of Chromium's 8-bit subgroup matrices (no ferrolm code).
        print("browser 8-bit subgroup matrices (raw WebGPU):", j.get("smxError", ""))
        for c in j.get("smx", []) if isinstance(j.get("smx"), list) else [j.get("smx")]:
            if c and "tops" in c:
                print(f"  16x{c['n']}x32 {c['kind']:9s} {c['nacc']} accumulators: {c['tops']:7.0f} int8 TOPS ({c['ms_per_dispatch']:.3f} ms a dispatch)")
            elif c:
                print("  ", c)
    elif "runs" in j:
        browser[(j["model"], j["mode"])] = j
    elif "report" in j:
        browser[(j["model"], j["mode"])] = j

print(f"{'model':28s} {'mode':8s} {'native pp':>10s} {'native tg':>10s} {'browser pp':>11s} {'browser tg':>11s} {'tg range':>13s} {'b/n pp':>7s} {'b/n tg':>7s} {'samp/greedy n|b':>16s} {'disp n|b':>9s} {'dl':>6s}")
for (model, mode, binary), n in sorted(native.items()):
    if binary != "new":
        print(f"{model:28s} {mode:8s} {n['prefill_tok_s']:10.0f} {n['decode_tok_s']:10.1f}   (binary {binary})")
        continue
    b = browser.get((model, mode))
    row = f"{model:28s} {mode:8s} {n['prefill_tok_s']:10.0f} {n['decode_tok_s']:10.1f}"
    ratio = ""
    g = native.get((model, "greedy", "new"))
    if b:
        runs = b["runs"][1:] or b["runs"]
        pp = st.median(r["stats"]["prefill_tok_s"] for r in runs)
        tg = st.median(r["stats"]["decode_tok_s"] for r in runs)
        lo, hi = min(r["stats"]["decode_tok_s"] for r in runs), max(r["stats"]["decode_tok_s"] for r in runs)
        ld = b["info"]["load"]
        disp = runs[0]["stats"].get("dispatches_per_token")
        row += f" {pp:11.0f} {tg:11.1f} {lo:6.0f}-{hi:<6.0f} {pp / n['prefill_tok_s']:7.2f} {tg / n['decode_tok_s']:7.2f}"
        bg = browser.get((model, "greedy"))
        if mode == "sampled" and g and bg:
            bgt = st.median(r["stats"]["decode_tok_s"] for r in (bg["runs"][1:] or bg["runs"]))
            ratio = f"{n['decode_tok_s'] / g['decode_tok_s']:.2f}|{tg / bgt:.2f}"
        row += f" {ratio:>16s} {n['dispatches_per_token']:>4}|{disp}  {ld['downloadedBytes'] / ld['size']:.2f}x"
    elif mode == "sampled" and g:
        row += f" {'':11s} {'':11s} {'':13s} {'':7s} {'':7s} {n['decode_tok_s'] / g['decode_tok_s']:16.2f}"
    print(row)

# The engine's own loop in the browser (bench.html modes raw / rawsampled, engine.benchmark):
# decode through the JavaScript API vs inside the module vs the GPU's time per step.
raw = [(k, v) for k, v in sorted(browser.items()) if k[1] in ("raw", "rawsampled") or k[1].startswith("raw@")]
if raw:
    print()
    print(f"{'model':28s} {'mode':10s} {'api tg':>8s} {'engine tg':>10s} {'engine pp':>10s} {'gpu ms/step':>12s} {'cpu ms/step':>12s} {'native gpu ms':>14s} {'native cpu ms':>14s} {'native tg':>10s} {'engine/native':>14s}")
for (model, mode), b in raw:
    r = b["report"]
    api_mode = "sampled" if mode == "rawsampled" else "greedy"
    api = browser.get((model, api_mode))
    api_tg = st.median(x["stats"]["decode_tok_s"] for x in (api["runs"][1:] or api["runs"])) if api else float("nan")
    n = native.get((model, api_mode, "new"), {})
    ng = n.get("gpu_ms_per_step")
    gm = r.get("gpu_ms_per_step")
    nan = float("nan")
    print(f"{model:28s} {mode:10s} {api_tg:8.1f} {r['decode_tok_s']:10.1f} {r['prefill_tok_s']:10.0f} {gm if gm is not None else nan:12.3f} {r.get('cpu_ms_per_step', nan):12.3f} {ng if ng is not None else nan:14.3f} {n.get('cpu_ms_per_step', nan):14.3f} {n.get('decode_tok_s', float('nan')):10.1f} {r['decode_tok_s'] / n['decode_tok_s'] if n else float('nan'):14.2f}")

# GPU time per kernel of one step, browser beside native (the raw mode's profiles). Browsers time
# each dispatch in a pass of its own, natively timestamps sit between the dispatches of one pass:
# both add a few us a dispatch, so read kernel against kernel. The browser's prefill chunk is the
# engine's maxBatch (256 by default), native bench's 512.
for (model, mode), b in raw:
    if mode not in ("raw", "rawsampled"):
        continue
    # A sampled run's decode profile holds the sampler's phases; its prefill is the greedy one's.
    n = native.get((model, "greedy" if mode == "raw" else "sampled", "new"), {})
    for what in ("decode_profile", "prefill_profile") if mode == "raw" else ("decode_profile",):
        bp = {k: (c, ms) for k, c, ms in (b["report"].get(what) or [])}
        npf = {k: (c, ms) for k, c, ms in (n.get(what) or [])}
        if not bp:
            continue
        r = b["report"]
        chunk = f" (browser chunk {min(r['prompt_len'], b['info'].get('maxBatch') or r['prompt_len'])} tokens, native {n.get('prompt_len')})" if what == "prefill_profile" else ""
        print(f"\n{model} {mode} {what}{chunk}: kernel, dispatches and ms browser | native")
        for k in sorted(set(bp) | set(npf), key=lambda k: -bp.get(k, (0, 0))[1]):
            (bc, bm), (nc, nm) = bp.get(k, (0, 0.0)), npf.get(k, (0, 0.0))
            print(f"  {k:16s} {bc:4d} {bm:8.3f} | {nc:4d} {nm:8.3f}")

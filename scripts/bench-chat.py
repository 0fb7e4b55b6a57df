#!/usr/bin/env python3
"""Chat-API costs on a GPU machine, natively: time to first token of a long chat's second turn
with and without prefix reuse, and the decode cost of what picks tokens on the CPU (logprobs,
JSON-schema constraints) next to greedy and sampled decoding on the GPU.

    python3 scripts/bench-chat.py BIN MODEL.gguf [MODEL2.gguf ...] > results.jsonl

Random-weight models from `ferrolm make-gguf` serve: the timings do not depend on the words.
"""
import json
import os
import subprocess
import sys
import tempfile

HISTORY_TURNS = 40  # ~90 prompt tokens each with a 49k vocabulary: a ~3.5k-token conversation


def run(args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)}\n{p.stderr[-2000:]}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def history():
    msgs = [{"role": "system", "content": "You are a careful assistant that answers in detail."}]
    for i in range(HISTORY_TURNS):
        msgs.append({"role": "user", "content": f"Question {i}: explain step {i} of making bread, the flour, the water, the yeast, the salt, how long to knead and how long to let the dough rest, and what goes wrong when the kitchen is cold."})
        msgs.append({"role": "assistant", "content": f"Step {i}: mix flour and water, add yeast and salt, knead for ten minutes until smooth, then let it rest covered for an hour in a warm place; a cold kitchen slows the yeast, so wait longer."})
    return msgs


def ttft(bin_, model, tmp):
    h = history()
    turn1 = h + [{"role": "user", "content": "Summarize all of that."}]
    turn2 = turn1 + [{"role": "assistant", "content": "Mix, knead, rest, bake."}, {"role": "user", "content": "Thanks. And for rye bread?"}]
    reqs = [
        {"messages": turn1, "max_tokens": 16, "temperature": 0},
        {"messages": turn2, "max_tokens": 16, "temperature": 0},
        {"messages": turn2, "max_tokens": 16, "temperature": 0, "prefix_cache": False},
    ]
    files = []
    for i, r in enumerate(reqs):
        f = os.path.join(tmp, f"req{i}.json")
        json.dump(r, open(f, "w"))
        files.append(f)
    args = [bin_, "chat-completion", "--model", model]
    for f in files:
        args += ["--request", f]
    out = run(args)
    s = [o["stats"] for o in out]
    return {
        "model": os.path.basename(model), "what": "second-turn TTFT",
        "turn1_prompt_tokens": s[0]["prompt_tokens"], "turn1_prefill_ms": s[0]["prefill_ms"],
        "turn2_prompt_tokens": s[1]["prompt_tokens"], "turn2_cached_tokens": s[1]["cached_tokens"],
        "turn2_prefill_ms_reused": s[1]["prefill_ms"], "turn2_prefill_ms_cold": s[2]["prefill_ms"],
    }


def decode_costs(bin_, model, tmp):
    schema = os.path.join(tmp, "schema.json")
    json.dump({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}, "required": ["items"]}, open(schema, "w"))
    base = [bin_, "generate", "--model", model, "--chat", "List fruits as JSON.", "--max-tokens", "128", "--json"]
    modes = {
        "greedy (GPU argmax)": [],
        "sampled t=0.7 top-p 0.9 (GPU)": ["--temperature", "0.7", "--top-p", "0.9", "--seed", "1"],
        "greedy + logprobs 5 (CPU pick)": ["--logprobs", "5"],
        "JSON schema, sampled (mask uploaded, GPU sampler)": ["--json-schema", schema, "--temperature", "0.7", "--seed", "1"],
    }
    rows = []
    for name, extra in modes.items():
        best = None
        for _ in range(3):
            r = run(base + extra)[-1]["stats"]
            if best is None or r["decode_tok_s"] > best["decode_tok_s"]:
                best = r
        rows.append({"model": os.path.basename(model), "what": "decode", "mode": name,
                     "generated": best["generated_tokens"], "decode_tok_s": round(best["decode_tok_s"], 1)})
    return rows


def main():
    bin_, models = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            print(json.dumps(ttft(bin_, m, tmp)), flush=True)
            for row in decode_costs(bin_, m, tmp):
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

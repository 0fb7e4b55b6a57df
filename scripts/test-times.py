#!/usr/bin/env python3
"""The suite's time against its budget: every native test binary and every browser test
(Chromium and Firefox apart), sorted, then the ten slowest tests and the total, with a loud
warning past the budget. Reads what scripts/test-native.py and scripts/test-browser.sh wrote
under target/test-times/.

  scripts/test-times.py [--budget-min 30] [--total-s SECONDS] [--brief]

--total-s: the wall time to hold against the budget (`.ci/run` passes its own, set-up
included); without it `make test`'s (target/test-times/make.wall, its halves ran side by side),
else the sum of the halves'. --brief: only the ten slowest and the total.
"""

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIR = ROOT / "target/test-times"


def browser_runs():
    """{browser: (wall seconds, [(test, seconds, status)])} from <browser>.jsonl + <browser>.wall."""
    out = {}
    for f in sorted(DIR.glob("*.jsonl")):
        rows = []
        for line in f.read_text().splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            rows.append((d["name"], float(d["seconds"]), d["status"]))
        wall_file = f.with_suffix(".wall")
        wall = float(wall_file.read_text()) if wall_file.exists() else sum(r[1] for r in rows)
        out[f.stem] = (wall, rows)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-min", type=float, default=30)
    ap.add_argument("--total-s", type=float)
    ap.add_argument("--brief", action="store_true")
    a = ap.parse_args()

    def say(line):
        if not a.brief:
            print(line)

    slow = []  # (seconds, where, test)
    halves = []  # (what, wall seconds)
    native = DIR / "native.json"
    if native.exists():
        d = json.loads(native.read_text())
        say(f"native: build {d['build_seconds']:.0f}s, tests {d['run_seconds']:.0f}s; binaries, slowest first:")
        for b in sorted(d["binaries"], key=lambda b: -b["seconds"]):
            say(f"  {b['seconds']:8.1f}s  {b['name']:<28} {len(b['tests']):4} tests")
            slow += [(t["seconds"], "native", f"{b['name']}::{t['name']}") for t in b["tests"]]
        halves.append(("native (build + tests)", d["build_seconds"] + d["run_seconds"]))
    for name, (wall, rows) in browser_runs().items():
        ran = [r for r in rows if r[2] != "skipped"]
        say(f"{name}: {wall:.0f}s wall, {len(ran)} tests run, {len(rows) - len(ran)} left to the other browser; slowest first:")
        for t, s, st in sorted(ran, key=lambda r: -r[1]):
            say(f"  {s:8.1f}s  {t[:110]}{'' if st == 'ok' else '  ' + st.upper()}")
        slow += [(s, name, t) for t, s, st in ran]
        halves.append((name, wall))

    print("\nthe ten slowest tests:")
    for s, where, t in sorted(slow, reverse=True)[:10]:
        print(f"  {s:8.1f}s  {where:<9} {t[:110]}")
    made = DIR / "make.wall"
    if a.total_s is not None:
        total = a.total_s
    elif made.exists():
        total = float(made.read_text())
    else:
        total = sum(w for _, w in halves)
    budget = a.budget_min * 60
    parts = ", ".join(f"{w:.0f}s {what}" for what, w in halves)
    print(f"\nsuite time: {total:.0f}s of a {budget:.0f}s budget ({parts})")
    if total > budget:
        bar = "!" * 78
        print(f"{bar}\n!! OVER BUDGET by {total - budget:.0f}s: make the slowest tests above cheaper before adding more\n"
              f"!! (docs/testing.md: shared engines, the smallest fixture that proves the claim)\n{bar}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The native half of `make test`: build every test binary once, run each, and time it.

Does what `cargo test --release` does (unit tests, integration tests, doc tests), plus a wall
time for every binary and every test, printed sorted and written to target/test-times/native.json
for scripts/test-times.py. Per-test times come from libtest's JSON events
(`-Z unstable-options --format json --report-time`, accepted by a stable toolchain's test
harness under RUSTC_BOOTSTRAP=1, which is set only for the test processes, never for rustc).

  scripts/test-native.py [--jobs N] [FILTER...]

FILTER: run only binaries whose name contains one of these (e.g. `kernels cli`).
--jobs N: binaries run at once (default 1, as cargo does; more only on a machine with cores to
spare: lavapipe already spreads one binary's GPU work over every core, and a few tests bound the
time of a hostile input). Binaries never share a process, so GPU switches a test sets stay in its
own binary.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "crate"


def build():
    """Builds the test binaries; returns [(name, path)] in cargo's order."""
    cmd = ["cargo", "test", "--release", "--no-run", "--message-format=json-render-diagnostics"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    out = []
    for line in p.stdout:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("profile", {}).get("test") and msg.get("executable"):
            t = msg["target"]
            kind = t["kind"][0]
            name = t["name"] if kind == "test" else f"{kind}:{t['name']}"
            out.append((name, msg["executable"]))
    if p.wait() != 0:
        sys.exit(f"test-native: cargo test --no-run failed ({p.returncode})")
    return out


def env_for_tests():
    env = dict(os.environ)
    env["RUSTC_BOOTSTRAP"] = "1"
    # What cargo sets for the test processes it runs.
    env.setdefault("CARGO_MANIFEST_DIR", str(CRATE))
    env.setdefault("CARGO_PKG_NAME", "ferrolm")
    return env


print_lock = threading.Lock()


def run_binary(name, exe, env):
    """Runs one test binary; returns (name, seconds, ok, [(test, seconds, status)])."""
    t0 = time.monotonic()
    cmd = [exe, "-Z", "unstable-options", "--format", "json", "--report-time"]
    p = subprocess.run(cmd, cwd=CRATE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    secs = time.monotonic() - t0
    tests, other = [], []
    for line in p.stdout.splitlines():
        ev = None
        if line.startswith("{"):
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                pass
        if ev and ev.get("type") == "test" and ev.get("event") in ("ok", "failed", "ignored"):
            tests.append((ev["name"], float(ev.get("exec_time", 0.0)), ev["event"]))
            if ev["event"] == "failed" and ev.get("stdout"):
                other.append(f"---- {ev['name']} ----\n{ev['stdout']}")
        elif not ev:
            other.append(line)
    ok = p.returncode == 0
    with print_lock:
        failed = [t for t in tests if t[2] == "failed"]
        print(f"test-native: {name}: {len(tests)} tests, {secs:.1f}s{'' if ok else ' FAILED'}", flush=True)
        if not ok:
            print("\n".join(other), flush=True)
            if not failed:
                print(f"test-native: {name} exited with {p.returncode}", flush=True)
    return name, secs, ok, tests


def doc_tests(env):
    t0 = time.monotonic()
    env = {k: v for k, v in env.items() if k != "RUSTC_BOOTSTRAP"}
    p = subprocess.run(["cargo", "test", "--release", "--doc", "-q"], cwd=ROOT, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    secs = time.monotonic() - t0
    ok = p.returncode == 0
    print(f"test-native: doc tests: {secs:.1f}s{'' if ok else ' FAILED'}", flush=True)
    if not ok:
        print(p.stdout, flush=True)
    return "doc", secs, ok, []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("filter", nargs="*")
    a = ap.parse_args()

    t0 = time.monotonic()
    bins = build()
    build_s = time.monotonic() - t0
    print(f"test-native: built {len(bins)} test binaries in {build_s:.0f}s", flush=True)
    if a.filter:
        bins = [b for b in bins if any(f in b[0] for f in a.filter)]
    env = env_for_tests()
    # Longest first so the tail of the run is not one slow binary alone: the order comes from the
    # last run's times where there is one.
    times_file = ROOT / "target/test-times/native.json"
    last = {}
    if times_file.exists():
        try:
            last = {b["name"]: b["seconds"] for b in json.loads(times_file.read_text())["binaries"]}
        except (ValueError, KeyError):
            last = {}
    bins.sort(key=lambda b: -last.get(b[0], 1e9))
    t1 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(lambda b: run_binary(b[0], b[1], env), bins))
    if not a.filter:
        results.append(doc_tests(env))
    run_s = time.monotonic() - t1

    results.sort(key=lambda r: -r[1])
    print(f"\ntest-native: {len(results)} binaries in {run_s:.0f}s (build {build_s:.0f}s), slowest first:")
    for name, secs, ok, tests in results:
        print(f"  {secs:8.1f}s  {name:<28} {len(tests):4} tests{'' if ok else '  FAILED'}")
    rows = sorted(((f"{n}::{t}", s, st) for n, _, _, ts in results for t, s, st in ts), key=lambda r: -r[1])
    print("test-native: slowest tests:")
    for name, s, st in rows[:15]:
        print(f"  {s:8.1f}s  {name}{'' if st == 'ok' else '  ' + st.upper()}")
    if not a.filter:
        times_file.parent.mkdir(parents=True, exist_ok=True)
        times_file.write_text(json.dumps({
            "build_seconds": build_s, "run_seconds": run_s,
            "binaries": [{"name": n, "seconds": s, "ok": ok, "tests": [{"name": t, "seconds": ts, "status": st} for t, ts, st in tests]}
                         for n, s, ok, tests in results],
        }, indent=1))
    bad = [r[0] for r in results if not r[2]]
    if bad:
        sys.exit(f"test-native: FAILED: {', '.join(bad)}")
    n = sum(len(r[3]) for r in results)
    print(f"test-native: all {n} tests passed")


if __name__ == "__main__":
    main()

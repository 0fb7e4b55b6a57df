#!/usr/bin/env bash
# One browser's run of tests/browser/browser.test.mjs (BROWSER=chromium or firefox), timed: the
# spec reporter on stdout, and each test's seconds plus the run's wall time under
# target/test-times/ for scripts/test-times.py. Extra arguments go to `node --test` (e.g.
# --test-name-pattern=...).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BROWSER:?BROWSER=chromium or firefox}"
out="$PWD/target/test-times"
mkdir -p "$out"
rm -f "$out/$BROWSER.jsonl" "$out/$BROWSER.wall"
SECONDS=0
status=0
(cd tests/browser && node --test --test-concurrency=1 --test-timeout=3600000 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=./times-reporter.mjs --test-reporter-destination="$out/$BROWSER.jsonl" \
  "$@" browser.test.mjs) || status=$?
echo "$SECONDS" > "$out/$BROWSER.wall"
echo "test-browser: $BROWSER took ${SECONDS}s"
exit $status

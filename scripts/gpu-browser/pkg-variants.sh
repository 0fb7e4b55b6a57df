#!/usr/bin/env bash
# Build packages that differ from the working tree only in some kernels, for device-ab.sh: each
# spec NAME=FILE[,FILE...] copies every FILE over shaders/<its basename> (FILE named after the
# kernel it replaces, in any folder), builds the package and keeps it as .bench/pkg-NAME; the
# tree's own shaders are restored after each build, also on failure or interrupt. With
# CHECK=1 the native kernel tests run against each variant first (`cargo test --test kernels
# matmul`-style filter in CHECK_FILTER, default all): a variant whose kernels fail to validate
# is not built. Measuring variants (ablations) may fail their numbers on purpose: CHECK=1 only
# stops on shader validation errors, not on wrong results.
#   scripts/gpu-browser/pkg-variants.sh NAME=FILE[,FILE...] ...
# e.g. scripts/gpu-browser/pkg-variants.sh base= noprod=/tmp/v/matmul_i8.wgsl
#   (an empty FILE list builds the tree as it is)
# pkg/ is left holding the last build (list `base=` last to leave the tree's own).
# Then: ROUNDS=2 scripts/gpu-browser/device-ab.sh $OUT/ab ".bench/pkg-base .bench/pkg-noprod" ...
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { sed -n 2,13p "$0"; exit 2; }
keep=$(mktemp -d)
cp -r shaders "$keep/"
restore() { rm -rf shaders && cp -r "$keep/shaders" shaders; }
trap 'restore; rm -rf "$keep"' EXIT
for spec in "$@"; do
  name=${spec%%=*}; files=${spec#*=}
  [ -n "$name" ] && [ "$name" != "$spec" ] || { echo "bad spec '$spec' (NAME=FILE[,FILE...])" >&2; exit 2; }
  restore
  for f in ${files//,/ }; do
    [ -f "$f" ] || { echo "$name: no file $f" >&2; exit 1; }
    [ -f "shaders/$(basename "$f")" ] || { echo "$name: $(basename "$f") is not a kernel in shaders/" >&2; exit 1; }
    cp "$f" "shaders/$(basename "$f")"
  done
  if [ "${CHECK:-0}" = 1 ]; then
    log=$(mktemp)
    (cd crate && XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} WGPU_BACKEND=vulkan \
      cargo test --release --test kernels ${CHECK_FILTER:-} > "$log" 2>&1) || true
    if grep -qiE "validation|shader.*error|parse error" "$log"; then
      grep -iE "validation|error" "$log" | head -5 >&2; echo "$name: kernels do not validate; not built" >&2; exit 1
    fi
    echo "$name: $(grep -E '^test result' "$log" | tail -1)"
    rm -f "$log"
  fi
  make pkg > /tmp/pkg-variants.log 2>&1 || { tail -20 /tmp/pkg-variants.log >&2; exit 1; }
  rm -rf ".bench/pkg-$name" && mkdir -p .bench && cp -r pkg ".bench/pkg-$name"
  echo "$name: .bench/pkg-$name ($(du -sh ".bench/pkg-$name" | cut -f1))"
done

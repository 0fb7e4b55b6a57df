#!/usr/bin/env bash
# Here, not on the GPU machine (it reaches no registry): the browser files of transformers.js and
# of the onnxruntime-web build it pins, packed as .bench/tjs.tar.xz for device-transformersjs.sh.
#   scripts/gpu-browser/pack-transformersjs.sh [VERSION]     (default 4.3.1)
# The archive holds tjs-lib/: dist/transformers.js (the self-contained ESM bundle, ONNX Runtime
# Web's JavaScript inside; the .web.js variant imports "onnxruntime-web/webgpu" by bare name and
# would need an import map) and the one wasm build that bundle loads on WebGPU,
# ort-wasm-simd-threaded.asyncify.{mjs,wasm} (ONNX Runtime's C++ WebGPU execution provider;
# transformers.js would fetch it from a CDN by default), plus VERSIONS.
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=${1:-4.3.1}
t=$(mktemp -d /tmp/tjs-pack.XXXXXX)
trap 'rm -rf "$t"' EXIT
(cd "$t" && npm pack --silent "@huggingface/transformers@$ver" > /dev/null)
mkdir -p "$t/tjs" "$t/ort" "$t/tjs-lib"
tar xzf "$t/huggingface-transformers-$ver.tgz" -C "$t/tjs"
# The exact onnxruntime-web version the package depends on (a pinned dev build), so the wasm
# matches the ONNX Runtime JavaScript compiled into the bundle.
ort=$(node -p "require('$t/tjs/package/package.json').dependencies['onnxruntime-web']")
(cd "$t" && npm pack --silent "onnxruntime-web@$ort" > /dev/null)
tar xzf "$t"/onnxruntime-web-*.tgz -C "$t/ort"
grep -q "ort-wasm-simd-threaded.asyncify.wasm" "$t/tjs/package/dist/transformers.js" \
  || { echo "transformers.js $ver no longer loads the asyncify build: check which ort-wasm files it names" >&2; exit 1; }
cp "$t/tjs/package/dist/transformers.js" "$t/tjs-lib/"
cp "$t"/ort/package/dist/ort-wasm-simd-threaded.asyncify.{mjs,wasm} "$t/tjs-lib/"
printf '@huggingface/transformers %s\nonnxruntime-web %s (commit %s)\n' "$ver" "$ort" "$(cat "$t/ort/package/__commit.txt" 2>/dev/null)" > "$t/tjs-lib/VERSIONS"
mkdir -p .bench
tar cJf .bench/tjs.tar.xz -C "$t" tjs-lib
ls -l .bench/tjs.tar.xz && cat "$t/tjs-lib/VERSIONS"

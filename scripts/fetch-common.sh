# Sourced by the fetch-*.sh scripts: a file in the model cache, downloaded once, checked against
# its sha256 (the check is remembered in a stamp keyed on size and mtime, so later runs do not
# re-hash), written through a .part file so an interrupted fetch leaves nothing half-done.
# The sourcing script sets NAME (the cached file's name), SHA256 and TAG (for messages), calls
# `begin_fetch` (exits printing the path when the file is already there), writes "$PART" (with
# "$TMP" as scratch) and calls `end_fetch`.
#   FERROLM_CACHE   cache directory (default: $HOME/.cache/ferrolm)
#   PYTHON          python interpreter with pip (default: python3)

CACHE="${FERROLM_CACHE:-$HOME/.cache/ferrolm}"
PYTHON="${PYTHON:-python3}"
DEST="$CACHE/$NAME"
STAMP="$DEST.sha256-ok"

log() { echo "$TAG: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# "size mtime" of a file (GNU stat).
file_key() { stat -c '%s %Y' "$1"; }

hash_of() { sha256sum "$1" | cut -d' ' -f1; }

# 0 if $DEST exists and has the expected hash. Uses/refreshes the stamp.
dest_ok() {
  [[ -f "$DEST" ]] || return 1
  local key
  key="$(file_key "$DEST") $SHA256"
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$key" ]]; then
    return 0
  fi
  log "verifying $DEST ..."
  local got
  got="$(hash_of "$DEST")"
  if [[ "$got" == "$SHA256" ]]; then
    echo "$key" > "$STAMP"
    return 0
  fi
  log "hash mismatch for existing $DEST (got $got, want $SHA256); deleting it"
  rm -f "$DEST" "$STAMP"
  return 1
}

begin_fetch() {
  if dest_ok; then
    echo "$DEST"
    exit 0
  fi
  mkdir -p "$CACHE"
  rm -f "$STAMP"
  TMP="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
  PART="$DEST.part"
  trap 'rm -rf "$TMP"; rm -f "$PART"' EXIT
}

end_fetch() {
  local got
  got="$(hash_of "$PART")"
  if [[ "$got" != "$SHA256" ]]; then
    rm -f "$PART"
    die "sha256 mismatch for $NAME: got $got, want $SHA256"
  fi
  mv -f "$PART" "$DEST"
  echo "$(file_key "$DEST") $SHA256" > "$STAMP"
  log "ok: $DEST"
  echo "$DEST"
}

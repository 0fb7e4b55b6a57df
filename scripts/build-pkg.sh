#!/usr/bin/env bash
# Build the browser npm package into pkg/ (see wasm-pack.toml for the settings it reads):
#   cargo build --target wasm32-unknown-unknown -> wasm-bindgen --target web -> wasm-opt
#   -> pkg-template/* + package.json (version from the cargo workspace).
# Needs wasm-bindgen-cli of the same version as the wasm-bindgen crate in Cargo.lock
# (`cargo install wasm-bindgen-cli --version X`) and binaryen's wasm-opt (optional: skipped
# with a warning when missing or when it cannot read the module).
set -euo pipefail
cd "$(dirname "$0")/.."

conf() {  # conf SECTION KEY DEFAULT: a scalar from wasm-pack.toml
  local v
  v=$(awk -v sec="[$1]" -v key="$2" '
    /^\[/ { insec = ($0 == sec) ; next }
    insec && $1 == key { sub(/^[^=]*=[ \t]*/, ""); sub(/[ \t]*#.*$/, ""); gsub(/"/, ""); print; exit }
  ' wasm-pack.toml)
  echo "${v:-$3}"
}

CRATE_DIR=$(conf build crate crate)
PACKAGE=$(conf build package ferrolm)
PROFILE=$(conf build profile release)
NO_DEFAULT=$(conf build no-default-features true)
TARGET=$(conf build target web)
OUT_DIR=$(conf build out-dir pkg)
OUT_NAME=$(conf build out-name ferrolm)
TEMPLATE=$(conf build template pkg-template)
OPT_ON=$(conf wasm-opt enabled true)
OPT_LEVEL=$(conf wasm-opt opt-level -O)

log() { echo "build-pkg: $*" >&2; }

WBG=${WASM_BINDGEN:-wasm-bindgen}
command -v "$WBG" >/dev/null || WBG="$HOME/.cargo/bin/wasm-bindgen"
command -v "$WBG" >/dev/null || { log "wasm-bindgen-cli not found (cargo install wasm-bindgen-cli --version <the one in Cargo.lock>)"; exit 1; }
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
have=$("$WBG" --version | awk '{print $2}')
if [[ -n "$want" && "$want" != "$have" ]]; then
  log "wasm-bindgen-cli is $have but Cargo.lock has wasm-bindgen $want; install the matching CLI"
  exit 1
fi

TARGET_DIR=${CARGO_TARGET_DIR:-target}
flags=(--target wasm32-unknown-unknown -p "$PACKAGE" --lib)
[[ "$PROFILE" == release ]] && flags+=(--release)
[[ "$NO_DEFAULT" == true ]] && flags+=(--no-default-features)
log "cargo build ${flags[*]}"
cargo build "${flags[@]}"
WASM="$TARGET_DIR/wasm32-unknown-unknown/$PROFILE/$PACKAGE.wasm"

# wasm-opt runs on rustc's module *before* wasm-bindgen: binaryen releases before ~116 (Debian 12
# ships 108) rewrite wasm-bindgen's externref table so that instantiation fails ("function-typed
# object must be null"); the raw module has no externref table yet, and wasm-bindgen keeps the
# optimized code as is.
if [[ "$OPT_ON" == true ]]; then
  if command -v wasm-opt >/dev/null; then
    log "wasm-opt $OPT_LEVEL ($(wasm-opt --version))"
    OPT="${WASM%.wasm}.opt.wasm"
    if wasm-opt "$OPT_LEVEL" --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
        --enable-mutable-globals --enable-reference-types --enable-multivalue "$WASM" -o "$OPT" 2> /tmp/ferrolm-wasm-opt.log; then
      WASM="$OPT"
    else
      log "WARNING: wasm-opt could not optimize the module (see /tmp/ferrolm-wasm-opt.log); shipping it unoptimized"
    fi
  else
    log "WARNING: wasm-opt (binaryen) not found; shipping the module unoptimized"
  fi
fi

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
log "wasm-bindgen --target $TARGET"
"$WBG" --target "$TARGET" --out-dir "$OUT_DIR" --out-name "$OUT_NAME" "$WASM"
BG="$OUT_DIR/${OUT_NAME}_bg.wasm"

cp -r "$TEMPLATE"/. "$OUT_DIR"/
VERSION=$(awk '/^\[workspace.package\]/ { s = 1 } s && /^version/ { gsub(/version = |"/, ""); print; exit }' Cargo.toml)
sed -i "s/\"version\": \"0.0.0\"/\"version\": \"$VERSION\"/" "$OUT_DIR/package.json"
rm -f "$OUT_DIR/.gitignore"
log "pkg ready in $OUT_DIR/: $(du -sh "$OUT_DIR" | cut -f1); wasm $(stat -c %s "$BG") bytes, gzip $(gzip -9c "$BG" | wc -c) bytes"

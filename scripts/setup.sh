#!/usr/bin/env bash
# Installs what ferrolm's build, demo and tests need on Debian 12 with Rust, as root or with sudo:
# Mesa's Vulkan drivers (lavapipe runs the GPU path on the CPU when there is no GPU), Chromium and
# Firefox ESR for the browser tests, binaryen's wasm-opt, the wasm32 target and the wasm-bindgen CLI matching
# Cargo.lock. Idempotent: a quick no-op once everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

want=(mesa-vulkan-drivers libvulkan1 vulkan-tools chromium firefox-esr binaryen make)
missing=()
for p in "${want[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ! python3 -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! rustup target list --installed 2>/dev/null | grep -q '^wasm32-unknown-unknown$'; then
  rustup target add wasm32-unknown-unknown
fi

# The CLI must match the wasm-bindgen crate exactly. Not --locked: its lock file pins a crate
# version the registry mirror may not carry.
want_wbg=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
have_wbg=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [[ "$have_wbg" != "$want_wbg" ]]; then
  echo "setup: installing wasm-bindgen-cli $want_wbg"
  cargo install wasm-bindgen-cli --version "$want_wbg"
fi

# ferrolm developer entry points. `make help` lists them.
#
#   make setup      install system packages, the wasm target and wasm-bindgen-cli (idempotent)
#   make model      fetch the default model into the cache (idempotent)
#   make tokenizers fetch the real tokenizers of each model family into the cache (idempotent)
#   make test-models fetch the extra real models the tests use (Gemma 3 270M Q4_K_M; idempotent)
#   make build      cargo build --release
#   make demo       chat with the default model: make demo PROMPT="..."
#   make test       every native test binary (timed) on Vulkan, then test-browser, then the time
#                   table against the suite's 30-minute budget (docs/testing.md)
#   make test-quick the edit-run loop in a few minutes: unit tests, shaders, one parity test, one
#                   browser test
#   make fixtures   regenerate tests/fixtures/smollm2/fixtures.json and the per-family
#                   tokenizer/chat-template fixtures (needs torch, transformers, gguf, numpy,
#                   accelerate, sentencepiece; not part of `test`)
#   make pkg        build the browser npm package into pkg/ (wasm-bindgen + wasm-opt)
#   make demo       (also) serves the browser chat demo on http://localhost:$(DEMO_PORT)/
#   make test-browser  tests of pkg/ in headless Chromium (SwiftShader) and Firefox ESR (lavapipe)
#   make bench-browser prepare the GPU machine's browser benchmark (scripts/gpu-browser/README.md;
#                   BASE=<revision> also packs that revision's binary for an A/B)
#   make clean      cargo clean

# bash: the test recipe runs its halves side by side with pipefail.
SHELL   := /bin/bash

FERROLM_CACHE ?= $(HOME)/.cache/ferrolm
export FERROLM_CACHE
MODEL   ?= $(FERROLM_CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT  ?= What is the capital of France?
CARGO   ?= cargo
PYTHON  ?= python3
BIN     := $(or $(CARGO_TARGET_DIR),target)/release/ferrolm
FIXTURES := tests/fixtures/smollm2/fixtures.json
DEMO_PORT ?= 8080
NODE    ?= node
# Where the test runners write their times (scripts/test-times.py reads them).
TIMES   := target/test-times
NPM     ?= npm

.PHONY: help setup model tokenizers test-models bench-browser build demo test test-quick fixtures clean pkg test-browser serve

help:
	@sed -n '3,21s/^# \{0,1\}//p' Makefile

setup:
	scripts/setup.sh

model:
	scripts/fetch-model.sh

tokenizers:
	$(PYTHON) scripts/fetch-tokenizers.py

test-models:
	scripts/fetch-test-models.sh

build:
	$(CARGO) build --release

demo: setup model build pkg
	$(BIN) generate --model "$(MODEL)" --chat "$(PROMPT)"
	$(MAKE) serve

# The browser demo: www/ at /, pkg/ at /pkg/, the model at /models/ (www/models is a gitignored
# symlink to the model cache).
serve:
	mkdir -p www/models
	ln -sf "$(MODEL)" www/models/$(notdir $(MODEL))
	@echo "browser demo: http://localhost:$(DEMO_PORT)/  (WebGPU browser needed; Ctrl-C stops)"
	$(NODE) tests/browser/server.mjs --port $(DEMO_PORT) --mount /=www --mount /pkg=pkg

pkg:
	scripts/build-pkg.sh

# What the native tests see: lavapipe (or the GPU) on Vulkan, the default model, and the extra
# files required rather than skipped.
NATIVE_ENV = XDG_RUNTIME_DIR=$${XDG_RUNTIME_DIR:-/tmp} FERROLM_MODEL="$(MODEL)" FERROLM_REQUIRE_TOKENIZERS=1 FERROLM_REQUIRE_MODELS=1 WGPU_BACKEND=vulkan

# What one browser's run needs besides BROWSER=...: the native CLI its tokens are compared with,
# the models, and every model required rather than skipped.
BROWSER_ENV = XDG_RUNTIME_DIR=$${XDG_RUNTIME_DIR:-/tmp} FERROLM_BIN="$(abspath $(BIN))" FERROLM_MODEL="$(abspath $(MODEL))" FERROLM_REQUIRE_MODELS=1

# Every test binary timed (scripts/test-native.py: what `cargo test --release` runs) and the
# browser package in Chromium then Firefox, then the time table against the budget
# (docs/testing.md). The browsers run beside the native half: each keeps about one core busy
# (SwiftShader compiling pipelines, Firefox's GPU process), which leaves the other to lavapipe.
# Each line is prefixed with its half.
test: setup model tokenizers test-models build pkg
	rm -rf $(TIMES)
	mkdir -p $(TIMES)
	cd tests/browser && $(NPM) ci --no-audit --no-fund --silent
	start=$$(date +%s); rc=0; \
	  ( set -o pipefail; rc=0; \
	    BROWSER=chromium $(BROWSER_ENV) scripts/test-browser.sh 2>&1 | sed -u 's/^/[chromium] /' || rc=$$?; \
	    BROWSER=firefox $(BROWSER_ENV) scripts/test-browser.sh 2>&1 | sed -u 's/^/[firefox] /' || rc=$$?; \
	    exit $$rc ) & browsers=$$!; \
	  ( set -o pipefail; $(NATIVE_ENV) $(PYTHON) scripts/test-native.py 2>&1 | sed -u 's/^/[native] /' ) || rc=$$?; \
	  wait $$browsers || rc=$$?; \
	  echo $$(( $$(date +%s) - start )) > $(TIMES)/make.wall; \
	  $(PYTHON) scripts/test-times.py; exit $$rc

# The edit-run loop (a few minutes): unit tests, shader validation, the default model's parity
# with transformers, and one browser test (HF folders against transformers, in Chromium).
test-quick: model pkg
	$(NATIVE_ENV) $(CARGO) test --release --lib --test shader_sources
	$(NATIVE_ENV) $(CARGO) test --release --test model_parity logits_and_greedy_tokens_match_reference
	cd tests/browser && $(NPM) ci --no-audit --no-fund --silent
	BROWSER=chromium FERROLM_BIN="$(abspath $(BIN))" FERROLM_MODEL="$(abspath $(MODEL))" scripts/test-browser.sh --test-name-pattern='^HF folder: logits'

# Installs its own npm deps (tests/browser/package-lock.json) and drives /usr/bin/chromium
# (override with CHROMIUM=...).
# The same tests in Chromium (WebGPU: Dawn on SwiftShader) and Firefox ESR (Firefox's wgpu on
# lavapipe): two WebGPU implementations.
test-browser: model test-models build pkg
	cd tests/browser && $(NPM) ci --no-audit --no-fund --silent
	rc=0; BROWSER=chromium $(BROWSER_ENV) scripts/test-browser.sh || rc=$$?; \
	  BROWSER=firefox $(BROWSER_ENV) scripts/test-browser.sh || rc=$$?; \
	  exit $$rc

# Carried to the GPU machine by the device tool: the binary (xz), pkg/, Chromium in 30 MiB parts.
bench-browser: build pkg
	mkdir -p .bench
	xz -T0 -6 -c $(BIN) > .bench/ferrolm.xz
	if [ -n "$(BASE)" ]; then \
	  rm -rf .bench/base && git worktree add -f .bench/base $(BASE) && \
	  (cd .bench/base && CARGO_TARGET_DIR=$(abspath .bench/base-target) $(CARGO) build --release) && \
	  xz -T0 -6 -c .bench/base-target/release/ferrolm > .bench/ferrolm-base.xz && \
	  git worktree remove --force .bench/base; fi
	[ -f .bench/chr/chrextra.tar.xz ] || scripts/gpu-browser/fetch-chromium.sh .bench/chr 26
	@echo "now the two device commands of scripts/gpu-browser/README.md"

fixtures: model tokenizers
	$(PYTHON) tests/scripts/make_model_fixtures.py --model "$(MODEL)" --out $(FIXTURES)
	$(PYTHON) tests/scripts/make_family_fixtures.py

clean:
	$(CARGO) clean

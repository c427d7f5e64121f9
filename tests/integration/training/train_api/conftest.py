"""The package's modules drive `parity.train()` against one deployed stack (every service its own process, real
vLLM), each from its own side: a whole run, the runs that end early or fail, what a step trains on, a run from the
store. The stack is the package's, started once (tests/conftest.py keeps the package on one worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.stack_fixtures import TrainingStack, own_training_stack


@pytest.fixture(scope="package")
def deployed_stack(
    training_vllm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrainingStack]:
    """The package's one stack, in place of the module-scoped one that would start a stack per module."""
    yield from own_training_stack(tmp_path_factory, training_vllm)

"""ruff's lint and format over the hand-written code; generated code (sdk/parity/api, sdk/parity/clients/generated) is
excluded in pyproject.toml. `make format` rewrites the code as ruff formats it."""

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

TREES = ["sdk", "services", "tests", "scripts", "bench", "examples"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_passes(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, *TREES],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr

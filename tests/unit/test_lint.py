"""ruff over the hand-written code; generated code (sdk/parity/api, sdk/parity/clients/generated) is excluded in pyproject.toml."""

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_ruff_check_passes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "sdk", "services", "tests", "scripts", "bench", "examples"],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr

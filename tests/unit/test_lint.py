"""ruff's lint and format over the hand-written code; generated code (sdk/parity/api, sdk/parity/clients/generated) is excluded in pyproject.toml."""

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_ruff_check_passes() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "sdk",
            "services",
            "tests",
            "scripts",
            "bench",
            "examples",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_the_code_as_it_is() -> None:
    """The hand-written code is as `ruff format` writes it (`make format` rewrites it so)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            "sdk",
            "services",
            "tests",
            "scripts",
            "bench",
            "examples",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr

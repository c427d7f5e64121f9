"""The hand-written code type-checks: mypy with pyproject.toml's [tool.mypy], over `parity` as installed (the SDK and
services/ as parity.services), the generated layer aside, and over the code that uses it (tests/, examples/, bench/,
scripts/), at zero errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.slow
# A cold cache is 2 to 2.5 minutes of one core (a warm one about 10 s); on a loaded machine (2 cores shared) it took
# over 5.
@pytest.mark.timeout(600)
def test_mypy_finds_no_errors(request: pytest.FixtureRequest) -> None:
    # Mypy's incremental cache lives in pytest's cache, apart from the one a developer's own runs keep.
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    cache_dir = cache.mkdir("mypy") if cache else None
    cache_options = ["--cache-dir", str(cache_dir)] if cache_dir else []
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "typecheck.py"), *cache_options],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr

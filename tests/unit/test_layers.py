"""Imports run one way (import-linter's contracts in pyproject.toml), and every public module of `parity`
imports on its own: an import that works only after another module has loaded is a cycle or a missing import
that the first user to import it alone meets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import parity
import parity.services
from tests.conftest import REPO_ROOT

# setup.py's two source roots: the SDK's folder is `parity`, services/ is `parity.services`.
SOURCE_ROOTS = {
    "parity": Path(parity.__path__[0]),
    "parity.services": Path(parity.services.__path__[0]),
}


def public_modules() -> list[str]:
    modules = []
    for package, folder in SOURCE_ROOTS.items():
        for path in sorted(folder.rglob("*.py")):
            # A folder without __init__.py holds scripts that are no module of Parity's: the verifiers bridge
            # runs in the interpreter that has verifiers.
            if any(
                not (parent / "__init__.py").exists() for parent in _folders_between(folder, path)
            ):
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not any(part.startswith("_") for part in parts):
                modules.append(".".join((package, *parts)))
    return modules


def _folders_between(root: Path, path: Path) -> list[Path]:
    return [parent for parent in path.parents if parent.is_relative_to(root) and parent != root]


def test_imports_run_one_way() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "lint_imports.py"), "--no-logo"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_walk_finds_every_layer() -> None:
    modules = set(public_modules())
    assert {
        "parity.cli",
        "parity.services.stack.up",
        "parity.config",
        "parity.clients.base",
    } <= modules
    assert "parity.api.trainer.v1.trainer_service_pb2_grpc" in modules


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_public_module_imports_alone() -> None:
    # -P: the script's folder (tests/unit, whose packages are named like services) stays off the path.
    result = subprocess.run(
        [sys.executable, "-P", str(Path(__file__).with_name("import_alone.py")), *public_modules()],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]

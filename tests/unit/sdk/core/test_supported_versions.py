"""`import parity` in an environment whose protobuf or grpcio the generated code does not support fails with
one error naming the installed and the supported releases; the range is the one pyproject.toml declares and
the one the committed generator sets."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from parity.core.supported_versions import SUPPORTED, release, specifier
from tests.conftest import REPO_ROOT


def _declared(name: str) -> str:
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    (found,) = [d for d in dependencies if re.match(rf"{name}\b(?!-)", d)]
    return found.removeprefix(name)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_pyproject_declares_the_checked_range(name: str) -> None:
    assert _declared(name) == specifier(name)


def test_the_lows_are_the_committed_generators() -> None:
    generated = (REPO_ROOT / "sdk/parity/api/common/v1/llm_call_pb2.py").read_text()
    protoc = re.search(r"Protobuf Python Version: (\S+)", generated)
    assert protoc is not None and release(protoc.group(1)) == SUPPORTED["protobuf"][0]
    tools = re.search(
        r"^grpcio-tools==(\S+)$", (REPO_ROOT / "requirements/protoc.txt").read_text(), re.M
    )
    assert tools is not None and release(tools.group(1)) == SUPPORTED["grpcio"][0]


@pytest.mark.parametrize(
    ("version", "expected"),
    [("7.36.2", (7, 36, 2)), ("4.25.1", (4, 25, 1)), ("8.0.0rc1", (8, 0, 0)), ("1.62.3.post1", (1, 62, 3)),
     ("2.13.0+cpu", (2, 13, 0))],
)  # fmt: skip
def test_release_reads_the_numeric_part(version: str, expected: tuple[int, ...]) -> None:
    assert release(version) == expected


def _import_parity_with(
    tmp_path: Path, name: str, version: str
) -> subprocess.CompletedProcess[str]:
    """`import parity` in a fresh interpreter that sees `name` at `version`: a distribution's metadata placed
    ahead of site-packages is what importlib.metadata, and pip, report as installed."""
    info = tmp_path / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return subprocess.run([sys.executable, "-c", "import parity"], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip


@pytest.mark.parametrize(
    ("name", "version"), [("protobuf", "3.20.3"), ("protobuf", "8.0.0"), ("grpcio", "1.60.0")]
)
def test_an_unsupported_release_is_named_on_import(tmp_path: Path, name: str, version: str) -> None:
    finished = _import_parity_with(tmp_path, name, version)
    assert finished.returncode == 1
    last = finished.stderr.strip().splitlines()[-1]
    assert last.startswith("parity.core.supported_versions.UnsupportedDependencyError: ")
    assert f"{name} {version} is installed (supported: {name}{specifier(name)})" in last
    assert "google/protobuf" not in finished.stderr and "_pb2" not in finished.stderr


def test_supported_releases_import(tmp_path: Path) -> None:
    finished = _import_parity_with(tmp_path, "protobuf", "4.25.1")
    assert finished.returncode == 0, finished.stderr

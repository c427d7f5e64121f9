"""Fresh Python environments that install Parity as a user does (`pip install parity`, its base install, next
to whatever else they want, nothing pinned by this repository), cached between runs.

An environment is keyed by what was asked of pip: its requirements, the base install's declared dependencies
and the interpreter. A cached one keeps the releases pip chose when it was made; delete .venv-frameworks/ (or
set PARITY_TEST_ENVS elsewhere) to take newer ones. Scripts run with the working tree's sdk/ ahead of the
installed copy, so a cached environment still tests today's SDK code; pip's own cache makes a cold build
download each wheel once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO_ROOT

CACHE_ROOT = Path(os.environ.get("PARITY_TEST_ENVS", REPO_ROOT / ".venv-frameworks"))
INSTALL_TIMEOUT_S = 900
READY = ".ready.json"


class InstallError(RuntimeError):
    """pip could not install the requirements; the message ends with pip's own output."""


@dataclass(frozen=True)
class IsolatedEnv:
    path: Path
    versions: dict[str, str]  # what pip installed, by lowercased distribution name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """`python ARGS` in this environment, with the working tree's SDK over the installed copy."""
        environment = {"PATH": f"{self.path / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
                       "PYTHONPATH": str(REPO_ROOT / "sdk"), **(env or {})}  # fmt: skip
        return subprocess.run([str(self.python), *args], env=environment, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip


def base_dependencies() -> list[str]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def env_key(requirements: list[str]) -> str:
    asked = {
        "python": list(sys.version_info[:2]),
        "requirements": requirements,
        "parity": base_dependencies(),
    }
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:12]


def cached_env(name: str, requirements: list[str], wheel: Path) -> IsolatedEnv:
    """The environment `pip install WHEEL REQUIREMENTS` makes, from the cache or built now."""
    path = CACHE_ROOT / f"{name}-{env_key(requirements)}"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    # One builder per environment: test workers that want the same one wait for it instead of building over it.
    with open(CACHE_ROOT / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ready_or_built(path, requirements, wheel)


def _ready_or_built(path: Path, requirements: list[str], wheel: Path) -> IsolatedEnv:
    ready = path / READY
    if ready.exists():
        return IsolatedEnv(path, json.loads(ready.read_text()))
    # READY is written last, so an interrupted build is never taken for a cached one.
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = str(path / "bin" / "python")
    # pip from this environment's pip (no ensurepip download or wheel unpack per environment).
    pip = [sys.executable, "-m", "pip", "--python", python]
    # --no-compile: bytecode is written on first import instead, for the few modules a test imports.
    finished = subprocess.run([*pip, "install", "--quiet", "--no-compile", str(wheel), *requirements],
                              capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    if finished.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        output = "\n".join(
            line
            for line in (finished.stdout + finished.stderr).splitlines()
            if "is ignored" not in line
        )
        raise InstallError(f"pip install parity {' '.join(requirements)} failed:\n{output[-4000:]}")
    frozen = subprocess.run(
        [*pip, "list", "--format", "json"], capture_output=True, text=True, check=True
    )
    versions = {item["name"].lower(): item["version"] for item in json.loads(frozen.stdout)}
    ready.write_text(json.dumps(versions, indent=1, sort_keys=True))
    return IsolatedEnv(path, versions)


def build_wheel(out: Path) -> Path:
    """Parity's wheel from the working tree, as `pip install .` would build it."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(REPO_ROOT)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    (wheel,) = out.glob("parity-*.whl")
    return wheel

"""requirements/constraints.txt, the exact set `make env` installs, lies inside the ranges pyproject.toml declares:
a range changed without `make lock` fails here, not in a half-upgraded environment."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO_ROOT


def _pins() -> dict[str, Version]:
    lines = (REPO_ROOT / "requirements" / "constraints.txt").read_text().splitlines()
    pins: dict[str, Version] = {}
    for line in lines:
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += [r for r in extra if not r.startswith("parity[")]
    return [Requirement(r) for r in requirements]


@pytest.mark.parametrize("requirement", _declared(), ids=str)
def test_each_declared_dependency_is_pinned_inside_its_range(requirement: Requirement) -> None:
    pins = _pins()
    name = canonicalize_name(requirement.name)
    assert name in pins, (
        f"{requirement.name} is not in requirements/constraints.txt: run `make lock`"
    )
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"{requirement.name}=={pins[name]} is outside {requirement}: run `make lock`"
    )


def test_torch_is_the_cpu_wheel_on_disk() -> None:
    # Any other torch pulls gigabytes of CUDA libraries onto the CPU machines.
    assert _pins()["torch"] == Version("2.13.0")


def test_the_pins_are_exact_and_sorted() -> None:
    lines = [line for line in (REPO_ROOT / "requirements/constraints.txt").read_text().splitlines()
             if line and not line.startswith("#")]  # fmt: skip
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==[^\s+]+", line) for line in lines)
    assert lines == sorted(lines, key=str.lower)

"""The protobuf and grpcio releases that parity.api's generated code loads on, checked on `import parity`.

The SDK installs into the agent's own environment, next to its framework, which may bring any
protobuf or grpcio. Outside this range the generated modules fail deep inside protobuf's or
grpc's import machinery, long after `import parity`, with a traceback that names neither the
package nor a release that works; this check fails at once and says both. pyproject.toml
declares the same range (a unit test holds them equal); docs/sdk.md says why these bounds.
"""

from __future__ import annotations

import re
from importlib import metadata, util

# name -> (lowest supported release, first unsupported release or None).
# The lows are the generator's: protoc 4.25.1 from grpcio-tools 1.62.3 (requirements/protoc.txt).
# protobuf 8 may drop gencode this old, as 4.x dropped 3.19's; it is allowed once tested.
SUPPORTED: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {
    "protobuf": ((4, 25, 1), (8,)),
    "grpcio": ((1, 62, 3), None),
}
# The module each distribution installs, to tell "not installed" from "installed without metadata".
_MODULES = {"protobuf": "google.protobuf", "grpcio": "grpc"}


class UnsupportedDependencyError(ImportError):
    """An installed protobuf or grpcio that Parity's generated code does not support."""


def specifier(name: str) -> str:
    """The range as a pip requirement specifier: `>=4.25.1,<8`."""
    low, high = SUPPORTED[name]
    text = ">=" + ".".join(map(str, low))
    return text + (",<" + ".".join(map(str, high)) if high else "")


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: 7.36.2 -> (7, 36, 2), 8.0.0rc1 -> (8, 0, 0)."""
    numbers = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        numbers.append(int(digits.group()))
        if digits.end() != len(piece):
            break
    return tuple(numbers)


def problems() -> list[str]:
    """One line per unsupported or missing package; empty when the environment is fine."""
    found = []
    for name, (low, high) in SUPPORTED.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            # Importable without metadata (vendored, zipapp): nothing to compare, let it try.
            if util.find_spec(_MODULES[name]) is None:
                found.append(f"{name} is not installed (supported: {name}{specifier(name)})")
            continue
        version = release(installed)
        if version < low or (high is not None and version >= high):
            found.append(f"{name} {installed} is installed (supported: {name}{specifier(name)})")
    return found


def check_installed() -> None:
    found = problems()
    if found:
        wanted = " ".join(f"'{name}{specifier(name)}'" for name in SUPPORTED)
        raise UnsupportedDependencyError(
            "Parity's generated gRPC code cannot load in this environment: " + "; ".join(found)
            + f". Install supported releases: pip install {wanted}"
        )  # fmt: skip

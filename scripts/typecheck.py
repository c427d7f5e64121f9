"""Type-check the hand-written code of `parity` as installed: mypy with pyproject.toml's [tool.mypy].

Usage: python scripts/typecheck.py [mypy options]

mypy run alone finds no `parity.services` (scripts/installed_layout.py says why), so this
runs it over a folder of links that lays `parity` out as installed, and names each file
by its path in the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from installed_layout import link_installed_layout

REPO_ROOT = Path(__file__).resolve().parent.parent
# Mypy's cache outlives the folder of links, whose name changes every run, so it is keyed to the repository.
CACHE_DIR = REPO_ROOT / ".mypy_cache"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        link_installed_layout(Path(scratch))
        command = [sys.executable, "-m", "mypy", "--config-file", str(REPO_ROOT / "pyproject.toml"),
                   "--cache-dir", str(CACHE_DIR), "-p", "parity", *argv]  # fmt: skip
        result = subprocess.run(
            command,
            env={**os.environ, "MYPYPATH": scratch},
            cwd=scratch,
            capture_output=True,
            text=True,
        )
        output = result.stdout.replace("parity/services/", "services/").replace(
            "parity/", "sdk/parity/"
        )
        print(output, end="")
        print(result.stderr, end="", file=sys.stderr)
        return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

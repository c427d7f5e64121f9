"""Type-check the hand-written code with mypy and pyproject.toml's [tool.mypy]: `parity` as installed, and the
trees that use it (tests/, examples/, bench/, scripts/).

Usage: python scripts/typecheck.py [mypy options]

mypy run alone finds no `parity.services` (scripts/installed_layout.py says why), so this
runs it over a folder of links that lays `parity` out as installed, and names each file
by its path in the repository. The trees beside it are checked in the same run, so the
modules they import are analysed once: tests/ and examples/ are packages from the repository
root; bench/ and scripts/ are folders of scripts that import their neighbours by module name.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from installed_layout import link_installed_layout

REPO_ROOT = Path(__file__).resolve().parent.parent
# Mypy's cache outlives the folder of links, whose name changes every run, so it is keyed to the repository.
CACHE_DIR = REPO_ROOT / ".mypy_cache"
TREES = ("tests", "examples", "bench", "scripts")
# An import-only stand-in for `ray` that bench/gpu/check.sh puts on the path instead of ray's wheel. In the run
# above it would be the module `ray` for every module that imports ray, so it is checked in a run of its own.
RAY_STANDIN = "bench/gpu/ray_standin"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    options, mypy_options = parser.parse_known_args(argv)
    cache_dir = options.cache_dir.resolve()  # mypy runs in another folder
    with tempfile.TemporaryDirectory() as scratch:
        link_installed_layout(Path(scratch))
        mypy = [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(REPO_ROOT / "pyproject.toml"),
            *mypy_options,
        ]
        # Run in the folder of links, which `parity` is named relative to: mypy's cache keeps the paths of files
        # with errors, and the folder's own name changes every run. The trees are named by their full paths.
        runs = [
            [*mypy, "--cache-dir", str(cache_dir), "--exclude", f"/{RAY_STANDIN}/", "parity",
             *(str(REPO_ROOT / tree) for tree in TREES)],
            # A cache of its own: the two runs' modules named `ray` would evict each other's.
            [*mypy, "--cache-dir", str(cache_dir / "ray_standin"), str(REPO_ROOT / RAY_STANDIN)],
        ]  # fmt: skip
        returncode = 0
        for command in runs:
            result = subprocess.run(
                command,
                env={**os.environ, "MYPYPATH": scratch},
                cwd=scratch,
                capture_output=True,
                text=True,
            )
            output = re.sub(f"^{re.escape(str(REPO_ROOT))}/", "", result.stdout, flags=re.M)
            output = re.sub("^parity/services/", "services/", output, flags=re.M)
            output = re.sub("^parity/", "sdk/parity/", output, flags=re.M)
            print(output, end="")
            print(result.stderr, end="", file=sys.stderr)
            returncode = returncode or result.returncode
        return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

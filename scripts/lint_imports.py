"""Check that imports run one way: import-linter's contracts in pyproject.toml, over `parity` as installed.

Usage: python scripts/lint_imports.py [lint-imports options, e.g. --verbose]

`lint-imports` run alone sees no services (scripts/installed_layout.py says why); this runs it
over a folder of links that lays `parity` out as it is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from installed_layout import link_installed_layout

REPO_ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        link_installed_layout(Path(scratch))
        # First on the path, so `parity` is found there rather than through the editable install's finder.
        path = os.pathsep.join(p for p in (scratch, os.environ.get("PYTHONPATH", "")) if p)
        command = [
            sys.executable,
            "-c",
            LINT_IMPORTS,
            "--no-cache",
            str(REPO_ROOT / "pyproject.toml"),
            *argv,
        ]
        return subprocess.run(
            command, env={**os.environ, "PYTHONPATH": path}, cwd=REPO_ROOT
        ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

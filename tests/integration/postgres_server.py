"""Where PostgreSQL's server binaries (initdb, postgres) are, for the store's tests. Standard library only:
`make env` runs this file with the system's Python, before .venv exists, to learn whether it must install them
(exit 0 printing their folder, or 1 saying what it found and how to install them).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# The oldest PostgreSQL the store supports (docs/deploy.md; deploy/ runs postgres:15).
MIN_MAJOR = 15
BIN_ENV = "PARITY_PG_BIN"
WHERE_LOOKED = (
    "`pg_config --bindir`, /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin, and initdb on PATH"
)
HOW_TO_INSTALL = (
    f"`make env` installs them (apt-get install postgresql, as root or with passwordless sudo; where the "
    f"distribution's PostgreSQL is older than {MIN_MAJOR}, add PostgreSQL's apt repository, apt.postgresql.org, "
    f"and apt-get install postgresql-{MIN_MAJOR}), or set {BIN_ENV} to the folder that holds initdb and postgres"
)


def server_major(bin_dir: Path) -> int | None:
    """The major version of the server in `bin_dir`; None where it holds no runnable initdb and postgres."""
    if not ((bin_dir / "initdb").is_file() and (bin_dir / "postgres").is_file()):
        return None
    try:
        version = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, text=True,
                                 timeout=30).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\(PostgreSQL\) (\d+)", version)
    return int(found.group(1)) if found else None


def _candidates() -> list[Path]:
    folders: list[Path] = []
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            folders.append(Path(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                               timeout=30).stdout.strip()))  # fmt: skip
    folders += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"))]  # Debian, Ubuntu
    folders += [Path(p) for p in sorted(glob.glob("/usr/pgsql-*/bin"))]  # PostgreSQL's own RPMs
    if initdb := shutil.which("initdb"):  # Fedora, Arch, Homebrew
        folders.append(Path(initdb).resolve().parent)
    return list({folder.resolve(): None for folder in folders if folder.is_dir()})


def server_bin() -> Path:
    """`PARITY_PG_BIN` when set, else the folder of the oldest server found that the store supports (what it
    promises is what the tests run). Raises LookupError saying what it found and how to install one."""
    if configured := os.environ.get(BIN_ENV):
        major = server_major(Path(configured))
        if major is None:
            raise LookupError(f"{BIN_ENV}={configured} holds no PostgreSQL server binaries (initdb, postgres); "
                              f"unset it to look in {WHERE_LOOKED}")  # fmt: skip
        if major < MIN_MAJOR:
            raise LookupError(
                f"{BIN_ENV}={configured} is PostgreSQL {major}; the store needs {MIN_MAJOR} or later"
            )
        return Path(configured)
    found = {folder: server_major(folder) for folder in _candidates()}
    usable = sorted(
        (major, str(folder))
        for folder, major in found.items()
        if major is not None and major >= MIN_MAJOR
    )
    if usable:
        return Path(usable[0][1])
    too_old = [
        f"PostgreSQL {major} in {folder}" for folder, major in found.items() if major is not None
    ]
    raise LookupError(
        f"no PostgreSQL {MIN_MAJOR} or later server binaries (initdb, postgres) found"
        + (f" (too old: {', '.join(too_old)})" if too_old else "")
        + f"; looked in {WHERE_LOOKED}. The store's PostgreSQL tests run them: {HOW_TO_INSTALL}."
    )


if __name__ == "__main__":
    try:
        print(server_bin())
    except LookupError as missing:
        sys.exit(f"{missing}")

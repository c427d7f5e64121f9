"""Scratch space for one benchmark run.

A full store run writes a few GB of databases; left behind run after run, they fill
the disk. The space is removed when the run ends, except after a failure: then its
logs and databases are what explains it, so it stays and its path is printed.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def scratch_dir(bench: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"parity-bench-{bench}-"))
    try:
        yield path
    except BaseException:
        print(f"kept the failed run's logs and databases in {path}", file=sys.stderr)
        raise
    shutil.rmtree(path, ignore_errors=True)

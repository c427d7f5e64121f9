"""Import each named module alone: `python -P tests/unit/import_alone.py MODULE...` (tests/unit/test_layers.py).

Each module is imported in a child forked from this process before it has loaded any
`parity` module, so it imports with nothing of Parity loaded before it, as in a fresh
interpreter. The heavy libraries (PRELOADED) are loaded once here instead of in every
child: two dozen trainer modules each starting torch and verl took minutes on two cores.
Prints one `FAILED module` block per module that does not import, with what it wrote;
exits 1 if any did.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import traceback
from pathlib import Path

PRELOADED = ("torch", "transformers", "verl.trainer.config")
WORKERS = 2


def import_in_child(module: str, output: Path) -> int:
    """Fork a child that imports `module`, writing anything it prints to `output`; returns its pid."""
    sys.stdout.flush()  # or the child's flush would write this process's pending output again
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        descriptor = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(descriptor, 1)
        os.dup2(descriptor, 2)
        importlib.import_module(module)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # No atexit handlers or finalizers: they belong to the libraries this process shares with its parent.
        os._exit(code)


def main(modules: list[str]) -> int:
    for name in PRELOADED:
        importlib.import_module(name)
    loaded = sorted(m for m in sys.modules if m == "parity" or m.startswith("parity."))
    if loaded:
        print(
            f"a preloaded library imported Parity ({loaded}): the children would not import alone"
        )
        return 1
    failed = []
    with tempfile.TemporaryDirectory() as scratch:
        running: dict[int, str] = {}
        pending = list(reversed(modules))
        while pending or running:
            while pending and len(running) < WORKERS:
                module = pending.pop()
                running[import_in_child(module, Path(scratch) / module)] = module
            pid, status = os.wait()
            module = running.pop(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                failed.append(module)
                print(f"FAILED {module}\n{(Path(scratch) / module).read_text()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

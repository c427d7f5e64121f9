"""Where vLLM's engine core runs on a CPU host: on its worker's cores.

The launcher runs the model inside vLLM's engine core (the process titled
`VLLM::EngineCore`). Placing the whole process on the cores VLLM_CPU_OMP_THREADS_BIND
gives the model keeps every thread of it off the core that ingest, the store, vLLM's API
server and the agents share. With vLLM's multiprocess executor (an operator's
VLLM_ENABLE_V1_MULTIPROCESSING=1) the engine core is a process of its own that
busy-polls shared memory while its worker computes: left free, it spent most of the
shared core; on its worker's cores its polling yields to the worker.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ENGINE_CORE_TITLE = b"VLLM::EngineCore"
_PROC = Path("/proc")


def parse_cpu_list(spec: str) -> frozenset[int] | None:
    """The cores named by a VLLM_CPU_OMP_THREADS_BIND value such as "0", "0,2" or "0-3|4-7"
    (one group per rank, taken together), or None for a symbolic value such as "auto"."""
    cores: set[int] = set()
    try:
        for part in spec.replace("|", ",").split(","):
            first, dash, last = part.strip().partition("-")
            cores.update(range(int(first), int(last if dash else first) + 1))
    except ValueError:
        return None
    return frozenset(cores) or None


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, by each process's parent in /proc."""
    children: dict[int, list[int]] = {}
    for stat in _PROC.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The command name sits in parentheses and may hold spaces; the parent follows.
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found += below
        pending += below
    return found


def engine_core_pids(api_server_pid: int) -> list[int]:
    """The engine core processes (one per data-parallel rank) vLLM's API server started."""
    pids = []
    for pid in descendants(api_server_pid):
        with contextlib.suppress(OSError):
            if (_PROC / str(pid) / "cmdline").read_bytes().startswith(ENGINE_CORE_TITLE):
                pids.append(pid)
    return pids


def place_process(pid: int, cores: frozenset[int]) -> None:
    """Move every thread of `pid` onto `cores`; threads it starts later inherit them."""
    for task in (_PROC / str(pid) / "task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), cores)

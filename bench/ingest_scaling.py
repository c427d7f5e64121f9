"""1, 2 and 4 ingests sharing one port (SO_REUSEPORT, as `parity up --ingests N` runs them) in front of the stub:
throughput against one ingest's, and the CPU the ingests and the store spend per call."""

from __future__ import annotations

import os
from pathlib import Path

from processes import Processes, cpu_seconds
from wrk_load import wrk


def ingest_scaling(
    scratch: Path, seconds: float, counts: tuple[int, ...] = (1, 2, 4)
) -> list[dict[str, float]]:
    """Throughput of 1, 2 and 4 ingests sharing one port (SO_REUSEPORT) in front of the stub, wrk at 256
    connections, and the CPU seconds the ingests and the store spend per call. On a machine with fewer cores than
    ingests the machine is the ceiling; the CPU per call says what each replica costs."""
    rows = []
    for count in counts:
        processes = Processes(scratch / f"scaling-{count}")
        processes.scratch.mkdir(exist_ok=True)
        try:
            url, names = processes.start_ingests(processes.start_stub(), count)
            measured = processes.pids([n for n in processes.names if n != "stub"])
            processes.wait_idle()
            before = cpu_seconds(measured)
            result = wrk(f"{url}/chat/completions", 256, seconds, False, processes.scratch)
            cpu = cpu_seconds(measured) - before
        finally:
            processes.stop()
        calls = result["rps"] * seconds
        rows.append({"ingests": count, "rps": result["rps"], "p50_ms": result["p50_ms"], "errors": result["errors"],
                     "cpu_ms_per_call": 1000 * cpu / max(calls, 1)})  # fmt: skip
    return rows


def print_scaling(rows: list[dict[str, float]]) -> None:
    print(
        f"{'ingests':>7} | {'rps':>8}{'p50 ms':>8} | {'vs 1 ingest':>12} | {'CPU ms per call':>16}"
    )
    for row in rows:
        print(f"{row['ingests']:>7} | {row['rps']:>8,.0f}{row['p50_ms']:>8.2f} | {row['rps'] / rows[0]['rps']:>11.2f}x | "
              f"{row['cpu_ms_per_call']:>16.2f}")  # fmt: skip
    print(
        f"one port (SO_REUSEPORT), wrk at 256 connections, non-stream, {os.cpu_count()} cores: the ingests, the "
        "store and wrk share them\n"
    )
